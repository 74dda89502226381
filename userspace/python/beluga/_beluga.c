// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * beluga._beluga: the CPython binding of libbeluga.
 *
 * One Python call is one libbeluga call: keys, offsets and tokens cross as
 * buffers (bytes, memoryview, array, numpy), never as one object per item,
 * and the GIL is released around every call that enters the kernel.
 *
 * Lifetimes. A Pool owns a libbeluga handle. Pool.map() returns the Pool's
 * one PoolMap, which owns the handle's mapping and exports it through the
 * buffer protocol. Every view (memoryview, numpy array) holds a reference to
 * the PoolMap, and the PoolMap one to the Pool, so a view cannot outlive
 * the mapping; close() of either refuses with BufferError while views exist
 * and unmaps nothing then.
 *
 * Threads. Pool calls run concurrently (they are ioctls on one file). Each
 * call that releases the GIL counts itself in Pool.inflight, an atomic
 * counter (no lock on the per-call path); close() marks the pool CLOSING
 * (new calls and new exports are refused), waits for the count to drop to
 * zero, and only then closes the handle. Mapping changes
 * (map, PoolMap.close) are made with the GIL held, so exports, which are
 * counted under the GIL too, never see a half-changed mapping. libbeluga
 * keeps its error message per thread, so the message read after a call is
 * that call's.
 *
 * The fake build (-DBELUGA_PY_FAKE) links tests/userspace/fake_kernel.c for host
 * tests and adds _fake_* functions; the fake is single-threaded, so its
 * ioctl hook is wrapped in a mutex here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "libbeluga.h"

#ifdef BELUGA_PY_FAKE
#include "fake_kernel.h"
#include "internal.h"
#endif

/* ---- Exceptions --------------------------------------------------------- */

static PyObject *BelugaError;

/* errno -> exception class; extra_base makes `except FileNotFoundError` work. */
static struct {
	int err;
	const char *name;
	PyObject **extra_base;
	const char *doc;
	PyObject *type;
} error_types[] = {
	{ ENOSPC, "NoSpace", NULL,
	  "ENOSPC: the pool has no free or evictable block (or no free region slot).", NULL },
	{ ENODEV, "NoRegion", NULL,
	  "ENODEV: no memory region is attached to the pool.", NULL },
	{ EBUSY, "Busy", NULL,
	  "EBUSY: pinned, mapped, in use, or a dax device not bound to device_dax.", NULL },
	{ ENOENT, "NotFound", &PyExc_FileNotFoundError,
	  "ENOENT: no such device, region, key or dax device (module not loaded?).", NULL },
	{ EPERM, "PermissionDenied", &PyExc_PermissionError,
	  "EPERM/EACCES: needs CAP_SYS_ADMIN or file permissions, or a block not owned.", NULL },
	{ EACCES, NULL, NULL, NULL, NULL },	/* PermissionDenied too */
	{ EBADF, "ReadOnly", NULL,
	  "EBADF: the pool was opened read-only; ALLOC, FREE and PUBLISH need writable=True.",
	  NULL },
	{ EEXIST, "Exists", &PyExc_FileExistsError,
	  "EEXIST: the region is attached already, or overlaps one.", NULL },
	{ ENOTTY, "NotBeluga", NULL,
	  "ENOTTY: the file is not a Beluga device, or the module lacks the command.", NULL },
	{ EPROTO, "AbiMismatch", NULL,
	  "EPROTO: module and library speak different ABI versions.", NULL },
	{ ENOSYS, "NoCuda", NULL,
	  "ENOSYS: no CUDA runtime could be loaded.", NULL },
	{ EINVAL, "InvalidArgument", NULL,
	  "EINVAL: the library or the module rejected an argument (offset, flag, size).",
	  NULL },
};

static PyObject *error_type_of(int err)
{
	size_t i;

	if (err == EACCES)
		err = EPERM;
	for (i = 0; i < sizeof(error_types) / sizeof(error_types[0]); i++)
		if (error_types[i].err == err && error_types[i].type)
			return error_types[i].type;
	return BelugaError;
}

/* Raise the exception of libbeluga's error @ret (negative) with @msg. */
static PyObject *raise_errno_msg(int ret, const char *msg)
{
	int err = ret < 0 ? -ret : ret;
	PyObject *args, *exc;

	if (!msg || !*msg)
		msg = beluga_strerror(err);
	exc = error_type_of(err);
	args = Py_BuildValue("(is)", err, msg);
	if (args) {
		PyErr_SetObject(exc, args);
		Py_DECREF(args);
	}
	return NULL;
}

/* Raise for a failed libbeluga call made by this thread just before. */
/*
 * libbeluga's message names the cause and the fix; the way to do it from
 * Python is the binding's: @hint (or, for errors any call can meet, the
 * general one) is appended to the library's message.
 */
static PyObject *raise_hinted(int ret, const char *hint)
{
	const char *msg = beluga_last_error(NULL);
	char buf[1024];

	if (!hint && -ret == ENODEV)
		hint = " with Pool.attach_dax() or Pool.attach_node() (or `belugactl attach`)";
	if (!hint || !msg || !*msg)
		return raise_errno_msg(ret, msg);
	snprintf(buf, sizeof(buf), "%s%s", msg, hint);
	return raise_errno_msg(ret, buf);
}

static PyObject *raise_beluga(int ret)
{
	return raise_hinted(ret, NULL);
}

/* ---- Output arrays ------------------------------------------------------ */

static PyObject *array_type;	/* array.array */
static PyObject *zero_q;	/* array('Q', [0]) */
static PyObject *zero_i;	/* array('i', [0]) */

/* A new array of @n zeros like @zero, and a pointer to its items. */
static PyObject *new_array(PyObject *zero, Py_ssize_t n, void **data)
{
	PyObject *arr = PySequence_Repeat(zero, n);
	Py_buffer view;

	if (!arr)
		return NULL;
	if (PyObject_GetBuffer(arr, &view, PyBUF_WRITABLE)) {
		Py_DECREF(arr);
		return NULL;
	}
	*data = view.buf;
	/*
	 * Nobody else holds the array yet, so it cannot be resized: the
	 * pointer stays valid after the export is dropped.
	 */
	PyBuffer_Release(&view);
	return arr;
}

/* ---- Input buffers ------------------------------------------------------ */

/* Native little-endian code of a struct-module format, or 0 if foreign. */
static char format_code(const char *fmt)
{
	if (!fmt)
		return 'B';
	if (*fmt == '@' || *fmt == '=' || *fmt == '<')
		fmt++;
	if (!fmt[0] || fmt[1])
		return 0;
	return fmt[0];
}

/*
 * Get a C-contiguous buffer of @obj for @what. Non-contiguous arrays are
 * refused with BufferError naming the fix (copying silently would hide a
 * slow path, and a written buffer must be the caller's own memory).
 */
static int get_contiguous(PyObject *obj, Py_buffer *view, int writable, const char *what)
{
	int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);

	if (!PyObject_CheckBuffer(obj)) {
		PyErr_Format(PyExc_TypeError,
			     "%s must be a buffer (bytes, bytearray, memoryview, array, numpy "
			     "array), not %.100s", what, Py_TYPE(obj)->tp_name);
		return -1;
	}
	if (PyObject_GetBuffer(obj, view, flags)) {
		/* Exporters differ (BufferError, numpy's ValueError): ask again. */
		PyObject *t, *v, *tb;

		PyErr_Fetch(&t, &v, &tb);
		if (writable && !PyObject_GetBuffer(obj, view, PyBUF_STRIDES | PyBUF_FORMAT)) {
			PyBuffer_Release(view);
			Py_XDECREF(t);
			Py_XDECREF(v);
			Py_XDECREF(tb);
			PyErr_Format(PyExc_TypeError,
				     "%s is read-only but is written: pass a writable buffer "
				     "(bytearray, array, writable numpy array)", what);
			return -1;
		}
		PyErr_Clear();
		PyErr_Restore(t, v, tb);
		return -1;
	}
	if (!PyBuffer_IsContiguous(view, 'C')) {
		PyBuffer_Release(view);
		PyErr_Format(PyExc_BufferError,
			     "%s is not C-contiguous: pass a contiguous copy "
			     "(numpy.ascontiguousarray(x) or bytes(x))", what);
		return -1;
	}
	return 0;
}

/* An array of u64 or u32 items taken from a buffer or a sequence of ints. */
struct uint_arg {
	Py_buffer view;
	int has_view;
	void *tmp;		/* malloc()ed copy (sequence, or misaligned buffer) */
	const void *data;
	size_t n;
};

static void uint_arg_release(struct uint_arg *a)
{
	if (a->has_view)
		PyBuffer_Release(&a->view);
	a->has_view = 0;
	free(a->tmp);
	a->tmp = NULL;
}

/*
 * Parse @obj as an array of @size-byte unsigned ints (8: offsets, 4:
 * tokens). Buffers must have that item type (@dtype names it in errors);
 * anything else that is a sequence is converted int by int.
 */
static int get_uints(PyObject *obj, struct uint_arg *a, size_t size, const char *what,
		     const char *dtype)
{
	/* the view is filled by get_contiguous() or never used */
	a->has_view = 0;
	a->tmp = NULL;
	if (PyObject_CheckBuffer(obj)) {
		char code;

		if (get_contiguous(obj, &a->view, 0, what))
			return -1;
		a->has_view = 1;
		code = format_code(a->view.format);
		if ((size_t)a->view.itemsize != size ||
		    !(code == (size == 8 ? 'Q' : 'I') || code == 'L')) {
			PyErr_Format(PyExc_TypeError,
				     "%s must be %s items; got buffer format '%s' with itemsize %zd: "
				     "convert it (numpy: x.astype(numpy.%s))", what, dtype,
				     a->view.format ? a->view.format : "B", a->view.itemsize,
				     size == 8 ? "uint64" : "uint32");
			uint_arg_release(a);
			return -1;
		}
		a->n = (size_t)a->view.len / size;
		a->data = a->view.buf;
		if ((uintptr_t)a->data % size) {
			a->tmp = malloc(a->n * size + 1);
			if (!a->tmp) {
				uint_arg_release(a);
				PyErr_NoMemory();
				return -1;
			}
			memcpy(a->tmp, a->data, a->n * size);
			a->data = a->tmp;
		}
		return 0;
	} else {
		PyObject *seq = PySequence_Fast(obj, "");
		Py_ssize_t i, n;

		if (!seq) {
			PyErr_Format(PyExc_TypeError,
				     "%s must be a buffer of %s or a sequence of ints, not %.100s",
				     what, dtype, Py_TYPE(obj)->tp_name);
			return -1;
		}
		n = PySequence_Fast_GET_SIZE(seq);
		a->tmp = malloc((size_t)n * size + 1);
		if (!a->tmp) {
			Py_DECREF(seq);
			PyErr_NoMemory();
			return -1;
		}
		for (i = 0; i < n; i++) {
			PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
			unsigned long long v;

			if (!PyLong_Check(item)) {
				PyErr_Format(PyExc_TypeError, "%s[%zd] must be an int, not %.100s",
					     what, i, Py_TYPE(item)->tp_name);
				goto bad;
			}
			v = PyLong_AsUnsignedLongLong(item);
			if (PyErr_Occurred() || (size == 4 && v > UINT32_MAX)) {
				PyErr_Clear();
				PyErr_Format(PyExc_OverflowError,
					     "%s[%zd] does not fit an unsigned %zu-bit int", what, i,
					     size * 8);
				goto bad;
			}
			if (size == 8)
				((uint64_t *)a->tmp)[i] = v;
			else
				((uint32_t *)a->tmp)[i] = (uint32_t)v;
		}
		Py_DECREF(seq);
		a->n = (size_t)n;
		a->data = a->tmp;
		return 0;
bad:
		Py_DECREF(seq);
		uint_arg_release(a);
		return -1;
	}
}

/*
 * Keys: any C-contiguous buffer of n * 16 bytes laid out as struct
 * beluga_key {lo, hi} little-endian: bytes-like, numpy uint8 (16n),
 * uint64 (2n), 'V16', or the structured dtype [('lo','<u8'),('hi','<u8')].
 * Big-endian and floating-point item types are refused.
 */
struct keys_arg {
	Py_buffer view;
	void *tmp;
	const struct beluga_key *keys;
	size_t n;
};

static void keys_release(struct keys_arg *k)
{
	PyBuffer_Release(&k->view);
	free(k->tmp);
	k->tmp = NULL;
}

static int key_format_ok(const Py_buffer *v)
{
	const char *f = v->format ? v->format : "B";
	char code = format_code(f);

	switch (v->itemsize) {
	case 1:
		return code == 'B' || code == 'b' || code == 'c';
	case 8:
		return code == 'Q' || code == 'L';
	case 16:
		if (!strcmp(f, "16x") || !strcmp(f, "16B") || !strcmp(f, "16s"))
			return 1;
		/* numpy structured: T{L:lo:L:hi:} (native), never big-endian or float */
		return !strncmp(f, "T{", 2) && !strpbrk(f, ">!efdgZ");
	default:
		return 0;
	}
}

/*
 * On success, keys_release() undoes it; on failure nothing is held. (No
 * memset of *k: clearing the 100-byte struct cost more than the rest of
 * the bytes path.)
 */
static int get_keys(PyObject *obj, struct keys_arg *k, const char *what)
{
	k->tmp = NULL;
	if (PyBytes_CheckExact(obj)) {
		/*
		 * The common case, taken without the buffer protocol's
		 * dispatch and checks: bytes are immutable, contiguous and
		 * unsigned bytes. The view holds a reference, as an export
		 * would, so keys_release() is the same for both.
		 */
		k->view = (Py_buffer){
			.obj = Py_NewRef(obj),
			.buf = PyBytes_AS_STRING(obj),
			.len = PyBytes_GET_SIZE(obj),
			.itemsize = 1,
			.readonly = 1,
			.ndim = 1,
		};
	} else {
		if (get_contiguous(obj, &k->view, 0, what))
			return -1;
		if (!key_format_ok(&k->view)) {
			PyErr_Format(PyExc_TypeError,
				     "%s must hold 16-byte keys {lo, hi} little-endian: bytes, "
				     "numpy uint8 (16 per key), uint64 (2 per key) or dtype "
				     "[('lo','<u8'),('hi','<u8')]; got buffer format '%s' with "
				     "itemsize %zd", what, k->view.format ? k->view.format : "B",
				     k->view.itemsize);
			PyBuffer_Release(&k->view);
			return -1;
		}
	}
	if (k->view.len % 16) {
		PyErr_Format(PyExc_ValueError,
			     "%s is %zd bytes, not a multiple of 16: each key is 16 bytes "
			     "(struct beluga_key {lo, hi}, little-endian)", what, k->view.len);
		PyBuffer_Release(&k->view);
		return -1;
	}
	k->n = (size_t)k->view.len / 16;
	k->keys = k->view.buf;
	if ((uintptr_t)k->view.buf % 8) {
		k->tmp = malloc((size_t)k->view.len + 1);
		if (!k->tmp) {
			PyBuffer_Release(&k->view);
			PyErr_NoMemory();
			return -1;
		}
		memcpy(k->tmp, k->view.buf, (size_t)k->view.len);
		k->keys = k->tmp;
	}
	return 0;
}

_Static_assert(sizeof(unsigned long) == sizeof(uint64_t), "unsigned long is not 64-bit");

/*
 * PyLong_AsUnsignedLong reads the digits directly, where
 * PyLong_AsUnsignedLongLong goes through _PyLong_AsByteArray: a namespace
 * is converted on every call.
 */

static int get_ns(PyObject *obj, uint64_t *ns)
{
	if (!PyLong_Check(obj)) {
		PyErr_Format(PyExc_TypeError, "ns must be an int (a 64-bit namespace), not %.100s",
			     Py_TYPE(obj)->tp_name);
		return -1;
	}
	*ns = PyLong_AsUnsignedLong(obj);
	if (*ns == (uint64_t)-1 && PyErr_Occurred()) {
		PyErr_Clear();
		PyErr_SetString(PyExc_OverflowError, "ns must be in [0, 2**64)");
		return -1;
	}
	return 0;
}

