# The README's entry points. `make test` and `make run` work on a fresh Debian 12 machine.
PRESET ?= release
BUILD := build/$(PRESET)
JOBS ?= $(shell nproc)

.PHONY: all deps configure build test test-debug mutation run bench-step bench format format-check \
	clean

all: build

deps:
	bash scripts/bootstrap.sh

configure: deps
	cmake --preset $(PRESET) >/dev/null

build: configure
	cmake --build --preset $(PRESET) -j $(JOBS)

# Installs what is missing, builds, runs every test.
test: build
	ctest --preset $(PRESET) -j $(JOBS)

# The unit tests under AddressSanitizer, with UBSan on src/ (cmake/WeftWarnings.cmake). The debug
# test preset leaves out the labels slow, heavy (end-to-end jobs of many ranks, whose code smaller
# tests run there), mutation, slurm and fuzz (the fuzz targets are clang's, built with both
# sanitizers whatever the preset, so `make test` has run them). The filter lives in the preset:
# with --preset, CTest 3.25 drops it for a -LE given here and then applies neither
# (docs/parallelism.md).
test-debug:
	$(MAKE) build PRESET=debug
	ctest --preset debug -j $(JOBS)

# The mutation check (docs/parallelism.md): each bug of tests/mutation/mutants.txt planted in a
# scratch copy of the tree (build/mutation, kept: the next run recompiles only what changed), where
# the tests named for it must catch it. Writes bench/results/mutation-<date>-<HHMM>-<commit>.md
# and .json. Not part of `make test`.
mutation: configure
	bash tests/mutation/run.sh --from-build $(BUILD) --jobs $(JOBS) --scratch build/mutation \
	  --out bench/results

# The demo: train a small GPT on Jane Austen's novels for a few minutes, then sample from it.
# DEMO=austen-llama-demo: the same with every modern choice on (configs/runs/austen-llama-demo.toml).
DEMO ?= austen-demo
run: build
	DEMO=$(DEMO) WEFT=$(BUILD)/bin/weft bash scripts/demo.sh

# Training steps of GPT-2 124M on random tokens (issue #2's benchmark command).
bench-step: build
	$(BUILD)/bin/weft bench step --model configs/models/gpt2-124m.toml --batch 4 --seq 64 --steps 3

# Benchmark against the PyTorch baseline; writes bench/results/.
bench: build
	bash bench/step/run.sh

format:
	git ls-files '*.h' '*.cc' | xargs clang-format -i

format-check:
	git ls-files '*.h' '*.cc' | xargs clang-format --dry-run -Werror

clean:
	rm -rf build
