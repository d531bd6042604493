# nibble's front door. `make run` and `make test` are the README's two commands:
# each installs missing Debian packages, configures, builds, then runs.
JOBS       ?= $(shell nproc)
BUILD      ?= build/release
ASAN_BUILD ?= build/asan
FUZZ_BUILD ?= build/fuzz
FUZZ_TIME  ?= 60
# The official openai client, for the server's client tests (ctest
# server_openai_client), in a virtual environment of its own.
OPENAI_VENV ?= build/venv-openai
CMAKE_GEN  := -G Ninja

.PHONY: all deps build build-asan run install test test-release test-asan openai-venv fixtures fuzz bench clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Release

# The sanitizer build compiles at -O1 with line tables only (-g1): enough for
# ASan/UBSan reports with file:line, and most of `make test`'s compile time
# was this build at -O2 -g.
$(ASAN_BUILD)/build.ninja:
	cmake -S . -B $(ASAN_BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DNIBBLE_SANITIZE=ON

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

build-asan: deps $(ASAN_BUILD)/build.ninja
	cmake --build $(ASAN_BUILD) -j $(JOBS)

# Runs nibble on the model the repository ships (models/dsv4-tiny): how it
# would run it, then a short greedy continuation. PROMPT may hold \n (printf
# %b), and defaults to the prompt of docs/shipped_model.md's first example,
# so the text can be compared with it (and with greedy_reference.json).
PROMPT ?= ROMEO.\n
run: build
	$(BUILD)/nibble explain models/dsv4-tiny
	printf '%b' '$(PROMPT)' | $(BUILD)/nibble run -p - -n 64 --temp 0

# Installs nibble and the shipped model under PREFIX (bin/, share/nibble/).
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# Every test once optimized; under AddressSanitizer + UBSan every test but the
# long acceptance runs (ctest label "acceptance", listed in tests/CMakeLists.txt),
# which the optimized run has just passed. The last line says which
# ISA-specific kernel tests this CPU skipped, and why.
test: test-release test-asan
	@cd $(BUILD) && tests/isa_summary

test-release: build openai-venv
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: build-asan openai-venv
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) -LE acceptance

# The openai client pinned in tests/server/requirements-openai.txt, from PyPI.
openai-venv: deps $(OPENAI_VENV)/.installed
$(OPENAI_VENV)/.installed: tests/server/requirements-openai.txt
	python3 -m venv $(OPENAI_VENV)
	$(OPENAI_VENV)/bin/pip install -q -r tests/server/requirements-openai.txt
	touch $@

# Regenerates every committed fixture (needs the optional Python tooling:
# pip install -r tools/requirements.txt).
fixtures:
	python3 tools/gen_all.py

# Opt-in libFuzzer run of the safetensors header parser for FUZZ_TIME seconds
# on one core (needs clang-14 + libclang-rt-14-dev, see deps/fuzz-packages.txt).
# New inputs land in $(FUZZ_BUILD)/corpus, crashes in $(FUZZ_BUILD)/crash-*.
# To refresh the committed corpus: $(FUZZ_BUILD)/tests/fuzz/fuzz_safetensors_header
#   -merge=1 tests/fuzz/corpus/safetensors_header $(FUZZ_BUILD)/corpus/safetensors_header
fuzz:
	@scripts/install-deps.sh deps/fuzz-packages.txt
	cmake -S . -B $(FUZZ_BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_COMPILER=clang++-14 -DNIBBLE_FUZZ=ON -DNIBBLE_TESTS=OFF
	cmake --build $(FUZZ_BUILD) --target fuzz_safetensors_header -j $(JOBS)
	mkdir -p $(FUZZ_BUILD)/corpus/safetensors_header
	$(FUZZ_BUILD)/tests/fuzz/fuzz_safetensors_header -max_total_time=$(FUZZ_TIME) \
	  -dict=tests/fuzz/safetensors_header.dict -artifact_prefix=$(FUZZ_BUILD)/ \
	  $(FUZZ_BUILD)/corpus/safetensors_header tests/fuzz/corpus/safetensors_header

clean:
	rm -rf build
