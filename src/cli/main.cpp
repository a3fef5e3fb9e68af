// moestream: run Mixture-of-Experts models larger than memory by streaming
// routed experts from disk. This file only dispatches to the subcommands and
// turns any escaped exception into a one-line error and exit status 1 (3 for a
// memory budget too small for the run: store/budget.h).
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "store/budget.h"

namespace {

struct Command {
    const char* name;
    int (*fn)(int, char**);
    const char* summary;
};

const Command kCommands[] = {
    {"run", ms::cmd_run, "generate text from a prompt, streaming experts under a memory budget"},
    {"chat", ms::cmd_chat, "interactive chat with the model's own chat template"},
    {"serve", ms::cmd_serve, "an OpenAI-compatible HTTP server (chat, completions, SSE, /metrics)"},
    {"logits", ms::cmd_logits, "write prompt logits (and a greedy continuation) for comparison"},
    {"perplexity", ms::cmd_perplexity, "perplexity of a text over non-overlapping windows, streamed"},
    {"inspect", ms::cmd_inspect, "describe a GGUF model: architecture, sizes, experts, memory needs"},
    {"quantize", ms::cmd_quantize, "write a float model's matrices as Q8_0 or Q4_K"},
    {"pack", ms::cmd_pack, "write (or --verify) the packed expert sidecar MODEL.gguf.experts"},
    {"synth", ms::cmd_synth, "make a synthetic model of a real architecture"},
    {"tokenize", ms::cmd_tokenize, "print the token ids of a text"},
    {"template", ms::cmd_template, "render a chat template with a context JSON"},
    {"bench", ms::cmd_bench, "benchmarks: ssd, cache, gemm, model, protocol"},
    {"version", ms::cmd_version, "version, build type, SIMD levels, CUDA and the GPU found (also --version)"},
};

void usage(FILE* f) {
    fprintf(f, "usage: moestream <command> [options]   (moestream <command> --help for details)\n\ncommands:\n");
    for (const Command& c : kCommands) fprintf(f, "  %-10s %s\n", c.name, c.summary);
    fprintf(f,
            "\nexit status: 0 done, 1 an error (one line on stderr), 2 a usage error, %d a memory budget\n"
            "(--mem, --gpu-mem) too small for the least the run needs\n",
            ms::kExitBudget);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) argv[1] = const_cast<char*>("version");
    for (const Command& c : kCommands) {
        if (strcmp(argv[1], c.name) != 0) continue;
        try {
            return c.fn(argc, argv);
        } catch (const ms::BudgetTooSmall& e) {
            fprintf(stderr, "moestream %s: error: %s\n", c.name, e.what());
            return ms::kExitBudget;
        } catch (const std::exception& e) {
            fprintf(stderr, "moestream %s: error: %s\n", c.name, e.what());
            return 1;
        }
    }
    fprintf(stderr, "moestream: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
