/* loader.stores._lmdbnode: where an LMDB leaf node's value lies, read from the node alone
 * (see Pages.value_span in loader/stores/lmdb_files.py, which this does in ~0.15 us
 * instead of ~1.2 us: every LMDB get pays it).
 *
 *   value_span(key, base, in_use, psize)
 *       key: a zero-copy buffer of a leaf node's key inside the map of data.mdb that
 *       starts at address ``base``, of which ``in_use`` bytes are pages in use, pages of
 *       ``psize`` bytes. The node is the 8 bytes before the key: u16 lo, u16 hi (the value's
 *       size = lo | hi << 16), u16 flags, u16 key size; then the key, then the value - or,
 *       with flags & F_BIGDATA (1), the u64 number of its first overflow page, whose data
 *       starts 16 bytes into it. Returns (offset of the value in data.mdb, its size,
 *       whether it is in overflow pages), or 1 when the key lies outside the pages in use,
 *       2 when the value would (a damaged node: reading it would be a SIGBUS).
 *       Little-endian machines only (the caller checks nothing on others).
 *
 *   find_value(key, base, in_use, psize, root, depth)
 *       The same (offset, size, big) for ``key`` in the B-tree whose root page is ``root``
 *       (of a table with LMDB's default key order: memcmp, then the shorter first),
 *       found by walking its branch and leaf pages in the map - or None when the walk
 *       does not find it, or meets anything it does not expect (a page outside the pages
 *       in use, a page that is not a branch or plain leaf page, a node outside its page,
 *       a sub-database or duplicates node): then ask LMDB, which names the damage.
 *       LMDB's own lookup (mdb_node_read) reads the first page of a value in overflow
 *       pages, one dependent disk read before any of the value's bytes can be asked for;
 *       this walk reads only the tree's pages, a few that stay cached.
 *       Page: u64 pgno, u16 pad, u16 flags (P_BRANCH 1, P_LEAF 2, P_LEAF2 0x20), u16
 *       lower, u16 upper, then u16 node offsets; (lower - 16) / 2 nodes. A branch node's
 *       child page is lo | hi << 16 | flags << 32; its first key is not compared.
 *
 *   buffer_offset(obj, base=0)
 *       Where the first byte of the buffer of ``obj`` (bytes, a memoryview - read-only,
 *       sliced or strided alike - or any object with the buffer protocol) lies relative to
 *       address ``base``: its address minus ``base`` (negative when below it); with base 0,
 *       its address. A zero-copy LMDB value's offset in data.mdb is buffer_offset(value,
 *       map base). Asked through the buffer protocol (PyObject_GetBuffer), not read from
 *       CPython's memoryview internals. TypeError for an object without a buffer,
 *       ValueError for a released memoryview.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdint.h>
#include <string.h>

#define F_BIGDATA 1
#define OVERFLOW_HEAD 16

/* Where the value of the leaf node at ``node`` (its 8-byte header, then a key of ``n``
 * bytes) lies: its offset in data.mdb, size, and whether it fills overflow pages; 0, or 2
 * when the node's key size is not ``n`` or the value would lie outside the pages in use.
 * The node's header and key, and its overflow page number, must be inside the map. */
static int leaf_value(const unsigned char *node, unsigned long long base, long long n, long long in_use,
                      long long psize, long long *start, long long *size, int *big)
{
    uint16_t h[4];
    memcpy(h, node, sizeof h);
    *size = (long long)h[0] | ((long long)h[1] << 16);
    *big = (h[2] & F_BIGDATA) != 0;
    *start = (long long)((uintptr_t)node - base) + 8 + n;
    if (*big) {
        uint64_t pgno;
        memcpy(&pgno, node + 8 + n, sizeof pgno);
        if (pgno > (uint64_t)(in_use / psize))
            return 2;
        *start = (long long)pgno * psize + OVERFLOW_HEAD;
    }
    return (long long)h[3] != n || *start + *size > in_use ? 2 : 0;
}

static PyObject *value_span(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "value_span(key, base, in_use, psize)");
        return NULL;
    }
    unsigned long long base = PyLong_AsUnsignedLongLong(args[1]);
    long long in_use = PyLong_AsLongLong(args[2]);
    long long psize = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (psize < 1) {
        PyErr_SetString(PyExc_ValueError, "psize must be at least 1");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    long long n = (long long)view.len;
    long long at = (long long)((unsigned long long)(uintptr_t)view.buf - base);
    PyBuffer_Release(&view);
    if (at < 8 || at > in_use - n - 8)
        return PyLong_FromLong(1);
    const unsigned char *node = (const unsigned char *)(uintptr_t)(base + (unsigned long long)at - 8);
    long long start, size;
    int big;
    if (leaf_value(node, base, n, in_use, psize, &start, &size, &big))
        return PyLong_FromLong(2);
    return Py_BuildValue("(LLO)", start, size, big ? Py_True : Py_False);
}

#define P_BRANCH 0x01
#define P_LEAF 0x02
#define P_LEAF2 0x20
#define PAGE_HEAD 16
#define F_SUBDATA 2
#define F_DUPDATA 4

/* The node at index i of a page, or NULL when it (its header and key) is not inside the page. */
static const unsigned char *node_at(const unsigned char *page, long long psize, int i, uint16_t *h)
{
    uint16_t off;
    memcpy(&off, page + PAGE_HEAD + 2 * i, sizeof off);
    if (off < PAGE_HEAD || (long long)off + 8 > psize)
        return NULL;
    memcpy(h, page + off, 4 * sizeof(uint16_t));
    if ((long long)off + 8 + h[3] > psize)
        return NULL;
    return page + off;
}

