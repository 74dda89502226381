# SPDX-License-Identifier: GPL-2.0
#
# The GPU path: libbeluga-kvcopy.so (gather/scatter kernel, kvcopy.cu) and the
# GPU device check, built with nvcc where it is present. Included by
# ../Makefile (paths are relative to userspace/; $(B), $(CC), $(BEL_CFLAGS)
# come from there).
#
#   make cuda               build/cuda/libbeluga-kvcopy.so, or a SKIP line
#                           naming what is missing (no nvcc)
#   make cuda-device-check  build/cuda/device-check (scripts/device-check-cuda.sh
#                           runs it)
#
# NVCC=path picks a compiler; CUDA_ARCHS (SASS) and CUDA_PTX (embedded PTX,
# JIT-compiled on newer GPUs) pick the targets. libbeluga itself never needs
# CUDA to build: it loads the runtime with dlopen().

NVCC       ?= $(firstword $(shell command -v nvcc 2>/dev/null) \
		$(wildcard /usr/local/cuda/bin/nvcc))
# Ampere (A100), Hopper (H100/H200), plus PTX for what comes after.
CUDA_ARCHS ?= 80 90
CUDA_PTX   ?= 90
CUDA_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
		-gencode arch=compute_$(CUDA_PTX),code=compute_$(CUDA_PTX)
# Warnings are errors for the device code (nvcc) and the host code (gcc).
NVCC_FLAGS := -O3 -std=c++17 -Werror all-warnings \
	      -Xcompiler -Wall,-Wextra,-Werror,-fPIC,-fvisibility=hidden -Icuda
KV_CFLAGS  := $(CFLAGS) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fPIC \
	      -fvisibility=hidden -Icuda

CU := $(B)/cuda
KVCOPY_SO := $(CU)/libbeluga-kvcopy.so

$(CU)/obj/kvcopy_plan.o: cuda/kvcopy_plan.c cuda/kvcopy_plan.h cuda/kvcopy.h
	@mkdir -p $(dir $@)
	$(CC) $(KV_CFLAGS) -c -o $@ $<

# Host tests, run by ../tests/userspace/run-tests.sh in `make check` (no GPU, no nvcc):
# test_cuda (registration pieces, rollback, error clear) against two copies
# of a stand-in CUDA runtime (a process may map several libcudart copies;
# each must get its last error cleared), and test_kvcopy (the batch checks
# and the kernel's tile arithmetic, on the CPU).
$(C)/libcudart-stub-%.so: $(UT)/cudart_stub.c $(UT)/cudart_stub.h
	@mkdir -p $(dir $@)
	$(CC) -O1 -g -std=c11 -Wall -Wextra -Werror -fPIC -shared -fvisibility=hidden -o $@ $<

$(C)/test_kvcopy: $(C)/obj/tests/test_kvcopy.o $(C)/obj/cuda/kvcopy_plan.o
	$(CC) $(C_CFLAGS) -o $@ $^
$(C)/obj/tests/test_kvcopy.o: BEL_CFLAGS += -Icuda

check: $(C)/test_cuda $(C)/test_kvcopy $(C)/libcudart-stub-a.so $(C)/libcudart-stub-b.so

ifneq ($(NVCC),)
cuda: $(KVCOPY_SO)

$(CU)/obj/%.o: cuda/%.cu cuda/kvcopy_plan.h cuda/kvcopy.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(CUDA_GENCODE) -c -o $@ $<

# The static CUDA runtime: the library needs only the driver at run time.
$(KVCOPY_SO): $(CU)/obj/kvcopy.o $(CU)/obj/kvcopy_plan.o cuda/libkvcopy.map
	$(NVCC) -shared -cudart static $(CUDA_GENCODE) \
		-Xlinker --version-script=cuda/libkvcopy.map -Xlinker -z -Xlinker defs \
		-o $@ $(CU)/obj/kvcopy.o $(CU)/obj/kvcopy_plan.o

# The shared runtime, found through its rpath, so that libbeluga's
# registration finds it mapped and clears that copy's error state.
CUDA_LIBDIR := $(abspath $(dir $(NVCC))/../lib64)
$(CU)/device-check: $(CU)/obj/device_check.o $(CU)/obj/kvcopy.o $(CU)/obj/kvcopy_plan.o \
		    $(B)/libbeluga.a
	$(NVCC) -cudart shared $(CUDA_GENCODE) -Xlinker -rpath=$(CUDA_LIBDIR) -o $@ \
		$(CU)/obj/device_check.o $(CU)/obj/kvcopy.o $(CU)/obj/kvcopy_plan.o \
		$(B)/libbeluga.a -ldl -lpthread

$(CU)/obj/device_check.o: NVCC_FLAGS += -I$(B)/include -Iinclude -Ilib -I../uapi

cuda-device-check: $(CU)/device-check
else
cuda cuda-device-check:
	@echo "SKIP: nvcc not found (not on PATH, not /usr/local/cuda/bin/nvcc): install the" \
	      "CUDA toolkit or pass NVCC=/path/to/nvcc to build the GPU path"
endif

.PHONY: cuda cuda-device-check
