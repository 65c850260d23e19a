/* loader.serializers._shuffle: the byte shuffle of fixed-size records (see
 * loader/serializers/shuffled.py for the value format that uses it).
 *
 *   shuffle(src, dst, stride)
 *       src holds n records of ``stride`` bytes (len(src) = n * stride); dst, a writable
 *       buffer of the same size, receives byte k of every record together:
 *       dst[k * n + i] = src[i * stride + k]. Fixed-size numeric records turn into long
 *       runs (the high bytes of counters and coordinates repeat) that LZ4 and zstd
 *       compress at GB/s.
 *   unshuffle(src, dst, stride)
 *       The inverse: dst[i * stride + k] = src[k * n + i].
 *
 * Both work in tiles of TILE records, so that a tile of records (TILE * stride bytes) stays
 * in the cache while its bytes go to (or come from) the ``stride`` streams, and transpose
 * 16x16-byte blocks with SSE2 where the machine has it (x86-64 always does), 8x8 blocks
 * in 64-bit words otherwise: ~5 GB/s over 96 MB, ~17 GB/s over a cached 1 MB batch.
 * The GIL is released while they run. A size that is not a multiple of stride, a stride
 * < 1, buffers of different sizes or a read-only dst raise ValueError / TypeError.
 *
 * A scan's read of a batch (loader/serializers/capnp_framing.py), two calls, GIL released:
 *   lz4_planes(src, dst, want) -> int
 *       Decompress the LZ4 block ``src`` into the writable ``dst`` (a reused buffer of the
 *       records' size), stopping once ``want`` bytes are out (the planes of the fields
 *       asked for: a field's planes lie at its byte offset); the bytes decoded. A damaged
 *       block raises ValueError. LZ4 is third_party/lz4 (python-lz4 cannot stop early
 *       or write into a given buffer: it allocates each batch's output).
 *   unshuffle_fields(planes, n, fields)
 *       ``fields``: (offset, width, out) triples; each ``out`` (n * width writable bytes)
 *       = the records of ``width`` bytes of planes [offset * n, (offset + width) * n).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lz4.h"

#define TILE 1024 /* records per tile: a multiple of 8 */

/* Transpose the 8x8 byte matrix x (x[r] = row r, byte c of the little-endian word = column
 * c) in place, in three steps of block swaps (4x4, 2x2, 1x1 blocks). */
static inline void transpose8(uint64_t x[8])
{
    for (int j = 0; j < 4; j++) {
        uint64_t a = x[j], b = x[j + 4];
        x[j] = (a & 0x00000000FFFFFFFFULL) | (b << 32);
        x[j + 4] = (a >> 32) | (b & 0xFFFFFFFF00000000ULL);
    }
    for (int j = 0; j < 8; j += (j & 1) ? 3 : 1) { /* j = 0, 1, 4, 5 */
        uint64_t a = x[j], b = x[j + 2];
        x[j] = (a & 0x0000FFFF0000FFFFULL) | ((b & 0x0000FFFF0000FFFFULL) << 16);
        x[j + 2] = ((a >> 16) & 0x0000FFFF0000FFFFULL) | (b & 0xFFFF0000FFFF0000ULL);
    }
    for (int j = 0; j < 8; j += 2) {
        uint64_t a = x[j], b = x[j + 1];
        x[j] = (a & 0x00FF00FF00FF00FFULL) | ((b & 0x00FF00FF00FF00FFULL) << 8);
        x[j + 1] = ((a >> 8) & 0x00FF00FF00FF00FFULL) | (b & 0xFF00FF00FF00FF00ULL);
    }
}

#ifdef __SSE2__
#include <emmintrin.h>

/* Transpose the 16x16 byte matrix x (x[r] = row r) in four rounds of unpacks (bytes,
 * 16-, 32-, 64-bit units); out[c] = column c. */
