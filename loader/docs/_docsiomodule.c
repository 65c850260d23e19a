/* loader.docs._docsio: listing and reading a directory of <id>.json documents (layout docs),
 * and the columns of a document block.
 *
 *   scan_dir(path) -> (ids, odd)
 *       One readdir(3) pass over a directory. Names starting with '.' and entries that
 *       are not regular files (d_type; fstatat(2), following symlinks, for DT_LNK and
 *       DT_UNKNOWN: as os.DirEntry.is_file()) are skipped. ``ids`` (bytes, native uint64)
 *       holds the ids of the canonical names: "<digits>.json", no leading zero unless the
 *       id is 0, id < 2**64, in directory order. ``odd`` (list of str, decoded as
 *       os.fsdecode does) holds every other name, for Python to classify.
 *
 *   read_batch(dir, ids, names=None) -> (buffer, spans, errnos, braced)
 *       Reads n files into ONE buffer laid out as a JSON array: "[" file1 ",\n" file2
 *       ",\n" ... "]". File i is ``names[i]`` when names is given and names[i] is not None
 *       (a str, bytes or path, relative to dir or absolute), else "<ids[i]>.json".
 *       ``dir`` is a path, an open directory fd, or None (the current directory).
 *       ``ids``: a C-contiguous buffer of n native uint64 (a numpy uint64 array).
 *       Returns ``buffer`` (a read-only buffer object), ``spans`` (bytes: n pairs of native
 *       int64 (start, end) of each file's bytes in buffer), ``errnos`` (bytes: n native
 *       int32, 0 or the errno of the failed openat/read; such a file's span is empty) and
 *       ``braced`` (bytes: n uint8, 1 when the file's first and last non-whitespace bytes
 *       are '{' and '}', two distinct bytes; JSON whitespace is " \t\n\r").
 *       Each file is opened with openat(O_RDONLY | O_CLOEXEC) and read until read(2)
 *       returns 0, whatever its size. Where the system has O_NOATIME it is tried first:
 *       reading a million files just written must not dirty a million inodes for their
 *       access times (measured: ~0.3 us less per first read of a 1 KB file on ext4 with
 *       relatime); a file we do not own refuses it (EPERM), then the rest of the batch is
 *       opened without it.
 *
 *   stat_batch(dir, ids, names=None) -> (sizes, mtimes, errnos)
 *       fstatat(2) of the files of a batch named as in read_batch: bytes of native int64
 *       sizes, int64 modification times in ns and int32 errnos (0, or the error of a
 *       failed stat, whose size and mtime are 0).
 *
 *   block_columns(ids, created_at, offsets, i, j, flags) -> bytes
 *       The header and fixed-width columns of a block of documents i..j-1 of an
 *       id-sorted batch (the value layout is in loader/docs/blocks.py).
 *
 * The GIL is released while reading the directory and the files.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* --- a read-only buffer owning malloc'd memory (no copy on return) ---------------------- */

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t size;
    size_t cap;
} BufferObject;

/* The memory of the last Buffer freed, reused by the next read_batch: a worker reading
 * batch after batch writes into pages already mapped instead of page-faulting a fresh
 * buffer every time (about a fifth of the read time for 1 KB files). Guarded by the GIL. */
#define SPARE_MAX ((size_t)64 << 20)
static char *spare;
static size_t spare_cap;

