// moestream synth (not yet written: see the issue tracker).
#include <cstdio>

#include "cli/commands.h"

namespace ms {

int cmd_synth(int, char**) {
    fprintf(stderr, "moestream synth: not implemented yet\n");
    return 1;
}

}  // namespace ms
