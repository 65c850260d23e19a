/* loader._gen: the C record generators, called in-process on numpy (or any writable) buffers.
 *
 *   fill_scidb96(buffer, start)          fill the whole buffer with records start, start+1, ...
 *   fill_scidb96_into(buffer, start, n)  fill the first n records of the buffer
 *
 * The buffer must be writable and C-contiguous; its size must be a multiple of 96 bytes.
 * The GIL is released while filling.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "scidb96.h"

static int get_u64(PyObject *obj, const char *what, uint64_t *out)
{
    PyObject *idx = PyNumber_Index(obj), *zero;
    int neg;
    unsigned long long v;

    if (!idx)
        return -1;
    zero = PyLong_FromLong(0);
    if (!zero) {
        Py_DECREF(idx);
        return -1;
    }
    neg = PyObject_RichCompareBool(idx, zero, Py_LT);
    Py_DECREF(zero);
    if (neg < 0) {
        Py_DECREF(idx);
        return -1;
    }
    if (neg) {
        Py_DECREF(idx);
        PyErr_Format(PyExc_ValueError, "%s must be >= 0", what);
        return -1;
    }
    v = PyLong_AsUnsignedLongLong(idx);
    Py_DECREF(idx);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s must be < 2**64", what);
        }
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

static PyObject *do_fill(PyObject *bufobj, PyObject *startobj, PyObject *nobj)
{
    Py_buffer view;
    uint64_t start, n, capacity;

    if (get_u64(startobj, "start", &start) < 0)
        return NULL;
    if (PyObject_GetBuffer(bufobj, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (view.len % SCIDB96_RECORD_SIZE != 0) {
        PyErr_Format(PyExc_ValueError,
                     "buffer size %zd is not a multiple of the scidb96 record size (%d bytes)",
                     view.len, SCIDB96_RECORD_SIZE);
        PyBuffer_Release(&view);
        return NULL;
    }
    capacity = (uint64_t)view.len / SCIDB96_RECORD_SIZE;
    if (nobj) {
        if (get_u64(nobj, "n", &n) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
        if (n > capacity) {
            PyErr_Format(PyExc_ValueError, "n=%llu records do not fit in a buffer of %llu records",
                         (unsigned long long)n, (unsigned long long)capacity);
            PyBuffer_Release(&view);
            return NULL;
        }
    } else {
        n = capacity;
    }
    if (n > 0 && n - 1 > UINT64_MAX - start) {
        PyErr_Format(PyExc_ValueError,
                     "records start=%llu .. start+n-1 (n=%llu) run past the largest record index 2**64-1",
                     (unsigned long long)start, (unsigned long long)n);
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    scidb96_fill(view.buf, start, n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong((unsigned long long)n);
}

static PyObject *fill_scidb96(PyObject *self, PyObject *args)
{
    PyObject *buf, *start;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO:fill_scidb96", &buf, &start))
        return NULL;
    return do_fill(buf, start, NULL);
}

static PyObject *fill_scidb96_into(PyObject *self, PyObject *args)
{
    PyObject *buf, *start, *n;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOO:fill_scidb96_into", &buf, &start, &n))
        return NULL;
    return do_fill(buf, start, n);
}

static PyMethodDef methods[] = {
    {"fill_scidb96", fill_scidb96, METH_VARARGS,
     "fill_scidb96(buffer, start) -> n\n\n"
     "Fill a writable C-contiguous buffer (size a multiple of 96) with scidb96 records\n"
     "start, start+1, ...; returns the number of records written. Releases the GIL."},
    {"fill_scidb96_into", fill_scidb96_into, METH_VARARGS,
     "fill_scidb96_into(buffer, start, n) -> n\n\n"
     "Like fill_scidb96, but writes only the first n records of the buffer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "loader._gen",
    "C record generators (in-process). See generators/scidb96.h for the record definition.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__gen(void)
{
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (PyModule_AddIntConstant(m, "SCIDB96_RECORD_SIZE", SCIDB96_RECORD_SIZE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