static int key_cmp(const unsigned char *node, const uint16_t *h, const unsigned char *k, Py_ssize_t n)
{
    Py_ssize_t m = h[3] < n ? h[3] : n;
    int c = memcmp(node + 8, k, (size_t)m);
    return c ? c : (h[3] > n) - (h[3] < n);
}

static PyObject *find_value(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "find_value(key, base, in_use, psize, root, depth)");
        return NULL;
    }
    unsigned long long base = PyLong_AsUnsignedLongLong(args[1]);
    long long in_use = PyLong_AsLongLong(args[2]);
    long long psize = PyLong_AsLongLong(args[3]);
    unsigned long long pgno = PyLong_AsUnsignedLongLong(args[4]);
    long depth = PyLong_AsLong(args[5]);
    if (PyErr_Occurred())
        return NULL;
    if (psize < 64 || psize > 65536 || depth < 1 || depth > 64)
        Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *k = view.buf;
    Py_ssize_t n = view.len;
    unsigned long long npages = (unsigned long long)(in_use / psize);
    PyObject *found = NULL;
    for (long level = 0; level < depth && !found; level++) {
        if (pgno < 2 || pgno >= npages)
            break;
        const unsigned char *page = (const unsigned char *)(uintptr_t)(base + pgno * (unsigned long long)psize);
        uint16_t flags, lower, upper;
        memcpy(&flags, page + 10, 2);
        memcpy(&lower, page + 12, 2);
        memcpy(&upper, page + 14, 2);
        if (lower < PAGE_HEAD || lower > upper || upper > psize || (flags & P_LEAF2))
            break;
        int nkeys = (lower - PAGE_HEAD) >> 1;
        uint16_t h[4];
        const unsigned char *node;
        if ((flags & (P_BRANCH | P_LEAF)) == P_BRANCH) {
            int lo = 1, hi = nkeys - 1, at = 0;  /* the last node whose key is <= k (node 0: below all) */
            while (lo <= hi) {
                int mid = (lo + hi) / 2;
                if (!(node = node_at(page, psize, mid, h)))
                    goto done;
                if (key_cmp(node, h, k, n) <= 0) {
                    at = mid;
                    lo = mid + 1;
                } else {
                    hi = mid - 1;
                }
            }
            if (nkeys < 1 || !(node = node_at(page, psize, at, h)))
                break;
            pgno = (unsigned long long)h[0] | (unsigned long long)h[1] << 16 | (unsigned long long)h[2] << 32;
            continue;
        }
        if ((flags & (P_BRANCH | P_LEAF)) != P_LEAF)
            break;
        int lo = 0, hi = nkeys - 1;
        while (lo <= hi) {
            int mid = (lo + hi) / 2;
            if (!(node = node_at(page, psize, mid, h)))
                goto done;
            int c = key_cmp(node, h, k, n);
            if (c < 0) {
                lo = mid + 1;
            } else if (c > 0) {
                hi = mid - 1;
            } else {
                if (h[2] & (F_SUBDATA | F_DUPDATA))
                    goto done;
                long long in_page = h[2] & F_BIGDATA ? 8 : (long long)h[0] | ((long long)h[1] << 16);
                if ((long long)(node - page) + 8 + n + in_page > psize)
                    goto done;  /* the page number, or the value itself, past its page */
                long long start, size;
                int big;
                if (!leaf_value(node, base, n, in_use, psize, &start, &size, &big)
                    && (!big || start >= 2 * psize + OVERFLOW_HEAD))  /* not in the meta pages */
                    found = Py_BuildValue("(LLO)", start, size, big ? Py_True : Py_False);
                goto done;
            }
        }
        break;
    }
done:
    PyBuffer_Release(&view);
    if (found)
        return found;
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *buffer_offset(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "buffer_offset(obj, base=0)");
        return NULL;
    }
    unsigned long long base = 0;
    if (nargs == 2) {
        base = PyLong_AsUnsignedLongLong(args[1]);
        if (base == (unsigned long long)-1 && PyErr_Occurred())
            return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_FULL_RO) < 0)
        return NULL;
    unsigned long long at = (unsigned long long)(uintptr_t)view.buf;
    PyBuffer_Release(&view);
    if (at >= base)
        return PyLong_FromUnsignedLongLong(at - base);
    if (base - at <= (unsigned long long)LLONG_MAX)
        return PyLong_FromLongLong(-(long long)(base - at));
    PyObject *address = PyLong_FromUnsignedLongLong(at);
    if (address == NULL)
        return NULL;
    PyObject *offset = PyNumber_Subtract(address, args[1]);
    Py_DECREF(address);
    return offset;
}

static PyMethodDef methods[] = {
    {"value_span", (PyCFunction)(void (*)(void))value_span, METH_FASTCALL,
     "value_span($module, key, base, in_use, psize, /)\n--\n\n"
     "-> (offset, size, big) | 1 (key outside) | 2 (value outside)"},
    {"find_value", (PyCFunction)(void (*)(void))find_value, METH_FASTCALL,
     "find_value($module, key, base, in_use, psize, root, depth, /)\n--\n\n"
     "-> (offset, size, big) | None (ask LMDB)"},
    {"buffer_offset", (PyCFunction)(void (*)(void))buffer_offset, METH_FASTCALL,
     "buffer_offset($module, obj, base=0, /)\n--\n\n"
     "-> the address of the first byte of obj's buffer minus base"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "loader.stores._lmdbnode",
    .m_doc = "Where an LMDB leaf node's value lies, from the node alone.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__lmdbnode(void)
{
    return PyModule_Create(&module);
}