static void buffer_dealloc(BufferObject *self)
{
    if (!spare && self->data && self->cap <= SPARE_MAX) {
        spare = self->data;
        spare_cap = self->cap;
    } else {
        free(self->data);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int buffer_getbuffer(BufferObject *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->size, 1, flags);
}

static Py_ssize_t buffer_length(BufferObject *self)
{
    return self->size;
}

static PyBufferProcs buffer_as_buffer = {(getbufferproc)buffer_getbuffer, NULL};
static PySequenceMethods buffer_as_sequence = {.sq_length = (lenfunc)buffer_length};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "loader.docs._docsio.Buffer",
    .tp_doc = "The bytes read by read_batch (read-only; use memoryview / numpy.frombuffer).",
    .tp_basicsize = sizeof(BufferObject),
    .tp_dealloc = (destructor)buffer_dealloc,
    .tp_as_buffer = &buffer_as_buffer,
    .tp_as_sequence = &buffer_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

/* --- growing arrays ------------------------------------------------------------------ */

typedef struct {
    char *data;
    size_t size, cap;
} Bytes;

/* Make room for at least `more` bytes after size; 0 or -1 (out of memory). */
static int bytes_reserve(Bytes *b, size_t more)
{
    size_t cap;
    char *p;

    if (b->cap - b->size >= more)
        return 0;
    cap = b->cap ? b->cap : 4096;
    while (cap - b->size < more) {
        if (cap > SIZE_MAX / 2)
            return -1;
        cap *= 2;
    }
    p = realloc(b->data, cap);
    if (!p)
        return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

static int bytes_append(Bytes *b, const void *src, size_t n)
{
    if (bytes_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->size, src, n);
    b->size += n;
    return 0;
}

/* --- names --------------------------------------------------------------------------- */

/* The id of a canonical name "<digits>.json" (no leading zero unless "0.json", < 2**64):
 * 1 and *id, or 0 when the name is not canonical. */
static int canonical_id(const char *name, size_t len, uint64_t *id)
{
    size_t d, i;
    uint64_t v = 0;

    if (len < 6 || len > 25 || memcmp(name + len - 5, ".json", 5) != 0)
        return 0;
    d = len - 5;
    if (d > 1 && name[0] == '0')
        return 0;
    for (i = 0; i < d; i++) {
        unsigned c = (unsigned char)name[i] - '0';
        if (c > 9)
            return 0;
        if (v > (UINT64_MAX - c) / 10)
            return 0; /* >= 2**64 */
        v = v * 10 + c;
    }
    *id = v;
    return 1;
}

/* "<id>.json" into out (at least 26 bytes), NUL-terminated. */
static void format_name(uint64_t id, char *out)
{
    char tmp[20];
    int n = 0;

    do {
        tmp[n++] = (char)('0' + id % 10);
        id /= 10;
    } while (id);
    while (n)
        *out++ = tmp[--n];
    memcpy(out, ".json", 6);
}

/* --- scan_dir ------------------------------------------------------------------------ */

static PyObject *scan_dir(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *pathobj, *path = NULL, *ids = NULL, *odd = NULL, *result = NULL;
    Bytes idbuf = {0}, names = {0};
    DIR *dir = NULL;
    struct dirent *e;
    int err = 0, oom = 0;
    size_t pos;

    if (!PyArg_ParseTuple(args, "O:scan_dir", &pathobj))
        return NULL;
    if (!PyUnicode_FSConverter(pathobj, &path))
        return NULL;

    Py_BEGIN_ALLOW_THREADS
    dir = opendir(PyBytes_AS_STRING(path));
    if (!dir) {
        err = errno;
    } else {
        int dfd = dirfd(dir);
        for (;;) {
            const char *name;
            size_t len;
            uint64_t id;
            int regular;

            errno = 0;
            e = readdir(dir);
            if (!e) {
                err = errno;
                break;
            }
            name = e->d_name;
            if (name[0] == '.')
                continue;
#ifdef _DIRENT_HAVE_D_TYPE
            if (e->d_type == DT_REG) {
                regular = 1;
            } else if (e->d_type != DT_LNK && e->d_type != DT_UNKNOWN) {
                regular = 0;
            } else
#endif
            {
                struct stat st;
                regular = fstatat(dfd, name, &st, 0) == 0 && S_ISREG(st.st_mode);
            }
            if (!regular)
                continue;
            len = strlen(name);
            if (canonical_id(name, len, &id)) {
                if (bytes_append(&idbuf, &id, sizeof id) < 0) {
                    oom = 1;
                    break;
                }
            } else if (bytes_append(&names, name, len + 1) < 0) {
                oom = 1;
                break;
            }
        }
        closedir(dir);
    }
    Py_END_ALLOW_THREADS

    if (oom) {
        PyErr_NoMemory();
        goto done;
    }
    if (err) {
        errno = err;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, pathobj);
        goto done;
    }
    ids = PyBytes_FromStringAndSize(idbuf.data ? idbuf.data : "", (Py_ssize_t)idbuf.size);
    odd = PyList_New(0);
    if (!ids || !odd)
        goto done;
    for (pos = 0; pos < names.size;) {
        size_t len = strlen(names.data + pos);
        PyObject *s = PyUnicode_DecodeFSDefaultAndSize(names.data + pos, (Py_ssize_t)len);
        if (!s || PyList_Append(odd, s) < 0) {
            Py_XDECREF(s);
            goto done;
        }
        Py_DECREF(s);
        pos += len + 1;
    }
    result = PyTuple_Pack(2, ids, odd);
done:
    Py_XDECREF(ids);
    Py_XDECREF(odd);
    Py_DECREF(path);
    free(idbuf.data);
    free(names.data);
    return result;
}

/* --- read_batch ---------------------------------------------------------------------- */

#define MIN_READ ((size_t)64 << 10) /* room offered to each read(2) */

static int is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* 1 when the first and last non-whitespace bytes of p[0:n] are '{' and '}' (two bytes). */
static uint8_t braced(const char *p, size_t n)
{
    size_t a = 0, z = n;

    while (a < z && is_ws(p[a]))
        a++;
    while (z > a && is_ws(p[z - 1]))
        z--;
    return z - a >= 2 && p[a] == '{' && p[z - 1] == '}';
}

/* Read the whole file fd at the end of buf; 0, an errno, or -1 (out of memory). */
static int read_all(int fd, Bytes *buf)
{
    for (;;) {
        ssize_t r;

        if (bytes_reserve(buf, MIN_READ) < 0)
            return -1;
        r = read(fd, buf->data + buf->size, buf->cap - buf->size);
        if (r > 0) {
            buf->size += (size_t)r;
        } else if (r == 0) {
            return 0;
        } else if (errno != EINTR) {
            return errno;
        }
    }
}

/* The arguments shared by read_batch and stat_batch: (dir, ids, names=None). */
typedef struct {
    Py_buffer idview;
    const uint64_t *ids;
    Py_ssize_t n;
    const char **names; /* NULL, or per file: its name, or NULL for "<id>.json" */
    PyObject *held;     /* keeps the encoded names alive */
    PyObject *dirobj;   /* the dir argument (borrowed: alive for the call) */
    PyObject *dirpath;  /* the directory as bytes, to open; NULL: dfd is given */
    int dfd;
} BatchArgs;

static void batch_args_release(BatchArgs *a)
{
    free(a->names);
    Py_XDECREF(a->held);
    Py_XDECREF(a->dirpath);
    if (a->idview.obj)
        PyBuffer_Release(&a->idview);
}

static int batch_args(PyObject *args, PyObject *kwargs, const char *fmt, const char *fn, BatchArgs *a)
{
    static char *kwlist[] = {"dir", "ids", "names", NULL};
    PyObject *dirobj, *idsobj, *namesobj = Py_None;
    Py_ssize_t i;

    memset(a, 0, sizeof *a);
    a->dfd = AT_FDCWD;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, fmt, kwlist, &dirobj, &idsobj, &namesobj))
        return -1;
    a->dirobj = dirobj;
    if (PyObject_GetBuffer(idsobj, &a->idview, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (a->idview.itemsize != 8
        || (a->idview.format && (!a->idview.format[0]
                                 || !strchr("QL", a->idview.format[strlen(a->idview.format) - 1])))) {
        PyErr_Format(PyExc_TypeError, "%s: ids must be a contiguous buffer of uint64", fn);
        return -1;
    }
    a->ids = (const uint64_t *)a->idview.buf;
    a->n = a->idview.len / 8;
    if (dirobj != Py_None) {
        if (PyLong_Check(dirobj)) {
            a->dfd = (int)PyLong_AsLong(dirobj);
            if (a->dfd == -1 && PyErr_Occurred())
                return -1;
        } else if (!PyUnicode_FSConverter(dirobj, &a->dirpath)) {
            return -1;
        }
    }
    if (namesobj != Py_None) {
        PyObject *seq = PySequence_Fast(namesobj, "names must be a sequence or None");
        if (!seq)
            return -1;
        if (PySequence_Fast_GET_SIZE(seq) != a->n) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "%s: names and ids differ in length", fn);
            return -1;
        }
        a->held = PyList_New(0);
        a->names = calloc((size_t)a->n + 1, sizeof *a->names);
        if (!a->held || !a->names) {
            Py_DECREF(seq);
            if (a->held)
                PyErr_NoMemory();
            return -1;
        }
        for (i = 0; i < a->n; i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(seq, i), *b = NULL;
            if (item == Py_None)
                continue;
            if (!PyUnicode_FSConverter(item, &b) || PyList_Append(a->held, b) < 0) {
                Py_XDECREF(b);
                Py_DECREF(seq);
                return -1;
            }
            Py_DECREF(b);
            a->names[i] = PyBytes_AS_STRING(b); /* kept alive by held */
        }
        Py_DECREF(seq);
    }
    return 0;
}

