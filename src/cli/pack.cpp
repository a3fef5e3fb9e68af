// moestream pack (not yet written: see the issue tracker).
#include <cstdio>

#include "cli/commands.h"

namespace ms {

int cmd_pack(int, char**) {
    fprintf(stderr, "moestream pack: not implemented yet\n");
    return 1;
}

}  // namespace ms
