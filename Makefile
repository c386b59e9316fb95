# graft: the two commands for a fresh machine are `make demo` and `make test`.
SHELL := /bin/bash
# ccache keys on paths relative to the checkout, so a fresh clone reuses an earlier build's objects.
export CCACHE_BASEDIR ?= $(CURDIR)
BUILD ?= build
JOBS ?= $(shell nproc)
PY := .venv/bin/python
CMAKE_FLAGS ?=

.PHONY: all setup configure build test test-conformance-reference test-cpp test-python demo bench bench-avx2 bench-quick bench-compare fuzz fuzz-smoke fuzz-python fuzz-campaign test-asan test-asan-quick test-tsan clean format format-check

all: build

setup:
	@scripts/setup.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DPython_EXECUTABLE=$(abspath $(PY)) $(CMAKE_FLAGS)

configure: setup $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# ctest runs JOBS test processes at once, each with its own OpenMP team: passive waiting keeps
# their idle threads from spinning on the cores the others need. GRAFT_VERIFY_PASSES=1 checks the
# graph after every pass of every pipeline the tests run (src/passes/pass.hpp). The conformance
# cases run on the cpu and the reference device (label conformance-reference: 95 s on one quiet
# core of the 2-core machine, 2026-12-02); test-conformance-reference runs only those.
test: build
	cd $(BUILD) && GRAFT_VERIFY_PASSES=1 OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} ctest --output-on-failure -j $(JOBS)
	GRAFT_VERIFY_PASSES=1 OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} $(PY) -m pytest -q tests/python

test-conformance-reference: build
	cd $(BUILD) && OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} ctest --output-on-failure -L conformance-reference

# Trains a small CNN on Fashion-MNIST (Debian's dataset-fashion-mnist, which make setup installs) with
# `graft train`: the model is written by the build (tools/demo_model.cpp) and takes the dataset's IDX
# files as they are. Prints the progress, the test accuracy after each epoch, and writes the trained
# model. DEMO_MODEL=fashion_mlp trains an MLP instead. OpenMP threads sleep rather than spin while
# they wait (docs/cli.md: on a busy machine spinning threads slow every step down).
FASHION_MNIST ?= /usr/share/datasets/fashion-mnist
DEMO_MODEL ?= fashion_cnn
DEMO_EPOCHS ?= 2
demo: build
	@test -f $(FASHION_MNIST)/train-images-idx3-ubyte.gz || { echo "make demo: no Fashion-MNIST in" \
	  "$(FASHION_MNIST) (the Debian package dataset-fashion-mnist; make setup installs it)"; exit 1; }
	OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} $(BUILD)/tools/graft train $(BUILD)/demo/$(DEMO_MODEL).onnx \
	  --input image=$(FASHION_MNIST)/train-images-idx3-ubyte.gz \
	  --label label=$(FASHION_MNIST)/train-labels-idx1-ubyte.gz \
	  --loss softmax-ce --optimizer sgd:lr=0.01,momentum=0.9 --batch-size 64 --epochs $(DEMO_EPOCHS) \
	  --eval image=$(FASHION_MNIST)/t10k-images-idx3-ubyte.gz --eval label=$(FASHION_MNIST)/t10k-labels-idx1-ubyte.gz \
	  --output $(BUILD)/demo/$(DEMO_MODEL)_trained.onnx

# The benchmark harness (bench/run.py; docs/benchmarks.md): its own venv .venv-bench with PyTorch,
# torchvision and ONNX Runtime, so that the project venv keeps its versions. graft's module comes
# from the build tree. BENCH_ARGS: e.g. --quick, --models mlp,resnet18, --compile.
BENCH_PY := .venv-bench/bin/python
BENCH_ARGS ?=
.venv-bench/.installed: bench/requirements.txt
	python3 -m venv .venv-bench
	$(BENCH_PY) -m pip install -q -r bench/requirements.txt
	touch $@

bench: build .venv-bench/.installed
	$(BENCH_PY) bench/run.py $(BENCH_ARGS)

# The AVX2 host class on an AVX-512 host: every framework sees an AVX2-only CPU (bench/cpuid_mask.cpp).
bench-avx2: build .venv-bench/.installed
	$(BENCH_PY) bench/run.py --isa avx2 --out bench/results-avx2 $(BENCH_ARGS)

bench-quick: build .venv-bench/.installed
	$(BENCH_PY) bench/run.py --quick $(BENCH_ARGS)

# A fresh run (into build/bench-compare, BENCH_ARGS as for bench) diffed against the committed
# bench/results/results.json: graft's and the other frameworks' times, new/old, flagged where they
# moved by more than the two runs' own noise (bench/compare.py).
bench-compare: build .venv-bench/.installed
	$(BENCH_PY) bench/run.py --out $(BUILD)/bench-compare $(BENCH_ARGS)
	python3 bench/compare.py $(BUILD)/bench-compare/results.json