/* The directory fd of a batch (opened when given as a path; GIL released); *err = errno
 * when it cannot be opened. */
static int batch_dir(BatchArgs *a, int *err)
{
    int fd;

    *err = 0;
    if (!a->dirpath)
        return a->dfd;
    fd = open(PyBytes_AS_STRING(a->dirpath), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        *err = errno;
    return fd;
}

static PyObject *read_batch(PyObject *Py_UNUSED(self), PyObject *args, PyObject *kwargs)
{
    PyObject *result = NULL;
    PyObject *spans = NULL, *errnos = NULL, *flags = NULL;
    BufferObject *out = NULL;
    BatchArgs a;
    const char **names;
    const uint64_t *ids;
    int64_t *sp;
    int32_t *en;
    uint8_t *fl;
    Py_ssize_t n, i;
    int dfd = AT_FDCWD, dir_err = 0, oom = 0;
#ifdef O_NOATIME
    int open_flags = O_RDONLY | O_CLOEXEC | O_NOATIME;
#else
    int open_flags = O_RDONLY | O_CLOEXEC;
#endif
    Bytes buf = {0};

    if (batch_args(args, kwargs, "OO|O:read_batch", "read_batch", &a) < 0) {
        batch_args_release(&a);
        return NULL;
    }
    ids = a.ids;
    n = a.n;
    names = a.names;
    spans = PyBytes_FromStringAndSize(NULL, n * 16);
    errnos = PyBytes_FromStringAndSize(NULL, n * 4);
    flags = PyBytes_FromStringAndSize(NULL, n);
    out = PyObject_New(BufferObject, &BufferType);
    if (out) {
        out->data = NULL;
        out->size = 0;
        out->cap = 0;
    }
    if (!spans || !errnos || !flags || !out)
        goto done;
    sp = (int64_t *)PyBytes_AS_STRING(spans);
    en = (int32_t *)PyBytes_AS_STRING(errnos);
    fl = (uint8_t *)PyBytes_AS_STRING(flags);
    if (spare) {
        buf.data = spare;
        buf.cap = spare_cap;
        spare = NULL;
    }

    Py_BEGIN_ALLOW_THREADS
    dfd = batch_dir(&a, &dir_err);
    if (!dir_err && bytes_append(&buf, "[", 1) < 0)
        oom = 1;
    for (i = 0; i < n && !dir_err && !oom; i++) {
        char own[32];
        const char *name = names && names[i] ? names[i] : own;
        size_t start;
        int fd, r;

        if (i && bytes_append(&buf, ",\n", 2) < 0) {
            oom = 1;
            break;
        }
        start = buf.size;
        if (name == own)
            format_name(ids[i], own);
        do {
            fd = openat(dfd, name, open_flags);
#ifdef O_NOATIME
            if (fd < 0 && errno == EPERM && (open_flags & O_NOATIME)) {
                open_flags &= ~O_NOATIME; /* not our file: no O_NOATIME from now on */
                fd = openat(dfd, name, open_flags);
            }
#endif
        } while (fd < 0 && errno == EINTR);
        if (fd < 0) {
            r = errno;
        } else {
            r = read_all(fd, &buf);
            close(fd);
            if (r < 0) {
                oom = 1;
                break;
            }
            if (r)
                buf.size = start; /* a failed read leaves nothing */
        }
        sp[2 * i] = (int64_t)start;
        sp[2 * i + 1] = (int64_t)buf.size;
        en[i] = r;
        fl[i] = r ? 0 : braced(buf.data + start, buf.size - start);
    }
    if (!dir_err && !oom && bytes_append(&buf, "]", 1) < 0)
        oom = 1;
    if (a.dirpath && dfd >= 0)
        close(dfd);
    Py_END_ALLOW_THREADS

    if (oom) {
        PyErr_NoMemory();
        goto done;
    }
    if (dir_err) {
        errno = dir_err;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, a.dirobj);
        goto done;
    }
    out->data = buf.data;
    out->cap = buf.cap;
    out->size = (Py_ssize_t)buf.size;
    buf.data = NULL;
    result = PyTuple_Pack(4, (PyObject *)out, spans, errnos, flags);
done:
    free(buf.data);
    batch_args_release(&a);
    Py_XDECREF(spans);
    Py_XDECREF(errnos);
    Py_XDECREF(flags);
    Py_XDECREF(out);
    return result;
}

