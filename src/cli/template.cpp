// moestream template (not yet written: see the issue tracker).
#include <cstdio>

#include "cli/commands.h"

namespace ms {

int cmd_template(int, char**) {
    fprintf(stderr, "moestream template: not implemented yet\n");
    return 1;
}

}  // namespace ms
