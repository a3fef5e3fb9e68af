// moestream chat (not yet written: see the issue tracker).
#include <cstdio>

#include "cli/commands.h"

namespace ms {

int cmd_chat(int, char**) {
    fprintf(stderr, "moestream chat: not implemented yet\n");
    return 1;
}

}  // namespace ms