static PyObject *stat_batch(PyObject *Py_UNUSED(self), PyObject *args, PyObject *kwargs)
{
    PyObject *result = NULL, *sizes = NULL, *mtimes = NULL, *errnos = NULL;
    BatchArgs a;
    int64_t *sz, *mt;
    int32_t *en;
    Py_ssize_t i;
    int dfd, dir_err = 0;

    if (batch_args(args, kwargs, "OO|O:stat_batch", "stat_batch", &a) < 0)
        goto done;
    sizes = PyBytes_FromStringAndSize(NULL, a.n * 8);
    mtimes = PyBytes_FromStringAndSize(NULL, a.n * 8);
    errnos = PyBytes_FromStringAndSize(NULL, a.n * 4);
    if (!sizes || !mtimes || !errnos)
        goto done;
    sz = (int64_t *)PyBytes_AS_STRING(sizes);
    mt = (int64_t *)PyBytes_AS_STRING(mtimes);
    en = (int32_t *)PyBytes_AS_STRING(errnos);
    Py_BEGIN_ALLOW_THREADS
    dfd = batch_dir(&a, &dir_err);
    for (i = 0; i < a.n && !dir_err; i++) {
        char own[32];
        const char *name = a.names && a.names[i] ? a.names[i] : own;
        struct stat st;

        if (name == own)
            format_name(a.ids[i], own);
        if (fstatat(dfd, name, &st, 0) < 0) { /* follows symlinks, as os.stat */
            en[i] = errno;
            sz[i] = mt[i] = 0;
        } else {
            en[i] = 0;
            sz[i] = (int64_t)st.st_size;
            mt[i] = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        }
    }
    if (a.dirpath && dfd >= 0)
        close(dfd);
    Py_END_ALLOW_THREADS
    if (dir_err) {
        errno = dir_err;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, a.dirobj);
        goto done;
    }
    result = PyTuple_Pack(3, sizes, mtimes, errnos);