static inline void transpose16(const __m128i x[16], __m128i out[16])
{
    __m128i a[16], b[16], c[16];
    for (int j = 0; j < 8; j++) {
        a[2 * j] = _mm_unpacklo_epi8(x[2 * j], x[2 * j + 1]);
        a[2 * j + 1] = _mm_unpackhi_epi8(x[2 * j], x[2 * j + 1]);
    }
    for (int m = 0; m < 4; m++) {
        b[4 * m] = _mm_unpacklo_epi16(a[4 * m], a[4 * m + 2]);
        b[4 * m + 1] = _mm_unpackhi_epi16(a[4 * m], a[4 * m + 2]);
        b[4 * m + 2] = _mm_unpacklo_epi16(a[4 * m + 1], a[4 * m + 3]);
        b[4 * m + 3] = _mm_unpackhi_epi16(a[4 * m + 1], a[4 * m + 3]);
    }
    for (int p = 0; p < 2; p++)
        for (int g = 0; g < 4; g++) {
            c[8 * p + 2 * g] = _mm_unpacklo_epi32(b[8 * p + g], b[8 * p + 4 + g]);
            c[8 * p + 2 * g + 1] = _mm_unpackhi_epi32(b[8 * p + g], b[8 * p + 4 + g]);
        }
    for (int q = 0; q < 8; q++) {
        out[2 * q] = _mm_unpacklo_epi64(c[q], c[8 + q]);
        out[2 * q + 1] = _mm_unpackhi_epi64(c[q], c[8 + q]);
    }
}

/* Bytes [0, k16) of records i0..i0+m16-1 (both multiples of 16) by 16x16 blocks. */
static void tile16(const uint8_t *src, uint8_t *dst, size_t n, size_t stride, size_t i0, size_t m16,
                   size_t k16, int to_streams)
{
    __m128i x[16], out[16];
    for (size_t k = 0; k < k16; k += 16) {
        for (size_t i = i0; i < i0 + m16; i += 16) {
            for (int r = 0; r < 16; r++)
                x[r] = _mm_loadu_si128((const __m128i *)(to_streams ? src + (i + r) * stride + k
                                                                    : src + (k + r) * n + i));
            transpose16(x, out);
            for (int c = 0; c < 16; c++)
                _mm_storeu_si128((__m128i *)(to_streams ? dst + (k + c) * n + i : dst + (i + c) * stride + k),
                                 out[c]);
        }
    }
}
#endif

/* One tile: records i0..i0+m-1. ``to_streams``: records -> streams (shuffle), else back.
 * 16x16 blocks (SSE2) where there are 16 bytes and 16 records, then 8x8 blocks, then
 * single bytes for what is left (the last stride % 8 bytes, the last m % 8 records). */
static void tile(const uint8_t *src, uint8_t *dst, size_t n, size_t stride, size_t i0, size_t m,
                 int to_streams)
{
    size_t m8 = m & ~(size_t)7, k8 = stride & ~(size_t)7, k16 = 0;
    uint64_t x[8];
#ifdef __SSE2__
    size_t m16 = m & ~(size_t)15;
    k16 = stride & ~(size_t)15;
    tile16(src, dst, n, stride, i0, m16, k16, to_streams);
    /* the records the 16x16 blocks left in bytes [0, k16): at most 15 */
    for (size_t k = 0; k < k16; k++)
        for (size_t i = i0 + m16; i < i0 + m; i++) {
            if (to_streams)
                dst[k * n + i] = src[i * stride + k];
            else
                dst[i * stride + k] = src[k * n + i];
        }
#endif
    for (size_t k = k16; k < k8; k += 8) {
        for (size_t i = i0; i < i0 + m8; i += 8) {
            if (to_streams) {
                for (int r = 0; r < 8; r++)
                    memcpy(&x[r], src + (i + r) * stride + k, 8);
                transpose8(x);
                for (int c = 0; c < 8; c++)
                    memcpy(dst + (k + c) * n + i, &x[c], 8);
            } else {
                for (int c = 0; c < 8; c++)
                    memcpy(&x[c], src + (k + c) * n + i, 8);
                transpose8(x);
                for (int r = 0; r < 8; r++)
                    memcpy(dst + (i + r) * stride + k, &x[r], 8);
            }
        }
    }
    for (size_t k = k16; k < stride; k++) {
        size_t from = k < k8 ? i0 + m8 : i0;
        for (size_t i = from; i < i0 + m; i++) {
            if (to_streams)
                dst[k * n + i] = src[i * stride + k];
            else
                dst[i * stride + k] = src[k * n + i];
        }
    }
}

