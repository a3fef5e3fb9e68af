# Front door. `make run` and `make test` are the two newcomer commands (README.md).
JOBS   ?= $(shell nproc)
BUILD  ?= build
ASAN   ?= build-asan
# The checking builds (ASan, TSan, fuzz) keep line tables only (-g1: file and
# line in every report, 40% less compile time than -g) and leave out the CUDA
# backend (no GPU where they run; the Release build compiles it).
CHECK_FLAGS := -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
               -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DMOESTREAM_CUDA=OFF
FUZZB  ?= build-fuzz
FUZZ_SECONDS ?= 30
FUZZ_LONG_SECONDS ?= 600
DEMO   ?= $(BUILD)/demo-tiny.gguf
DEPS   := build-essential cmake pkg-config libgtest-dev libgmock-dev libbenchmark-dev \
          libpcre2-dev liburing-dev libxxhash-dev clang libclang-rt-14-dev gnuplot-nox ninja-build \
          libcpp-httplib-dev chromium haproxy

.PHONY: deps build bin test unit asan asan-build tsan fuzz fuzz-long serve-test serve-node run run-synth clean \
        routing-check soak install deb deb-test simd-deps simd-levels qemu-cpus isa-scan

# apt-get install of those of the packages $(1) that are missing.
define apt_install
	@missing=$$(for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  SUDO=$$( [ $$(id -u) -eq 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
endef

deps:
	$(call apt_install,$(DEPS))

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# Only the moestream binary (what `run` needs: half the compile of `build`).
bin: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target moestream

# The golden reference data the tests compare with (never read by the
# binary). Absent, as in a clone of this repository alone, the test programs
# that need it skip and log to BUILD_DIR/golden-skipped.txt
# (tests/golden_dir.h): one line says what was skipped and why. Present (CI),
# a logged skip fails the suite.
GOLDEN ?= ../shared/golden
define golden_summary
	@log=$(1)/golden-skipped.txt; if [ -s $$log ]; then \
	  echo "skipped $$(awk '{n += $$2} END {print n}' $$log) tests in $$(cut -d' ' -f1 $$log | sort -u | wc -l) programs ($$(cut -d' ' -f1 $$log | sort -u | paste -sd' ')): $(GOLDEN) not found"; \
	  if [ -d $(GOLDEN) ]; then echo "error: golden tests skipped although $(GOLDEN) is present"; exit 1; fi; \
	fi
endef

# Unit + golden tests (Release), again at the SIMD levels of other CPUs and
# on emulated ones, then under ASan+UBSan, the ISA scan of both builds, the
# threaded parts' tests under TSan, then a short fuzz run of every parser
# harness (`make fuzz-long` for long ones).
test: build
	@rm -f $(BUILD)/golden-skipped.txt
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(call golden_summary,$(BUILD))
	$(MAKE) simd-levels
	$(MAKE) qemu-cpus
	$(MAKE) serve-test
	$(MAKE) asan
	$(MAKE) isa-scan
	$(MAKE) tsan
	$(MAKE) fuzz FUZZ_SECONDS=$(FUZZ_SECONDS)

# Every x86-64 CPU, not just this one (quant/cpu.h's levels). qemu-user runs
# the binaries on emulated CPUs, python3 runs scripts/isa_scan.py.
SIMD_DEPS := qemu-user python3
simd-deps:
	$(call apt_install,$(SIMD_DEPS))

# The tests of the SIMD kernels and of what is built on them.
KERNEL_LABELS := quant|ops|model|synth|runtime
# The Release suite with the level capped as on a CPU without AVX-512 (all
# of it) and on one without AVX2 (the kernel tests: the rest only runs slower
# there, 9 minutes instead of 2 here). Tests that compare levels compare the
# ones left.
simd-levels: build
	cd $(BUILD) && MOESTREAM_SIMD=avx2 ctest --output-on-failure -j $(JOBS)
	cd $(BUILD) && MOESTREAM_SIMD=scalar ctest --output-on-failure -j $(JOBS) -L '$(KERNEL_LABELS)'

# The Release binaries on emulated CPUs: Haswell (AVX2, FMA, F16C, BMI2, no
# AVX-512; features TCG lacks are turned off to keep it quiet) for the kernel
# tests and `make run`'s generation, whose text must be this CPU's; Nehalem
# (no AVX) for the generation alone. First each must report the level it is
# meant to check. qemu-user has no io_uring (--io pread) and counts its own
# memory in the RSS (--mem 64M). The levels agree within rounding, not bit
# for bit (attention's SIMD loops fuse products), so the text comparison
# holds because this prompt's 64 tokens have no near-tie at any level
# (checked when the contract changed); a build is deterministic, so a flip
# fails every time, never by chance, and then needs looking at.
QEMU_AVX2 := qemu-x86_64 -cpu Haswell-noTSX,-pcid,-x2apic,-tsc-deadline,-invpcid
QEMU_SSE := qemu-x86_64 -cpu Nehalem
QEMU_TESTS = $(notdir $(wildcard $(BUILD)/quant_*_test $(BUILD)/ops_*_test)) model_golden_test runtime_golden_test
RUN_ARGS := run -m models/demo-Q8_0.gguf -p "It is my duty to" -n 64 -c 512 --seed 2
qemu-cpus: build simd-deps
	@for cpu in "$(QEMU_AVX2):avx2" "$(QEMU_SSE):scalar"; do \
	  q=$${cpu%:*}; want=$${cpu##*:}; rm -f $(BUILD)/qemu-level.json; \
	  $$q $(BUILD)/moestream bench gemm --quick --gpu off --duration 0 --m 4 --json $(BUILD)/qemu-level.json >/dev/null 2>&1; \
	  grep -q "\"simd_level\": \"$$want\"" $(BUILD)/qemu-level.json || { echo "qemu-cpus: $$q did not run at $$want"; exit 1; }; \
	done
	cd $(BUILD) && printf '%s\n' $(QEMU_TESTS) | xargs -P $(JOBS) -I{} sh -c \
	  '$(QEMU_AVX2) ./{} --gtest_brief=1 > qemu-{}.log 2>&1 && echo "qemu-cpus: {} passed on Haswell" || { cat qemu-{}.log; echo "qemu-cpus: {} FAILED on Haswell"; exit 1; }'
	$(BUILD)/moestream $(RUN_ARGS) --mem 28M > $(BUILD)/run-native.txt
	$(QEMU_AVX2) $(BUILD)/moestream $(RUN_ARGS) --mem 64M --io pread > $(BUILD)/run-haswell.txt
	$(QEMU_SSE) $(BUILD)/moestream $(RUN_ARGS) --mem 64M --io pread > $(BUILD)/run-nehalem.txt
	cmp $(BUILD)/run-native.txt $(BUILD)/run-haswell.txt && cmp $(BUILD)/run-native.txt $(BUILD)/run-nehalem.txt

# `moestream serve` against the official openai npm client (pinned in
# tests/server/node/package-lock.json, installed here) under node's test
# runner, and a bounded load test; all on loopback.
serve-test: build
	@if [ ! -d $(GOLDEN) ]; then echo "skipped serve-test (the openai client tests serve a golden model): $(GOLDEN) not found"; \
	else $(MAKE) --no-print-directory serve-node; fi

serve-node:
	@command -v npm >/dev/null || { SUDO=$$( [ $$(id -u) -eq 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq nodejs npm >/dev/null; }
	cd tests/server/node && npm ci --no-audit --no-fund --loglevel=error
	MOESTREAM_BIN=$(abspath $(BUILD))/moestream node --test tests/server/node/

# ASan+UBSan, then the tests that reach the SIMD kernels again capped at
# AVX2: the configuration of the CPUs without AVX-512 that once died here of
# SIGILL (the whole suite runs at AVX2 in simd-levels). Not under qemu:
# qemu-user 7.2 grows past 4 GB of RSS within seconds on ASan's shadow
# reservations, before the first test runs.
asan: asan-build
	@rm -f $(ASAN)/golden-skipped.txt
	cd $(ASAN) && MOESTREAM_SANITIZED=1 ctest --output-on-failure -j $(JOBS)
	cd $(ASAN) && MOESTREAM_SANITIZED=1 MOESTREAM_SIMD=avx2 ctest --output-on-failure -j $(JOBS) -L '$(KERNEL_LABELS)'
	$(call golden_summary,$(ASAN))

asan-build: deps
	@cmake -S . -B $(ASAN) -G Ninja $(CHECK_FLAGS) -DMOESTREAM_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN) -j $(JOBS)

# No instruction beyond baseline x86-64 outside the dispatched kernels, in the
# Release and ASan binaries (scripts/isa_scan.py), and no ISA flags (-march,
# -m<ext>) in their compile commands.
isa-scan: build asan-build simd-deps
	@if grep -n -E -- '-march=|-mtune=|-m(avx|fma|f16c|bmi|sse3|ssse3|sse4|popcnt|lzcnt)' $(BUILD)/build.ninja $(ASAN)/build.ninja; then \
	  echo "isa-scan: ISA flags in a default build (above)"; exit 1; fi
	scripts/isa_scan.py $(BUILD)/moestream $(BUILD)/*_test $(ASAN)/moestream $(ASAN)/*_test

# ThreadSanitizer on the tests of the threaded parts: the I/O engines and the
# store, the thread pool, the server (only these targets are built).
TSAN   ?= build-tsan
TSAN_TESTS = store_store_test store_streaming_test store_io_test ops_thread_pool_test server_serve_test server_http_front_test server_demo_serve_test
tsan: deps
	@cmake -S . -B $(TSAN) -G Ninja $(CHECK_FLAGS) -DMOESTREAM_TSAN=ON >/dev/null
	@cmake --build $(TSAN) -j $(JOBS) --target $(TSAN_TESTS)
	@rm -f $(TSAN)/golden-skipped.txt
	cd $(TSAN) && for t in $(TSAN_TESTS); do MOESTREAM_SANITIZED=1 TSAN_OPTIONS="halt_on_error=1 suppressions=$(abspath tests/tsan.supp)" ./$$t || exit 1; done
	$(call golden_summary,$(TSAN))

fuzz: deps
	@CC=clang CXX=clang++ cmake -S . -B $(FUZZB) -G Ninja $(CHECK_FLAGS) -DMOESTREAM_FUZZ=ON -DMOESTREAM_TESTS=OFF >/dev/null
	@cmake --build $(FUZZB) -j $(JOBS) --target fuzzers
	scripts/fuzz.sh $(FUZZB) $(FUZZ_SECONDS)

# Every harness for FUZZ_LONG_SECONDS (10 minutes) each, on the corpus the
# short runs grew; the executions of each are in its final stats.
fuzz-long:
	$(MAKE) fuzz FUZZ_SECONDS=$(FUZZ_LONG_SECONDS)

# Slow: the full qwen3-30b-a3b synth (18 GB in ROUTING_DIR) routes like the
# published Qwen3-30B-A3B on English text (tests/cli/routing_test.cpp).
ROUTING_DIR ?= /tmp
routing-check: build
	MOESTREAM_SLOW=1 MOESTREAM_SLOW_DIR=$(ROUTING_DIR) $(BUILD)/cli_routing_test

# The demo model (models/README.md) streamed under a budget that caches about
# half of its 64 experts, so decode reads experts from the drive. On the CPU:
# on a machine with an NVIDIA GPU, --gpu auto would open a CUDA context, whose
# ~90 MiB of process memory alone is over this 28 MiB budget (H200, 2026-12-03).
run: bin
	$(BUILD)/moestream run -m models/demo-Q8_0.gguf -p "It is my duty to" -n 64 --mem 28M -c 512 --seed 2 --gpu off

# The random-weight tiny synth of qwen3-30b-a3b's shape (gibberish text).
run-synth: bin
	$(BUILD)/moestream synth --preset tiny -o $(DEMO)
	$(BUILD)/moestream run -m $(DEMO) -p "The quick brown fox" -n 32 --mem 24M -c 512 --seed 1

# The memory contract over time: a 20,000-token generation and 1,000 server
# requests on a model 2x larger than --mem, RSS sampled (scripts/soak.sh).
soak: build
	scripts/soak.sh $(BUILD) 20000 1000

# The binary, its man page (from its own --help), README and docs under
# share/doc/moestream, and the demo model under share/moestream, all under
# PREFIX (the Release build; nothing installed refers to this tree).
PREFIX ?= /usr/local
install: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target moestream_man
	cmake --install $(BUILD) --prefix $(PREFIX)

# The same files as a Debian package under /usr (CPack; dependencies from
# dpkg-shlibdeps): $(BUILD)/packages/moestream_VERSION_amd64.deb.
deb: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target moestream_man
	cd $(BUILD) && cpack -G DEB
	@dpkg-deb --info $(BUILD)/packages/moestream_*.deb | grep -E '^ (Package|Version|Depends):'

# Installs the package into a clean Debian 12 chroot (debootstrap from
# Debian's mirror; root and network needed) and runs the demo model there
# (scripts/deb-test.sh).
deb-test: deb
	@command -v debootstrap >/dev/null || { SUDO=$$( [ $$(id -u) -eq 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq debootstrap >/dev/null; }
	SUDO=$$( [ $$(id -u) -eq 0 ] || echo sudo ); $$SUDO scripts/deb-test.sh $(BUILD)/packages/moestream_*.deb

clean:
	rm -rf $(BUILD) $(ASAN) $(TSAN) $(FUZZB)
