// moestream run (not yet written: see the issue tracker).
#include <cstdio>

#include "cli/commands.h"

namespace ms {

int cmd_run(int, char**) {
    fprintf(stderr, "moestream run: not implemented yet\n");
    return 1;
}

}  // namespace ms