static void shuffle_tiles(const uint8_t *src, uint8_t *dst, size_t n, size_t stride)
{
    for (size_t i0 = 0; i0 < n; i0 += TILE)
        tile(src, dst, n, stride, i0, n - i0 < TILE ? n - i0 : TILE, 1);
}

#ifdef __SSE2__
/* Unshuffle of 4- and 8-byte records (one numeric field's byte planes: a scan's column,
 * loader/serializers/capnp_framing.py) in one pass, 16 records a step: the planes are read
 * and the records written in order, a few unpacks per 16 bytes; returns the records done
 * (a multiple of 16). */
static size_t unshuffle4(const uint8_t *src, uint8_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i r0 = _mm_loadu_si128((const __m128i *)(src + i)),
                r1 = _mm_loadu_si128((const __m128i *)(src + n + i)),
                r2 = _mm_loadu_si128((const __m128i *)(src + 2 * n + i)),
                r3 = _mm_loadu_si128((const __m128i *)(src + 3 * n + i));
        __m128i a0 = _mm_unpacklo_epi8(r0, r1), a1 = _mm_unpackhi_epi8(r0, r1);
        __m128i b0 = _mm_unpacklo_epi8(r2, r3), b1 = _mm_unpackhi_epi8(r2, r3);
        __m128i *o = (__m128i *)(dst + i * 4);
        _mm_storeu_si128(o, _mm_unpacklo_epi16(a0, b0));
        _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(a0, b0));
        _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(a1, b1));
        _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(a1, b1));
    }
    return i;
}

static size_t unshuffle8(const uint8_t *src, uint8_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i r[8];
        for (int k = 0; k < 8; k++)
            r[k] = _mm_loadu_si128((const __m128i *)(src + k * n + i));
        __m128i a0 = _mm_unpacklo_epi8(r[0], r[1]), a1 = _mm_unpackhi_epi8(r[0], r[1]);
        __m128i b0 = _mm_unpacklo_epi8(r[2], r[3]), b1 = _mm_unpackhi_epi8(r[2], r[3]);
        __m128i c0 = _mm_unpacklo_epi8(r[4], r[5]), c1 = _mm_unpackhi_epi8(r[4], r[5]);
        __m128i d0 = _mm_unpacklo_epi8(r[6], r[7]), d1 = _mm_unpackhi_epi8(r[6], r[7]);
        /* e: bytes 0-3 of records (0-3, 4-7, 8-11, 12-15); f: their bytes 4-7 */
        __m128i e[4] = {_mm_unpacklo_epi16(a0, b0), _mm_unpackhi_epi16(a0, b0), _mm_unpacklo_epi16(a1, b1),
                        _mm_unpackhi_epi16(a1, b1)};
        __m128i f[4] = {_mm_unpacklo_epi16(c0, d0), _mm_unpackhi_epi16(c0, d0), _mm_unpacklo_epi16(c1, d1),
                        _mm_unpackhi_epi16(c1, d1)};
        __m128i *o = (__m128i *)(dst + i * 8);
        for (int q = 0; q < 4; q++) {
            _mm_storeu_si128(o + 2 * q, _mm_unpacklo_epi32(e[q], f[q]));
            _mm_storeu_si128(o + 2 * q + 1, _mm_unpackhi_epi32(e[q], f[q]));
        }
    }
    return i;
}
#endif

static void unshuffle_tiles(const uint8_t *src, uint8_t *dst, size_t n, size_t stride)
{
#ifdef __SSE2__
    if (stride == 4 || stride == 8) {
        size_t done = stride == 4 ? unshuffle4(src, dst, n) : unshuffle8(src, dst, n);
        for (size_t i = done; i < n; i++)
            for (size_t k = 0; k < stride; k++)
                dst[i * stride + k] = src[k * n + i];
        return;
    }
#endif
    for (size_t i0 = 0; i0 < n; i0 += TILE)
        tile(src, dst, n, stride, i0, n - i0 < TILE ? n - i0 : TILE, 0);
}

typedef void (*transform_fn)(const uint8_t *, uint8_t *, size_t, size_t);

