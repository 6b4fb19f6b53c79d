# GPU build rules: the GPU trainer, its tests and its benchmark. The Makefile includes this
# file (-include gpu.mk); it also works alone:  make -f gpu.mk [target] [VAR=value ...]
#
#   train_gpt        the GPU trainer
#   test/gpu_trainer/trainer    the GPU test program (doctest; needs train.cpp for the CPU reference)
#   test_gpu         builds and runs it (exit 77 from test_gpu = no GPU here: reported, not failed)
#   bench_gpu        GPT-2 124M shape, both precisions: ms/step, tokens/s, MFU, peak memory,
#                    time per kernel (scripts/bench_gpu.sh; LLMC_DIR=... adds llm.c's train_gpt2cu)
#   gpu_info         prints what was found: nvcc, architectures, NCCL, MPI, doctest
#   archs            the compile matrix: sm_75 to sm_120, fp32 and bf16, without a GPU (CI)
#
# Variables:
#   CUDA_HOME   CUDA toolkit (default /usr/local/cuda); nvcc is taken from PATH first
#   PRECISION   bf16 or fp32: the type of weights, activations and their gradients; default
#               bf16, or fp32 when CUDA_ARCH (or the local GPU) is below sm_80 (T4, V100)
#   CUDA_ARCH   compute capabilities to build for, e.g. "90" or "sm_90" or "80 90";
#               default: the local GPU's (nvidia-smi), else "80 90"
#   NCCL_HOME   NCCL install with include/ and lib/ (default: searched, see NCCL_INC below)
#   MPI_HOME    MPI install with include/ and lib/ (default: mpicxx --showme); MPI=0: without MPI
#   DOCTEST_INC directory holding doctest/doctest.h (default /usr/include)
#   NVCCFLAGS   extra flags for nvcc

GPU_MK_SAVED_GOAL := $(.DEFAULT_GOAL)
GPU_MK_STANDALONE := $(if $(filter-out $(lastword $(MAKEFILE_LIST)),$(MAKEFILE_LIST)),,yes)

CUDA_HOME ?= /usr/local/cuda
NVCC := $(or $(shell command -v nvcc 2>/dev/null),$(wildcard $(CUDA_HOME)/bin/nvcc))
CUDA_INC := $(if $(NVCC),$(abspath $(dir $(NVCC))/../include))
CUDA_LIB := $(if $(NVCC),$(firstword $(wildcard $(abspath $(dir $(NVCC))/../lib64) $(abspath $(dir $(NVCC))/../lib))))

# ---- architectures: the local GPU's, else a list that runs on A100 (80) and H100/H200 (90)
LOCAL_ARCH := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
ifeq ($(origin CUDA_ARCH),undefined)
  CUDA_ARCH := $(if $(LOCAL_ARCH),$(LOCAL_ARCH),80 90)
  ARCH_NOTE := $(if $(LOCAL_ARCH),(this machine's GPU),(no GPU here: the default list; CUDA_ARCH=... to choose))
else
  ARCH_NOTE := (CUDA_ARCH)
endif
GPU_ARCHS := $(patsubst sm_%,%,$(patsubst compute_%,%,$(CUDA_ARCH)))
# machine code for each, plus PTX of the newest so that later GPUs can compile it at load
GENCODE := $(foreach a,$(GPU_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
           -gencode arch=compute_$(lastword $(GPU_ARCHS)),code=compute_$(lastword $(GPU_ARCHS))

# ---- NCCL: NCCL_HOME, then CUDA's own directories, the system's, and the nvidia-nccl
# Python wheel (e.g. PyTorch's virtual environment)
NCCL_WHEEL := $(firstword $(wildcard /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl \
                                     /usr/local/lib/python3*/dist-packages/nvidia/nccl \
                                     /usr/lib/python3/dist-packages/nvidia/nccl))
NCCL_INC := $(patsubst %/nccl.h,%,$(firstword $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/include/nccl.h) \
                $(CUDA_INC)/nccl.h /usr/include/nccl.h /usr/local/include/nccl.h $(NCCL_WHEEL)/include/nccl.h)))
NCCL_SO := $(firstword $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/lib/libnccl.so $(NCCL_HOME)/lib/libnccl.so.2) \
                $(CUDA_LIB)/libnccl.so /usr/lib/x86_64-linux-gnu/libnccl.so /usr/lib/aarch64-linux-gnu/libnccl.so \
                /usr/local/lib/libnccl.so $(NCCL_WHEEL)/lib/libnccl.so $(NCCL_WHEEL)/lib/libnccl.so.2))
