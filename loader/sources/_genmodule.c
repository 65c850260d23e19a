/* loader.sources._gen: the C record generators, called in-process on numpy (or any writable) buffers.
 *
 *   fill_scidb96(buffer, start)          fill the whole buffer with records start, start+1, ...
 *   fill_scidb96_into(buffer, start, n)  fill the first n records of the buffer
 *   fill_ticks(buffer, start, t0, step)  the same for layout ticks (41-byte records; t0 int64
 *                                        ns since the epoch, step >= 1 ns: generators/ticks.h)
 *
 * The buffer must be writable and C-contiguous; its size a whole number of records.
 *
 *   docs_meta(seed, start, created_at, offsets)  created_at and text offsets of documents
 *                                               start .. start+n-1 (n = len(created_at))
 *   docs_text(seed, start, n, text)             their texts, one after the other
 *
 * (gen://docs, see generators/docs_gen.h). The GIL is released while filling.
 *
 *   scatter_fields(records, record_size, fields)  records from columns: fields is a list of
 *                                                 (column buffer, byte offset, size 1/2/4/8)
 *
 * (a file with a schema, loader/sources/typed.py: each record written whole, field after
 * field, so the records are written in order - about twice numpy's field-by-field copy).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "docs_gen.h"
#include "scidb96.h"
#include "ticks.h"

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

typedef void (*fill_fn)(void *buf, uint64_t start, uint64_t n, const void *opts);

typedef struct {
    int64_t t0;
    uint64_t step;
} ticks_opts;

static void fill_scidb96_fn(void *buf, uint64_t start, uint64_t n, const void *opts)
{
    (void)opts;
    scidb96_fill(buf, start, n);
}

static void fill_ticks_fn(void *buf, uint64_t start, uint64_t n, const void *opts)
{
    const ticks_opts *o = (const ticks_opts *)opts;
    ticks_fill(buf, start, n, o->t0, o->step);
}

/* Fill records start.. of a buffer of whole records of `size` bytes of layout `name`: all of
 * them, or the first n (nobj not NULL). */
static PyObject *do_fill(PyObject *bufobj, PyObject *startobj, PyObject *nobj, const char *name,
                         Py_ssize_t size, fill_fn fn, const void *opts)
{
    Py_buffer view;
    uint64_t start, n, capacity;

    if (get_u64(startobj, "start", &start) < 0)
        return NULL;
    if (PyObject_GetBuffer(bufobj, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (view.len % size != 0) {
        PyErr_Format(PyExc_ValueError,
                     "buffer size %zd is not a multiple of the %s record size (%zd bytes)",
                     view.len, name, size);
        PyBuffer_Release(&view);
        return NULL;
    }
    capacity = (uint64_t)view.len / (uint64_t)size;
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
    fn(view.buf, start, n, opts);
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
    return do_fill(buf, start, NULL, "scidb96", SCIDB96_RECORD_SIZE, fill_scidb96_fn, NULL);
}

static PyObject *fill_scidb96_into(PyObject *self, PyObject *args)
{
    PyObject *buf, *start, *n;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOO:fill_scidb96_into", &buf, &start, &n))
        return NULL;
    return do_fill(buf, start, n, "scidb96", SCIDB96_RECORD_SIZE, fill_scidb96_fn, NULL);
}

static PyObject *fill_ticks(PyObject *self, PyObject *args)
{
    PyObject *buf, *start, *stepobj;
    long long t0;
    ticks_opts o;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOLO:fill_ticks", &buf, &start, &t0, &stepobj))
        return NULL;
    if (get_u64(stepobj, "step", &o.step) < 0)
        return NULL;
    if (o.step == 0) {
        PyErr_SetString(PyExc_ValueError, "step must be >= 1 (ns)");
        return NULL;
    }
    o.t0 = (int64_t)t0;
    return do_fill(buf, start, NULL, "ticks", TICKS_RECORD_SIZE, fill_ticks_fn, &o);
}

/* A writable C-contiguous buffer of whole int64 items; *count = their number. */
static int get_i64_buffer(PyObject *obj, const char *what, Py_buffer *view, uint64_t *count)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->len % 8 != 0) {
        PyErr_Format(PyExc_ValueError, "%s: buffer size %zd is not a multiple of 8 (int64)",
                     what, view->len);
        PyBuffer_Release(view);
        return -1;
    }
    *count = (uint64_t)view->len / 8;
    return 0;
}