/* PyArg "O&" converters: ints in range, never wrapped like "K" and "I". */
static int conv_u64(PyObject *obj, void *out)
{
	unsigned long long v;

	if (!PyLong_Check(obj)) {
		PyErr_Format(PyExc_TypeError, "expected an int, not %.100s", Py_TYPE(obj)->tp_name);
		return 0;
	}
	v = PyLong_AsUnsignedLongLong(obj);
	if (PyErr_Occurred()) {
		PyErr_Clear();
		PyErr_SetString(PyExc_OverflowError, "expected an int in [0, 2**64)");
		return 0;
	}
	*(uint64_t *)out = v;
	return 1;
}

static int conv_u32(PyObject *obj, void *out)
{
	uint64_t v;

	if (!conv_u64(obj, &v))
		return 0;
	if (v > UINT32_MAX) {
		PyErr_SetString(PyExc_OverflowError, "expected an int in [0, 2**32)");
		return 0;
	}
	*(uint32_t *)out = (uint32_t)v;
	return 1;
}

/* ---- Pool ---------------------------------------------------------------- */

enum { POOL_OPEN, POOL_CLOSING, POOL_CLOSED };

struct PoolMap;

typedef struct {
	PyObject_HEAD
	struct beluga *b;
	PyObject *path;		/* str given or resolved; for repr and messages */
	int writable;
	/*
	 * state and inflight pair up as in Dekker's algorithm (both seq_cst):
	 * a call increments inflight, then reads state; close() stores
	 * CLOSING, then reads inflight. At least one of the two sees the
	 * other's write, so a call either backs out or is waited for.
	 */
	atomic_int state;	/* POOL_*; stored with the GIL and lock held */
	atomic_ulong inflight;	/* calls counted in by pool_enter() */
	pthread_mutex_t lock;	/* orders close()'s sleep on idle with the wakeups */
	pthread_cond_t idle;	/* inflight dropped to 0 while not OPEN, or CLOSED */
	struct PoolMap *map;	/* borrowed: the PoolMap clears it when it goes */
	/*
	 * lookup_many()'s io_uring ring, made at its first use. A ring is one
	 * thread's at a time: ring_lock serialises its users and protects
	 * ring, ring_err and ring_msg. Taken with the GIL released, never
	 * while waiting for it.
	 */
	pthread_mutex_t ring_lock;
	struct beluga_ring *ring;
	int ring_err;		/* -errno: why there is no ring; 0: none tried yet */
	char ring_msg[512];	/* libbeluga's message for ring_err */
	/*
	 * lookup_count()'s read-only mapping of the index, made at its first
	 * use and made anew once ATTACH or DETACH sealed it. index_lock
	 * protects index_err and index_msg, and the mapping itself: readers
	 * (beluga_lookup_count()) hold it shared, (re)mapping holds it
	 * exclusive, as libbeluga asks. Its holders never wait for the GIL,
	 * so index_error's getter may take it with the GIL held. Readers
	 * that find the copy sealed let go and queue for the remap, so a
	 * remap waits for lookups already running only.
	 */
	pthread_rwlock_t index_lock;
	int index_err;		/* -errno: why there is no mapping for good; 0: none */
	char index_msg[512];	/* libbeluga's message for index_err */
	/*
	 * device_range()'s eventfd, made here and closed with the pool, or
	 * -1; fenced: its signal was seen (device_fenced()). GIL.
	 */
	int range_efd;
	int fenced;
} Pool;

typedef struct PoolMap {
	PyObject_HEAD
	Pool *pool;		/* strong */
	char *base;
	size_t length;
	uint64_t block_size;
	Py_ssize_t exports;	/* buffer views plus running CUDA calls; GIL */
	int cuda_busy;		/* a CUDA (un)registration runs; GIL */
	int cuda_registered;	/* registered: a remap would drop it; GIL */
	int closed;
} PoolMap;

static PyTypeObject PoolType, PoolMapType;

static PyObject *closed_error(void)
{
	PyErr_SetString(PyExc_ValueError,
			"beluga: the pool is closed: open a new beluga.Pool to use it again");
	return NULL;
}

/*
 * Count a call out. Only the last call out of a pool that is no longer
 * OPEN takes the lock, to wake close(): it reads inflight under the lock
 * before it sleeps, so the wakeup cannot fall between its check and its
 * sleep.
 */
static inline void pool_leave(Pool *p)
{
	if (atomic_fetch_sub(&p->inflight, 1) == 1 &&
	    atomic_load(&p->state) != POOL_OPEN) {
		pthread_mutex_lock(&p->lock);
		pthread_cond_broadcast(&p->idle);
		pthread_mutex_unlock(&p->lock);
	}
}

/* Count a call in; fails (ValueError) when the pool is closed or closing. */
static inline int pool_enter(Pool *p)
{
	atomic_fetch_add(&p->inflight, 1);
	if (atomic_load(&p->state) == POOL_OPEN)
		return 0;
	pool_leave(p);
	closed_error();
	return -1;
}

/* Run @stmt with the GIL released (between pool_enter() and pool_leave()). */
#define POOL_CALL(p, stmt)					\
	do {							\
		Py_BEGIN_ALLOW_THREADS				\
		stmt;						\
		Py_END_ALLOW_THREADS				\
	} while (0)

static int poolmap_unmap(PoolMap *m);

static PyObject *Pool_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "path", "writable", NULL };
	PyObject *path_obj = Py_None, *path_bytes = NULL;
	const char *path = NULL;
	struct beluga *b = NULL;
	int writable = 1, ret;
	Pool *p;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "|Op:Pool", kwlist, &path_obj, &writable))
		return NULL;
	if (path_obj != Py_None) {
		if (!PyUnicode_FSConverter(path_obj, &path_bytes))
			return NULL;
		path = PyBytes_AS_STRING(path_bytes);
	}
	Py_BEGIN_ALLOW_THREADS
	ret = beluga_open(path, writable ? O_RDWR : O_RDONLY, &b);
	Py_END_ALLOW_THREADS
	if (ret) {
		Py_XDECREF(path_bytes);
		/* The library's message has the whole fix (modprobe, udev). */
		return raise_errno_msg(ret, beluga_last_error(NULL));
	}
	p = (Pool *)type->tp_alloc(type, 0);
	if (!p) {
		Py_XDECREF(path_bytes);
		beluga_close(b);
		return NULL;
	}
	if (path_bytes) {
		p->path = PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(path_bytes));
		Py_DECREF(path_bytes);
	} else {
		const char *env = getenv("BELUGA_DEVICE");

		p->path = PyUnicode_DecodeFSDefault(env && *env ? env : BELUGA_DEVICE_PATH);
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_mutex_init(&p->ring_lock, NULL);
	pthread_rwlock_init(&p->index_lock, NULL);
	pthread_cond_init(&p->idle, NULL);
	atomic_init(&p->inflight, 0);
	atomic_init(&p->state, POOL_OPEN);
	p->b = b;
	p->writable = writable;
	p->range_efd = -1;
	if (!p->path) {
		Py_DECREF(p);
		return NULL;
	}
	return (PyObject *)p;
}

static void Pool_dealloc(Pool *p)
{
	/* No call can be in flight: each holds a reference. */
	beluga_ring_exit(p->ring);
	p->ring = NULL;
	if (p->b)
		beluga_close(p->b);
	p->b = NULL;
	if (p->range_efd >= 0)
		close(p->range_efd);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->ring_lock);
	pthread_rwlock_destroy(&p->index_lock);
	pthread_cond_destroy(&p->idle);
	Py_XDECREF(p->path);
	Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyObject *Pool_close(Pool *p, PyObject *Py_UNUSED(ignored))
{
	if (p->state == POOL_CLOSED)
		Py_RETURN_NONE;
	if (p->state == POOL_CLOSING) {
		/* Another thread is closing: return once it is done. */
		Py_BEGIN_ALLOW_THREADS
		pthread_mutex_lock(&p->lock);
		while (p->state != POOL_CLOSED)
			pthread_cond_wait(&p->idle, &p->lock);
		pthread_mutex_unlock(&p->lock);
		Py_END_ALLOW_THREADS
		Py_RETURN_NONE;
	}
	if (p->map && p->map->exports) {
		PyErr_Format(PyExc_BufferError,
			     "cannot close the pool: %zd views of its mapping are still exported "
			     "(memoryview or numpy arrays over Pool.map()): release them first",
			     p->map->exports);
		return NULL;
	}
	pthread_mutex_lock(&p->lock);
	p->state = POOL_CLOSING;
	pthread_mutex_unlock(&p->lock);

	/* Calls in flight still use the handle: wait for them. */
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&p->lock);
	while (atomic_load(&p->inflight))
		pthread_cond_wait(&p->idle, &p->lock);
	pthread_mutex_unlock(&p->lock);
	Py_END_ALLOW_THREADS

	/* CLOSING refused new exports, so the mapping has none. */
	if (p->map)
		poolmap_unmap(p->map);
	Py_BEGIN_ALLOW_THREADS
	beluga_ring_exit(p->ring);
	beluga_close(p->b);
	Py_END_ALLOW_THREADS
	p->ring = NULL;
	p->b = NULL;
	/* After the file: the range (and its eventfd's use) ended with it. */
	if (p->range_efd >= 0)
		close(p->range_efd);
	p->range_efd = -1;
	pthread_mutex_lock(&p->lock);
	p->state = POOL_CLOSED;
	pthread_cond_broadcast(&p->idle);
	pthread_mutex_unlock(&p->lock);
	Py_RETURN_NONE;
}

static PyObject *Pool_enter_ctx(Pool *p, PyObject *Py_UNUSED(ignored))
{
	if (p->state != POOL_OPEN)
		return closed_error();
	Py_INCREF(p);
	return (PyObject *)p;
}

static PyObject *Pool_exit_ctx(Pool *p, PyObject *Py_UNUSED(args))
{
	PyObject *r = Pool_close(p, NULL);

	if (!r)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_FALSE;
}

static PyObject *Pool_repr(Pool *p)
{
	if (p->state != POOL_OPEN)
		return PyUnicode_FromFormat("<beluga.Pool %R closed>", p->path);
	return PyUnicode_FromFormat("<beluga.Pool %R fd=%d %s>", p->path, beluga_fd(p->b),
				    p->writable ? "read-write" : "read-only");
}

/* INFO into @info; -1 with an exception set. */
static int pool_info(Pool *p, struct beluga_info *info)
{
	int ret;

	if (pool_enter(p))
		return -1;
	POOL_CALL(p, ret = beluga_info(p->b, info));
	pool_leave(p);
	if (ret) {
		raise_beluga(ret);
		return -1;
	}
	return 0;
}