# link the library file itself (a wheel ships only libnccl.so.2), and find it again at run time
NCCL_LIBS := $(if $(NCCL_SO),$(NCCL_SO) -Xlinker -rpath=$(dir $(NCCL_SO)),-lnccl)

# ---- MPI (optional): from MPI_HOME, or from mpicxx, with its flags translated for nvcc
MPI ?= 1
comma := ,
nvcc_flags = $(foreach f,$(1),$(if $(filter -I% -L% -l% -D%,$(f)),$(f),$(if $(filter -Wl$(comma)%,$(f)),-Xlinker $(patsubst -Wl$(comma)%,%,$(f)),-Xcompiler $(f))))
ifeq ($(MPI),1)
  ifneq ($(MPI_HOME),)
    MPI_CFLAGS := -I$(MPI_HOME)/include
    MPI_LIBS := -L$(MPI_HOME)/lib -lmpi -Xlinker -rpath=$(MPI_HOME)/lib
    MPI_FOUND := $(MPI_HOME)
  else ifneq ($(shell command -v mpicxx 2>/dev/null),)
    MPI_CFLAGS := $(call nvcc_flags,$(shell mpicxx --showme:compile 2>/dev/null))
    MPI_LIBS := $(call nvcc_flags,$(shell mpicxx --showme:link 2>/dev/null))
    MPI_FOUND := $(shell command -v mpicxx)
  endif
endif
MPI_DEFS := $(if $(MPI_FOUND),-DTRAIN_MPI -DOMPI_SKIP_MPICXX)

DOCTEST_INC ?= /usr/include

# ---- precision: bf16 (the default from sm_80: tensor cores, float32 master weights) or fp32
# (the exact tier, checked against train.cpp to 1e-5; the default when an architecture built
# for is below sm_80, whose GPUs have no bf16 tensor cores). The stamp names it and the
# architectures, so switching either rebuilds. bf16 asked for below sm_80 compiles
# (gpu/mma.cuh's instructions trap there), and train_gpt stops at start-up on such a GPU with
# one line saying to build fp32 (gpu/fit.cuh).
ARCHS_BELOW_80 := $(strip $(foreach a,$(GPU_ARCHS),$(if $(filter-out 8% 9% 1%,$(a)),$(a))))
ifeq ($(origin PRECISION),undefined)
  PRECISION := $(if $(ARCHS_BELOW_80),fp32,bf16)
  PRECISION_NOTE := (the default $(if $(ARCHS_BELOW_80),below sm_80: sm_$(firstword $(ARCHS_BELOW_80)) has no bf16 tensor cores,from sm_80))
else
  PRECISION_NOTE := (PRECISION)$(if $(filter bf16,$(PRECISION)),$(if $(ARCHS_BELOW_80), NOTE: a bf16 build stops at start-up on sm_$(firstword $(ARCHS_BELOW_80)) (below sm_80); PRECISION=fp32 runs there))
endif
ifeq ($(filter bf16 fp32,$(PRECISION)),)
  $(error PRECISION must be bf16 or fp32, not '$(PRECISION)')
endif
PRECISION_DEFS := $(if $(filter bf16,$(PRECISION)),-DTRAIN_BF16)
GPU_STAMP := .train_gpt-$(PRECISION)-sm$(subst $(eval) ,-,$(strip $(GPU_ARCHS)))
$(GPU_STAMP):
	@rm -f .train_gpt-bf16* .train_gpt-fp32* && touch $@

