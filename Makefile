# graft: the two commands for a fresh machine are `make demo` and `make test`.
SHELL := /bin/bash
BUILD ?= build
JOBS ?= $(shell nproc)
PY := .venv/bin/python
CMAKE_FLAGS ?=

.PHONY: all setup configure build test test-cpp test-python demo bench fuzz test-asan clean format

all: build

setup:
	@scripts/setup.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DPython_EXECUTABLE=$(abspath $(PY)) $(CMAKE_FLAGS)

configure: setup $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(PY) -m pytest -q tests/python

demo: build
	$(PY) tools/demo.py

bench: build
	$(PY) bench/run.py

fuzz: setup
	cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_C_COMPILER=clang -DGRAFT_FUZZ=ON -DGRAFT_PYTHON=OFF
	cmake --build build-fuzz -j $(JOBS) --target fuzz_import
	mkdir -p build-fuzz/corpus && cp tests/fuzz/seeds/* build-fuzz/corpus/ 2>/dev/null || true
	build-fuzz/tests/fuzz/fuzz_import build-fuzz/corpus -max_total_time=$${FUZZ_SECONDS:-60} -rss_limit_mb=4096

test-asan: setup
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DGRAFT_SANITIZE=ON -DGRAFT_PYTHON=OFF \
	  -DPython_EXECUTABLE=$(abspath $(PY))
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS)

format:
	git ls-files '*.cpp' '*.hpp' | xargs clang-format -i

clean:
	rm -rf $(BUILD) build-asan build-fuzz