#define SET_U64(d, s, f)						\
	do {								\
		PyObject *v_ = PyLong_FromUnsignedLongLong((s)->f);	\
		if (!v_ || PyDict_SetItemString(d, #f, v_)) {		\
			Py_XDECREF(v_);					\
			Py_DECREF(d);					\
			return NULL;					\
		}							\
		Py_DECREF(v_);						\
	} while (0)

#define SET_I64(d, s, f)						\
	do {								\
		PyObject *v_ = PyLong_FromLongLong((s)->f);		\
		if (!v_ || PyDict_SetItemString(d, #f, v_)) {		\
			Py_XDECREF(v_);					\
			Py_DECREF(d);					\
			return NULL;					\
		}							\
		Py_DECREF(v_);						\
	} while (0)

#define SET_STR(d, s, f)						\
	do {								\
		PyObject *v_ = PyUnicode_DecodeFSDefaultAndSize((s)->f,	\
			(Py_ssize_t)strnlen((s)->f, sizeof((s)->f)));	\
		if (!v_ || PyDict_SetItemString(d, #f, v_)) {		\
			Py_XDECREF(v_);					\
			Py_DECREF(d);					\
			return NULL;					\
		}							\
		Py_DECREF(v_);						\
	} while (0)

static PyObject *info_dict(const struct beluga_info *i)
{
	PyObject *d = PyDict_New();

	if (!d)
		return NULL;
	SET_U64(d, i, abi_version);
	SET_U64(d, i, nr_regions);
	SET_U64(d, i, block_size);
	SET_U64(d, i, nr_blocks);
	SET_U64(d, i, map_size);
	SET_U64(d, i, max_batch);
	SET_U64(d, i, max_regions);
	return d;
}

/*
 * info() also says whether the pool is shared between hosts ("shared": it
 * has host records), which KVStore asks to know whether it must write
 * back and invalidate what it copies (a module without HOSTS has no
 * shared pools).
 */
static PyObject *Pool_info(Pool *p, PyObject *Py_UNUSED(ignored))
{
	struct beluga_info info;
	PyObject *d;
	int nr_hosts;

	if (pool_info(p, &info))
		return NULL;
	if (pool_enter(p))
		return NULL;
	POOL_CALL(p, nr_hosts = beluga_hosts(p->b, NULL, 0));
	pool_leave(p);
	if (nr_hosts == -ENOTTY)
		nr_hosts = 0;
	if (nr_hosts < 0)
		return raise_beluga(nr_hosts);
	d = info_dict(&info);
	if (d && PyDict_SetItemString(d, "shared", nr_hosts > 0 ? Py_True : Py_False)) {
		Py_DECREF(d);
		return NULL;
	}
	return d;
}

static PyObject *Pool_stats(Pool *p, PyObject *Py_UNUSED(ignored))
{
	struct beluga_stats s;
	PyObject *d;
	int ret;

	if (pool_enter(p))
		return NULL;
	POOL_CALL(p, ret = beluga_stats(p->b, &s));
	pool_leave(p);
	if (ret)
		return raise_beluga(ret);
	d = PyDict_New();
	if (!d)
		return NULL;
#define STAT_FIELD(name, kind, help)	SET_U64(d, &s, name);
	BELUGA_STATS_FIELDS(STAT_FIELD)
#undef STAT_FIELD
	return d;
}

static PyObject *Pool_region_info(Pool *p, PyObject *arg)
{
	struct beluga_region_info ri;
	uint32_t id;
	PyObject *d;
	int ret;

	if (!conv_u32(arg, &id))
		return NULL;
	if (pool_enter(p))
		return NULL;
	POOL_CALL(p, ret = beluga_region_info(p->b, id, &ri));
	pool_leave(p);
	if (ret)
		return raise_beluga(ret);
	d = PyDict_New();
	if (!d)
		return NULL;
	SET_U64(d, &ri, region_id);
	SET_U64(d, &ri, backend);
	SET_I64(d, &ri, node);
	SET_U64(d, &ri, mappings);
	SET_U64(d, &ri, phys_start);
	SET_U64(d, &ri, length);
	SET_U64(d, &ri, first_offset);
	SET_U64(d, &ri, nr_blocks);
	SET_U64(d, &ri, free_blocks);
	SET_U64(d, &ri, allocated_blocks);
	SET_U64(d, &ri, published_blocks);
	SET_STR(d, &ri, name);
	return d;
}

/* The block count @arg of alloc(n) or alloc_evicting(n); -1 with an exception. */
static Py_ssize_t alloc_count(PyObject *arg, const char *what)
{
	Py_ssize_t n = PyNumber_AsSsize_t(arg, PyExc_OverflowError);

	if (n == -1 && PyErr_Occurred())
		return -1;
	if (n < 0) {
		PyErr_Format(PyExc_ValueError, "%s(n): n must be >= 0, got %zd", what, n);
		return -1;
	}
	return n;
}

static PyObject *Pool_alloc(Pool *p, PyObject *arg)
{
	Py_ssize_t n = alloc_count(arg, "alloc");
	PyObject *arr;
	void *data;
	int ret;

	if (n < 0)
		return NULL;
	if (pool_enter(p))
		return NULL;
	arr = new_array(zero_q, n, &data);
	if (!arr) {
		pool_leave(p);
		return NULL;
	}
	POOL_CALL(p, ret = beluga_alloc(p->b, data, (size_t)n));
	pool_leave(p);
	if (ret) {
		Py_DECREF(arr);
		return raise_beluga(ret);
	}
	return arr;
}

static void key_to_bytes(const struct beluga_key *k, unsigned char *out);

/* [(ns, key bytes), ...] of @nr evicted keys, in their order. */
static PyObject *evicted_list(const struct beluga_evicted_key *evicted, size_t nr)
{
	PyObject *list = PyList_New((Py_ssize_t)nr);
	unsigned char key[16];
	size_t i;

	for (i = 0; list && i < nr; i++) {
		PyObject *item;

		key_to_bytes(&evicted[i].key, key);
		item = Py_BuildValue("(Ky#)", (unsigned long long)evicted[i].ns, key,
				     (Py_ssize_t)sizeof(key));
		if (!item) {
			Py_CLEAR(list);
			break;
		}
		PyList_SET_ITEM(list, (Py_ssize_t)i, item);
	}
	return list;
}

static PyObject *Pool_alloc_evicting(Pool *p, PyObject *arg)
{
	Py_ssize_t n = alloc_count(arg, "alloc_evicting");
	struct beluga_evicted_key *evicted;
	PyObject *arr, *keys;
	size_t nr_evicted = 0;
	void *data;
	int ret;

	if (n < 0)
		return NULL;
	/* Room for one key per block: an ALLOC evicts at most what it takes. */
	evicted = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*evicted));
	if (!evicted)
		return PyErr_NoMemory();
	if (pool_enter(p)) {
		PyMem_Free(evicted);
		return NULL;
	}
	arr = new_array(zero_q, n, &data);
	if (!arr) {
		pool_leave(p);
		PyMem_Free(evicted);
		return NULL;
	}
	POOL_CALL(p, ret = beluga_alloc_evicting(p->b, data, (size_t)n, evicted, &nr_evicted));
	keys = ret ? NULL : evicted_list(evicted, nr_evicted);
	/* Python ran out of memory: the blocks go back, not to a caller. */
	if (!ret && !keys)
		POOL_CALL(p, beluga_free(p->b, data, (size_t)n));
	pool_leave(p);
	PyMem_Free(evicted);
	if (ret) {
		Py_DECREF(arr);
		if (ret == -EOPNOTSUPP)
			return raise_errno_msg(ret,
				"alloc_evicting: the loaded beluga module predates ALLOC's evicted "
				"report (BELUGA_ALLOC_EVICTED): upgrade the module to this "
				"binding's version, or call Pool.alloc(), which reports no evictions");
		return raise_beluga(ret);
	}
	if (!keys) {
		Py_DECREF(arr);
		return NULL;
	}
	return Py_BuildValue("(NN)", arr, keys);
}

static PyObject *blocks_op(Pool *p, PyObject *arg,
			   int (*op)(struct beluga *, const uint64_t *, size_t))
{
	struct uint_arg a;
	int ret;

	if (get_uints(arg, &a, 8, "offsets", "uint64"))
		return NULL;
	if (pool_enter(p)) {
		uint_arg_release(&a);
		return NULL;
	}
	POOL_CALL(p, ret = op(p->b, a.data, a.n));
	pool_leave(p);
	uint_arg_release(&a);
	if (ret)
		return raise_beluga(ret);
	Py_RETURN_NONE;
}

static PyObject *Pool_free(Pool *p, PyObject *arg)
{
	return blocks_op(p, arg, beluga_free);
}

static PyObject *Pool_release(Pool *p, PyObject *arg)
{
	return blocks_op(p, arg, beluga_release);
}

static PyTypeObject PublishResultType;

static PyStructSequence_Field publish_result_fields[] = {
	{ "results", "array('i'): per item 0 (PUBLISH_OK), 1 (PUBLISH_EXISTS) or -errno" },
	{ "published", "items now visible under their key" },
	{ "exists", "items whose key was present (a lost race: the block was freed)" },
	{ "failed", "items with a negative result" },
	{ NULL, NULL },
};

static PyStructSequence_Desc publish_result_desc = {
	"beluga.PublishResult",
	"The outcome of Pool.publish(): per-item results and their totals.",
	publish_result_fields,
	4,
};

/* Items of a publish this small live on the stack: no allocation per call. */
#define PUBLISH_STACK_ITEMS 64

/* publish_run()'s answer when a Python exception is set instead. */
#define PUBLISH_PYERR 1

/*
 * PUBLISH of @n blocks at @offs under @keys in @ns, between pool_enter()
 * and pool_leave(), the GIL released for the call: each item's result
 * into @out[i] and the totals into @sum. 0, libbeluga's -errno (chunks
 * before the failing one stay applied), or PUBLISH_PYERR.
 */
static int publish_run(Pool *p, uint64_t ns, const uint64_t *offs,
		       const struct beluga_key *keys, size_t n, int32_t *out,
		       struct beluga_publish_summary *sum)
{
	struct beluga_publish_item stack_items[PUBLISH_STACK_ITEMS];
	struct beluga_publish_item *items = stack_items;
	size_t i;
	int ret;

	if (n > PUBLISH_STACK_ITEMS) {
		items = PyMem_Malloc(n * sizeof(*items));
		if (!items) {
			PyErr_NoMemory();
			return PUBLISH_PYERR;
		}
	}
	for (i = 0; i < n; i++) {
		memset(&items[i], 0, sizeof(items[i]));
		items[i].offset = offs[i];
		memcpy(&items[i].key, &keys[i], sizeof(items[i].key));
	}
	POOL_CALL(p, ret = beluga_publish(p->b, ns, items, n, sum));
	for (i = 0; i < n; i++)
		out[i] = items[i].result;
	if (items != stack_items)
		PyMem_Free(items);
	return ret;
}

/*
 * publish()'s answer, a PublishResult of @results (stolen) and @sum; or,
 * when PUBLISH failed with @ret, its exception with that PublishResult as
 * its `result`, since chunks before the failing one stay applied.
 */
static PyObject *publish_answer(PyObject *results, const struct beluga_publish_summary *sum,
				int ret)
{
	PyObject *res = PyStructSequence_New(&PublishResultType);
	PyObject *t, *v, *tb;

	if (!res) {
		Py_DECREF(results);
		return NULL;
	}
	PyStructSequence_SET_ITEM(res, 0, results);
	PyStructSequence_SET_ITEM(res, 1, PyLong_FromSize_t(sum->published));
	PyStructSequence_SET_ITEM(res, 2, PyLong_FromSize_t(sum->exists));
	PyStructSequence_SET_ITEM(res, 3, PyLong_FromSize_t(sum->failed));
	if (PyErr_Occurred()) {
		Py_DECREF(res);
		return NULL;
	}
	if (!ret)
		return res;
	raise_beluga(ret);
	PyErr_Fetch(&t, &v, &tb);
	PyErr_NormalizeException(&t, &v, &tb);
	if (v && PyObject_SetAttrString(v, "result", res))
		PyErr_Clear();
	PyErr_Restore(t, v, tb);
	Py_DECREF(res);
	return NULL;
}

static PyObject *Pool_publish(Pool *p, PyObject *const *args, Py_ssize_t nargs)
{
	struct beluga_publish_summary sum = { 0, 0, 0 };
	PyObject *results, *res = NULL;
	struct keys_arg k;
	struct uint_arg a;
	int32_t *out;
	uint64_t ns;
	int ret;

	if (nargs != 3) {
		PyErr_Format(PyExc_TypeError, "publish(ns, offsets, keys) takes 3 arguments (%zd given)",
			     nargs);
		return NULL;
	}
	if (get_ns(args[0], &ns))
		return NULL;
	if (get_uints(args[1], &a, 8, "offsets", "uint64"))
		return NULL;
	if (get_keys(args[2], &k, "keys")) {
		uint_arg_release(&a);
		return NULL;
	}
	if (a.n != k.n) {
		PyErr_Format(PyExc_ValueError,
			     "publish: %zu offsets but %zu keys: give one key per offset",
			     a.n, k.n);
		goto out;
	}
	results = new_array(zero_i, (Py_ssize_t)a.n, (void **)&out);
	if (!results)
		goto out;
	if (pool_enter(p)) {
		Py_DECREF(results);
		goto out;
	}
	ret = publish_run(p, ns, a.data, k.keys, a.n, out, &sum);
	pool_leave(p);
	if (ret == PUBLISH_PYERR)
		Py_DECREF(results);
	else
		res = publish_answer(results, &sum, ret);
out:
	keys_release(&k);
	uint_arg_release(&a);
	return res;
}

/*
 * Count-only results (hits, None), made once per hit count and shared:
 * tuples of immutable objects cannot tell one copy from another, and the
 * hot path then allocates nothing. Counts past the cache get their own.
 */
#define COUNT_RESULTS 1024
static PyObject *count_results[COUNT_RESULTS];
static PyObject *str_pin;	/* "pin", interned: keyword names are, mostly */

static PyObject *count_result(ssize_t hits)
{
	PyObject *n, *r;

	if (hits < COUNT_RESULTS && count_results[hits])
		return Py_NewRef(count_results[hits]);
	n = PyLong_FromSsize_t(hits);
	if (!n)
		return NULL;
	r = PyTuple_Pack(2, n, Py_None);
	Py_DECREF(n);
	if (r && hits < COUNT_RESULTS)
		count_results[hits] = Py_NewRef(r);
	return r;
}

/*
 * lookup(ns, keys, pin=False): parsed by hand, it is the hot path. With
 * pin, the offsets land in the result array directly, which is cut to the
 * hits afterwards (shrinking an array cannot fail), so that no pin is
 * taken that could not be handed to the caller.
 */
static PyObject *Pool_lookup(Pool *p, PyObject *const *args, Py_ssize_t nargs,
			     PyObject *kwnames)
{
	PyObject *pin_obj = NULL, *arr = NULL, *res, *n;
	uint64_t *offs = NULL;
	struct keys_arg k;
	ssize_t hits;
	uint64_t ns;
	int pin = 0;

	if (nargs < 2 || nargs > 3)
		goto usage;
	if (nargs == 3)
		pin_obj = args[2];
	if (kwnames) {
		Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);

		if (nkw != 1 || pin_obj ||
		    (PyTuple_GET_ITEM(kwnames, 0) != str_pin &&
		     PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "pin")))
			goto usage;
		pin_obj = args[nargs];
	}
	if (pin_obj) {
		pin = PyObject_IsTrue(pin_obj);
		if (pin < 0)
			return NULL;
	}
	if (get_ns(args[0], &ns))
		return NULL;
	if (get_keys(args[1], &k, "keys"))
		return NULL;
	if (pin) {
		arr = new_array(zero_q, (Py_ssize_t)k.n, (void **)&offs);
		if (!arr)
			goto fail;
	}
	if (pool_enter(p))
		goto fail;
	POOL_CALL(p, hits = beluga_lookup(p->b, ns, k.keys, k.n, offs,
					  pin ? BELUGA_LOOKUP_PIN : 0));
	keys_release(&k);
	if (hits < 0) {
		pool_leave(p);
		Py_XDECREF(arr);
		return raise_beluga((int)hits);
	}
	if (!pin) {
		pool_leave(p);
		return count_result(hits);
	}
	res = PyTuple_New(2);
	n = PyLong_FromSsize_t(hits);
	if (!res || !n ||
	    ((size_t)hits < k.n && PySequence_DelSlice(arr, hits, (Py_ssize_t)k.n))) {
		/* Not reached in practice; give the pins back rather than leak them. */
		POOL_CALL(p, beluga_release(p->b, offs, (size_t)hits));
		pool_leave(p);
		Py_XDECREF(res);
		Py_XDECREF(n);
		Py_DECREF(arr);
		return NULL;
	}
	pool_leave(p);
	PyTuple_SET_ITEM(res, 0, n);
	PyTuple_SET_ITEM(res, 1, arr);
	return res;
fail:
	keys_release(&k);
	Py_XDECREF(arr);
	return NULL;
usage:
	PyErr_SetString(PyExc_TypeError, "lookup(ns, keys, pin=False)");
	return NULL;
}

/*
 * With index_lock held exclusive: map the index when it is not mapped and
 * live. No region yet (-ENODEV) is tried again at the next call; any other
 * failure is for good (a shared pool, an older module, no memory for the
 * copy) and Pool.index_error says why: lookup_count() then asks the kernel.
 */
static void pool_index_map(Pool *p)
{
	int ret;

	if (p->index_err || beluga_index_live(p->b))
		return;
	ret = beluga_index_map(p->b);
	if (ret && ret != -ENODEV) {
		p->index_err = ret;
		snprintf(p->index_msg, sizeof(p->index_msg), "%s", beluga_last_error(p->b));
	}
}

/*
 * With the GIL released: take index_lock shared, after mapping the index
 * anew where it is not live (not mapped yet, or sealed by ATTACH or
 * DETACH). Returns whether the mapping is live; index_lock is held either
 * way. A sealed or missing mapping is still correct (libbeluga asks the
 * kernel then): the remap only takes the system call away again.
 */
static int index_read_lock(Pool *p)
{
	pthread_rwlock_rdlock(&p->index_lock);
	if (p->index_err || beluga_index_live(p->b))
		return beluga_index_live(p->b);
	pthread_rwlock_unlock(&p->index_lock);
	pthread_rwlock_wrlock(&p->index_lock);
	pool_index_map(p);
	pthread_rwlock_unlock(&p->index_lock);
	pthread_rwlock_rdlock(&p->index_lock);
	return beluga_index_live(p->b);
}

/* With the GIL released, between pool_enter() and pool_leave(). */
static ssize_t lookup_count_run(Pool *p, uint64_t ns, const struct keys_arg *k)
{
	ssize_t hits;

	index_read_lock(p);
	hits = beluga_lookup_count(p->b, ns, k->keys, k->n);
	pthread_rwlock_unlock(&p->index_lock);
	return hits;
}

/*
 * A count-only lookup of a few keys on the mapped index takes about as
 * long as letting the GIL go and taking it back (64 keys: about 1 us on
 * the host), so up to LOOKUP_GIL_KEYS keys it runs with the GIL held:
 * when the index lock is had without waiting and the mapping is live, so
 * that nothing waits with the GIL held (a copy sealed meanwhile makes
 * libbeluga ask the kernel: one LOOKUP, which sleeps on nothing). Returns
 * whether it ran (@hits).
 */
#define LOOKUP_GIL_KEYS 256

static int lookup_count_quick(Pool *p, uint64_t ns, const struct keys_arg *k, ssize_t *hits)
{
	if (k->n > LOOKUP_GIL_KEYS || pthread_rwlock_tryrdlock(&p->index_lock))
		return 0;
	if (!beluga_index_live(p->b)) {
		pthread_rwlock_unlock(&p->index_lock);
		return 0;
	}
	*hits = beluga_lookup_count(p->b, ns, k->keys, k->n);
	pthread_rwlock_unlock(&p->index_lock);
	return 1;
}

/*
 * lookup_count()'s tally: a writable, C-contiguous buffer of at least
 * TALLY_SLOTS native uint64 ('Q', or 'L' where that is 64 bits, as
 * array('Q') is), which a call with keys adds 1, hits and misses to.
 */
enum { TALLY_CALLS, TALLY_HITS, TALLY_MISSES, TALLY_SLOTS };

static int get_tally(PyObject *obj, Py_buffer *view)
{
	char code;

	if (get_contiguous(obj, view, 1, "tally"))
		return -1;
	code = format_code(view->format);
	if (view->itemsize != 8 || (code != 'Q' && code != 'L') ||
	    view->len < TALLY_SLOTS * 8 || (uintptr_t)view->buf % 8) {
		PyErr_Format(PyExc_TypeError,
			     "tally must be array('Q') of at least %d items (calls, hits, misses); "
			     "got buffer format '%s' with itemsize %zd and %zd bytes",
			     TALLY_SLOTS, view->format ? view->format : "B", view->itemsize,
			     view->len);
		PyBuffer_Release(view);
		return -1;
	}
	return 0;
}

/* A call with @n keys, @hits of them hits, into @tally (if any). GIL held. */
static void tally_add(Py_buffer *tally, size_t n, size_t hits)
{
	uint64_t *t = tally->buf;

	if (!t || !n)
		return;
#ifdef Py_GIL_DISABLED
	__atomic_fetch_add(&t[TALLY_CALLS], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&t[TALLY_HITS], hits, __ATOMIC_RELAXED);
	__atomic_fetch_add(&t[TALLY_MISSES], n - hits, __ATOMIC_RELAXED);
#else
	/* the GIL orders them: no locked instructions */
	t[TALLY_CALLS] += 1;
	t[TALLY_HITS] += hits;
	t[TALLY_MISSES] += n - hits;
#endif
}

