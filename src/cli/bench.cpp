// moestream bench (not yet written: see the issue tracker).
#include <cstdio>

#include "cli/commands.h"

namespace ms {

int cmd_bench(int, char**) {
    fprintf(stderr, "moestream bench: not implemented yet\n");
    return 1;
}

}  // namespace ms
