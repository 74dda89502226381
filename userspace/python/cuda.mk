# SPDX-License-Identifier: GPL-2.0
#
# beluga._cuda, the GPU gather/scatter module, included by python/Makefile
# (paths relative to userspace/). The module is plain C and built
# everywhere; it loads libbeluga-kvcopy.so at run time, which is copied next
# to it where nvcc built one (cuda/cuda.mk), and raises beluga.NoCuda
# naming what is missing elsewhere.

PY_CUDA_EXTS := $(PYR)/beluga/_cuda$(PY_EXT) $(PYF)/beluga/_cuda$(PY_EXT)

$(PYR)/obj/_cuda.o $(PYF)/obj/_cuda.o: $(PY_PKG_SRC)/_cuda.c cuda/kvcopy.h | python-have-headers
	@mkdir -p $(dir $@)
	$(CC) $(PY_CFLAGS) -Icuda -c -o $@ $<

$(PYR)/beluga/_cuda$(PY_EXT): $(PYR)/obj/_cuda.o python/extension.map
	@mkdir -p $(dir $@)
	$(CC) $(PY_LDFLAGS) -o $@ $< -ldl

$(PYF)/beluga/_cuda$(PY_EXT): $(PYF)/obj/_cuda.o python/extension.map
	@mkdir -p $(dir $@)
	$(CC) $(PY_LDFLAGS) -o $@ $< -ldl

python: $(PY_CUDA_EXTS)

ifneq ($(NVCC),)
$(PYR)/beluga/libbeluga-kvcopy.so $(PYF)/beluga/libbeluga-kvcopy.so: $(KVCOPY_SO)
	@mkdir -p $(dir $@)
	cp $< $@

python: $(PYR)/beluga/libbeluga-kvcopy.so $(PYF)/beluga/libbeluga-kvcopy.so
endif