/*
 * lookup_count(ns, keys[, tally]) -> hits: lookup(ns, keys)'s count, with
 * no system call on the mapped index (beluga_lookup_count(3)). With a
 * tally, a successful call with keys also counts itself there, so that a
 * caller keeping statistics (KVStore) needs no lock and no Python code of
 * its own per call: the adds are made with the GIL held (atomic where
 * there is none), so a Python reader that copies the tally in one call
 * (tolist()) sees whole calls only.
 */
static PyObject *Pool_lookup_count(Pool *p, PyObject *const *args, Py_ssize_t nargs)
{
	Py_buffer tally = { 0 };
	struct keys_arg k;
	ssize_t hits;
	uint64_t ns;

	if (nargs != 2 && nargs != 3) {
		PyErr_SetString(PyExc_TypeError,
				"lookup_count(ns, keys[, tally]) takes 2 arguments (3 with a tally)");
		return NULL;
	}
	if (get_ns(args[0], &ns))
		return NULL;
	if (nargs == 3 && args[2] != Py_None && get_tally(args[2], &tally))
		return NULL;
	if (get_keys(args[1], &k, "keys"))
		goto fail;
	if (pool_enter(p)) {
		keys_release(&k);
		goto fail;
	}
	if (!lookup_count_quick(p, ns, &k, &hits))
		POOL_CALL(p, hits = lookup_count_run(p, ns, &k));
	pool_leave(p);
	keys_release(&k);
	if (hits < 0) {
		PyBuffer_Release(&tally);
		return raise_beluga((int)hits);
	}
	tally_add(&tally, k.n, (size_t)hits);
	PyBuffer_Release(&tally);
	return PyLong_FromSsize_t(hits);
fail:
	PyBuffer_Release(&tally);
	return NULL;
}

/*
 * lookup_pinned(ns, keys, tally) -> (hits, offsets): lookup(ns, keys,
 * pin=True), counted into @tally as lookup_count() counts: a caller's
 * statistics of its pinned lookups with no lock and no Python code of its
 * own (KVStore.pin(), which the adapters call per request).
 */
static PyObject *Pool_lookup_pinned(Pool *p, PyObject *const *args, Py_ssize_t nargs)
{
	Py_buffer tally = { 0 };
	PyObject *res;

	if (nargs != 3 || !PyBytes_CheckExact(args[1])) {
		PyErr_SetString(PyExc_TypeError,
				"lookup_pinned(ns, keys, tally) takes 3 arguments, keys as bytes");
		return NULL;
	}
	if (get_tally(args[2], &tally))
		return NULL;
	{
		PyObject *const lookup_args[3] = { args[0], args[1], Py_True };

		res = Pool_lookup(p, lookup_args, 3, NULL);
	}
	/* lookup() took only whole keys */
	if (res)
		tally_add(&tally, (size_t)PyBytes_GET_SIZE(args[1]) / sizeof(struct beluga_key),
			  (size_t)PyLong_AsSsize_t(PyTuple_GET_ITEM(res, 0)));
	PyBuffer_Release(&tally);
	return res;
}

/*
 * lookup_count_or(ns, tally, general, keys) -> lookup_count(ns, keys,
 * tally) for keys as bytes that it answers, else general(keys): what it
 * refuses with ValueError (not whole keys, a closed pool) and every other
 * kind of keys go to @general, which answers as the caller always has.
 * Made for functools.partial(pool.lookup_count_or, ns, tally, general):
 * a callable of the keys alone with no Python frame of its own, which
 * KVStore.lookup() is on its hot path (engines call it per request).
 */
static PyObject *Pool_lookup_count_or(Pool *p, PyObject *const *args, Py_ssize_t nargs)
{
	PyObject *hits;

	if (nargs != 4) {
		PyErr_SetString(PyExc_TypeError,
				"lookup_count_or(ns, tally, general, keys) takes 4 arguments");
		return NULL;
	}
	if (PyBytes_CheckExact(args[3])) {
		PyObject *const count_args[3] = { args[0], args[3], args[1] };

		hits = Pool_lookup_count(p, count_args, 3);
		if (hits || !PyErr_ExceptionMatches(PyExc_ValueError))
			return hits;
		PyErr_Clear();
	}
	return PyObject_CallOneArg(args[2], args[3]);
}

static PyObject *Pool_get_index_error(Pool *p, void *Py_UNUSED(c))
{
	char msg[sizeof(p->index_msg)];
	int err;

	pthread_rwlock_rdlock(&p->index_lock);
	err = p->index_err;
	memcpy(msg, p->index_msg, sizeof(msg));
	pthread_rwlock_unlock(&p->index_lock);
	if (!err)
		Py_RETURN_NONE;
	return PyUnicode_FromString(msg);
}

/*
 * lookup_many(): many requests' lookups. Count-only ones on the mapped
 * index, as lookup_count() (lookup_many_dispatch()); the others as io_uring
 * commands through the pool's ring (RING_ENTRIES per system call) where
 * the module and the kernel have them, else (and for a request longer
 * than the module's max_batch, or empty) the plain call; the answers are
 * lookup()'s either way.
 */
#define RING_ENTRIES 64

struct many_request {
	struct keys_arg k;
	PyObject *arr;		/* with pin: the offsets' array('Q') */
	uint64_t *offs;		/* its storage, or NULL */
	ssize_t hits;		/* the answer: hits, or -errno */
};

/* With ring_lock held. Failing once is remembered: Pool.ring_error says why. */
static struct beluga_ring *pool_ring(Pool *p)
{
	int ret;

	if (p->ring || p->ring_err)
		return p->ring;
	ret = beluga_ring_init(p->b, RING_ENTRIES, 0, &p->ring);
	if (ret) {
		p->ring_err = ret;
		snprintf(p->ring_msg, sizeof(p->ring_msg), "%s", beluga_last_error(p->b));
	}
	return p->ring;
}

/*
 * Give up the ring after io_uring itself failed (not a command): its
 * commands in flight are waited for by beluga_ring_exit() and their
 * answers lost, so a pinned lookup among them leaves pins that only
 * close() returns. Only a broken io_uring gets here (-EINTR, -EAGAIN and
 * -EBUSY are retried).
 */
static void pool_ring_broken(Pool *p, ssize_t err)
{
	p->ring_err = (int)err;
	snprintf(p->ring_msg, sizeof(p->ring_msg),
		 "io_uring failed while commands were in flight (%s); lookup_many() "
		 "makes plain calls from now on", strerror((int)-err));
	beluga_ring_exit(p->ring);
	p->ring = NULL;
}

/* With the GIL released, between pool_enter() and pool_leave(). */
static void lookup_many_run(Pool *p, uint64_t ns, struct many_request *rq, size_t n,
			    uint32_t flags)
{
	struct beluga_ring_result res[RING_ENTRIES];
	struct beluga_ring *ring;
	size_t next = 0, queued, i, qidx[RING_ENTRIES];
	ssize_t got;
	int ret;

	pthread_mutex_lock(&p->ring_lock);
	while (next < n) {
		ring = pool_ring(p);
		queued = 0;
		while (next < n && queued < RING_ENTRIES) {
			struct many_request *r = &rq[next];

			ret = ring && r->k.n ?
			      beluga_ring_queue_lookup(ring, ns, r->k.keys, r->k.n, r->offs,
						       flags, next) : -E2BIG;
			if (!ret)
				qidx[queued++] = next;
			else	/* no ring, an empty request, or over max_batch */
				r->hits = beluga_lookup(p->b, ns, r->k.keys, r->k.n, r->offs,
							flags);
			next++;
		}
		if (!queued)
			continue;
		do
			got = beluga_ring_submit_and_wait(ring, res, RING_ENTRIES);
		while (got == -EINTR || got == -EAGAIN || got == -EBUSY);
		if (got < 0) {
			pool_ring_broken(p, got);
			for (i = 0; i < queued; i++)
				rq[qidx[i]].hits = got;
			continue;
		}
		for (i = 0; i < (size_t)got; i++)
			rq[res[i].user_data].hits = res[i].res ? (ssize_t)res[i].res :
								   (ssize_t)res[i].hits;
	}
	pthread_mutex_unlock(&p->ring_lock);
}

/*
 * With the GIL released: count-only requests on a live mapping of the
 * index are answered in this process (lookup_count()), with no system
 * call at all; pinned ones, and all where the index cannot be mapped,
 * go through the ring.
 */
static void lookup_many_dispatch(Pool *p, uint64_t ns, struct many_request *rq, size_t n,
				 int pin)
{
	size_t i;
	int live;

	if (!pin) {
		live = index_read_lock(p);
		for (i = 0; live && i < n; i++)
			rq[i].hits = beluga_lookup_count(p->b, ns, rq[i].k.keys, rq[i].k.n);
		pthread_rwlock_unlock(&p->index_lock);
		if (live)
			return;
	}
	lookup_many_run(p, ns, rq, n, pin ? BELUGA_LOOKUP_PIN : 0);
}

static void many_requests_free(struct many_request *rq, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		keys_release(&rq[i].k);
		Py_XDECREF(rq[i].arr);
	}
	PyMem_Free(rq);
}

/*
 * On a failed request, the pins the others took are given back and the
 * first failure (in request order) is raised: nothing is half done.
 */
static PyObject *lookup_many_results(Pool *p, struct many_request *rq, size_t n, int pin)
{
	PyObject *list, *item, *hits;
	size_t i;

	for (i = 0; i < n && rq[i].hits >= 0; i++)
		;
	if (i < n) {
		/* Raised first: the releases must not replace its message. */
		raise_beluga((int)rq[i].hits);
		for (i = 0; pin && i < n; i++)
			if (rq[i].hits > 0)
				POOL_CALL(p, beluga_release(p->b, rq[i].offs, (size_t)rq[i].hits));
		return NULL;
	}
	list = PyList_New((Py_ssize_t)n);
	for (i = 0; list && i < n; i++) {
		if (!pin) {
			item = count_result(rq[i].hits);
		} else {
			hits = PyLong_FromSsize_t(rq[i].hits);
			item = NULL;
			if (hits && !PySequence_DelSlice(rq[i].arr, rq[i].hits,
							 (Py_ssize_t)rq[i].k.n))
				item = PyTuple_Pack(2, hits, rq[i].arr);
			Py_XDECREF(hits);
		}
		if (!item)
			Py_CLEAR(list);
		else
			PyList_SET_ITEM(list, (Py_ssize_t)i, item);
	}
	if (!list && pin)	/* not reached in practice; never leak a pin */
		for (i = 0; i < n; i++)
			POOL_CALL(p, beluga_release(p->b, rq[i].offs, (size_t)rq[i].hits));
	return list;
}

static PyObject *Pool_lookup_many(Pool *p, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "ns", "requests", "pin", NULL };
	PyObject *ns_obj, *requests, *seq, *result = NULL;
	struct many_request *rq;
	size_t n, parsed = 0;
	uint64_t ns;
	int pin = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|p:lookup_many", kwlist, &ns_obj,
					 &requests, &pin))
		return NULL;
	if (get_ns(ns_obj, &ns))
		return NULL;
	seq = PySequence_Fast(requests, "requests must be a sequence of key buffers "
			      "(one per request, each as lookup()'s keys)");
	if (!seq)
		return NULL;
	n = (size_t)PySequence_Fast_GET_SIZE(seq);
	rq = PyMem_Calloc(n ? n : 1, sizeof(*rq));
	if (!rq) {
		Py_DECREF(seq);
		return PyErr_NoMemory();
	}
	for (; parsed < n; parsed++) {
		struct many_request *r = &rq[parsed];
		char what[48];

		snprintf(what, sizeof(what), "requests[%zu]", parsed);
		if (get_keys(PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)parsed), &r->k, what))
			goto out;
		if (pin) {
			r->arr = new_array(zero_q, (Py_ssize_t)r->k.n, (void **)&r->offs);
			if (!r->arr) {
				keys_release(&r->k);
				goto out;
			}
		}
	}
	if (pool_enter(p))
		goto out;
	POOL_CALL(p, lookup_many_dispatch(p, ns, rq, n, pin));
	result = lookup_many_results(p, rq, n, pin);
	pool_leave(p);
out:
	many_requests_free(rq, parsed);
	Py_DECREF(seq);
	return result;
}

static PyObject *Pool_get_ring_error(Pool *p, void *Py_UNUSED(c))
{
	char msg[sizeof(p->ring_msg)];
	int err;

	pthread_mutex_lock(&p->ring_lock);
	err = p->ring_err;
	memcpy(msg, p->ring_msg, sizeof(msg));
	pthread_mutex_unlock(&p->ring_lock);
	if (!err)
		Py_RETURN_NONE;
	return PyUnicode_FromString(msg);
}

static PyObject *attach_dict(const struct beluga_attach *a)
{
	PyObject *d = PyDict_New();

	if (!d)
		return NULL;
	SET_U64(d, a, region_id);
	SET_U64(d, a, backend);
	SET_I64(d, a, node);
	SET_U64(d, a, phys_start);
	SET_U64(d, a, length);
	SET_U64(d, a, block_size);
	SET_U64(d, a, first_offset);
	SET_U64(d, a, nr_blocks);
	SET_U64(d, a, flags);
	SET_U64(d, a, host_id);
	SET_STR(d, a, name);
	return d;
}

static PyObject *Pool_attach_dax(Pool *p, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "dax", "block_size", "shared", "host_id", "format", NULL };
	uint64_t block_size = 0;
	int shared = 0, host_id = -1, format = 0, ret;
	PyObject *dax_obj, *dax_bytes = NULL;
	struct beluga_attach out;
	const char *dax;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O&pip:attach_dax", kwlist, &dax_obj,
					 conv_u64, &block_size, &shared, &host_id, &format))
		return NULL;
	if (!PyUnicode_FSConverter(dax_obj, &dax_bytes))
		return NULL;
	dax = PyBytes_AS_STRING(dax_bytes);
	if (!shared && (format || host_id != -1)) {
		Py_DECREF(dax_bytes);
		PyErr_SetString(PyExc_ValueError,
				"attach_dax: host_id and format apply to shared=True pools only");
		return NULL;
	}
	memset(&out, 0, sizeof(out));
	if (pool_enter(p)) {
		Py_DECREF(dax_bytes);
		return NULL;
	}
	if (shared)
		POOL_CALL(p, ret = beluga_attach_dax_shared(p->b, dax, block_size, host_id,
							    format ? LIBBELUGA_SHARED_FORMAT : 0,
							    &out));
	else
		POOL_CALL(p, ret = beluga_attach_dax(p->b, dax, block_size, &out));
	pool_leave(p);
	Py_DECREF(dax_bytes);
	if (ret == -EEXIST)
		return raise_hinted(ret, " (Pool.region_info() or `belugactl status` shows "
					 "the regions)");
	if (ret)
		return raise_beluga(ret);
	return attach_dict(&out);
}

static PyObject *Pool_attach_node(Pool *p, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "node", "size", "block_size", NULL };
	uint64_t size, block_size = 0;
	struct beluga_attach out;
	int node, ret;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "iO&|O&:attach_node", kwlist, &node,
					 conv_u64, &size, conv_u64, &block_size))
		return NULL;
	memset(&out, 0, sizeof(out));
	if (pool_enter(p))
		return NULL;
	POOL_CALL(p, ret = beluga_attach_node(p->b, node, size, block_size, &out));
	pool_leave(p);
	if (ret)
		return raise_beluga(ret);
	return attach_dict(&out);
}

static PyObject *Pool_detach(Pool *p, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "region_id", "evict", NULL };
	uint32_t region_id;
	uint64_t evicted = 0;
	int evict = 0, ret;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&|p:detach", kwlist, conv_u32, &region_id,
					 &evict))
		return NULL;
	if (pool_enter(p))
		return NULL;
	POOL_CALL(p, ret = beluga_detach(p->b, region_id, evict ? BELUGA_DETACH_EVICT : 0,
					 &evicted));
	pool_leave(p);
	if (ret == -EBUSY && !evict)
		return raise_hinted(ret, " (pass evict=True)");
	if (ret)
		return raise_beluga(ret);
	return PyLong_FromUnsignedLongLong(evicted);
}