done:
    batch_args_release(&a);
    Py_XDECREF(sizes);
    Py_XDECREF(mtimes);
    Py_XDECREF(errnos);
    return result;
}

/* --- document blocks ------------------------------------------------------------------ */

/* The smallest of 1, 2, 4, 8 bytes that holds every value <= maximum. */
static int width_of(uint64_t maximum)
{
    if (maximum < 0x100u)
        return 1;
    if (maximum < 0x10000u)
        return 2;
    if (maximum < 0x100000000ull)
        return 4;
    return 8;
}

static char *put_le(char *p, uint64_t v, int w)
{
    for (int k = 0; k < w; k++)
        p[k] = (char)(v >> (8 * k));
    return p + w;
}

static int u64_buffer(Py_buffer *b, const char *what, Py_ssize_t n)
{
    if (b->len != n * 8) {
        PyErr_Format(PyExc_ValueError, "block_columns: %s holds %zd bytes, expected %zd", what, b->len, n * 8);
        return -1;
    }
    return 0;
}

static PyObject *block_columns(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer ids = {0}, cas = {0}, off = {0};
    Py_ssize_t i, j, n, k;
    int flags;
    PyObject *out = NULL;

    if (!PyArg_ParseTuple(args, "y*y*y*nni", &ids, &cas, &off, &i, &j, &flags))
        return NULL;
    n = ids.len / 8;
    if (u64_buffer(&ids, "ids", n) || u64_buffer(&cas, "created_at", n) || u64_buffer(&off, "offsets", n + 1))
        goto done;
    if (i < 0 || j <= i || j > n || j - i > 0xFFFFFFFFll || flags < 0 || flags > 255) {
        PyErr_Format(PyExc_ValueError, "block_columns: bad block %zd..%zd of %zd documents (flags %d)", i, j, n, flags);
        goto done;
    }
    {
        const uint64_t *id = ids.buf;
        const int64_t *ca = cas.buf, *of = off.buf;
        Py_ssize_t m = j - i;
        uint64_t first = id[i], maxd = 0, maxlen = 0, span;
        int64_t base = ca[i], top = ca[i];
        int wi = 0, wl, wc;
        char *p;

        if (m > 1 && id[j - 1] - first != (uint64_t)(m - 1)) { /* not consecutive */
            for (k = i + 1; k < j; k++)
                if (id[k] - id[k - 1] > maxd)
                    maxd = id[k] - id[k - 1];
            wi = width_of(maxd);
        }
        for (k = i; k < j; k++) {
            uint64_t len = (uint64_t)(of[k + 1] - of[k]);
            if (len > maxlen)
                maxlen = len;
            if (ca[k] < base)
                base = ca[k];
            if (ca[k] > top)
                top = ca[k];
        }
        wl = width_of(maxlen);
        span = (uint64_t)top - (uint64_t)base;
        wc = span ? width_of(span) : 0;
        out = PyBytes_FromStringAndSize(NULL, 24 + (m - 1) * wi + m * (wl + wc));
        if (!out)
            goto done;
        p = PyBytes_AS_STRING(out);
        p = put_le(p, (uint64_t)m, 4);
        *p++ = (char)wi;
        *p++ = (char)wl;
        *p++ = (char)wc;
        *p++ = (char)flags;
        p = put_le(p, first, 8);
        p = put_le(p, (uint64_t)base, 8);
        if (wi)
            for (k = i + 1; k < j; k++)
                p = put_le(p, id[k] - id[k - 1], wi);
        for (k = i; k < j; k++)
            p = put_le(p, (uint64_t)(of[k + 1] - of[k]), wl);
        if (wc)
            for (k = i; k < j; k++)
                p = put_le(p, (uint64_t)ca[k] - (uint64_t)base, wc);
    }
done:
    PyBuffer_Release(&ids);
    PyBuffer_Release(&cas);
    PyBuffer_Release(&off);
    return out;
}

