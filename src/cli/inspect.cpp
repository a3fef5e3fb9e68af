// moestream inspect (not yet written: see the issue tracker).
#include <cstdio>

#include "cli/commands.h"

namespace ms {

int cmd_inspect(int, char**) {
    fprintf(stderr, "moestream inspect: not implemented yet\n");
    return 1;
}

}  // namespace ms
