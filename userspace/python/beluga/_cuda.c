// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * beluga._cuda: gather and scatter between an engine's paged GPU KV cache
 * and pool blocks, one kernel launch per batch (libbeluga-kvcopy.so, see
 * userspace/cuda/kvcopy.h for the layouts).
 *
 * Everything crosses as plain integers: device addresses of the layers
 * (tensor.data_ptr()), the pool mapping's address (PoolMap.address),
 * strides in bytes, a cudaStream_t (torch.cuda.current_stream().cuda_stream).
 * There is no torch dependency, and no build-time CUDA dependency either:
 * the module is built everywhere and loads libbeluga-kvcopy.so (next to this
 * module, or $BELUGA_KVCOPY) at the first call that needs it, so that
 * `import beluga._cuda` works on a machine without CUDA and the calls raise
 * beluga.NoCuda naming what is missing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kvcopy.h"

#define KVCOPY_SONAME	"libbeluga-kvcopy.so"

/* beluga.Error, beluga.NoCuda, beluga.InvalidArgument (from beluga._beluga). */
static PyObject *ErrorType, *NoCudaType, *InvalidType;

static struct {
	int (*abi)(void);
	int (*probe)(char *err, size_t errlen);
	int (*copy)(int direction, const struct beluga_kv_layout *layout,
		    const uint64_t *gpu_layers, const void *pool_base,
		    const struct beluga_kv_pair *pairs, size_t nr_pairs,
		    uint64_t stream, int sync, char *err, size_t errlen);
	char path[4096];
} kv;

static PyObject *raise_errno(int err, const char *msg)
{
	PyObject *type = err == EINVAL ? InvalidType :
			 (err == ENODEV || err == ENOENT || err == ENOSYS || err == EPROTO) ?
			 NoCudaType : ErrorType;
	PyObject *exc = PyObject_CallFunction(type, "is", err, msg);

	if (exc) {
		PyErr_SetObject(type, exc);
		Py_DECREF(exc);
	}
	return NULL;
}

static void load_sym(void *lib, const char *name, void *fnp)
{
	void *sym = dlsym(lib, name);

	memcpy(fnp, &sym, sizeof(sym));
}

/* Load libbeluga-kvcopy.so once (under the GIL); 0, or an exception set. */
static int kv_load(PyObject *module)
{
	const char *env = getenv("BELUGA_KVCOPY");
	char msg[4608 + 512];
	void *lib;

	if (kv.copy)
		return 0;
	if (env && *env) {
		snprintf(kv.path, sizeof(kv.path), "%s", env);
	} else {
		PyObject *file = PyModule_GetFilenameObject(module);
		const char *f = file ? PyUnicode_AsUTF8(file) : NULL;
		const char *slash = f ? strrchr(f, '/') : NULL;

		if (!slash) {
			Py_XDECREF(file);
			PyErr_Clear();
			snprintf(kv.path, sizeof(kv.path), "%s", KVCOPY_SONAME);
		} else {
			snprintf(kv.path, sizeof(kv.path), "%.*s/%s", (int)(slash - f), f,
				 KVCOPY_SONAME);
			Py_DECREF(file);
		}
	}
	lib = dlopen(kv.path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		snprintf(msg, sizeof(msg),
			 "beluga._cuda: cannot load %s (%s): it is built only where nvcc is "
			 "present: install the CUDA toolkit, run `make -C userspace cuda python`, "
			 "or set BELUGA_KVCOPY to the library's path", kv.path, dlerror());
		raise_errno(ENOENT, msg);
		return -1;
	}
	load_sym(lib, "beluga_kv_abi", &kv.abi);
	load_sym(lib, "beluga_kv_probe", &kv.probe);
	load_sym(lib, "beluga_kv_copy", &kv.copy);
	if (!kv.abi || !kv.probe || !kv.copy || kv.abi() != BELUGA_KVCOPY_ABI) {
		snprintf(msg, sizeof(msg),
			 "beluga._cuda: %s is not a libbeluga-kvcopy of ABI %d (%s): rebuild it "
			 "with this tree (`make -C userspace cuda python`)", kv.path,
			 BELUGA_KVCOPY_ABI, kv.abi ? "other ABI" : "missing symbols");
		kv.copy = NULL;
		raise_errno(EPROTO, msg);
		return -1;
	}
	/* Never dlclose(): it carries a CUDA runtime, which does not unload. */
	return 0;
}

