// The subcommands of `moestream`: one file per command under src/cli/, each
// exposing one entry point that takes the full argv (argv[1] is its name).
#pragma once

namespace ms {

int cmd_inspect(int argc, char** argv);
int cmd_synth(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_template(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_logits(int argc, char** argv);
int cmd_pack(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_version(int argc, char** argv);

}  // namespace ms