NVCC_BASE := -O3 -std=c++17 $(GENCODE) -Xcompiler -fopenmp,-Wall,-Wno-unused-function -lineinfo
NVCC_COMMON := $(NVCC_BASE) $(NVCCFLAGS) $(if $(NCCL_INC),-I$(NCCL_INC)) $(MPI_DEFS) $(MPI_CFLAGS)
NVCC_ALL := $(NVCC_COMMON) $(PRECISION_DEFS)
GPU_LIBS := -lcublas -lcublasLt $(NCCL_LIBS) $(MPI_LIBS) -lgomp
GPU_HOST_HEADERS := $(wildcard host/*.h) $(wildcard gpu/*.cuh)

define gpu_found
	@echo "gpu.mk: nvcc $(NVCC); architectures $(GPU_ARCHS) $(ARCH_NOTE); precision $(PRECISION) $(PRECISION_NOTE)"
	@echo "gpu.mk: NCCL $(if $(NCCL_INC),headers $(NCCL_INC), headers NOT FOUND (set NCCL_HOME)); library $(or $(NCCL_SO),-lnccl from the default paths)"
	@echo "gpu.mk: MPI $(if $(MPI_FOUND),$(MPI_FOUND) (mpirun launches replicas),not used (single GPU, or srun with --nccl-init-file))"
endef
NO_NVCC_MESSAGE := gpu.mk: nvcc not found (PATH or CUDA_HOME=$(CUDA_HOME)): the GPU targets need the CUDA toolkit; the CPU build (make train) does not

.PHONY: gpu_info test_gpu bench_gpu

ifeq ($(NVCC),)

train_gpt build/train_gpt_bf16 build/train_gpt_fp32 test/gpu_trainer/trainer test/gpu_trainer/flash_attention test_gpu bench_gpu gpu_info archs:
	@echo "$(NO_NVCC_MESSAGE)"; exit 1

else

gpu_info:
	$(gpu_found)
	@echo "gpu.mk: doctest $(if $(wildcard $(DOCTEST_INC)/doctest/doctest.h),$(DOCTEST_INC),NOT FOUND (set DOCTEST_INC))"

train_gpt: train_gpt.cu $(GPU_HOST_HEADERS) $(GPU_STAMP)
	$(gpu_found)
	$(NVCC) $(NVCC_ALL) -o $@ train_gpt.cu $(GPU_LIBS)

# both precisions side by side, whatever PRECISION says (scripts/bench_gpu.sh compares them)
build/train_gpt_bf16 build/train_gpt_fp32: build/train_gpt_%: train_gpt.cu $(GPU_HOST_HEADERS)
	@mkdir -p build
	$(NVCC) $(NVCC_COMMON) $(if $(filter bf16,$*),-DTRAIN_BF16) -o $@ train_gpt.cu $(GPU_LIBS)

# its end-to-end tests start ./train_gpt, hence the order-only prerequisite
test/gpu_trainer/trainer: test/gpu_trainer/trainer.cu test/test_util.h test/golden.h dev/cuda/device_array.h train_gpt.cu train.cpp $(GPU_HOST_HEADERS) $(GPU_STAMP) | train_gpt
	@test -f $(DOCTEST_INC)/doctest/doctest.h || { echo "gpu.mk: doctest.h not found under $(DOCTEST_INC) (apt-get install doctest-dev, or DOCTEST_INC=dir)"; exit 1; }
	$(gpu_found)
	$(NVCC) $(NVCC_ALL) -I$(DOCTEST_INC) -o $@ test/gpu_trainer/trainer.cu $(GPU_LIBS)

# the fused attention against train.cpp and the cuBLAS path, on real tensor cores
test/gpu_trainer/flash_attention: test/gpu_trainer/flash_attention.cu test/test_util.h dev/cuda/device_array.h train.cpp $(GPU_HOST_HEADERS) $(GPU_STAMP)
	@test -f $(DOCTEST_INC)/doctest/doctest.h || { echo "gpu.mk: doctest.h not found under $(DOCTEST_INC) (apt-get install doctest-dev, or DOCTEST_INC=dir)"; exit 1; }
	$(NVCC) $(NVCC_ALL) -I$(DOCTEST_INC) -o $@ test/gpu_trainer/flash_attention.cu $(GPU_LIBS)

# The compile matrix: every architecture nvcc has among the GPUs supported (T4 sm_75 to
# Blackwell sm_120; V100's sm_70 left CUDA 13), each in both precisions (bf16 below sm_80 too:
# it compiles, and stops at start-up there), failing on any error. test/gpu_trainer/trainer.cu includes
# train_gpt.cu, so its device code is all of the trainer's kernels and the tests' own. To keep
# CI short (test/gpu_trainer/compile_matrix.sh), each pair goes to PTX only (nvcc's front end and
# cicc: every template instantiated, every __CUDA_ARCH__ branch taken, no ptxas, no host
# compiler); sm_75 fp32, what a T4 builds by default, also goes through ptxas (its registers and
# shared memory; the host code is the same for every architecture, and the nvcc build compiles
# it). Not checked here: ptxas for the other architectures (the nvcc build does sm_80 and sm_90,
# the GPU check the GPU's own).
MATRIX_ARCHS ?= $(filter 75 80 86 89 90 100 120,$(patsubst compute_%,%,$(shell $(NVCC) --list-gpu-arch 2>/dev/null)))
MATRIX_PTX := $(foreach a,$(MATRIX_ARCHS),$(foreach p,fp32 bf16,build/archs/test_gpu-sm$(a)-$(p).ptx))
MATRIX_FULL := build/archs/test_gpu-sm75-fp32.cubin  # ptxas on that PTX (the host code is the nvcc build's)
MATRIX_FLAGS = -std=c++17 -O3 $(if $(filter bf16,$(lastword $(subst -, ,$*))),-DTRAIN_BF16) $(if $(NCCL_INC),-I$(NCCL_INC)) \
               -I$(DOCTEST_INC) -Xcompiler -fopenmp
matrix_arch = $(firstword $(subst -, ,$*))
.PHONY: archs
archs: $(MATRIX_PTX) $(MATRIX_FULL)
	@echo "gpu.mk: compile matrix passed: PTX of test/gpu_trainer/trainer.cu (train_gpt.cu's kernels included) for sm_$(subst $() ,$(comma) sm_,$(MATRIX_ARCHS)) in fp32 and bf16; sm_75 fp32 through ptxas"
build/archs/test_gpu-sm%.ptx: test/gpu_trainer/trainer.cu test/test_util.h test/golden.h train_gpt.cu train.cpp $(GPU_HOST_HEADERS)
	@mkdir -p build/archs
	$(NVCC) $(MATRIX_FLAGS) -arch=compute_$(matrix_arch) --ptx -o $@ test/gpu_trainer/trainer.cu
build/archs/test_gpu-sm%.cubin: build/archs/test_gpu-sm%.ptx
	$(dir $(NVCC))ptxas -arch=sm_$(matrix_arch) -o $@ $<

# test_gpu exits 77 when it finds no GPU: then the tests were compiled but not run
test_gpu: test/gpu_trainer/trainer train_gpt
	@./test/gpu_trainer/trainer; rc=$$?; \
	if [ $$rc -eq 77 ]; then echo "test_gpu: NOT RUN (no GPU on this machine)"; exit 0; fi; exit $$rc

bench_gpu: build/train_gpt_bf16 build/train_gpt_fp32
	@bash scripts/bench_gpu.sh

endif

# Leave the including Makefile's default goal alone; alone, the default is train_gpt.
.DEFAULT_GOAL := $(or $(GPU_MK_SAVED_GOAL),$(if $(GPU_MK_STANDALONE),train_gpt))