static PyObject *Pool_evict_key(Pool *p, PyObject *const *args, Py_ssize_t nargs)
{
	struct beluga_key key;
	struct keys_arg k;
	uint64_t ns;
	int ret;

	if (nargs != 2) {
		PyErr_SetString(PyExc_TypeError, "evict_key(ns, key) takes 2 arguments");
		return NULL;
	}
	if (get_ns(args[0], &ns) || get_keys(args[1], &k, "key"))
		return NULL;
	if (k.n != 1) {
		PyErr_Format(PyExc_ValueError, "evict_key: key must be one 16-byte key, got %zu keys",
			     k.n);
		keys_release(&k);
		return NULL;
	}
	memcpy(&key, k.keys, sizeof(key));
	keys_release(&k);
	if (pool_enter(p))
		return NULL;
	POOL_CALL(p, ret = beluga_evict_key(p->b, ns, &key));
	pool_leave(p);
	if (ret)
		return raise_beluga(ret);
	Py_RETURN_NONE;
}

static PyObject *Pool_evict_ns(Pool *p, PyObject *arg)
{
	uint64_t ns, evicted = 0, busy = 0;
	int ret;

	if (get_ns(arg, &ns))
		return NULL;
	if (pool_enter(p))
		return NULL;
	POOL_CALL(p, ret = beluga_evict_ns(p->b, ns, &evicted, &busy));
	pool_leave(p);
	if (ret)
		return raise_beluga(ret);
	return Py_BuildValue("(KK)", (unsigned long long)evicted, (unsigned long long)busy);
}

/* ---- PoolMap ------------------------------------------------------------- */

/*
 * (Re)map the handle; GIL held (see the top comment). Nothing in flight
 * reads the mapping: the pool ioctls do not, and views hold exports.
 */
static int poolmap_map(PoolMap *m)
{
	struct beluga_info info;
	int ret;

	ret = beluga_map(m->pool->b);
	if (!ret)
		ret = beluga_info(m->pool->b, &info);
	if (ret) {
		raise_beluga(ret);
		m->base = NULL;
		m->length = 0;
		return -1;
	}
	m->base = beluga_map_base(m->pool->b);
	m->length = beluga_map_length(m->pool->b);
	m->block_size = info.block_size;
	m->closed = 0;
	return 0;
}

/* Drop the mapping; the caller checked that nothing is exported. */
static int poolmap_unmap(PoolMap *m)
{
	if (!m->closed && m->pool->b)
		beluga_unmap(m->pool->b);
	m->base = NULL;
	m->length = 0;
	m->closed = 1;
	m->cuda_registered = 0;	/* beluga_unmap() unregistered it */
	if (m->pool->map == m)
		m->pool->map = NULL;
	return 0;
}

static PyObject *Pool_map(Pool *p, PyObject *Py_UNUSED(ignored))
{
	struct beluga_info info;
	PoolMap *m = p->map;

	if (p->state != POOL_OPEN)
		return closed_error();
	if (m) {
		/* Grow it to regions attached since, unless views or CUDA pin it. */
		if (!m->exports && !m->cuda_registered && !beluga_info(p->b, &info) &&
		    info.map_size != m->length &&
		    poolmap_map(m)) {
			poolmap_unmap(m);
			return NULL;
		}
		Py_INCREF(m);
		return (PyObject *)m;
	}
	m = PyObject_New(PoolMap, &PoolMapType);
	if (!m)
		return NULL;
	Py_INCREF(p);
	m->pool = p;
	m->exports = 0;
	m->cuda_busy = 0;
	m->cuda_registered = 0;
	m->closed = 1;
	m->base = NULL;
	m->length = 0;
	m->block_size = 0;
	if (poolmap_map(m)) {
		Py_DECREF(m);
		return NULL;
	}
	p->map = m;
	return (PyObject *)m;
}

static void PoolMap_dealloc(PoolMap *m)
{
	/* No views: each holds a reference. */
	poolmap_unmap(m);
	Py_DECREF(m->pool);
	PyObject_Free(m);
}

static int poolmap_check(PoolMap *m)
{
	if (m->closed || m->pool->state != POOL_OPEN) {
		PyErr_SetString(PyExc_ValueError,
				"beluga: the pool mapping is closed (or the pool is closed): "
				"call Pool.map() again on an open pool");
		return -1;
	}
	return 0;
}

static int PoolMap_getbuffer(PoolMap *m, Py_buffer *view, int flags)
{
	if (m->closed || m->pool->state != POOL_OPEN) {
		PyErr_SetString(PyExc_BufferError,
				"beluga: the pool mapping is closed (or the pool is closing): "
				"call Pool.map() again on an open pool");
		view->obj = NULL;
		return -1;
	}
	if ((flags & PyBUF_WRITABLE) && !m->pool->writable) {
		PyErr_SetString(PyExc_BufferError,
				"beluga: the pool was opened read-only (writable=False): its "
				"mapping cannot be written");
		view->obj = NULL;
		return -1;
	}
	if (PyBuffer_FillInfo(view, (PyObject *)m, m->base, (Py_ssize_t)m->length,
			      !m->pool->writable, flags))
		return -1;
	m->exports++;
	return 0;
}

static void PoolMap_releasebuffer(PoolMap *m, Py_buffer *Py_UNUSED(view))
{
	m->exports--;
}

static PyBufferProcs PoolMap_as_buffer = {
	(getbufferproc)PoolMap_getbuffer,
	(releasebufferproc)PoolMap_releasebuffer,
};

static Py_ssize_t PoolMap_len(PoolMap *m)
{
	return m->closed ? 0 : (Py_ssize_t)m->length;
}

static PyObject *PoolMap_close(PoolMap *m, PyObject *Py_UNUSED(ignored))
{
	if (m->closed)
		Py_RETURN_NONE;
	if (m->exports) {
		PyErr_Format(PyExc_BufferError,
			     "cannot close the pool mapping: %zd views are still exported "
			     "(memoryview or numpy arrays over it): release them first",
			     m->exports);
		return NULL;
	}
	poolmap_unmap(m);
	Py_RETURN_NONE;
}

static PyObject *PoolMap_block(PoolMap *m, PyObject *arg)
{
	unsigned long long off;
	PyObject *full, *view;

	off = PyLong_AsUnsignedLongLong(arg);
	if (PyErr_Occurred()) {
		PyErr_Clear();
		PyErr_SetString(PyExc_TypeError, "block(offset): offset must be an int >= 0");
		return NULL;
	}
	if (poolmap_check(m))
		return NULL;
	if (!m->block_size || off % m->block_size || off >= m->length ||
	    m->length - off < m->block_size) {
		PyErr_Format(PyExc_ValueError,
			     "block(%llu): not the offset of a block in this mapping "
			     "(block size %llu, mapping %zu bytes): use offsets from alloc() "
			     "or lookup(pin=True)", off, (unsigned long long)m->block_size,
			     m->length);
		return NULL;
	}
	full = PyMemoryView_FromObject((PyObject *)m);
	if (!full)
		return NULL;
	view = PySequence_GetSlice(full, (Py_ssize_t)off, (Py_ssize_t)(off + m->block_size));
	Py_DECREF(full);
	return view;
}

/*
 * The bytes of block @obj for store_blocks() and load_blocks() (@writable):
 * @obj's own buffer where it is contiguous and @bb bytes long, else that
 * of convert(obj) (KVStore's _source or _dest), which converts it or
 * raises as KVStore always has. On success, PyBuffer_Release() undoes it.
 */
static int block_buffer(PyObject *obj, PyObject *convert, Py_ssize_t bb, int writable,
			Py_buffer *view)
{
	int flags = PyBUF_SIMPLE | (writable ? PyBUF_WRITABLE : 0);
	PyObject *conv;
	int ret;

	if (PyObject_CheckBuffer(obj)) {
		if (!PyObject_GetBuffer(obj, view, flags)) {
			if (view->len == bb)
				return 0;
			PyBuffer_Release(view);
		} else {
			PyErr_Clear();	/* not contiguous, read-only: convert() says */
		}
	}
	conv = PyObject_CallOneArg(convert, obj);
	if (!conv)
		return -1;
	ret = PyObject_GetBuffer(conv, view, flags);
	Py_DECREF(conv);
	if (!ret && view->len != bb) {
		PyErr_Format(PyExc_ValueError,
			     "%s gave %zd bytes for a block of %zd",
			     writable ? "dest()" : "source()", view->len, bb);
		PyBuffer_Release(view);
		return -1;
	}
	return ret;
}

/* Release the first @n of block_buffers()' views, and the array. */
static void block_buffers_release(Py_buffer *views, size_t n)
{
	size_t i;

	for (i = 0; views && i < n; i++)
		PyBuffer_Release(&views[i]);
	PyMem_Free(views);
}

/*
 * block_buffer() of items @from .. @from + @n - 1 of sequence @seq, in
 * order: an array of @n views for block_buffers_release(), or NULL with
 * the first item's exception raised and nothing held.
 */
static Py_buffer *block_buffers(PyObject *seq, size_t from, size_t n, PyObject *convert,
				Py_ssize_t bb, int writable)
{
	Py_buffer *views = PyMem_Calloc(n ? n : 1, sizeof(*views));
	size_t i;

	if (!views)
		return (Py_buffer *)PyErr_NoMemory();
	for (i = 0; i < n; i++) {
		PyObject *obj = PySequence_GetItem(seq, (Py_ssize_t)(from + i));
		int ret = obj ? block_buffer(obj, convert, bb, writable, &views[i]) : -1;

		Py_XDECREF(obj);
		if (ret) {
			block_buffers_release(views, i);
			return NULL;
		}
	}
	return views;
}

/* @obj as store_blocks()'s or load_blocks()'s block_bytes: 0, or -1 raised. */
static int get_block_bytes(PoolMap *m, PyObject *obj, Py_ssize_t *bb)
{
	*bb = PyLong_AsSsize_t(obj);
	if (*bb == -1 && PyErr_Occurred())
		return -1;
	if (*bb <= 0 || (uint64_t)*bb > m->block_size) {
		PyErr_Format(PyExc_ValueError,
			     "block_bytes %zd is not in [1, %llu] (the pool's block size)",
			     *bb, (unsigned long long)m->block_size);
		return -1;
	}
	return 0;
}

/*
 * Are the @n blocks at @offs inside the mapping? Else block()'s error is
 * raised for the first that is not: the GIL was let go since the pool
 * gave them, and the mapping may have been closed meanwhile, or predate
 * a region attached since (Pool.map() grows it).
 */
static int blocks_mapped(PoolMap *m, const uint64_t *offs, size_t n)
{
	PyObject *off, *view;
	size_t i;

	if (poolmap_check(m))
		return 0;
	for (i = 0; i < n; i++)
		if (offs[i] >= m->length || m->length - offs[i] < m->block_size)
			break;
	if (i == n)
		return 1;
	off = PyLong_FromUnsignedLongLong(offs[i]);
	view = off ? PoolMap_block(m, off) : NULL;
	Py_XDECREF(off);
	Py_XDECREF(view);
	if (!PyErr_Occurred())
		PyErr_SetString(PyExc_ValueError, "a pool block outside the mapping");
	return 0;
}

/*
 * store_blocks(ns, keys, blocks, block_bytes, tally, source) -> (skipped,
 * allocated, exists, refused): KVStore.store()'s steps for keys as bytes
 * and blocks of one pool block each on the binding's own coherent pool,
 * in one call and in the same order: the count-only lookup of the
 * leading run present (counted into @tally as lookup_count() counts),
 * each block after it as a buffer (source(block) for those that are not
 * contiguous @block_bytes already; its errors propagate before anything
 * is allocated), ALLOC (halving on NoSpace, down to none), the copies
 * into this mapping, and PUBLISH. @refused is None where every block was
 * published (@exists of them lost a race to the same key), else
 * (offsets, results) for the caller's accounting, which frees the
 * refused blocks. A failing PUBLISH frees every block and raises as
 * publish() does. The Python steps this replaces cost ten times a 16 KiB
 * copy, and more with cold caches (bench/peers, RESULTS.md).
 */
static PyObject *PoolMap_store_blocks(PoolMap *m, PyObject *const *args, Py_ssize_t nargs)
{
	struct beluga_publish_summary sum = { 0, 0, 0 };
	PyObject *results = NULL, *ret_obj = NULL;
	Py_buffer tally = { 0 }, *srcs = NULL;
	size_t skip, todo = 0, want = 0, i, exists = 0, refused = 0;
	Pool *p = m->pool;
	uint64_t *offs = NULL, ns;
	struct keys_arg k;
	Py_ssize_t bb;
	int32_t *out;
	ssize_t hits;
	int ret = 0;

	if (nargs != 6 || !PyBytes_CheckExact(args[1])) {
		PyErr_SetString(PyExc_TypeError,
				"store_blocks(ns, keys, blocks, block_bytes, tally, source) takes 6 "
				"arguments, keys as bytes");
		return NULL;
	}
	if (get_ns(args[0], &ns) || get_block_bytes(m, args[3], &bb))
		return NULL;
	if (get_tally(args[4], &tally))
		return NULL;
	if (get_keys(args[1], &k, "keys"))
		goto out_tally;
	if (PySequence_Size(args[2]) != (Py_ssize_t)k.n) {
		if (!PyErr_Occurred())
			PyErr_Format(PyExc_ValueError, "store() got %zu keys but %zd blocks", k.n,
				     PySequence_Size(args[2]));
		goto out_keys;
	}
	if (poolmap_check(m) || pool_enter(p))
		goto out_keys;
	if (!lookup_count_quick(p, ns, &k, &hits))
		POOL_CALL(p, hits = lookup_count_run(p, ns, &k));
	pool_leave(p);
	if (hits < 0) {
		raise_beluga((int)hits);
		goto out_keys;
	}
	tally_add(&tally, k.n, (size_t)hits);
	skip = (size_t)hits;
	todo = k.n - skip;
	if (!todo)
		goto answer;
	srcs = block_buffers(args[2], skip, todo, args[5], bb, 0);
	if (!srcs)
		goto out;
	offs = PyMem_Malloc(todo * sizeof(*offs));
	if (!offs) {
		PyErr_NoMemory();
		goto out;
	}
	/* In flight from ALLOC to PUBLISH: close() waits, the mapping stays. */
	if (pool_enter(p))
		goto out;
	for (want = todo; want; want /= 2) {
		POOL_CALL(p, ret = beluga_alloc(p->b, offs, want));
		if (ret != -ENOSPC)
			break;
	}
	if (want && ret) {
		pool_leave(p);
		raise_beluga(ret);
		goto out;
	}
	if (!want) {
		pool_leave(p);
		goto answer;
	}
	if (!blocks_mapped(m, offs, want))
		goto free_blocks;
	/* With the GIL held, as the Python path's copies were: nothing remaps meanwhile. */
	for (i = 0; i < want; i++)
		memcpy(m->base + offs[i], srcs[i].buf, (size_t)bb);
	results = new_array(zero_i, (Py_ssize_t)want, (void **)&out);
	if (!results)
		goto free_blocks;
	ret = publish_run(p, ns, offs, k.keys + skip, want, out, &sum);
	if (ret) {
		if (ret != PUBLISH_PYERR) {
			publish_answer(results, &sum, ret);	/* raises */
			results = NULL;
		}
		goto free_blocks;
	}
	pool_leave(p);
	for (i = 0; i < want; i++) {
		exists += out[i] == BELUGA_PUBLISH_EXISTS;
		refused += out[i] < 0;
	}
answer:
	if (refused) {
		void *data;
		PyObject *offsets = new_array(zero_q, (Py_ssize_t)want, &data);

		if (!offsets)
			goto out;	/* published or refused: the pool's now, or the file's */
		memcpy(data, offs, want * sizeof(*offs));
		ret_obj = Py_BuildValue("(nnn(NO))", (Py_ssize_t)skip, (Py_ssize_t)want,
					(Py_ssize_t)exists, offsets, results);
	} else {
		ret_obj = Py_BuildValue("(nnnO)", (Py_ssize_t)skip, (Py_ssize_t)want,
					(Py_ssize_t)exists, Py_None);
	}
	goto out;
free_blocks:
	/* In flight still. As KVStore's path: the blocks go back, the error stands. */
	{
		PyObject *t, *v, *tb;

		PyErr_Fetch(&t, &v, &tb);
		POOL_CALL(p, beluga_free(p->b, offs, want));
		pool_leave(p);
		PyErr_Restore(t, v, tb);
	}
out:
	Py_XDECREF(results);
	block_buffers_release(srcs, todo);
	PyMem_Free(offs);
out_keys:
	keys_release(&k);
out_tally:
	PyBuffer_Release(&tally);
	return ret_obj;
}

