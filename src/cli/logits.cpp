// moestream logits (not yet written: see the issue tracker).
#include <cstdio>

#include "cli/commands.h"

namespace ms {

int cmd_logits(int, char**) {
    fprintf(stderr, "moestream logits: not implemented yet\n");
    return 1;
}

}  // namespace ms
