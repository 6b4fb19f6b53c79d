# Builds the CPU trainer (train), the GPU trainer (train_gpt) and their tests.
#   make train       CPU trainer; with MPI when mpicxx is found (MPI=0 to turn off)
#   make test        builds and runs every test that this machine can run
#   make train_gpt_cpu  the GPU trainer on the CPU runtime (cpu_cuda/, see cpu.mk): no GPU needed
#   make bench       CPU speed: ./train against a plain PyTorch GPT-2 and Llama of the same shapes (when torch is installed),
#                    then generation: 512 tokens against 64, with and without the key/value cache
#   make check       per-tensor comparison of the CPU trainer with the PyTorch golden file
#   make check-docs  reruns every command whose output README.md and docs/ quote and compares (~10 min on 2 cores)
#   make train_gpt   GPU trainer (needs nvcc; CUDA_ARCH=90 to choose the GPU; see gpu.mk)
#   make test_gpu    GPU tests (build here, run where there is a GPU)
#   make bench_comm  the planner's gradient-sync time against one measured between network-namespace hosts (root)
#   make bench_gpu   GPU speed: GPT-2 124M shape at T=1024
#   make sass        what the compiled GPU code says (needs nvcc, not a GPU): registers, spills, blocks per SM, attention's hottest loops

CXX ?= g++
CXXFLAGS ?= -O3 -march=native
CXXFLAGS += -std=c++17 -Wall -Wextra -Wno-unused-parameter
# nothing reads errno after sqrtf/logf: without this GCC keeps those loops scalar
CXXFLAGS += -fno-math-errno
ifeq ($(shell uname -m),x86_64)
  # GCC prefers 256-bit vectors on many AVX-512 chips; the matmul kernel is written for 512
  CXXFLAGS += -mprefer-vector-width=512
endif

# OpenMP: all the CPU parallelism. Without it everything still works, on one core.
OPENMP := $(shell echo 'int main(){return 0;}' | $(CXX) -fopenmp -x c++ - -o /dev/null 2>/dev/null && echo yes)
ifeq ($(OPENMP),yes)
  CXXFLAGS += -fopenmp
else
  $(warning ************************************************************)
  $(warning OpenMP not found: the CPU trainer will run on ONE core.)
  $(warning Install it (Debian: apt-get install libgomp1, or libomp-dev).)
  $(warning ************************************************************)
  CXXFLAGS += -Wno-unknown-pragmas
endif

# MPI for several CPU replicas: found through mpicxx; MPI=0 builds without it.
MPI ?= 1
MPICXX := $(if $(filter 1,$(MPI)),$(shell command -v mpicxx 2>/dev/null))
ifneq ($(MPICXX),)
  TRAIN_CXX := OMPI_CXX=$(CXX) $(MPICXX)
  TRAIN_DEFS := -DTRAIN_MPI -DOMPI_SKIP_MPICXX  # C API only
  TRAIN_NOTE := with MPI ($(MPICXX))
else
  TRAIN_CXX := $(CXX)
  TRAIN_NOTE := without MPI (single process; install libopenmpi-dev for replicas)
endif