/*
 * load_blocks(ns, keys, outs, block_bytes, dest) -> hits: KVStore.load()'s
 * steps for keys as bytes into one-pool-block destinations on the
 * binding's own coherent pool, in one call and in the same order: every
 * destination as a writable buffer (dest(out) for those that are not
 * contiguous @block_bytes already; its errors propagate before the
 * lookup), the pinned lookup of the leading run present, the copies out
 * of this mapping, and the RELEASE of the pins. Should the copies fail
 * after the lookup (a mapping older than a region attached since), the
 * pins are released and the exception carries the lookup's hits as
 * `lookup_hits`, so that the caller counts the lookup as it happened.
 */
static PyObject *PoolMap_load_blocks(PoolMap *m, PyObject *const *args, Py_ssize_t nargs)
{
	Py_buffer *dsts = NULL;
	PyObject *res = NULL;
	Pool *p = m->pool;
	size_t i;
	uint64_t *offs = NULL, ns;
	struct keys_arg k;
	Py_ssize_t bb;
	ssize_t hits;

	if (nargs != 5 || !PyBytes_CheckExact(args[1])) {
		PyErr_SetString(PyExc_TypeError,
				"load_blocks(ns, keys, outs, block_bytes, dest) takes 5 arguments, "
				"keys as bytes");
		return NULL;
	}
	if (get_ns(args[0], &ns) || get_block_bytes(m, args[3], &bb))
		return NULL;
	if (get_keys(args[1], &k, "keys"))
		return NULL;
	if (PySequence_Size(args[2]) != (Py_ssize_t)k.n) {
		if (!PyErr_Occurred())
			PyErr_Format(PyExc_ValueError,
				     "load() got %zu keys but %zd destination buffers", k.n,
				     PySequence_Size(args[2]));
		goto out;
	}
	if (!k.n) {
		res = PyLong_FromLong(0);
		goto out;
	}
	dsts = block_buffers(args[2], 0, k.n, args[4], bb, 1);
	if (!dsts)
		goto out;
	offs = PyMem_Malloc(k.n * sizeof(*offs));
	if (!offs) {
		PyErr_NoMemory();
		goto out;
	}
	if (poolmap_check(m) || pool_enter(p))
		goto out;
	POOL_CALL(p, hits = beluga_lookup(p->b, ns, k.keys, k.n, offs, BELUGA_LOOKUP_PIN));
	if (hits < 0) {
		pool_leave(p);
		raise_beluga((int)hits);
		goto out;
	}
	if (blocks_mapped(m, offs, (size_t)hits)) {
		/* With the GIL held, as the Python path's copies were. */
		for (i = 0; i < (size_t)hits; i++)
			memcpy(dsts[i].buf, m->base + offs[i], (size_t)bb);
		res = PyLong_FromSsize_t(hits);
	} else {
		PyObject *t, *v, *tb, *n;

		PyErr_Fetch(&t, &v, &tb);
		PyErr_NormalizeException(&t, &v, &tb);
		n = PyLong_FromSsize_t(hits);
		if (!v || !n || PyObject_SetAttrString(v, "lookup_hits", n))
			PyErr_Clear();
		Py_XDECREF(n);
		PyErr_Restore(t, v, tb);
	}
	if (hits) {
		int ret;

		POOL_CALL(p, ret = beluga_release(p->b, offs, (size_t)hits));
		if (ret && res) {
			Py_CLEAR(res);
			raise_beluga(ret);
		}
	}
	pool_leave(p);
out:
	block_buffers_release(dsts, k.n);
	PyMem_Free(offs);
	keys_release(&k);
	return res;
}

/*
 * CUDA (un)registration can take long: it runs without the GIL, counted as
 * an export (so close() and a remap refuse meanwhile) and one at a time.
 */
static PyObject *poolmap_cuda(PoolMap *m, int reg, unsigned int flags)
{
	int ret;

	if (poolmap_check(m))
		return NULL;
	if (m->cuda_busy) {
		PyErr_SetString(PyExc_BufferError,
				"beluga: another thread is (un)registering this mapping with "
				"CUDA: wait for it");
		return NULL;
	}
	if (pool_enter(m->pool))
		return NULL;
	m->cuda_busy = 1;
	m->exports++;
	Py_BEGIN_ALLOW_THREADS
	ret = reg ? beluga_cuda_register(m->pool->b, flags) :
		    beluga_cuda_unregister(m->pool->b);
	Py_END_ALLOW_THREADS
	m->exports--;
	m->cuda_busy = 0;
	pool_leave(m->pool);
	if (ret)
		return raise_beluga(ret);
	m->cuda_registered = reg;
	Py_RETURN_NONE;
}

static PyObject *PoolMap_cuda_register(PoolMap *m, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "flags", NULL };
	unsigned int flags = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "|I:cuda_register", kwlist, &flags))
		return NULL;
	return poolmap_cuda(m, 1, flags);
}

static PyObject *PoolMap_cuda_unregister(PoolMap *m, PyObject *Py_UNUSED(ignored))
{
	return poolmap_cuda(m, 0, 0);
}

static PyObject *PoolMap_enter_ctx(PoolMap *m, PyObject *Py_UNUSED(ignored))
{
	if (poolmap_check(m))
		return NULL;
	Py_INCREF(m);
	return (PyObject *)m;
}

static PyObject *PoolMap_exit_ctx(PoolMap *m, PyObject *Py_UNUSED(args))
{
	PyObject *r = PoolMap_close(m, NULL);

	if (!r)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_FALSE;
}

static PyObject *PoolMap_get_closed(PoolMap *m, void *Py_UNUSED(c))
{
	return PyBool_FromLong(m->closed || m->pool->state != POOL_OPEN);
}

static PyObject *PoolMap_get_address(PoolMap *m, void *Py_UNUSED(c))
{
	if (poolmap_check(m))
		return NULL;
	return PyLong_FromVoidPtr(m->base);
}

static PyObject *PoolMap_get_cuda_registered(PoolMap *m, void *Py_UNUSED(c))
{
	return PyBool_FromLong(m->cuda_registered);
}

static PyObject *PoolMap_get_block_size(PoolMap *m, void *Py_UNUSED(c))
{
	return PyLong_FromUnsignedLongLong(m->block_size);
}

static PyObject *PoolMap_get_pool(PoolMap *m, void *Py_UNUSED(c))
{
	Py_INCREF(m->pool);
	return (PyObject *)m->pool;
}

static PyObject *PoolMap_get_exports(PoolMap *m, void *Py_UNUSED(c))
{
	return PyLong_FromSsize_t(m->exports);
}

static PyObject *PoolMap_repr(PoolMap *m)
{
	if (m->closed)
		return PyUnicode_FromString("<beluga.PoolMap closed>");
	return PyUnicode_FromFormat("<beluga.PoolMap %zu bytes at %p, %zd exports>",
				    m->length, m->base, m->exports);
}

static PyMethodDef PoolMap_methods[] = {
	{ "close", (PyCFunction)PoolMap_close, METH_NOARGS,
	  "close(): unmap. BufferError while views are exported." },
	{ "block", (PyCFunction)PoolMap_block, METH_O,
	  "block(offset) -> memoryview of the one block at pool offset @offset." },
	{ "store_blocks", (PyCFunction)(void (*)(void))PoolMap_store_blocks, METH_FASTCALL,
	  "store_blocks(ns, keys, blocks, block_bytes, tally, source) -> (skipped, allocated, "
	  "exists, refused): KVStore.store()'s lookup, ALLOC, copies and PUBLISH in one call "
	  "(refused: None, or (offsets, results) when PUBLISH refused some)." },
	{ "load_blocks", (PyCFunction)(void (*)(void))PoolMap_load_blocks, METH_FASTCALL,
	  "load_blocks(ns, keys, outs, block_bytes, dest) -> hits: KVStore.load()'s pinned "
	  "lookup, copies and RELEASE in one call." },
	{ "cuda_register", (PyCFunction)(void (*)(void))PoolMap_cuda_register,
	  METH_VARARGS | METH_KEYWORDS,
	  "cuda_register(flags=0): cudaHostRegister the mapping (beluga.NoCuda without CUDA)." },
	{ "cuda_unregister", (PyCFunction)PoolMap_cuda_unregister, METH_NOARGS,
	  "cuda_unregister(): undo cuda_register()." },
	{ "__enter__", (PyCFunction)PoolMap_enter_ctx, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)PoolMap_exit_ctx, METH_VARARGS, NULL },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef PoolMap_getset[] = {
	{ "closed", (getter)PoolMap_get_closed, NULL, "True once unmapped", NULL },
	{ "address", (getter)PoolMap_get_address, NULL,
	  "the mapping's base address, for GPU copies and other C code: hold a memoryview "
	  "of the map while the address is in use (an export keeps it mapped in place)",
	  NULL },
	{ "cuda_registered", (getter)PoolMap_get_cuda_registered, NULL,
	  "registered with cuda_register()", NULL },
	{ "block_size", (getter)PoolMap_get_block_size, NULL, "bytes per block", NULL },
	{ "pool", (getter)PoolMap_get_pool, NULL, "the Pool this maps", NULL },
	{ "exports", (getter)PoolMap_get_exports, NULL, "views now exported", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PySequenceMethods PoolMap_as_sequence = {
	.sq_length = (lenfunc)PoolMap_len,
};

static PyTypeObject PoolMapType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "beluga.PoolMap",
	.tp_basicsize = sizeof(PoolMap),
	.tp_dealloc = (destructor)PoolMap_dealloc,
	.tp_repr = (reprfunc)PoolMap_repr,
	.tp_as_sequence = &PoolMap_as_sequence,
	.tp_as_buffer = &PoolMap_as_buffer,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "The mapping of a Pool (Pool.map()): a 1-D buffer of bytes over every "
		  "block, read-only for a read-only pool.",
	.tp_methods = PoolMap_methods,
	.tp_getset = PoolMap_getset,
};

/* ---- Device leases of a shared pool ---------------------------------------- */

/*
 * device_range(offset=0, length=None): declare a device range
 * (beluga_device_range(3)); on a shared pool with an eventfd made here,
 * which the pool owns.
 */
static PyObject *Pool_device_range(Pool *p, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "offset", "length", NULL };
	unsigned long long offset = 0, length = 0;
	PyObject *length_obj = Py_None;
	struct beluga_info info;
	uint32_t fence_ms = 0;
	int nr_hosts, efd = -1, ret;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "|KO:device_range", kwlist, &offset,
					 &length_obj))
		return NULL;
	if (length_obj != Py_None) {
		length = PyLong_AsUnsignedLongLong(length_obj);
		if (PyErr_Occurred())
			return NULL;
	}
	if (pool_enter(p))
		return NULL;
	ret = 0;
	if (length_obj == Py_None) {
		POOL_CALL(p, ret = beluga_info(p->b, &info));
		length = !ret && info.map_size > offset ? info.map_size - offset : 0;
	}
	nr_hosts = 0;
	if (!ret)
		POOL_CALL(p, nr_hosts = beluga_hosts(p->b, NULL, 0));
	if (!ret && nr_hosts < 0)
		ret = nr_hosts;
	/* A shared pool signals the fence; another never does. */
	if (!ret && nr_hosts > 0) {
		efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (efd < 0) {
			pool_leave(p);
			return PyErr_SetFromErrno(PyExc_OSError);
		}
	}
	if (!ret)
		POOL_CALL(p, ret = beluga_device_range(p->b, offset, length, efd, &fence_ms));
	pool_leave(p);
	if (ret) {
		if (efd >= 0)
			close(efd);
		return raise_beluga(ret);
	}
	p->range_efd = efd;
	if (efd < 0)
		return Py_BuildValue("(IO)", fence_ms, Py_None);
	return Py_BuildValue("(Ii)", fence_ms, efd);
}

/* device_fenced(): whether the device range's eventfd was signalled (sticky). */
static PyObject *Pool_device_fenced(Pool *p, PyObject *Py_UNUSED(ignored))
{
	uint64_t count;
	int efd;

	ssize_t n;

	if (p->fenced)
		Py_RETURN_TRUE;
	if (pool_enter(p))
		return NULL;
	efd = beluga_device_eventfd(p->b);
	/* Non-blocking: EAGAIN until the signal. */
	n = efd < 0 ? 0 : read(efd, &count, sizeof(count));
	if (n == (ssize_t)sizeof(count))
		p->fenced = 1;
	else if (n < 0 && errno != EAGAIN) {
		pool_leave(p);
		return PyErr_SetFromErrno(PyExc_OSError);
	}
	pool_leave(p);
	return PyBool_FromLong(p->fenced);
}

static PyObject *Pool_get_device_eventfd(Pool *p, void *Py_UNUSED(c))
{
	int efd;

	if (p->state != POOL_OPEN)
		Py_RETURN_NONE;
	efd = beluga_device_eventfd(p->b);
	if (efd < 0)
		Py_RETURN_NONE;
	return PyLong_FromLong(efd);
}

static PyObject *Pool_get_device_fence_ms(Pool *p, void *Py_UNUSED(c))
{
	if (p->state != POOL_OPEN)
		return PyLong_FromLong(0);
	return PyLong_FromUnsignedLong(beluga_device_fence_ms(p->b));
}

/* ---- Pool properties and type --------------------------------------------- */

static PyObject *Pool_get_fd(Pool *p, void *Py_UNUSED(c))
{
	if (p->state != POOL_OPEN)
		return closed_error();
	return PyLong_FromLong(beluga_fd(p->b));
}

static PyObject *Pool_get_writable(Pool *p, void *Py_UNUSED(c))
{
	return PyBool_FromLong(p->writable);
}

static PyObject *Pool_get_closed(Pool *p, void *Py_UNUSED(c))
{
	return PyBool_FromLong(p->state != POOL_OPEN);
}

static PyObject *Pool_get_path(Pool *p, void *Py_UNUSED(c))
{
	Py_INCREF(p->path);
	return p->path;
}

static PyObject *Pool_get_block_size(Pool *p, void *Py_UNUSED(c))
{
	struct beluga_info info;

	if (pool_info(p, &info))
		return NULL;
	return PyLong_FromUnsignedLongLong(info.block_size);
}

static PyObject *Pool_get_map_size(Pool *p, void *Py_UNUSED(c))
{
	struct beluga_info info;

	if (pool_info(p, &info))
		return NULL;
	return PyLong_FromUnsignedLongLong(info.map_size);
}