static PyObject *cuda_device_count(PyObject *module, PyObject *Py_UNUSED(ignored))
{
	char err[512] = "";
	int ret;

	if (kv_load(module))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	ret = kv.probe(err, sizeof(err));
	Py_END_ALLOW_THREADS
	if (ret < 0)
		return raise_errno(-ret, err);
	return PyLong_FromLong(ret);
}

static PyObject *cuda_library_path(PyObject *module, PyObject *Py_UNUSED(ignored))
{
	if (kv_load(module))
		return NULL;
	return PyUnicode_DecodeFSDefault(kv.path);
}

/* A non-negative integer argument as uint64; -1 with an exception set. */
static int as_u64(PyObject *o, const char *what, uint64_t *out)
{
	unsigned long long v;

	if (!PyLong_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what,
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	v = PyLong_AsUnsignedLongLong(o);
	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "%s must be a non-negative integer below 2**64", what);
		return -1;
	}
	*out = v;
	return 0;
}

/*
 * A contiguous buffer of 8-byte unsigned integers (array('Q'), numpy uint64,
 * bytes) as @count uint64 values, or a sequence of ints; @per_item values
 * form one item (2 for pairs). Returns a PyMem buffer or NULL with an
 * exception set.
 */
static uint64_t *u64_items(PyObject *o, const char *what, size_t per_item, size_t *count)
{
	uint64_t *vals;
	Py_buffer view;
	Py_ssize_t i, n;

	if (PyObject_CheckBuffer(o)) {
		if (PyObject_GetBuffer(o, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT))
			return NULL;
		if (view.itemsize != 8 && !(view.format && !strcmp(view.format, "B"))) {
			PyErr_Format(PyExc_TypeError, "%s: items must be 8-byte unsigned integers "
				     "(array('Q'), numpy uint64), not format '%s'", what,
				     view.format ? view.format : "B");
			goto bad_view;
		}
		if (view.format && strchr("qlbhin", view.format[strlen(view.format) - 1])) {
			PyErr_Format(PyExc_TypeError, "%s: items must be unsigned (uint64), not "
				     "format '%s'", what, view.format);
			goto bad_view;
		}
		if (view.len % (Py_ssize_t)(8 * per_item)) {
			PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of "
				     "%zu-byte items", what, view.len, 8 * per_item);
			goto bad_view;
		}
		*count = (size_t)view.len / (8 * per_item);
		vals = PyMem_Malloc(view.len ? (size_t)view.len : 1);
		if (!vals) {
			PyErr_NoMemory();
			goto bad_view;
		}
		memcpy(vals, view.buf, (size_t)view.len);
		PyBuffer_Release(&view);
		return vals;
bad_view:
		PyBuffer_Release(&view);
		return NULL;
	}

	o = PySequence_Fast(o, "");
	if (!o) {
		PyErr_Format(PyExc_TypeError, "%s must be a buffer of uint64 or a sequence", what);
		return NULL;
	}
	n = PySequence_Fast_GET_SIZE(o);
	vals = PyMem_Malloc((size_t)(n ? n : 1) * per_item * sizeof(*vals));
	if (!vals) {
		Py_DECREF(o);
		PyErr_NoMemory();
		return NULL;
	}
	for (i = 0; i < n; i++) {
		PyObject *item = PySequence_Fast_GET_ITEM(o, i);

		if (per_item == 1) {
			if (as_u64(item, what, &vals[i]))
				goto bad_seq;
			continue;
		}
		if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != (Py_ssize_t)per_item) {
			PyErr_Format(PyExc_TypeError, "%s[%zd] must be a (gpu_block, pool_offset) "
				     "tuple", what, i);
			goto bad_seq;
		}
		for (size_t k = 0; k < per_item; k++)
			if (as_u64(PyTuple_GET_ITEM(item, (Py_ssize_t)k), what, &vals[i * per_item + k]))
				goto bad_seq;
	}
	Py_DECREF(o);
	*count = (size_t)n;
	return vals;
bad_seq:
	Py_DECREF(o);
	PyMem_Free(vals);
	return NULL;
}

