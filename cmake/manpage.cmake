# Run after the moestream binary is linked (the moestream_man target): writes
# OUT, the man page moestream(1), and OUT.gz, from the binary's own --help text (the
# command list, then every command's --help), so the page never disagrees
# with the flags. Troff sees the help as preformatted text; backslashes and
# lines that would read as requests are escaped.
execute_process(COMMAND "${BIN}" --help OUTPUT_VARIABLE top RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${BIN} --help failed (${rc})")
endif()
execute_process(COMMAND "${BIN}" version OUTPUT_VARIABLE version_text)
string(REGEX MATCH "^moestream ([^\n]*)" _ "${version_text}")
set(version "${CMAKE_MATCH_1}")

function(troff_block text out)
  string(REPLACE "\\" "\\e" text "${text}")
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" text "${text}")
  set(${out} ".nf\n${text}.fi\n" PARENT_SCOPE)
endfunction()

set(page ".TH MOESTREAM 1 \"\" \"moestream ${version}\" \"User Commands\"\n")
string(APPEND page ".SH NAME\nmoestream \\- run Mixture-of-Experts language models larger than memory, streaming experts from disk\n")
string(APPEND page ".SH SYNOPSIS\n.B moestream\n.I command\n[options]\n")
string(APPEND page ".SH DESCRIPTION\n")
troff_block("${top}" block)
string(APPEND page "${block}")
string(APPEND page ".SH COMMANDS\n")
# The command names: the indented first words after "commands:".
string(REGEX REPLACE "^.*\ncommands:\n" "" listing "${top}")
string(REGEX MATCHALL "(^|\n)  [a-z]+" names "${listing}")
foreach(n ${names})
  string(STRIP "${n}" n)
  execute_process(COMMAND "${BIN}" ${n} --help OUTPUT_VARIABLE help RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${BIN} ${n} --help failed (${rc})")
  endif()
  troff_block("${help}" block)
  string(APPEND page ".SS ${n}\n${block}")
endforeach()
# Paths under the installation prefix: /usr for the Debian package,
# /usr/local for a plain `make install`.
string(APPEND page ".SH FILES\n.TP\nPREFIX/share/moestream/demo-Q8_0.gguf\nthe demo model (13 MB), e.g.\n\\fBmoestream run -m /usr/share/moestream/demo-Q8_0.gguf -p \\(dqIt is my duty to\\(dq --mem 28M -c 512\\fR\n")
string(APPEND page ".TP\nPREFIX/share/doc/moestream/\nREADME.md and docs/: the design, benchmarks and measurements\n")
file(WRITE "${OUT}" "${page}")
# And compressed, as Debian installs man pages (-n: no name or time stamp
# inside, so an unchanged page gives the same bytes).
execute_process(COMMAND gzip -9nc "${OUT}" OUTPUT_FILE "${OUT}.gz" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gzip ${OUT} failed (${rc})")
endif()
