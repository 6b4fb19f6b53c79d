# The CUDA sources on the CPU runtime (cpu_cuda/): built with g++, run without a GPU.
# The Makefile includes this file after gpu.mk.
#
#   train_gpt_cpu            the GPU trainer, on the CPU: same options, files and log lines
#   test/gpu_trainer/trainer_cpu        test/gpu_trainer/trainer.cu on the CPU runtime
#   (both in PRECISION, bf16 by default, as gpu.mk; *_fp32 are the same in fp32, which
#   make test runs as well)
#   test/cpu_runtime/execution       the runtime's own tests (execution model, runtime API)
#   test/cpu_runtime/kernel_features  its cooperative groups, launch bounds, cache hints and the other
#                            features of kernels written elsewhere
#   test/cpu_runtime/samples  the CUDA of tutorials and vendor samples: device presets and every
#                            attribute, symbols, libcu++ barriers and pipelines, occupancy, ...
#   DIR/NAME_cpu             any DIR/NAME.cu, with headers beside it and SOURCES=... ("bring your own kernel"; the rule at the end);
#                            test/cpu_runtime/byok_cpu is one, built and run by make test
#   test/cpu_runtime/wmma       its WMMA (tensor-core fragments) against float64 references
#   test/cpu_runtime/mma        its mma.sync, ldmatrix and cp.async (gpu/mma.cuh's instructions):
#                            the PTX ISA's layouts, float64 references, misuse
#   test/gpu_trainer/flash_attention_cpu  the fused attention against train.cpp and the cuBLAS path
#                            (and _fp32)
#   test/cpu_runtime/cublas     its cuBLAS subset against float64 references
#   test/cpu_runtime/nccl       its NCCL, across 1, 2 and 4 processes
#   dev/cuda/NAME_cpu        the kernel workbenches (run with --check for the quick check)
#   bench_cpu_cuda           the runtime's own costs: fiber switch, barrier, shuffle, launch;
#                            and its cuBLAS's GFLOP/s on the trainer's shapes
#
# Each .cu file (and every file it includes from the project) is first rewritten into
# build/cpu/ by cpu_cuda/rewrite.cpp: only the launch syntax and __shared__ declarations
# change, and every line keeps its number (#line points compiler errors and gdb at the
# original). The toolkit's headers are needed for the declarations; nothing links to CUDA.