/* Keyword @name: required unless @dflt is given (then used when absent). */
static int kw_u64(PyObject *o, const char *name, const uint64_t *dflt, uint64_t *out)
{
	if (!o || o == Py_None) {
		if (dflt) {
			*out = *dflt;
			return 0;
		}
		PyErr_Format(PyExc_TypeError, "missing required keyword argument '%s'", name);
		return -1;
	}
	return as_u64(o, name, out);
}

static PyObject *kv_copy(PyObject *module, PyObject *args, PyObject *kwds, int direction)
{
	static char *kwlist[] = {
		"gpu_layers", "pool_base", "pairs", "block_tokens", "row_bytes",
		"gpu_kv_stride", "gpu_block_stride", "gpu_num_blocks", "pool_length",
		"num_kv", "gpu_token_stride", "pool_layer_stride", "pool_kv_stride",
		"pool_token_stride", "stream", "sync", NULL
	};
	PyObject *layers_o, *pairs_o, *base_o, *o[12] = { NULL };
	struct beluga_kv_layout lay;
	uint64_t *layers = NULL, *pairs = NULL, base, stream, v[12], two = 2, zero = 0;
	size_t nr_layers, nr_pairs;
	char err[512] = "";
	int sync = 1, ret;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|$OOOOOOOOOOOOp", kwlist,
					 &layers_o, &base_o, &pairs_o, &o[0], &o[1], &o[2], &o[3],
					 &o[4], &o[5], &o[6], &o[7], &o[8], &o[9], &o[10], &o[11],
					 &sync))
		return NULL;
	/* 0 block_tokens, 1 row_bytes, 2..5 GPU strides/blocks, pool_length, 6 num_kv */
	if (as_u64(base_o, "pool_base", &base) ||
	    kw_u64(o[0], kwlist[3], NULL, &v[0]) || kw_u64(o[1], kwlist[4], NULL, &v[1]) ||
	    kw_u64(o[2], kwlist[5], NULL, &v[2]) || kw_u64(o[3], kwlist[6], NULL, &v[3]) ||
	    kw_u64(o[4], kwlist[7], NULL, &v[4]) || kw_u64(o[5], kwlist[8], NULL, &v[5]) ||
	    kw_u64(o[6], kwlist[9], &two, &v[6]) || kw_u64(o[11], kwlist[14], &zero, &stream))
		return NULL;
	if (v[0] > UINT32_MAX || v[6] > UINT32_MAX)
		return raise_errno(EINVAL, "kv copy: block_tokens and num_kv must fit 32 bits");

	memset(&lay, 0, sizeof(lay));
	lay.block_tokens = (uint32_t)v[0];
	lay.row_bytes = v[1];
	lay.gpu_kv_stride = v[2];
	lay.gpu_block_stride = v[3];
	lay.gpu_num_blocks = v[4];
	lay.pool_length = v[5];
	lay.num_kv = (uint32_t)v[6];
	/* Defaults: dense GPU rows, the canonical pool block for the strides given. */
	if (kw_u64(o[7], kwlist[10], &lay.row_bytes, &lay.gpu_token_stride) ||
	    kw_u64(o[10], kwlist[13], &lay.row_bytes, &lay.pool_token_stride))
		return NULL;
	v[7] = (uint64_t)lay.block_tokens * lay.pool_token_stride;
	if (kw_u64(o[9], kwlist[12], &v[7], &lay.pool_kv_stride))
		return NULL;
	v[8] = (uint64_t)lay.num_kv * lay.pool_kv_stride;
	if (kw_u64(o[8], kwlist[11], &v[8], &lay.pool_layer_stride))
		return NULL;

	layers = u64_items(layers_o, "gpu_layers", 1, &nr_layers);
	if (!layers)
		return NULL;
	if (!nr_layers || nr_layers > UINT32_MAX) {
		PyMem_Free(layers);
		return raise_errno(EINVAL, "kv copy: gpu_layers must list one device address per "
				   "layer (got none)");
	}
	lay.num_layers = (uint32_t)nr_layers;
	pairs = u64_items(pairs_o, "pairs", 2, &nr_pairs);
	if (!pairs) {
		PyMem_Free(layers);
		return NULL;
	}
	if (kv_load(module)) {
		ret = -1;
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	ret = kv.copy(direction, &lay, layers, (const void *)(uintptr_t)base,
		      (const struct beluga_kv_pair *)pairs, nr_pairs, stream, sync, err,
		      sizeof(err));
	Py_END_ALLOW_THREADS
	if (ret)
		raise_errno(-ret, err);
out:
	PyMem_Free(layers);
	PyMem_Free(pairs);
	if (ret)
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *cuda_gather(PyObject *module, PyObject *args, PyObject *kwds)
{
	return kv_copy(module, args, kwds, BELUGA_KV_TO_POOL);
}

static PyObject *cuda_scatter(PyObject *module, PyObject *args, PyObject *kwds)
{
	return kv_copy(module, args, kwds, BELUGA_KV_FROM_POOL);
}

#define COPY_ARGS \
	"(gpu_layers, pool_base, pairs, *, block_tokens, row_bytes, gpu_kv_stride,\n" \
	"  gpu_block_stride, gpu_num_blocks, pool_length, num_kv=2, gpu_token_stride=row_bytes,\n" \
	"  pool_layer_stride=canonical, pool_kv_stride=canonical, pool_token_stride=row_bytes,\n" \
	"  stream=0, sync=True)\n"
#define COPY_DOC \
	"gpu_layers: one device address per layer (tensor.data_ptr()); pool_base: the pool\n" \
	"mapping's address (PoolMap.address, after PoolMap.cuda_register()); pairs: a buffer of\n" \
	"uint64 (gpu_block, pool_offset) pairs or a sequence of such tuples. Row r of token t of\n" \
	"GPU block b, K (0) or V (1), is layer + kv*gpu_kv_stride + b*gpu_block_stride +\n" \
	"t*gpu_token_stride on the GPU, and pool_base + pool_offset + layer*pool_layer_stride +\n" \
	"kv*pool_kv_stride + t*pool_token_stride in the pool; the defaults are the canonical\n" \
	"layer-major pool block (for each layer K[tokens][heads][dim], then V). vLLM's per-layer\n" \
	"(2, num_blocks, block_tokens, heads, dim) cache: gpu_kv_stride = num_blocks *\n" \
	"block_tokens * row_bytes, gpu_block_stride = block_tokens * row_bytes. One kernel\n" \
	"launch; sync=False leaves the copy ordered on stream. Raises beluga.InvalidArgument\n" \
	"for a bad batch, beluga.NoCuda without the library, a GPU or a driver."

static PyMethodDef cuda_methods[] = {
	{ "device_count", cuda_device_count, METH_NOARGS,
	  "device_count(): CUDA devices visible (beluga.NoCuda when none or no driver)." },
	{ "library_path", cuda_library_path, METH_NOARGS,
	  "library_path(): the libbeluga-kvcopy.so loaded (beluga.NoCuda when missing)." },
	{ "gather", (PyCFunction)(void (*)(void))cuda_gather, METH_VARARGS | METH_KEYWORDS,
	  "gather" COPY_ARGS "--\n\nCopy GPU blocks into pool blocks.\n\n" COPY_DOC },
	{ "scatter", (PyCFunction)(void (*)(void))cuda_scatter, METH_VARARGS | METH_KEYWORDS,
	  "scatter" COPY_ARGS "--\n\nCopy pool blocks into GPU blocks.\n\n" COPY_DOC },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef cuda_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "beluga._cuda",
	.m_doc = "Gather/scatter between a paged GPU KV cache and Beluga pool blocks.",
	.m_size = -1,
	.m_methods = cuda_methods,
};

PyMODINIT_FUNC PyInit__cuda(void)
{
	PyObject *m, *base = PyImport_ImportModule("beluga._beluga");

	if (!base)
		return NULL;
	ErrorType = PyObject_GetAttrString(base, "Error");
	NoCudaType = PyObject_GetAttrString(base, "NoCuda");
	InvalidType = PyObject_GetAttrString(base, "InvalidArgument");
	Py_DECREF(base);
	if (!ErrorType || !NoCudaType || !InvalidType)
		return NULL;
	m = PyModule_Create(&cuda_module);
	if (!m)
		return NULL;
	if (PyModule_AddIntConstant(m, "KVCOPY_ABI", BELUGA_KVCOPY_ABI) ||
	    PyModule_AddIntConstant(m, "TO_POOL", BELUGA_KV_TO_POOL) ||
	    PyModule_AddIntConstant(m, "FROM_POOL", BELUGA_KV_FROM_POOL)) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