static PyMethodDef Pool_methods[] = {
	{ "close", (PyCFunction)Pool_close, METH_NOARGS,
	  "close(): unmap and close; waits for calls in flight. BufferError while views of "
	  "the mapping are exported. Allocations and pins of this pool are returned." },
	{ "info", (PyCFunction)Pool_info, METH_NOARGS,
	  "info() -> dict of struct beluga_info, and 'shared': whether the pool is shared "
	  "between hosts" },
	{ "stats", (PyCFunction)Pool_stats, METH_NOARGS,
	  "stats() -> dict of struct beluga_stats" },
	{ "region_info", (PyCFunction)Pool_region_info, METH_O,
	  "region_info(region_id) -> dict of struct beluga_region_info" },
	{ "alloc", (PyCFunction)Pool_alloc, METH_O,
	  "alloc(n) -> array('Q') of n block offsets; all or nothing (beluga.NoSpace)" },
	{ "alloc_evicting", (PyCFunction)Pool_alloc_evicting, METH_O,
	  "alloc_evicting(n) -> (offsets, evicted): alloc(n), and the [(ns, key: bytes of 16)] "
	  "of the published blocks it evicted to make room, least recently used first. "
	  "beluga.Error (errno EOPNOTSUPP) from a module that predates the report" },
	{ "free", (PyCFunction)Pool_free, METH_O,
	  "free(offsets): return allocated, unpublished blocks" },
	{ "release", (PyCFunction)Pool_release, METH_O,
	  "release(offsets): drop one pin per listed offset" },
	{ "publish", (PyCFunction)(void (*)(void))Pool_publish, METH_FASTCALL,
	  "publish(ns, offsets, keys) -> PublishResult; lost races are results, not errors" },
	{ "lookup", (PyCFunction)(void (*)(void))Pool_lookup, METH_FASTCALL | METH_KEYWORDS,
	  "lookup(ns, keys, pin=False) -> (hits, offsets): the leading run of keys present; "
	  "offsets is None, or with pin=True an array('Q') of the hits' pinned blocks" },
	{ "lookup_many", (PyCFunction)(void (*)(void))Pool_lookup_many,
	  METH_VARARGS | METH_KEYWORDS,
	  "lookup_many(ns, requests, pin=False) -> [lookup(ns, keys, pin) for keys in requests]: "
	  "count-only, as lookup_count() does (no system call on the mapped index); with pin, or "
	  "where the index cannot be mapped (index_error), through io_uring (64 requests per "
	  "system call) where the module and kernel have it (ring_error says why not); a failed "
	  "request raises and releases the others' pins" },
	{ "lookup_count", (PyCFunction)(void (*)(void))Pool_lookup_count, METH_FASTCALL,
	  "lookup_count(ns, keys[, tally]) -> hits: lookup(ns, keys)[0] (count-only: no pins, "
	  "no LRU refresh), answered in this process from a read-only mapping of the pool's "
	  "index, with no system call; what it cannot be sure of it asks the kernel, and "
	  "where the index cannot be mapped (index_error says why) it always does. The "
	  "mapping shows every key of the pool to this process (beluga_lookup_count(3)). "
	  "tally: an array('Q') of 3 (or more) items to which a call with keys adds 1, its "
	  "hits and its misses, with the GIL held (a caller's statistics without a lock)" },
	{ "lookup_pinned", (PyCFunction)(void (*)(void))Pool_lookup_pinned, METH_FASTCALL,
	  "lookup_pinned(ns, keys, tally) -> (hits, offsets): lookup(ns, keys, pin=True) for "
	  "keys as bytes, counted into tally (an array('Q') of 3 or more) as lookup_count "
	  "counts: calls, hits, misses" },
	{ "lookup_count_or", (PyCFunction)(void (*)(void))Pool_lookup_count_or, METH_FASTCALL,
	  "lookup_count_or(ns, tally, general, keys) -> lookup_count(ns, keys, tally) for keys "
	  "as bytes that it answers, else general(keys) (other keys, or what lookup_count "
	  "refuses with ValueError): for functools.partial(pool.lookup_count_or, ns, tally, "
	  "general), a callable of the keys with no Python frame (KVStore.lookup)" },
	{ "attach_dax", (PyCFunction)(void (*)(void))Pool_attach_dax, METH_VARARGS | METH_KEYWORDS,
	  "attach_dax(dax, block_size=0, shared=False, host_id=-1, format=False) -> dict" },
	{ "attach_node", (PyCFunction)(void (*)(void))Pool_attach_node,
	  METH_VARARGS | METH_KEYWORDS, "attach_node(node, size, block_size=0) -> dict" },
	{ "detach", (PyCFunction)(void (*)(void))Pool_detach, METH_VARARGS | METH_KEYWORDS,
	  "detach(region_id, evict=False) -> blocks evicted" },
	{ "evict_key", (PyCFunction)(void (*)(void))Pool_evict_key, METH_FASTCALL,
	  "evict_key(ns, key): evict one published key" },
	{ "evict_ns", (PyCFunction)Pool_evict_ns, METH_O,
	  "evict_ns(ns) -> (evicted, busy)" },
	{ "map", (PyCFunction)Pool_map, METH_NOARGS,
	  "map() -> PoolMap: the pool's mapping (one per pool; grown after attach when no "
	  "view is exported)" },
	{ "device_range", (PyCFunction)(void (*)(void))Pool_device_range,
	  METH_VARARGS | METH_KEYWORDS,
	  "device_range(offset=0, length=None) -> (fence_ms, eventfd or None): declare that "
	  "devices will pin bytes offset..offset+length (None: to the end of the mapping) "
	  "before they do; one per pool. On a shared pool mappings made afterwards take pins, "
	  "fence_ms is W and eventfd (owned by the pool, closed with it) becomes readable when "
	  "the host fenced: unregister, unmap and close within W. Elsewhere (0, None). "
	  "PoolMap.cuda_register() does this itself. beluga.Error ENOLINK: no "
	  "beluga-watchdogd runs (beluga_device_range(3))" },
	{ "device_fenced", (PyCFunction)Pool_device_fenced, METH_NOARGS,
	  "device_fenced() -> True once the device range's eventfd was signalled: the host "
	  "fenced itself; let go within device_fence_ms (does not block)" },
	{ "__enter__", (PyCFunction)Pool_enter_ctx, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)Pool_exit_ctx, METH_VARARGS, NULL },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef Pool_getset[] = {
	{ "fd", (getter)Pool_get_fd, NULL, "the file descriptor", NULL },
	{ "writable", (getter)Pool_get_writable, NULL, "opened read-write", NULL },
	{ "closed", (getter)Pool_get_closed, NULL, "True once close() began", NULL },
	{ "path", (getter)Pool_get_path, NULL, "the device path", NULL },
	{ "block_size", (getter)Pool_get_block_size, NULL,
	  "bytes per block (0 while no region is attached)", NULL },
	{ "map_size", (getter)Pool_get_map_size, NULL, "bytes of offset space", NULL },
	{ "ring_error", (getter)Pool_get_ring_error, NULL,
	  "None, or why lookup_many() makes plain calls (no io_uring commands here)", NULL },
	{ "device_eventfd", (getter)Pool_get_device_eventfd, NULL,
	  "None, or the eventfd of the pool's device range (cuda_register()'s or "
	  "device_range()'s): readable once the host fenced", NULL },
	{ "device_fence_ms", (getter)Pool_get_device_fence_ms, NULL,
	  "W of the device range: the milliseconds the devices have to let go after the "
	  "fence; 0 without a range or on a pool that is not shared", NULL },
	{ "index_error", (getter)Pool_get_index_error, NULL,
	  "None, or why lookup_count() asks the kernel every time (the index cannot be "
	  "mapped here)", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject PoolType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "beluga.Pool",
	.tp_basicsize = sizeof(Pool),
	.tp_dealloc = (destructor)Pool_dealloc,
	.tp_repr = (reprfunc)Pool_repr,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Pool(path=None, writable=True): an open Beluga device "
		  "(path None: $BELUGA_DEVICE or /dev/beluga).",
	.tp_methods = Pool_methods,
	.tp_getset = Pool_getset,
	.tp_new = Pool_new,
};

/* ---- Module functions ------------------------------------------------------ */

static PyObject *cache_op(PyObject *arg, int (*op)(const void *, size_t), const char *what)
{
	Py_buffer view;
	int ret;

	if (get_contiguous(arg, &view, 0, what))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	ret = op(view.buf, (size_t)view.len);
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&view);
	if (ret)
		return raise_errno_msg(ret, NULL);
	Py_RETURN_NONE;
}

static PyObject *mod_flush_range(PyObject *Py_UNUSED(m), PyObject *arg)
{
	return cache_op(arg, beluga_flush_range, "flush_range(buf)");
}

static PyObject *mod_invalidate_range(PyObject *Py_UNUSED(m), PyObject *arg)
{
	return cache_op(arg, beluga_invalidate_range, "invalidate_range(buf)");
}

static void key_to_bytes(const struct beluga_key *k, unsigned char *out)
{
	int i;

	for (i = 0; i < 8; i++) {
		out[i] = (unsigned char)(k->lo >> (8 * i));
		out[8 + i] = (unsigned char)(k->hi >> (8 * i));
	}
}

static void bytes_to_key(const unsigned char *in, struct beluga_key *k)
{
	int i;

	k->lo = k->hi = 0;
	for (i = 0; i < 8; i++) {
		k->lo |= (uint64_t)in[i] << (8 * i);
		k->hi |= (uint64_t)in[8 + i] << (8 * i);
	}
}

static PyObject *mod_fnv1a_128(PyObject *Py_UNUSED(m), PyObject *arg)
{
	unsigned char out[16];
	struct beluga_key k;
	Py_buffer view;

	if (get_contiguous(arg, &view, 0, "data"))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	beluga_fnv1a_128(view.buf, (size_t)view.len, &k);
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&view);
	key_to_bytes(&k, out);
	return PyBytes_FromStringAndSize((const char *)out, 16);
}

/* @obj: None or one 16-byte key; *has says which. */
static int get_parent(PyObject *obj, struct beluga_key *parent, int *has)
{
	Py_buffer view;

	*has = 0;
	if (obj == Py_None)
		return 0;
	if (get_contiguous(obj, &view, 0, "parent"))
		return -1;
	if (view.len != 16) {
		PyErr_Format(PyExc_ValueError,
			     "parent must be one 16-byte key (or None), got %zd bytes", view.len);
		PyBuffer_Release(&view);
		return -1;
	}
	bytes_to_key(view.buf, parent);
	PyBuffer_Release(&view);
	*has = 1;
	return 0;
}

static PyObject *mod_hash_block(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	struct beluga_key parent, out;
	unsigned char bytes[16];
	struct uint_arg t;
	int has;

	if (nargs != 2) {
		PyErr_SetString(PyExc_TypeError, "hash_block(parent, tokens) takes 2 arguments");
		return NULL;
	}
	if (get_parent(args[0], &parent, &has) ||
	    get_uints(args[1], &t, 4, "tokens", "uint32"))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	beluga_hash_block(has ? &parent : NULL, t.data, t.n, &out);
	Py_END_ALLOW_THREADS
	uint_arg_release(&t);
	key_to_bytes(&out, bytes);
	return PyBytes_FromStringAndSize((const char *)bytes, 16);
}

/*
 * hash_chain(tokens, block_tokens, parent=None, out=None): the keys of the
 * full blocks as bytes, or written into @out (a writable, C-contiguous key
 * buffer: as many keys as fit), returning the number written.
 */
static PyObject *mod_hash_chain(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "tokens", "block_tokens", "parent", "out", NULL };
	PyObject *tokens, *parent_obj = Py_None, *out_obj = Py_None, *ret = NULL;
	struct beluga_key parent, *keys = NULL;
	Py_buffer out = { .obj = NULL };
	unsigned char *dst;
	Py_ssize_t block_tokens;
	struct uint_arg t;
	size_t nkeys, i;
	ssize_t got;
	int has;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "On|OO:hash_chain", kwlist, &tokens,
					 &block_tokens, &parent_obj, &out_obj))
		return NULL;
	if (block_tokens < 1) {
		PyErr_Format(PyExc_ValueError, "hash_chain: block_tokens must be >= 1, got %zd",
			     block_tokens);
		return NULL;
	}
	if (get_parent(parent_obj, &parent, &has))
		return NULL;
	if (out_obj != Py_None) {
		if (get_contiguous(out_obj, &out, 1, "out"))
			return NULL;
		if (!key_format_ok(&out) || out.len % 16) {
			PyErr_Format(PyExc_TypeError,
				     "out must be a writable buffer of 16-byte keys (bytearray of "
				     "16n bytes, numpy uint8/uint64 or [('lo','<u8'),('hi','<u8')]); "
				     "got format '%s', %zd bytes",
				     out.format ? out.format : "B", out.len);
			PyBuffer_Release(&out);
			return NULL;
		}
	}
	if (get_uints(tokens, &t, 4, "tokens", "uint32"))
		goto done;
	nkeys = t.n / (size_t)block_tokens;
	if (out.obj && nkeys > (size_t)out.len / 16)
		nkeys = (size_t)out.len / 16;
	keys = PyMem_Malloc(nkeys * sizeof(*keys) + 1);
	if (!keys) {
		PyErr_NoMemory();
		goto done_tokens;
	}
	Py_BEGIN_ALLOW_THREADS
	got = beluga_hash_chain(has ? &parent : NULL, t.data, t.n, (size_t)block_tokens, keys,
				nkeys);
	Py_END_ALLOW_THREADS
	if (got < 0) {
		raise_beluga((int)got);
		goto done_tokens;
	}
	if (out.obj) {
		dst = out.buf;
		ret = PyLong_FromSsize_t(got);
	} else {
		ret = PyBytes_FromStringAndSize(NULL, got * 16);
		dst = ret ? (unsigned char *)PyBytes_AS_STRING(ret) : NULL;
	}
	/* Byte by byte: @out need not be aligned, and keys are little-endian. */
	for (i = 0; dst && i < (size_t)got; i++)
		key_to_bytes(&keys[i], dst + 16 * i);
done_tokens:
	uint_arg_release(&t);
done:
	PyMem_Free(keys);
	if (out.obj)
		PyBuffer_Release(&out);
	return ret;
}

static PyObject *mod_strerror(PyObject *Py_UNUSED(m), PyObject *arg)
{
	long err = PyLong_AsLong(arg);

	if (err == -1 && PyErr_Occurred())
		return NULL;
	return PyUnicode_FromString(beluga_strerror((int)err));
}

#ifdef BELUGA_PY_FAKE
/*
 * The fake kernel keeps plain global state; calls from threads that run
 * without the GIL are serialized here, as the real module's locks would.
 */
static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static int (*fake_inner)(int fd, unsigned long request, void *arg);
/* _fake_delay(): every ioctl first sleeps this long, outside the lock. */
static volatile long fake_delay_us;
/* _fake_shared(watchdog_ms=): the watchdog daemon's file, or -1. */
static int fake_watchdog_fd = -1;

static int fake_locked_ioctl(int fd, unsigned long request, void *arg)
{
	long delay = fake_delay_us;
	int ret, saved;

	if (delay > 0) {
		struct timespec ts = { delay / 1000000, (delay % 1000000) * 1000 };

		nanosleep(&ts, NULL);
	}
	pthread_mutex_lock(&fake_lock);
	ret = fake_inner(fd, request, arg);
	saved = errno;
	pthread_mutex_unlock(&fake_lock);
	errno = saved;
	return ret;
}

static void fake_wrap(void)
{
	if (bel_ioctl != fake_locked_ioctl) {
		fake_inner = bel_ioctl;
		bel_ioctl = fake_locked_ioctl;
	}
}

static int fake_add_regions(const char *spec)
{
	uint64_t dax_phys = 0x390000000ULL;
	char list[512], *tok, *save;

	if (strlen(spec) >= sizeof(list)) {
		PyErr_SetString(PyExc_ValueError, "_fake_reset: regions spec too long");
		return -1;
	}
	snprintf(list, sizeof(list), "%s", spec);
	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(tok, ':'), *end;
		uint64_t len;
		int ret;

		if (!colon) {
			PyErr_Format(PyExc_ValueError, "_fake_reset: region '%s' is not NAME:SIZE",
				     tok);
			return -1;
		}
		*colon = '\0';
		len = strtoull(colon + 1, &end, 10);
		switch (*end) {
		case 'K': len <<= 10; break;
		case 'M': len <<= 20; break;
		case 'G': len <<= 30; break;
		}
		if (!strncmp(tok, "node", 4)) {
			ret = fake_kernel_add_region(tok, BELUGA_BACKEND_NODE, atoi(tok + 4), 0, len);
		} else {
			ret = fake_kernel_add_region(tok, BELUGA_BACKEND_DAX, -1, dax_phys, len);
			dax_phys += len;
		}
		if (ret < 0) {
			PyErr_Format(PyExc_ValueError, "_fake_reset: region %s: %s", tok,
				     strerror(-ret));
			return -1;
		}
	}
	return 0;
}