CPU_CUDA_INC := $(or $(CUDA_INC),$(wildcard $(CUDA_HOME)/include))
CPU_CUDA_OK := $(if $(wildcard $(CPU_CUDA_INC)/cuda_runtime.h),yes)
CPU_CUDA_HEADERS := $(wildcard cpu_cuda/*.h cpu_cuda/include/*.h cpu_cuda/include/*/*.h cpu_cuda/include/cuda/*)
# (cpu_cuda/include first: its <cooperative_groups.h> stands in for the toolkit's, which needs nvcc)
CPU_CUDA_CXXFLAGS := $(CXXFLAGS) -g -I$(CURDIR)/cpu_cuda/include -I$(CPU_CUDA_INC)
CPU_CUDA_FLAGS := $(CPU_CUDA_CXXFLAGS) -include $(CURDIR)/cpu_cuda/cuda_cpu.h
CPU_CUDA_LIBS := -lpthread -lrt
# The test programs keep line tables only (-g1: backtraces and breakpoints by line, no local
# variables), which compiles faster (train_gpt.cu: 48 s of processor time instead of 60 with
# -g); the trainers, the workbenches and your own programs keep full -g. For a test program in
# gdb with its variables:
# make test/gpu_trainer/trainer_cpu CPU_CUDA_TEST_DEBUG=-g (after removing it).
CPU_CUDA_TEST_DEBUG ?= -g1
CPU_CUDA_TEST_FLAGS = $(CPU_CUDA_FLAGS) $(CPU_CUDA_TEST_DEBUG)
REWRITE := build/cpu_cuda_rewrite

# the project's sources as the CPU build sees them
CPU_CUDA_SOURCES := train_gpt.cu train.cpp $(HOST_HEADERS) $(wildcard gpu/*.cuh test/*.h test/*/*.cu test/*/*.h dev/cuda/*.cu dev/cuda/*.h)
TRAINER_SOURCES = $(call CPU_MIRROR,train_gpt.cu $(HOST_HEADERS) $(wildcard gpu/*.cuh))
DEFS_bf16 := -DTRAIN_BF16
DEFS_fp32 :=
CPU_MIRROR = $(addprefix build/cpu/,$(1))
WORKBENCHES := layernorm attention_softmax attention_fused crossentropy gelu encoder_backward adamw
# built on request (make dev/cuda/step_kernels_cpu), not by make test: a timing table, no check
BENCH_ONLY_WORKBENCHES := step_kernels

# what make test builds and runs
CPU_CUDA_PROGRAMS := train_gpt_cpu train_gpt_cpu_fp32 test/gpu_trainer/trainer_cpu test/gpu_trainer/trainer_cpu_fp32 test/cpu_runtime/execution test/cpu_runtime/wmma \
                     test/cpu_runtime/mma \
                     test/cpu_runtime/kernel_features test/cpu_runtime/samples test/cpu_runtime/byok_cpu test/cpu_runtime/byok_multi/main_cpu \
                     test/gpu_trainer/flash_attention_cpu test/gpu_trainer/flash_attention_cpu_fp32 \
                     test/cpu_runtime/cublas test/cpu_runtime/nccl $(foreach w,$(WORKBENCHES),dev/cuda/$(w)_cpu)

.PHONY: cpu_cuda_check bench_cpu_cuda print-cpu-cuda-compiler

# the compiler and flags of the programs above, less the umbrella header: each of cpu_cuda/'s
# headers must compile alone with them (test/cpu_runtime/headers.sh)
print-cpu-cuda-compiler:
	@echo $(CXX) $(CPU_CUDA_CXXFLAGS)

cpu_cuda_check:
ifneq ($(CPU_CUDA_OK),yes)
	@echo "cpu.mk: the CPU runtime needs the CUDA toolkit's headers (cuda_runtime.h, cublas_v2.h, nccl.h):"; \
	 echo "        install the CUDA toolkit, or set CUDA_HOME (looked in '$(CPU_CUDA_INC)')"; exit 1
endif

$(REWRITE): cpu_cuda/rewrite.cpp
	@mkdir -p build
	$(CXX) -std=c++17 -O2 -Wall -Wextra -o $@ $<

build/cpu/%: % $(REWRITE)
	@mkdir -p $(dir $@)
	@$(REWRITE) $< $@

train_gpt_cpu: $(TRAINER_SOURCES) $(CPU_CUDA_HEADERS) $(TRAIN_STAMP) $(GPU_STAMP) | cpu_cuda_check
	@echo "building train_gpt_cpu (train_gpt.cu on the CPU runtime, $(PRECISION)) $(TRAIN_NOTE)"
	$(TRAIN_CXX) $(CPU_CUDA_FLAGS) $(TRAIN_DEFS) $(DEFS_$(PRECISION)) -o $@ -x c++ build/cpu/train_gpt.cu $(CPU_CUDA_LIBS)
train_gpt_cpu_fp32: $(TRAINER_SOURCES) $(CPU_CUDA_HEADERS) $(TRAIN_STAMP) | cpu_cuda_check
	$(TRAIN_CXX) $(CPU_CUDA_FLAGS) $(TRAIN_DEFS) -o $@ -x c++ build/cpu/train_gpt.cu $(CPU_CUDA_LIBS)

# their end-to-end tests start the trainer of their precision, and ./train
test/gpu_trainer/trainer_cpu: $(call CPU_MIRROR,$(CPU_CUDA_SOURCES)) $(CPU_CUDA_HEADERS) $(GPU_STAMP) | cpu_cuda_check train_gpt_cpu train
	$(CXX) $(CPU_CUDA_TEST_FLAGS) $(DEFS_$(PRECISION)) -DTRAIN_GPT_BINARY='"./train_gpt_cpu"' -o $@ \
	    -x c++ build/cpu/test/gpu_trainer/trainer.cu $(CPU_CUDA_LIBS)
test/gpu_trainer/trainer_cpu_fp32: $(call CPU_MIRROR,$(CPU_CUDA_SOURCES)) $(CPU_CUDA_HEADERS) | cpu_cuda_check train_gpt_cpu_fp32 train
	$(CXX) $(CPU_CUDA_TEST_FLAGS) -DTRAIN_GPT_BINARY='"./train_gpt_cpu_fp32"' -o $@ -x c++ build/cpu/test/gpu_trainer/trainer.cu \
	    $(CPU_CUDA_LIBS)

test/cpu_runtime/execution: $(call CPU_MIRROR,test/cpu_runtime/execution.cu test/cpu_runtime/cpu_cuda_test.h) $(CPU_CUDA_HEADERS) | cpu_cuda_check
	$(CXX) $(CPU_CUDA_TEST_FLAGS) -o $@ -x c++ build/cpu/test/cpu_runtime/execution.cu $(CPU_CUDA_LIBS)

test/cpu_runtime/kernel_features: $(call CPU_MIRROR,test/cpu_runtime/kernel_features.cu test/cpu_runtime/cpu_cuda_test.h) $(CPU_CUDA_HEADERS) | cpu_cuda_check
	$(CXX) $(CPU_CUDA_TEST_FLAGS) -O1 -o $@ -x c++ build/cpu/test/cpu_runtime/kernel_features.cu $(CPU_CUDA_LIBS)

test/cpu_runtime/samples: $(call CPU_MIRROR,test/cpu_runtime/samples.cu test/cpu_runtime/cpu_cuda_test.h) $(CPU_CUDA_HEADERS) | cpu_cuda_check
	$(CXX) $(CPU_CUDA_TEST_FLAGS) -O1 -o $@ -x c++ build/cpu/test/cpu_runtime/samples.cu $(CPU_CUDA_LIBS)

test/cpu_runtime/wmma: $(call CPU_MIRROR,test/cpu_runtime/wmma.cu test/cpu_runtime/cpu_cuda_test.h) $(CPU_CUDA_HEADERS) | cpu_cuda_check
	$(CXX) $(CPU_CUDA_TEST_FLAGS) -o $@ -x c++ build/cpu/test/cpu_runtime/wmma.cu $(CPU_CUDA_LIBS)
test/cpu_runtime/mma: $(call CPU_MIRROR,test/cpu_runtime/mma.cu test/cpu_runtime/cpu_cuda_test.h gpu/mma.cuh) $(CPU_CUDA_HEADERS) | cpu_cuda_check
	$(CXX) $(CPU_CUDA_TEST_FLAGS) -o $@ -x c++ build/cpu/test/cpu_runtime/mma.cu $(CPU_CUDA_LIBS)

FLASH_TEST_SOURCES := $(call CPU_MIRROR,test/gpu_trainer/flash_attention.cu train.cpp test/test_util.h dev/cuda/device_array.h \
                      $(HOST_HEADERS) $(wildcard gpu/*.cuh))
test/gpu_trainer/flash_attention_cpu: $(FLASH_TEST_SOURCES) $(CPU_CUDA_HEADERS) $(GPU_STAMP) | cpu_cuda_check
	$(CXX) $(CPU_CUDA_TEST_FLAGS) $(DEFS_$(PRECISION)) -o $@ -x c++ build/cpu/test/gpu_trainer/flash_attention.cu $(CPU_CUDA_LIBS)
test/gpu_trainer/flash_attention_cpu_fp32: $(FLASH_TEST_SOURCES) $(CPU_CUDA_HEADERS) | cpu_cuda_check
	$(CXX) $(CPU_CUDA_TEST_FLAGS) -o $@ -x c++ build/cpu/test/gpu_trainer/flash_attention.cu $(CPU_CUDA_LIBS)

test/cpu_runtime/cublas test/cpu_runtime/nccl: test/%: test/%.cpp test/cpu_runtime/cpu_cuda_test.h $(CPU_CUDA_HEADERS) | cpu_cuda_check
	$(CXX) $(CPU_CUDA_TEST_FLAGS) -o $@ $< $(CPU_CUDA_LIBS)

# (-O1: the checks run small shapes, and six programs compile twice as fast)
$(foreach w,$(WORKBENCHES) $(BENCH_ONLY_WORKBENCHES),dev/cuda/$(w)_cpu): dev/cuda/%_cpu: $(call CPU_MIRROR,$(CPU_CUDA_SOURCES)) $(CPU_CUDA_HEADERS) $(GPU_STAMP) | cpu_cuda_check
	$(CXX) $(CPU_CUDA_FLAGS) $(DEFS_$(PRECISION)) -O1 -o $@ -x c++ build/cpu/dev/cuda/$*.cu $(CPU_CUDA_LIBS)

dev/cpu_cuda_bench: $(call CPU_MIRROR,dev/cpu_cuda_bench.cu gpu/mma.cuh) $(CPU_CUDA_HEADERS) | cpu_cuda_check
	$(CXX) $(CPU_CUDA_FLAGS) -o $@ -x c++ build/cpu/dev/cpu_cuda_bench.cu $(CPU_CUDA_LIBS)

dev/cpu_cuda_gemm_bench: dev/cpu_cuda_gemm_bench.cpp $(CPU_CUDA_HEADERS) | cpu_cuda_check
	$(CXX) $(CPU_CUDA_FLAGS) -o $@ $< $(CPU_CUDA_LIBS)

bench_cpu_cuda: dev/cpu_cuda_bench dev/cpu_cuda_gemm_bench
	./dev/cpu_cuda_bench
	./dev/cpu_cuda_gemm_bench

# Bring your own kernel: any .cu program on the runtime. `make DIR/NAME_cpu` builds DIR/NAME.cu
# (a path outside the project works too: make -C PROJECT /abs/path/NAME_cpu). Every header beside
# it (*.cuh, *.h, *.hpp) is rewritten too, into the same folder under build/cpu/any/, so kernels,
# launches and __shared__ declarations in those headers work; a program of several .cu files names
# the others in SOURCES (relative to NAME.cu's folder: make DIR/NAME_cpu SOURCES="b.cu c.cu"), each
# compiled as a translation unit of its own, as nvcc does, and linked with NAME.cu (the runtime's
# definitions are inline, so each file may include it; a macro one file defines stays in that file).
# test/cpu_runtime/byok_multi/ is an example that make test builds. Headers in
# other folders (a samples collection's Common/) are found through INCLUDES="-I/path" (not rewritten).
# (Targets with rules of their own above take precedence.)
CPU_CUDA_ARCH ?= 900  # __CUDA_ARCH__ in these programs (cuda_cpu.h)
BYOK_REWRITTEN = build/cpu/any$(abspath $<)
BYOK_DIR = build/cpu/any$(abspath $(dir $<))
BYOK_BESIDE = $(wildcard $(dir $(1))*.cuh $(dir $(1))*.h $(dir $(1))*.hpp) $(addprefix $(dir $(1)),$(SOURCES))
.SECONDEXPANSION:
%_cpu: %.cu $$(call BYOK_BESIDE,$$*) $(REWRITE) $(CPU_CUDA_HEADERS) | cpu_cuda_check
	@mkdir -p $(BYOK_DIR)
	@for f in $(call BYOK_BESIDE,$<); do $(REWRITE) $$f $(BYOK_DIR)/$$(basename $$f) || exit 1; done
	@$(REWRITE) $< $(BYOK_REWRITTEN)
	$(CXX) $(CPU_CUDA_FLAGS) -iquote $(BYOK_DIR) -iquote $(dir $<) $(INCLUDES) -DCPU_CUDA_ARCH=$(CPU_CUDA_ARCH) -o $@ -x c++ $(BYOK_REWRITTEN) \
	    $(addprefix $(BYOK_DIR)/,$(notdir $(SOURCES))) $(CPU_CUDA_LIBS)

# the multi-file example: main.cu with kernels in a header beside it, a second .cu, and a host-only
# .cpp with a umin of its own (device functions are shown to .cu files only, as nvcc shows them)
test/cpu_runtime/byok_multi/main_cpu: SOURCES = scale.cu host_gold.cpp