static int check_doc_range(uint64_t start, uint64_t n)
{
    if (n > 0 && n - 1 > UINT64_MAX - start) {
        PyErr_Format(PyExc_ValueError,
                     "documents start=%llu .. start+n-1 (n=%llu) run past the largest id 2**64-1",
                     (unsigned long long)start, (unsigned long long)n);
        return -1;
    }
    return 0;
}

static PyObject *docs_meta(PyObject *self, PyObject *args)
{
    PyObject *seedobj, *startobj, *caobj, *offobj;
    Py_buffer ca, off;
    uint64_t seed, start, n, noff, total;
    (void)self;

    if (!PyArg_ParseTuple(args, "OOOO:docs_meta", &seedobj, &startobj, &caobj, &offobj))
        return NULL;
    if (get_u64(seedobj, "seed", &seed) < 0 || get_u64(startobj, "start", &start) < 0)
        return NULL;
    if (get_i64_buffer(caobj, "created_at", &ca, &n) < 0)
        return NULL;
    if (get_i64_buffer(offobj, "offsets", &off, &noff) < 0) {
        PyBuffer_Release(&ca);
        return NULL;
    }
    if (noff != n + 1 || check_doc_range(start, n) < 0) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError,
                         "offsets must hold n+1 = %llu int64 values (it holds %llu)",
                         (unsigned long long)n + 1, (unsigned long long)noff);
        PyBuffer_Release(&ca);
        PyBuffer_Release(&off);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    total = docs_gen_meta(seed, start, n, (int64_t *)ca.buf, (int64_t *)off.buf);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ca);
    PyBuffer_Release(&off);
    return PyLong_FromUnsignedLongLong((unsigned long long)total);
}

static PyObject *docs_text(PyObject *self, PyObject *args)
{
    PyObject *seedobj, *startobj, *nobj, *textobj;
    Py_buffer text;
    uint64_t seed, start, n, written;
    Py_ssize_t cap;
    (void)self;

    if (!PyArg_ParseTuple(args, "OOOO:docs_text", &seedobj, &startobj, &nobj, &textobj))
        return NULL;
    if (get_u64(seedobj, "seed", &seed) < 0 || get_u64(startobj, "start", &start) < 0 ||
        get_u64(nobj, "n", &n) < 0 || check_doc_range(start, n) < 0)
        return NULL;
    if (PyObject_GetBuffer(textobj, &text, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    cap = text.len;
    Py_BEGIN_ALLOW_THREADS
    written = docs_gen_text(seed, start, n, (uint8_t *)text.buf, (uint64_t)cap);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&text);
    if (written == UINT64_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "the texts of documents %llu .. +%llu do not fit in a buffer of %zd bytes "
                     "(size it with docs_meta)",
                     (unsigned long long)start, (unsigned long long)n, cap);
        return NULL;
    }
    return PyLong_FromUnsignedLongLong((unsigned long long)written);
}

#define MAX_FIELDS 1024

/* record i of records = the i-th value of each column at its offset */
static void scatter(uint8_t *dst, uint64_t rs, uint64_t n, Py_ssize_t nf, const uint8_t *const *cols,
                    const uint64_t *offs, const uint64_t *sizes)
{
    for (uint64_t i = 0; i < n; i++) {
        uint8_t *row = dst + i * rs;
        for (Py_ssize_t f = 0; f < nf; f++) {
            switch (sizes[f]) {
            case 8: memcpy(row + offs[f], cols[f] + i * 8, 8); break;
            case 4: memcpy(row + offs[f], cols[f] + i * 4, 4); break;
            case 2: memcpy(row + offs[f], cols[f] + i * 2, 2); break;
            default: row[offs[f]] = cols[f][i]; break;
            }
        }
    }
}

