/* loader.stores._preads: the spans of a value in a file, read with one release of the GIL.
 *
 *   read_spans(fd, at, size, spans, into, advise) -> bytes read
 *       Copies bytes [at + offset, at + offset + length) of file ``fd`` for each
 *       (offset, length) in ``spans`` one after another into the writable buffer ``into``
 *       (pread, retried until complete). The spans lie in a value of ``size`` bytes that
 *       starts at byte ``at`` of the file: one outside it is a ValueError, as is an
 *       ``into`` smaller than the spans. With ``advise``, each span is first asked of the
 *       kernel (posix_fadvise WILLNEED, no wait; advice that fails is only advice), so
 *       that the disk works on all of them together instead of one after another. Returns
 *       the bytes copied: fewer than the spans hold when the file ended first. A failed
 *       read is an OSError.
 *
 * Why in C: a box query's read is ~10 spans. From Python, each posix_fadvise and each pread
 * released and took back the GIL: with two threads querying, every return from the kernel
 * waited for the other thread's Python work, and two threads answered fewer boxes a second
 * than one. Here the GIL is released once for all of them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

static PyObject *read_spans(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "read_spans(fd, at, size, spans, into, advise)");
        return NULL;
    }
    long fd_l = PyLong_AsLong(args[0]);
    long long at = PyLong_AsLongLong(args[1]);
    long long size = PyLong_AsLongLong(args[2]);
    int advise = PyObject_IsTrue(args[5]);
    if (PyErr_Occurred() || advise < 0)
        return NULL;
    if (fd_l < 0 || fd_l > INT32_MAX || at < 0 || size < 0) {
        PyErr_SetString(PyExc_ValueError, "read_spans: a negative descriptor, position or size");
        return NULL;
    }
    int fd = (int)fd_l;
    PyObject *seq = PySequence_Fast(args[3], "read_spans: spans must be a sequence of (offset, length)");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    long long *span = PyMem_Malloc(sizeof(long long) * 2 * (n ? n : 1));
    if (span == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    long long total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        long long offset, length;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "read_spans: a span is an (offset, length) tuple");
            goto fail;
        }
        offset = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 0));
        length = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 1));
        if (PyErr_Occurred())
            goto fail;
        if (offset < 0 || length < 0 || offset > size || length > size - offset) {
            PyErr_Format(PyExc_ValueError, "bytes %lld..%lld are outside a value of %lld",
                         offset, offset + length, size);
            goto fail;
        }
        span[2 * i] = at + offset;
        span[2 * i + 1] = length;
        total += length;
    }
    Py_buffer into;
    if (PyObject_GetBuffer(args[4], &into, PyBUF_WRITABLE) < 0)
        goto fail;
    if (into.len < total) {
        PyErr_Format(PyExc_ValueError, "read_spans: %lld bytes of spans into a buffer of %zd",
                     total, into.len);
        PyBuffer_Release(&into);
        goto fail;
    }
    char *out = into.buf;
    long long done = 0;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    if (advise)
        for (Py_ssize_t i = 0; i < n; i++)
            if (span[2 * i + 1])
                posix_fadvise(fd, (off_t)span[2 * i], (off_t)span[2 * i + 1], POSIX_FADV_WILLNEED);
    for (Py_ssize_t i = 0; i < n && !err; i++) {
        long long pos = span[2 * i], left = span[2 * i + 1];
        while (left > 0) {
            ssize_t got = pread(fd, out + done, (size_t)left, (off_t)pos);
            if (got < 0) {
                if (errno == EINTR)
                    continue;
                err = errno;
                break;
            }
            if (got == 0) {  /* the file ended */
                err = -1;
                break;
            }
            done += got;
            pos += got;
            left -= got;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&into);
    PyMem_Free(span);
    Py_DECREF(seq);
    if (err > 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLongLong(done);

fail:
    PyMem_Free(span);
    Py_DECREF(seq);
    return NULL;
}

static PyMethodDef methods[] = {
    {"read_spans", (PyCFunction)(void (*)(void))read_spans, METH_FASTCALL,
     "read_spans($module, fd, at, size, spans, into, advise, /)\n--\n\n"
     "-> bytes read"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "loader.stores._preads",
    .m_doc = "The spans of a value in a file, read with one release of the GIL.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__preads(void)
{
    return PyModule_Create(&module);
}