static PyObject *mod_fake_reset(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "block_size", "regions", "max_batch", "abi_version",
				  "alloc_evicted", NULL };
	uint64_t block_size = 65536;
	uint32_t max_batch = BELUGA_MAX_BATCH, abi = BELUGA_ABI_VERSION;
	const char *regions = "dax0.0:16M";
	int alloc_evicted = 1, ret;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O&sO&O&p:_fake_reset", kwlist,
					 conv_u64, &block_size, &regions, conv_u32, &max_batch,
					 conv_u32, &abi, &alloc_evicted))
		return NULL;
	pthread_mutex_lock(&fake_lock);
	fake_delay_us = 0;
	if (fake_watchdog_fd >= 0)
		close(fake_watchdog_fd);
	fake_watchdog_fd = -1;
	fake_kernel_reset(block_size, max_batch);
	fake.abi_version = abi;
	fake.alloc_v1 = !alloc_evicted;
	fake_wrap();
	ret = fake_add_regions(regions);
	pthread_mutex_unlock(&fake_lock);
	if (ret)
		return NULL;
	Py_RETURN_NONE;
}

static const char *const fake_cmd_names[] = {
	[BELUGA_CMD_INFO] = "info", [BELUGA_CMD_STATS] = "stats",
	[BELUGA_CMD_ALLOC] = "alloc", [BELUGA_CMD_FREE] = "free",
	[BELUGA_CMD_PUBLISH] = "publish", [BELUGA_CMD_LOOKUP] = "lookup",
	[BELUGA_CMD_RELEASE] = "release", [BELUGA_CMD_ATTACH] = "attach",
	[BELUGA_CMD_DETACH] = "detach", [BELUGA_CMD_EVICT] = "evict",
	[BELUGA_CMD_REGION_INFO] = "region_info",
};

static PyObject *mod_fake_calls(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored))
{
	PyObject *d = PyDict_New();
	unsigned int cmd;

	if (!d)
		return NULL;
	pthread_mutex_lock(&fake_lock);
	for (cmd = 0; cmd <= BELUGA_CMD_REGION_INFO; cmd++) {
		PyObject *v = PyLong_FromUnsignedLong(fake_kernel_calls(cmd));

		if (!v || PyDict_SetItemString(d, fake_cmd_names[cmd], v)) {
			Py_XDECREF(v);
			Py_CLEAR(d);
			break;
		}
		Py_DECREF(v);
	}
	pthread_mutex_unlock(&fake_lock);
	return d;
}

/* _fake_delay(seconds): make every later ioctl take that long (0 stops it). */
static PyObject *mod_fake_delay(PyObject *Py_UNUSED(m), PyObject *arg)
{
	double s = PyFloat_AsDouble(arg);

	if (s == -1.0 && PyErr_Occurred())
		return NULL;
	if (s < 0 || s > 60) {
		PyErr_SetString(PyExc_ValueError, "_fake_delay: seconds must be in [0, 60]");
		return NULL;
	}
	fake_delay_us = (long)(s * 1e6);
	Py_RETURN_NONE;
}

/* _fake_fail(cmd, nth, errno): the nth call (1-based, since reset) of cmd fails. */
static PyObject *mod_fake_fail(PyObject *Py_UNUSED(m), PyObject *args)
{
	unsigned int nth, cmd;
	const char *name;
	int err;

	if (!PyArg_ParseTuple(args, "sIi:_fake_fail", &name, &nth, &err))
		return NULL;
	for (cmd = 0; cmd <= BELUGA_CMD_REGION_INFO; cmd++)
		if (!strcmp(name, fake_cmd_names[cmd]))
			break;
	if (cmd > BELUGA_CMD_REGION_INFO) {
		PyErr_Format(PyExc_ValueError, "_fake_fail: unknown command '%s'", name);
		return NULL;
	}
	pthread_mutex_lock(&fake_lock);
	fake.fail_cmd = (int)cmd;
	fake.fail_nth = fake_kernel_calls(cmd) + nth;
	fake.fail_errno = err;
	pthread_mutex_unlock(&fake_lock);
	Py_RETURN_NONE;
}

/*
 * _fake_shared(peer='aware', allow_gup_ms=0, watchdog_ms=0): make the fake
 * pool shared: this host (id 1) and a peer (id 0), alive and honouring
 * device leases ('aware'), ignoring them ('old'), or dead ('dead');
 * allow_gup_ms: as mh_allow_gup=1 with that W; watchdog_ms: a watchdog
 * daemon registered with that W (a file the fake keeps open).
 */
static PyObject *mod_fake_shared(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "peer", "allow_gup_ms", "watchdog_ms", NULL };
	const char *peer = "aware";
	unsigned int gup_ms = 0, wd_ms = 0;
	struct beluga_watchdog w;
	int ret = 0, fd;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "|sII:_fake_shared", kwlist, &peer, &gup_ms,
					 &wd_ms))
		return NULL;
	if (strcmp(peer, "aware") && strcmp(peer, "old") && strcmp(peer, "dead")) {
		PyErr_SetString(PyExc_ValueError, "_fake_shared: peer is 'aware', 'old' or 'dead'");
		return NULL;
	}
	pthread_mutex_lock(&fake_lock);
	memset(fake.hosts, 0, sizeof(fake.hosts));
	fake.nr_hosts = 2;
	fake.hosts[0].host_id = 0;
	fake.hosts[0].state = BELUGA_HOST_ACTIVE;
	fake.hosts[0].flags = (strcmp(peer, "dead") ? BELUGA_HOST_ALIVE : 0) |
			      (strcmp(peer, "old") ? BELUGA_HOST_LEASE_AWARE : 0);
	snprintf(fake.hosts[0].name, sizeof(fake.hosts[0].name), "peer");
	fake.hosts[1].host_id = 1;
	fake.hosts[1].state = BELUGA_HOST_ACTIVE;
	fake.hosts[1].flags = BELUGA_HOST_ALIVE | BELUGA_HOST_SELF | BELUGA_HOST_LEASE_AWARE;
	snprintf(fake.hosts[1].name, sizeof(fake.hosts[1].name), "self");
	fake.allow_gup_fence_ms = gup_ms;
	if (fake_watchdog_fd >= 0)
		close(fake_watchdog_fd);
	fake_watchdog_fd = -1;
	if (wd_ms) {
		/* The daemon's file: a second open of the device file the pools use. */
		const char *dev = getenv("BELUGA_DEVICE");

		fd = dev ? open(dev, O_RDONLY | O_CLOEXEC) : -1;
		w = (struct beluga_watchdog){ .size = sizeof(w), .flags = BELUGA_WATCHDOG_REGISTER,
					      .timeout_ms = wd_ms };
		errno = 0;
		if (fd < 0 || !fake_inner || fake_inner(fd, BELUGA_IOC_WATCHDOG, &w))
			ret = errno ? errno : EINVAL;
		else
			fake_watchdog_fd = fd;
		if (ret && fd >= 0)
			close(fd);
	}
	pthread_mutex_unlock(&fake_lock);
	if (ret)
		return PyErr_Format(PyExc_OSError, "_fake_shared: cannot register the watchdog "
				    "on $BELUGA_DEVICE: %s", strerror(ret));
	Py_RETURN_NONE;
}

/* _fake_fence() -> eventfds signalled; _fake_unfence(): the host holds its lease again. */
static PyObject *mod_fake_fence(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored))
{
	int n;

	pthread_mutex_lock(&fake_lock);
	n = fake_kernel_fence();
	pthread_mutex_unlock(&fake_lock);
	return PyLong_FromLong(n);
}

static PyObject *mod_fake_unfence(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored))
{
	pthread_mutex_lock(&fake_lock);
	fake_kernel_unfence();
	pthread_mutex_unlock(&fake_lock);
	Py_RETURN_NONE;
}

/* _fake_device() -> dict: the ranges declared, the last mapping and whether pins take it. */
static PyObject *mod_fake_device(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored))
{
	PyObject *d;

	pthread_mutex_lock(&fake_lock);
	d = Py_BuildValue("{sIsIsKsKsO}", "device_ranges", fake_kernel_device_ranges(),
			  "pool_maps", fake.pool_maps,
			  "last_map", (unsigned long long)(uintptr_t)fake.last_map,
			  "last_map_length", (unsigned long long)fake.last_map_length,
			  "last_map_pinnable", fake.last_map_pinnable ? Py_True : Py_False);
	pthread_mutex_unlock(&fake_lock);
	return d;
}
#endif /* BELUGA_PY_FAKE */

static PyMethodDef module_methods[] = {
	{ "flush_range", mod_flush_range, METH_O,
	  "flush_range(buf): write back and invalidate the CPU cache lines of buf "
	  "(a writer, before PUBLISH on a shared pool)" },
	{ "invalidate_range", mod_invalidate_range, METH_O,
	  "invalidate_range(buf): drop the CPU cache lines of buf (a reader, before "
	  "reading a block of a shared pool)" },
	{ "fnv1a_128", mod_fnv1a_128, METH_O, "fnv1a_128(data) -> bytes(16), key {lo, hi} LE" },
	{ "hash_block", (PyCFunction)(void (*)(void))mod_hash_block, METH_FASTCALL,
	  "hash_block(parent, tokens) -> bytes(16); parent None or a 16-byte key" },
	{ "hash_chain", (PyCFunction)(void (*)(void))mod_hash_chain, METH_VARARGS | METH_KEYWORDS,
	  "hash_chain(tokens, block_tokens, parent=None, out=None) -> bytes(16 * full blocks); "
	  "with out (a writable key buffer), fills it and returns the keys written" },
	{ "strerror", mod_strerror, METH_O,
	  "strerror(errno) -> what the error means in Beluga" },
#ifdef BELUGA_PY_FAKE
	{ "_fake_reset", (PyCFunction)(void (*)(void))mod_fake_reset, METH_VARARGS | METH_KEYWORDS,
	  "_fake_reset(block_size=65536, regions='dax0.0:16M', max_batch=4096, abi_version=ABI_VERSION, "
	  "alloc_evicted=True): a fresh fake pool (alloc_evicted=False: a module that predates "
	  "ALLOC's evicted report): test only" },
	{ "_fake_calls", mod_fake_calls, METH_NOARGS,
	  "_fake_calls() -> {command: ioctls since reset}: test only" },
	{ "_fake_delay", mod_fake_delay, METH_O,
	  "_fake_delay(seconds): every later ioctl sleeps first, without the GIL: test only" },
	{ "_fake_fail", mod_fake_fail, METH_VARARGS,
	  "_fake_fail(cmd, nth, errno): the nth next call of cmd fails: test only" },
	{ "_fake_shared", (PyCFunction)(void (*)(void))mod_fake_shared, METH_VARARGS | METH_KEYWORDS,
	  "_fake_shared(peer='aware', allow_gup_ms=0, watchdog_ms=0): a shared fake pool: "
	  "test only" },
	{ "_fake_fence", mod_fake_fence, METH_NOARGS,
	  "_fake_fence() -> eventfds signalled: the host fences itself: test only" },
	{ "_fake_unfence", mod_fake_unfence, METH_NOARGS,
	  "_fake_unfence(): the host holds its lease again: test only" },
	{ "_fake_device", mod_fake_device, METH_NOARGS,
	  "_fake_device() -> dict: device ranges, the last mapping, pinnable: test only" },
#endif
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef beluga_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "beluga._beluga",
	.m_doc = "CPython binding of libbeluga (see the beluga package).",
	.m_size = -1,
	.m_methods = module_methods,
};

static int add_int(PyObject *m, const char *name, long long v)
{
	PyObject *o = PyLong_FromLongLong(v);

	if (!o || PyModule_AddObject(m, name, o)) {
		Py_XDECREF(o);
		return -1;
	}
	return 0;
}

static int add_errors(PyObject *m)
{
	size_t i;

	BelugaError = PyErr_NewExceptionWithDoc(
		"beluga.Error",
		"A libbeluga call failed: .errno is the errno, the message names the cause "
		"and the fix.",
		PyExc_OSError, NULL);
	if (!BelugaError || PyModule_AddObjectRef(m, "Error", BelugaError))
		return -1;
	for (i = 0; i < sizeof(error_types) / sizeof(error_types[0]); i++) {
		char qual[64];
		PyObject *bases;

		if (!error_types[i].name)
			continue;
		snprintf(qual, sizeof(qual), "beluga.%s", error_types[i].name);
		if (error_types[i].extra_base)
			bases = PyTuple_Pack(2, BelugaError, *error_types[i].extra_base);
		else
			bases = PyTuple_Pack(1, BelugaError);
		if (!bases)
			return -1;
		error_types[i].type = PyErr_NewExceptionWithDoc(qual, error_types[i].doc,
								 bases, NULL);
		Py_DECREF(bases);
		if (!error_types[i].type ||
		    PyModule_AddObjectRef(m, error_types[i].name, error_types[i].type))
			return -1;
	}
	return 0;
}

static PyObject *make_zero(const char *code)
{
	return PyObject_CallFunction(array_type, "s[i]", code, 0);
}

PyMODINIT_FUNC PyInit__beluga(void)
{
	PyObject *m, *array_mod;

	m = PyModule_Create(&beluga_module);
	if (!m)
		return NULL;
	array_mod = PyImport_ImportModule("array");
	if (!array_mod)
		goto fail;
	array_type = PyObject_GetAttrString(array_mod, "array");
	Py_DECREF(array_mod);
	if (!array_type)
		goto fail;
	zero_q = make_zero("Q");
	zero_i = make_zero("i");
	str_pin = PyUnicode_InternFromString("pin");
	if (!zero_q || !zero_i || !str_pin)
		goto fail;
	if (PyType_Ready(&PoolType) || PyType_Ready(&PoolMapType) ||
	    PyStructSequence_InitType2(&PublishResultType, &publish_result_desc))
		goto fail;
	if (PyModule_AddObjectRef(m, "Pool", (PyObject *)&PoolType) ||
	    PyModule_AddObjectRef(m, "PoolMap", (PyObject *)&PoolMapType) ||
	    PyModule_AddObjectRef(m, "PublishResult", (PyObject *)&PublishResultType))
		goto fail;
	if (add_errors(m))
		goto fail;
	if (add_int(m, "ABI_VERSION", BELUGA_ABI_VERSION) ||
	    add_int(m, "MAX_BATCH", BELUGA_MAX_BATCH) ||
	    add_int(m, "MAX_REGIONS", BELUGA_MAX_REGIONS) ||
	    add_int(m, "NAME_LEN", BELUGA_NAME_LEN) ||
	    add_int(m, "LOOKUP_PIN", BELUGA_LOOKUP_PIN) ||
	    add_int(m, "PUBLISH_OK", BELUGA_PUBLISH_OK) ||
	    add_int(m, "PUBLISH_EXISTS", BELUGA_PUBLISH_EXISTS) ||
	    add_int(m, "BLOCK_SIZE_MIN", BELUGA_BLOCK_SIZE_MIN) ||
	    add_int(m, "BLOCK_SIZE_MAX", BELUGA_BLOCK_SIZE_MAX) ||
	    add_int(m, "BLOCK_SIZE_DEFAULT", BELUGA_BLOCK_SIZE_DEFAULT) ||
	    add_int(m, "DAX_ALIGN", BELUGA_DAX_ALIGN) ||
	    add_int(m, "BACKEND_DAX", BELUGA_BACKEND_DAX) ||
	    add_int(m, "BACKEND_NODE", BELUGA_BACKEND_NODE) ||
	    add_int(m, "LIBBELUGA_VERSION_MAJOR", LIBBELUGA_VERSION_MAJOR) ||
	    add_int(m, "LIBBELUGA_VERSION_MINOR", LIBBELUGA_VERSION_MINOR) ||
	    PyModule_AddStringConstant(m, "LIBBELUGA_VERSION", LIBBELUGA_VERSION) ||
	    PyModule_AddStringConstant(m, "DEVICE_PATH", BELUGA_DEVICE_PATH))
		goto fail;
#ifdef BELUGA_PY_FAKE
	/* Installed by fake_kernel.c's constructor when BELUGA_FAKE_KERNEL is set. */
	if (getenv("BELUGA_FAKE_KERNEL"))
		fake_wrap();
	if (add_int(m, "FAKE_KERNEL", 1))
		goto fail;
#else
	if (add_int(m, "FAKE_KERNEL", 0))
		goto fail;
#endif
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
