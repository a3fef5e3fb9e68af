// moestream tokenize (not yet written: see the issue tracker).
#include <cstdio>

#include "cli/commands.h"

namespace ms {

int cmd_tokenize(int, char**) {
    fprintf(stderr, "moestream tokenize: not implemented yet\n");
    return 1;
}

}  // namespace ms