/* --- module -------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"scan_dir", scan_dir, METH_VARARGS,
     "scan_dir($module, path, /)\n--\n\n"
     "-> (ids: bytes of native uint64, odd: list of str); see the module doc."},
    {"read_batch", (PyCFunction)(void (*)(void))read_batch, METH_VARARGS | METH_KEYWORDS,
     "read_batch($module, dir, ids, names=None)\n--\n\n"
     "-> (buffer, spans, errnos, braced); see the module doc."},
    {"stat_batch", (PyCFunction)(void (*)(void))stat_batch, METH_VARARGS | METH_KEYWORDS,
     "stat_batch($module, dir, ids, names=None)\n--\n\n"
     "-> (sizes, mtimes_ns, errnos): bytes of native int64, int64,\n"
     "int32 per file (named as in read_batch); stat(2) follows symlinks; a failed stat: errno, 0, 0."},
    {"block_columns", block_columns, METH_VARARGS,
     "block_columns($module, ids, created_at, offsets, i, j, flags, /)\n--\n\n"
     "-> bytes: the header and columns of the\n"
     "document block i..j-1 (loader/docs/blocks.py has the layout); native uint64/int64 buffers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "loader.docs._docsio",
    .m_doc = "Listing and reading a directory of <id>.json documents (see loader/docs/_docsiomodule.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__docsio(void)
{
    PyObject *m;

    if (PyType_Ready(&BufferType) < 0)
        return NULL;
    m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&BufferType);
    if (PyModule_AddObject(m, "Buffer", (PyObject *)&BufferType) < 0) {
        Py_DECREF(&BufferType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