static PyObject *transform(PyObject *args, transform_fn fn)
{
    Py_buffer src, dst;
    Py_ssize_t stride;

    if (!PyArg_ParseTuple(args, "y*w*n", &src, &dst, &stride))
        return NULL;
    PyObject *result = NULL;
    if (stride < 1) {
        PyErr_Format(PyExc_ValueError, "stride must be >= 1, not %zd", stride);
    } else if (src.len != dst.len) {
        PyErr_Format(PyExc_ValueError, "src holds %zd bytes, dst %zd: they must be the same size", src.len,
                     dst.len);
    } else if (src.len % stride) {
        PyErr_Format(PyExc_ValueError, "%zd bytes is not a whole number of %zd-byte records", src.len, stride);
    } else {
        size_t n = (size_t)(src.len / stride);
        Py_BEGIN_ALLOW_THREADS
        fn((const uint8_t *)src.buf, (uint8_t *)dst.buf, n, (size_t)stride);
        Py_END_ALLOW_THREADS
        result = Py_None;
        Py_INCREF(result);
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

static PyObject *py_shuffle(PyObject *self, PyObject *args)
{
    (void)self;
    return transform(args, shuffle_tiles);
}

static PyObject *py_unshuffle(PyObject *self, PyObject *args)
{
    (void)self;
    return transform(args, unshuffle_tiles);
}

static PyObject *py_lz4_planes(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer src, dst;
    Py_ssize_t want;

    if (!PyArg_ParseTuple(args, "y*w*n", &src, &dst, &want))
        return NULL;
    PyObject *result = NULL;
    if (src.len > INT_MAX || dst.len > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "an LZ4 block of %zd bytes into %zd: over LZ4's 2 GiB", src.len, dst.len);
    } else if (want < 0 || want > dst.len) {
        PyErr_Format(PyExc_ValueError, "want %zd bytes: not within the %zd of dst", want, dst.len);
    } else {
        int got;
        Py_BEGIN_ALLOW_THREADS
        if (want == dst.len)
            got = LZ4_decompress_safe((const char *)src.buf, (char *)dst.buf, (int)src.len, (int)dst.len);
        else
            got = LZ4_decompress_safe_partial((const char *)src.buf, (char *)dst.buf, (int)src.len, (int)want,
                                              (int)dst.len);
        Py_END_ALLOW_THREADS
        if (got < 0)
            PyErr_Format(PyExc_ValueError, "the LZ4 block is damaged (error at input byte %d)", -got - 1);
        else
            result = PyLong_FromLong(got);
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

static PyObject *py_unshuffle_fields(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer planes;
    Py_ssize_t n;
    PyObject *fields;

    if (!PyArg_ParseTuple(args, "y*nO", &planes, &n, &fields))
        return NULL;
    PyObject *seq = PySequence_Fast(fields, "fields must be a sequence of (offset, width, out)");
    if (seq == NULL) {
        PyBuffer_Release(&planes);
        return NULL;
    }
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq), got = 0;
    Py_buffer *outs = PyMem_Calloc(k ? (size_t)k : 1, sizeof(Py_buffer));
    Py_ssize_t *at = PyMem_Calloc(k ? (size_t)k : 1, 2 * sizeof(Py_ssize_t));
    int ok = outs != NULL && at != NULL && n >= 0;
    if (outs == NULL || at == NULL)
        PyErr_NoMemory();
    else if (n < 0)
        PyErr_Format(PyExc_ValueError, "n must be >= 0, not %zd", n);
    for (; ok && got < k; got++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, got);
        Py_ssize_t off, w;
        if (!PyArg_ParseTuple(item, "nnw*", &off, &w, &outs[got])) {
            ok = 0;
            break;
        }
        at[2 * got] = off, at[2 * got + 1] = w;
        if (off < 0 || w < 1 || (off + w) * n > planes.len || outs[got].len != w * n) {
            PyErr_Format(PyExc_ValueError,
                         "field at byte %zd of %zd bytes: planes [%zd, %zd) of %zd bytes into %zd bytes", off, w,
                         off * n, (off + w) * n, planes.len, outs[got].len);
            ok = 0; /* the loop's got++ still counts this out: it is released below */
        }
    }
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t j = 0; j < k; j++)
            unshuffle_tiles((const uint8_t *)planes.buf + at[2 * j] * n, (uint8_t *)outs[j].buf, (size_t)n,
                            (size_t)at[2 * j + 1]);
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t j = 0; j < got && outs != NULL; j++)
        PyBuffer_Release(&outs[j]);
    PyMem_Free(outs);
    PyMem_Free(at);
    Py_DECREF(seq);
    PyBuffer_Release(&planes);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