HOST_HEADERS := $(wildcard host/*.h)
NPROC := $(shell nproc 2>/dev/null || echo 2)

# GPU rules (train_gpt, test/gpu_trainer/trainer, test_gpu, bench_gpu): they need nvcc, found there
-include gpu.mk

.PHONY: all test bench check clean
all: train $(if $(NVCC),train_gpt)

# The stamp names the MPI choice, so installing (or removing) Open MPI rebuilds train.
TRAIN_STAMP := .train-$(if $(MPICXX),mpi,single)
$(TRAIN_STAMP):
	@rm -f .train-mpi .train-single && touch $@

train: train.cpp $(HOST_HEADERS) $(TRAIN_STAMP)
	@echo "building train $(TRAIN_NOTE)"
	$(TRAIN_CXX) $(CXXFLAGS) $(TRAIN_DEFS) -o $@ train.cpp

# The CUDA sources on the CPU runtime (train_gpt_cpu, test/gpu_trainer/trainer_cpu, ...): see cpu.mk
include cpu.mk

# ---- tests (doctest, from Debian's doctest-dev)
DOCTEST_OK := $(shell test -f /usr/include/doctest/doctest.h && echo yes)

test/cpu_trainer/trainer: test/cpu_trainer/trainer.cpp test/cpu_trainer/finite_diff.h test/generation_check.h test/test_util.h test/golden.h train.cpp $(HOST_HEADERS)
ifneq ($(DOCTEST_OK),yes)
	$(error doctest is missing: apt-get install doctest-dev)
endif
	$(CXX) $(CXXFLAGS) -o $@ test/cpu_trainer/trainer.cpp

test/cpu_trainer/plan: test/cpu_trainer/plan.cpp test/test_util.h $(HOST_HEADERS)
	$(CXX) $(CXXFLAGS) -o $@ test/cpu_trainer/plan.cpp

test/cpu_trainer/llama: test/cpu_trainer/llama.cpp test/cpu_trainer/finite_diff.h test/generation_check.h test/test_util.h train.cpp $(HOST_HEADERS)
	$(CXX) $(CXXFLAGS) -o $@ test/cpu_trainer/llama.cpp

test/cpu_trainer/noise_estimator: test/cpu_trainer/noise_estimator.cpp $(HOST_HEADERS)
	$(CXX) $(CXXFLAGS) -o $@ test/cpu_trainer/noise_estimator.cpp

test/cpu_trainer/check_reference: test/cpu_trainer/check_reference.cpp test/golden.h train.cpp $(HOST_HEADERS)
	$(CXX) $(CXXFLAGS) -o $@ test/cpu_trainer/check_reference.cpp

# Everything the tests run, built in parallel first (the CPU runtime's programs take a while).
TEST_PROGRAMS := train test/cpu_trainer/trainer test/cpu_trainer/llama test/cpu_trainer/plan test/cpu_trainer/noise_estimator test/cpu_trainer/check_reference $(if $(CPU_CUDA_OK),$(CPU_CUDA_PROGRAMS))
test:
	@$(MAKE) --no-print-directory -j$(NPROC) $(TEST_PROGRAMS)
	@bash test/run_all.sh

# Do the tests catch bugs? test/mutations.sh plants each bug of its table in a copy of the tree,
# as many side by side as there are processors, and prints "N of M caught" (docs/hardening.md).
# Not part of make test. print-test-programs: what the script's "auto" targets choose from.
.PHONY: mutations print-test-programs
mutations:
	JOBS=$(NPROC) bash test/mutations.sh
print-test-programs:
	@echo $(TEST_PROGRAMS)

check: test/cpu_trainer/check_reference
	./test/cpu_trainer/check_reference test/golden/model_tiny.bin test/golden/reference_tiny.bin
	./test/cpu_trainer/check_reference test/golden/llama_tiny.bin test/golden/llama_reference_tiny.bin

# Every quoted output of README.md and docs/*.md against what today's code prints, and every
# file, function and option they name against the checkout (docs/check-docs.md). make test
# runs the quick part (test/tools/quoted_outputs.sh).
.PHONY: check-docs
check-docs: train $(if $(CPU_CUDA_OK),train_gpt_cpu)
	python3 test/tools/check_docs.py

bench: train
	@bash scripts/bench_cpu.sh
	@bash scripts/bench_generation.sh

# The gradient sync timed over links of 1 Gbit/s and 200 Mbit/s between 2 and 4 hosts made of
# network namespaces (test/replicas/cluster.sh; needs root and Open MPI), beside the planner's
# --dry-run --link-gbps prediction: the table in docs/replicas.md, "Across hosts".
.PHONY: bench_comm
bench_comm: train
	@bash scripts/bench_comm.sh

# What the compiled GPU code says, per kernel: registers, spills, shared memory, blocks per SM, and
# the instruction mix and FLOP per instruction of the attention kernels' hottest loops
# (dev/sass_report.py; docs/attention.md, "Reading the compiled code"). It compiles train_gpt.cu
# for CUDA_ARCH's architectures in PRECISION; SASS_ARGS="--precision both --kernel layernorm"
# adds options (python3 dev/sass_report.py --help). Without nvcc it says so and fails.
.PHONY: sass
sass:
	@python3 dev/sass_report.py $(if $(NVCC),--nvcc $(NVCC)) $(if $(NCCL_INC),--include $(NCCL_INC)) \
	    $(if $(GPU_ARCHS),--arch "$(GPU_ARCHS)") $(if $(PRECISION),--precision $(PRECISION)) \
	    $(if $(strip $(NVCCFLAGS)),--nvcc-flags="$(NVCCFLAGS)") $(SASS_ARGS)

clean:
	rm -f train train_gpt test/cpu_trainer/trainer test/cpu_trainer/llama test/cpu_trainer/plan test/cpu_trainer/noise_estimator test/cpu_trainer/check_reference test/gpu_trainer/trainer .train-mpi .train-single
	rm -rf build $(CPU_CUDA_PROGRAMS) dev/cpu_cuda_bench dev/cpu_cuda_gemm_bench
	$(MAKE) -C dev/cuda clean

# ---- hardening: sanitizer builds and fuzzing ---------------------------------------------
# `make test` also builds the CPU trainer and its doctest suite with AddressSanitizer and
# UndefinedBehaviorSanitizer (build/asan/; -O0 keeps the build short, any report fails the
# run) and, where clang has libFuzzer (Debian: clang libclang-rt-dev), the fuzz harnesses of
# test/hardening/fuzz/ (build/fuzz/); test/run_all.sh runs them.
#   make fuzz   builds the harnesses and runs each for FUZZ_SECONDS (default 60)
SAN_CXXFLAGS := $(filter-out -O%,$(CXXFLAGS)) -O0 -g -fno-omit-frame-pointer \
                -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_CXX ?= clang++
FUZZ_OK := $(shell echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' | \
             $(FUZZ_CXX) -fsanitize=fuzzer -x c++ - -o /dev/null 2>/dev/null && echo yes)
FUZZ_HARNESSES := $(patsubst test/hardening/fuzz/%.cpp,build/fuzz/%,$(wildcard test/hardening/fuzz/fuzz_*.cpp))
FUZZ_SECONDS ?= 60

build/asan/train: train.cpp $(HOST_HEADERS)
	@mkdir -p $(@D)
	$(CXX) $(SAN_CXXFLAGS) -o $@ train.cpp

build/asan/cpu_trainer: test/cpu_trainer/trainer.cpp test/cpu_trainer/finite_diff.h test/generation_check.h test/test_util.h test/golden.h train.cpp $(HOST_HEADERS)
	@mkdir -p $(@D)
	$(CXX) $(SAN_CXXFLAGS) -o $@ test/cpu_trainer/trainer.cpp

build/fuzz/fuzz_%: test/hardening/fuzz/fuzz_%.cpp test/hardening/fuzz/fuzz.h $(HOST_HEADERS)
	@mkdir -p $(@D)
	$(FUZZ_CXX) -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -o $@ $<

.PHONY: sanitizers fuzzers fuzz clean-hardening
sanitizers: build/asan/train build/asan/cpu_trainer
fuzzers: $(FUZZ_HARNESSES)
fuzz: fuzzers
	bash test/hardening/fuzz/run.sh $(FUZZ_SECONDS)
# (built by make test in the same parallel make as the rest, not before it one after the other)
TEST_PROGRAMS += build/asan/train build/asan/cpu_trainer $(if $(FUZZ_OK),$(FUZZ_HARNESSES))
clean: clean-hardening
clean-hardening:
	rm -rf build/asan build/fuzz
# ---- end of hardening