# Seeds: the small models of tests/fuzz/seeds (tests/fuzz/make_seeds.py writes them) and the small
# models of the ONNX conformance data (the pinned onnx package's, which make setup caches in
# ONNX_DATA; docs/dependencies.md). FUZZ_SECONDS bounds the run; findings land in build-fuzz/.
GRAFT_DEPS_DIR ?= $(HOME)/.cache/graft-deps
ONNX_VERSION := $(shell sed -n 's/^onnx==\([0-9.]*\).*/\1/p' requirements.txt)
ONNX_DATA ?= $(GRAFT_DEPS_DIR)/onnx-$(ONNX_VERSION)-testdata
fuzz: setup fuzz-python
	cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_C_COMPILER=clang -DGRAFT_FUZZ=ON -DGRAFT_PYTHON=OFF
	cmake --build build-fuzz -j $(JOBS) --target fuzz_import fuzz_checkpoint
	mkdir -p build-fuzz/corpus build-fuzz/corpus-ckpt build-fuzz/findings
	cp tests/fuzz/seeds/*.onnx tests/fuzz/regressions/*.onnx build-fuzz/corpus/
	cp tests/fuzz/seeds/ckpt_*.onnx tests/fuzz/regressions/*.onnx build-fuzz/corpus-ckpt/
	for m in $$(find $(ONNX_DATA)/node $(ONNX_DATA)/simple -name model.onnx -size -4k 2>/dev/null); do \
	  cp "$$m" "build-fuzz/corpus/$$(basename $$(dirname $$m)).onnx"; done
	build-fuzz/tests/fuzz/fuzz_import build-fuzz/corpus -max_total_time=$${FUZZ_SECONDS:-60} -rss_limit_mb=4096 \
	  -timeout=30 -max_len=65536 -artifact_prefix=build-fuzz/findings/
	build-fuzz/tests/fuzz/fuzz_checkpoint build-fuzz/corpus-ckpt -max_total_time=$${FUZZ_SECONDS:-60} -rss_limit_mb=4096 \
	  -timeout=30 -max_len=65536 -artifact_prefix=build-fuzz/findings/ckpt-

# The Python API target (tests/fuzz/fuzz_python.py) under atheris (PyPI; the pinned version has a
# wheel for CPython 3.11), on the ordinary build's module: coverage of the Python side, crashes of
# the native side caught by libFuzzer. Its corpus starts from the regression inputs; findings land
# in build/findings-py/ (keep each in tests/fuzz/regressions/python, which make test replays).
ATHERIS_VERSION := 3.0.0
fuzz-python: build
	$(PY) -c 'import atheris' 2>/dev/null || $(PY) -m pip install -q atheris==$(ATHERIS_VERSION)
	mkdir -p $(BUILD)/corpus-py $(BUILD)/findings-py
	cp tests/fuzz/regressions/python/* $(BUILD)/corpus-py/ 2>/dev/null; rm -f $(BUILD)/corpus-py/*.md
	OMP_WAIT_POLICY=passive $(PY) tests/fuzz/fuzz_python.py atheris $(BUILD)/corpus-py \
	  -max_total_time=$${FUZZ_SECONDS:-60} -rss_limit_mb=4096 -timeout=60 -max_len=4096 \
	  -artifact_prefix=$(BUILD)/findings-py/

# A campaign with the ordinary build (no libFuzzer): CAMPAIGN_COUNT mutants of the seeds (models
# and checkpoints), each in a forked child with a memory cap and a timeout; prints the counts and
# fails on any crash, hang or blow-up (tests/fuzz/campaign.cpp; findings land in build/findings).
# Then the Python API: CAMPAIGN_API_CASES hostile calls per category of issue 16 (threads, virtual
# devices, batches per step, optimizer values, anchors, special files, checkpoints, non-UTF-8
# names, concurrent run(), Python integers: tests/fuzz/campaign_api.py) and CAMPAIGN_PY_COUNT
# random inputs of the Python fuzz target (tests/fuzz/fuzz_python.py random).
CAMPAIGN_COUNT ?= 1000
CAMPAIGN_API_CASES ?= 30
CAMPAIGN_PY_COUNT ?= 300
fuzz-campaign: build
	$(BUILD)/tests/fuzz_campaign mutate --seeds tests/fuzz/seeds --count $(CAMPAIGN_COUNT) --findings $(BUILD)/findings
	$(BUILD)/tests/fuzz_campaign mutate --seeds tests/fuzz/regressions --count $(CAMPAIGN_COUNT) --rng 2 \
	  --findings $(BUILD)/findings
	OMP_WAIT_POLICY=passive $(PY) tests/fuzz/campaign_api.py --cases-per-category $(CAMPAIGN_API_CASES)
	OMP_WAIT_POLICY=passive $(PY) tests/fuzz/fuzz_python.py random --count $(CAMPAIGN_PY_COUNT) \
	  --findings $(BUILD)/findings-py

# CI's fuzz stage (.ci/run): FUZZ_SECONDS (default 60) of mutation fuzzing on the ordinary build,
# so no second (libFuzzer) build: mutants of the seed models and checkpoints, then of the
# regression inputs, then random inputs of the Python target, a third of the time each, every case
# in a forked child with a memory cap and a timeout. Fails on any crash, hang or blow-up (findings
# in build/findings and build/findings-py). The random seed is the commit count, so each landing
# tries other mutants.
fuzz-smoke: build
	rng=$$(git rev-list --count HEAD 2>/dev/null || echo 1); third=$$(( $${FUZZ_SECONDS:-60} / 3 )); \
	for seeds in tests/fuzz/seeds tests/fuzz/regressions; do \
	  $(BUILD)/tests/fuzz_campaign mutate --seeds $$seeds --count 1000000 --rng $$rng --seconds $$third \
	    --findings $(BUILD)/findings || exit 1; done; \
	OMP_WAIT_POLICY=passive $(PY) tests/fuzz/fuzz_python.py random --count 1000000 --seed $$rng --seconds $$third \
	  --findings $(BUILD)/findings-py

# The ASan builds' UBSan checks: CMakeLists.txt's GRAFT_UBSAN_CHECKS (the arithmetic ones) unless
# UBSAN is given (UBSAN=undefined: every check, about 1.5x the build time).
# Line tables only (-g1): reports keep file:line, and the build takes about 0.9x the time of -g.
ASAN_CONFIG = -DGRAFT_SANITIZE=ON $(if $(UBSAN),-DGRAFT_UBSAN_CHECKS=$(UBSAN),-UGRAFT_UBSAN_CHECKS) \
  -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DCMAKE_C_FLAGS_DEBUG=-g1

# Unit and op tests under ASan+UBSan, then every conformance case, each in a child process: a
# sanitizer report in a child fails the run (ordinary failures are the Release build's business).
test-asan: setup
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug $(ASAN_CONFIG) -DGRAFT_PYTHON=OFF \
	  -DPython_EXECUTABLE=$(abspath $(PY))
	cmake --build build-asan -j $(JOBS)
	cd build-asan && export ASAN_OPTIONS=detect_leaks=1 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 && \
	  ctest --output-on-failure -j $(JOBS) -E '^conformance(_reference)?$$' && \
	  tests/conformance --only-crashes --timeout 600

# The unit and backend suites only (what .ci/run runs): builds just their two test programs and
# runs each once, as one process (under ctest every backend test is a process of its own that
# rebuilds the whole case matrix: 10 s each under ASan, 30 min in all; run once, 12 s + 41 s).
test-asan-quick: setup
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug $(ASAN_CONFIG) -DGRAFT_PYTHON=OFF \
	  -DPython_EXECUTABLE=$(abspath $(PY))
	cmake --build build-asan -j $(JOBS) --target unit_tests backend_tests
	cd build-asan && export ASAN_OPTIONS=detect_leaks=1 GRAFT_VERIFY_PASSES=1 OMP_WAIT_POLICY=passive \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 && \
	  tests/unit_tests --gtest_brief=1 && tests/backend_tests --gtest_brief=1

# The concurrency tests under ThreadSanitizer: graft's thread pool, one session run from several
# threads, the pipeline executor (a worker thread per virtual device), two replicas in one
# process. tests/tsan.supp says why each suppression is there (libgomp and oneDNN are not
# instrumented).
# -O1 with line tables only (-g1): reports keep their file:line stacks, and the build compiles in
# 0.55-0.6x the time of RelWithDebInfo's -O2 -g (session.cpp 10.7 -> 6.3 s, onednn_conv.cpp 7.8 ->
# 4.6, ops/conv.cpp 6.0 -> 3.4; 2-core AVX-512 EPYC), which kept the stage out of CI's budget.
TSAN_OPT := -O1 -g1 -DNDEBUG
TSAN_TESTS := ThreadPool.*:SpinTeam.*:LocalReduce.*:Reliability.RunFromSeveralThreads*:Pipeline.*:PipelineTraining.*:TrainingSession.TwoReplicas*
test-tsan: setup
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRAFT_TSAN=ON -DGRAFT_PYTHON=OFF \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(TSAN_OPT)" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$(TSAN_OPT)" \
	  -DPython_EXECUTABLE=$(abspath $(PY))
	cmake --build build-tsan -j $(JOBS) --target unit_tests
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  OMP_WAIT_POLICY=passive build-tsan/tests/unit_tests --gtest_filter='$(TSAN_TESTS)'

format:
	git ls-files '*.cpp' '*.hpp' | xargs clang-format -i

# Fails when C++ lines changed since the merge base with FORMAT_BASE (default: main) are not as
# clang-format writes them (FORMAT_ALL=1: every file, whole).
FORMAT_BASE ?= main
format-check:
	@scripts/format_check.sh $(FORMAT_BASE)

clean:
	rm -rf $(BUILD) build-asan build-fuzz build-tsan