/* lz4_value(prefix, head, region, scratch, stride) -> bytes: prefix + head + the LZ4 block
 * (LZ4_compress_default) of shuffle(region, stride), shuffled in scratch - or of region as
 * it is when stride is 0 (planes shuffled by the caller); the GIL released while it
 * shuffles and compresses. One call per batch value instead of four (a small batch's
 * values were mostly Python calls: loader/serializers/shuffled.py). Every LZ4 block
 * bulkload writes comes from here (python-lz4 picks its own match candidates: its blocks
 * of the same bytes may differ), so a value's bytes depend on its records only. */
static PyObject *py_lz4_value(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer prefix, head, region, scratch;
    Py_ssize_t stride;

    if (!PyArg_ParseTuple(args, "y*y*y*w*n", &prefix, &head, &region, &scratch, &stride))
        return NULL;
    PyObject *result = NULL;
    if (stride < 0 || (stride && region.len % stride)) {
        PyErr_Format(PyExc_ValueError, "%zd bytes is not a whole number of %zd-byte records", region.len, stride);
    } else if (scratch.len < region.len) {
        PyErr_Format(PyExc_ValueError, "scratch holds %zd bytes, the region %zd", scratch.len, region.len);
    } else if (region.len > LZ4_MAX_INPUT_SIZE) {
        PyErr_Format(PyExc_ValueError, "an LZ4 block of %zd bytes: over LZ4's limit", region.len);
    } else {
        int bound = LZ4_compressBound((int)region.len);
        Py_ssize_t at = prefix.len + head.len;
        result = PyBytes_FromStringAndSize(NULL, at + bound);
        if (result != NULL) {
            char *out = PyBytes_AS_STRING(result);
            int got = 0;
            memcpy(out, prefix.buf, (size_t)prefix.len);
            memcpy(out + prefix.len, head.buf, (size_t)head.len);
            Py_BEGIN_ALLOW_THREADS
            const char *from = (const char *)region.buf;
            if (stride) {
                shuffle_tiles((const uint8_t *)region.buf, (uint8_t *)scratch.buf, (size_t)(region.len / stride),
                              (size_t)stride);
                from = (const char *)scratch.buf;
            }
            got = LZ4_compress_default(from, out + at, (int)region.len, bound);
            Py_END_ALLOW_THREADS
            if (got <= 0) {
                Py_CLEAR(result);
                PyErr_SetString(PyExc_ValueError, "LZ4 could not compress the region");
            } else if (_PyBytes_Resize(&result, at + got) < 0) {
                result = NULL;
            }
        }
    }
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&head);
    PyBuffer_Release(&region);
    PyBuffer_Release(&scratch);
    return result;
}

static PyMethodDef methods[] = {
    {"shuffle", py_shuffle, METH_VARARGS,
     "shuffle($module, src, dst, stride, /)\n--\n\n"
     "dst[k*n + i] = src[i*stride + k] for n records of stride bytes."},
    {"unshuffle", py_unshuffle, METH_VARARGS,
     "unshuffle($module, src, dst, stride, /)\n--\n\n"
     "The inverse of shuffle, dst[i*stride + k] = src[k*n + i]."},
    {"lz4_planes", py_lz4_planes, METH_VARARGS,
     "lz4_planes($module, src, dst, want, /)\n--\n\n"
     "Decompress the LZ4 block src into dst, stopping once want bytes are out; the bytes decoded."},
    {"lz4_value", py_lz4_value, METH_VARARGS,
     "lz4_value($module, prefix, head, region, scratch, stride, /)\n--\n\n"
     "prefix + head + the LZ4 block of shuffle(region, stride) (shuffled in scratch)."},
    {"unshuffle_fields", py_unshuffle_fields, METH_VARARGS,
     "unshuffle_fields($module, planes, n, fields, /)\n--\n\n"
     "For each (offset, width, out) of fields: out = unshuffle(planes[offset*n:(offset+width)*n], width)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "loader.serializers._shuffle",
    .m_doc = "The byte shuffle of fixed-size records (see loader/serializers/_shufflemodule.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__shuffle(void)
{
    return PyModule_Create(&module);
}