static PyObject *scatter_fields(PyObject *self, PyObject *args)
{
    PyObject *dstobj, *fields, *seq = NULL, *ret = NULL;
    Py_ssize_t rs, nf = 0, got = 0;
    Py_buffer dst, views[MAX_FIELDS];
    const uint8_t *cols[MAX_FIELDS];
    uint64_t offs[MAX_FIELDS], sizes[MAX_FIELDS], n;
    (void)self;

    if (!PyArg_ParseTuple(args, "OnO:scatter_fields", &dstobj, &rs, &fields))
        return NULL;
    if (rs <= 0)
        return PyErr_Format(PyExc_ValueError, "record_size must be > 0");
    if (PyObject_GetBuffer(dstobj, &dst, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    n = (uint64_t)(dst.len / rs);
    seq = PySequence_Fast(fields, "fields must be a list of (column, offset, size)");
    if (!seq)
        goto done;
    nf = PySequence_Fast_GET_SIZE(seq);
    if (nf > MAX_FIELDS) {
        PyErr_Format(PyExc_ValueError, "at most %d fields", MAX_FIELDS);
        goto done;
    }
    for (got = 0; got < nf; got++) {
        PyObject *col;
        Py_ssize_t off, size;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, got), "Onn:field", &col, &off, &size))
            goto done;
        if (PyObject_GetBuffer(col, &views[got], PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        if ((size != 1 && size != 2 && size != 4 && size != 8) || off < 0 || off + size > rs ||
            (uint64_t)views[got].len < n * (uint64_t)size) {
            PyBuffer_Release(&views[got]);
            PyErr_Format(PyExc_ValueError, "field %zd: size %zd at offset %zd does not fit a record of %zd "
                         "bytes, or its column holds fewer than %llu values", got, size, off, rs,
                         (unsigned long long)n);
            goto done;
        }
        cols[got] = (const uint8_t *)views[got].buf;
        offs[got] = (uint64_t)off;
        sizes[got] = (uint64_t)size;
    }
    Py_BEGIN_ALLOW_THREADS
    scatter((uint8_t *)dst.buf, (uint64_t)rs, n, nf, cols, offs, sizes);
    Py_END_ALLOW_THREADS
    ret = PyLong_FromUnsignedLongLong((unsigned long long)n);
done:
    for (Py_ssize_t f = 0; f < got; f++)
        PyBuffer_Release(&views[f]);
    Py_XDECREF(seq);
    PyBuffer_Release(&dst);
    return ret;
}

static PyMethodDef methods[] = {
    {"fill_scidb96", fill_scidb96, METH_VARARGS,
     "fill_scidb96($module, buffer, start, /)\n--\n\n"
     "Fill a writable C-contiguous buffer (size a multiple of 96) with scidb96 records\n"
     "start, start+1, ...; returns the number of records written. Releases the GIL."},
    {"fill_scidb96_into", fill_scidb96_into, METH_VARARGS,
     "fill_scidb96_into($module, buffer, start, n, /)\n--\n\n"
     "Like fill_scidb96, but writes only the first n records of the buffer."},
    {"fill_ticks", fill_ticks, METH_VARARGS,
     "fill_ticks($module, buffer, start, t0, step, /)\n--\n\n"
     "Fill a writable C-contiguous buffer (size a multiple of 41) with ticks records\n"
     "start, start+1, ... (t0: int64 ns since the epoch of record 0, step: ns between\n"
     "records, >= 1); returns the number of records written. Releases the GIL."},
    {"docs_meta", docs_meta, METH_VARARGS,
     "docs_meta($module, seed, start, created_at, offsets, /)\n--\n\n"
     "Fill created_at (n int64) and offsets (n+1 int64; offsets[0] = 0) for documents\n"
     "start .. start+n-1 of gen://docs stream seed, n = len(created_at); returns the total\n"
     "text length offsets[n]. Releases the GIL."},
    {"docs_text", docs_text, METH_VARARGS,
     "docs_text($module, seed, start, n, text, /)\n--\n\n"
     "Write the texts of documents start .. start+n-1, one after the other, into the\n"
     "writable buffer text; returns the bytes written. ValueError if they do not fit.\n"
     "Releases the GIL."},
    {"scatter_fields", scatter_fields, METH_VARARGS,
     "scatter_fields($module, records, record_size, fields, /)\n--\n\n"
     "Write the n = len(records) // record_size records of the writable C-contiguous buffer\n"
     "records from columns: fields is a list of (column, offset, size), each column a\n"
     "C-contiguous buffer of at least n values of size 1, 2, 4 or 8 bytes, written at byte\n"
     "offset of each record; returns n. Releases the GIL."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "loader.sources._gen",
    .m_doc = "C record generators (in-process). See generators/scidb96.h, generators/ticks.h and\n"
             "generators/docs_gen.h for the definitions.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__gen(void)
{
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    docs_gen_init();
    if (PyModule_AddIntConstant(m, "SCIDB96_RECORD_SIZE", SCIDB96_RECORD_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "TICKS_RECORD_SIZE", TICKS_RECORD_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "DOCS_TEXT_MAX", DOCS_TEXT_MAX) < 0 ||
        PyModule_AddIntConstant(m, "DOCS_CREATED_MIN", (long)DOCS_CREATED_MIN) < 0 ||
        PyModule_AddIntConstant(m, "DOCS_CREATED_MAX", (long)DOCS_CREATED_MAX) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
