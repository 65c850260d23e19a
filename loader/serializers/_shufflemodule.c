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
 * A batch value's LZ4 (loader/serializers/capnp_framing.py), one call each, GIL released:
 *   lz4_blocks(prefix, head, region, scratch, stride, cuts) -> bytes
 *       prefix + head + the BLZ2 block table and blocks of the shuffled region (a head
 *       whose magic is BLZ3: the table, then each block's xxh3_64, then the blocks): a block
 *       per run of planes (a field's), each LZ4 of its planes, LZ4 of its unshuffled bytes
 *       (whole values that repeat), a dictionary of its values (MODE_DICT: few distinct
 *       values, as ticks' symbols and prices) or raw, whichever is smallest (a sample of
 *       the planes' LZ4, of its repeats and of the records' LZ4 decides which to try in
 *       full: compress_block). Every LZ4 block bulkload writes comes
 *       from here (python-lz4 picks its own match candidates), so a value's bytes depend
 *       on its records only.
 *   blocks_decode(src, dst, n, ranges, fields, hashed) -> int
 *       Decode into ``dst`` (a reused buffer of the records' size) only the BLZ2 blocks
 *       holding the planes ``ranges`` asks for (a scan's columns), the table checked whole
 *       (a dictionary's sizes and indexes before it is gathered);
 *       ``hashed`` (BLZ3): each of those blocks' xxh3_64 checked before it is decoded; a
 *       block of another hash raises BlockHashError (a ValueError of this module's own).
 *   lz4_planes(src, dst, want) -> int
 *       The same for an older BLZ1 value (one LZ4 block of every plane): decompress it
 *       into ``dst``, stopping once ``want`` bytes are out; the bytes decoded. A damaged
 *       block raises ValueError. LZ4 is third_party/lz4 (python-lz4 cannot stop early
 *       or write into a given buffer: it allocates each batch's output).
 *   unshuffle_fields(planes, n, fields)
 *       ``fields``: (offset, width, out) triples; each ``out`` (n * width writable bytes)
 *       = the records of ``width`` bytes of planes [offset * n, (offset + width) * n).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LZ4_STATIC_LINKING_ONLY /* LZ4_compress_fast_extState_fastReset */
#include "lz4.h"
#define XXH_INLINE_ALL /* header only: XXH3_64bits inlined here (third_party/xxhash) */
#include "xxhash.h"

/* third_party/xxhash/xxh3_avx2.c: XXH3 compiled for AVX2, used where the CPU has it */
uint64_t shuffle_xxh3_avx2(const void *data, size_t len);
int shuffle_xxh3_avx2_ok(void);
#if defined(__GNUC__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE
#endif
static int use_avx2; /* set at import */
static PyObject *BlockHashError; /* blocks_decode: a block whose bytes do not have its hash */

static inline uint64_t block_hash(const uint8_t *p, size_t n)
{
    return use_avx2 ? shuffle_xxh3_avx2(p, n) : XXH3_64bits(p, n);
}

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
/* Unshuffle of 2-, 4- and 8-byte records (one numeric field's byte planes: a scan's column,
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

static size_t unshuffle2(const uint8_t *src, uint8_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i r0 = _mm_loadu_si128((const __m128i *)(src + i)), r1 = _mm_loadu_si128((const __m128i *)(src + n + i));
        __m128i *o = (__m128i *)(dst + i * 2);
        _mm_storeu_si128(o, _mm_unpacklo_epi8(r0, r1));
        _mm_storeu_si128(o + 1, _mm_unpackhi_epi8(r0, r1));
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
    if (stride == 2 || stride == 4 || stride == 8) {
        size_t done = stride == 2 ? unshuffle2(src, dst, n) : stride == 4 ? unshuffle4(src, dst, n) : unshuffle8(src, dst, n);
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

/* The (offset, width, out) triples of a call's ``fields``, checked against planes of
 * ``n`` bytes in ``planes_len``; each out a writable buffer of n * width bytes. */
struct fieldset {
    PyObject *seq;
    Py_ssize_t k, got; /* the triples; those whose out is held (to release) */
    Py_buffer *outs;
    Py_ssize_t *at; /* offset, width of each */
};

static void fields_release(struct fieldset *fs)
{
    for (Py_ssize_t j = 0; j < fs->got && fs->outs != NULL; j++)
        PyBuffer_Release(&fs->outs[j]);
    PyMem_Free(fs->outs);
    PyMem_Free(fs->at);
    Py_XDECREF(fs->seq);
}

static int fields_parse(PyObject *fields, Py_ssize_t n, Py_ssize_t planes_len, struct fieldset *fs)
{
    memset(fs, 0, sizeof *fs);
    fs->seq = PySequence_Fast(fields, "fields must be a sequence of (offset, width, out)");
    if (fs->seq == NULL)
        return 0;
    Py_ssize_t k = fs->k = PySequence_Fast_GET_SIZE(fs->seq);
    fs->outs = PyMem_Calloc(k ? (size_t)k : 1, sizeof(Py_buffer));
    fs->at = PyMem_Calloc(k ? (size_t)k : 1, 2 * sizeof(Py_ssize_t));
    if (fs->outs == NULL || fs->at == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    if (n < 0) {
        PyErr_Format(PyExc_ValueError, "n must be >= 0, not %zd", n);
        return 0;
    }
    for (; fs->got < k; fs->got++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fs->seq, fs->got);
        Py_ssize_t off, w;
        if (!PyArg_ParseTuple(item, "nnw*", &off, &w, &fs->outs[fs->got]))
            return 0;
        fs->at[2 * fs->got] = off, fs->at[2 * fs->got + 1] = w;
        if (off < 0 || w < 1 || (off + w) * n > planes_len || fs->outs[fs->got].len != w * n) {
            PyErr_Format(PyExc_ValueError,
                         "field at byte %zd of %zd bytes: planes [%zd, %zd) of %zd bytes into %zd bytes", off, w,
                         off * n, (off + w) * n, planes_len, fs->outs[fs->got].len);
            fs->got++; /* its out is held: released with the others */
            return 0;
        }
    }
    return 1;
}

/* Each field of ``fs`` not ``done`` (NULL: none is) unshuffled from its planes (GIL released). */
static void fields_unshuffle(const struct fieldset *fs, const uint8_t *planes, size_t n, const char *done)
{
    for (Py_ssize_t j = 0; j < fs->k; j++)
        if (done == NULL || !done[j])
            unshuffle_tiles(planes + (size_t)fs->at[2 * j] * n, (uint8_t *)fs->outs[j].buf, n,
                            (size_t)fs->at[2 * j + 1]);
}

static PyObject *py_unshuffle_fields(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer planes;
    Py_ssize_t n;
    PyObject *fields;

    if (!PyArg_ParseTuple(args, "y*nO", &planes, &n, &fields))
        return NULL;
    struct fieldset fs;
    int ok = fields_parse(fields, n, planes.len, &fs);
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        fields_unshuffle(&fs, (const uint8_t *)planes.buf, (size_t)n, NULL);
        Py_END_ALLOW_THREADS
    }
    fields_release(&fs);
    PyBuffer_Release(&planes);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- BLZ2: the records region as independent blocks, one per run of planes ----------
 * (the value format: loader/serializers/shuffled.py). A block is planes [lo, hi) of the
 * shuffled region (n bytes a plane), stored in one of three modes: */
#define MODE_RAW 0      /* the planes as they are (LZ4 did not shrink them) */
#define MODE_PLANES 1   /* an LZ4 block of the planes */
#define MODE_RECORDS 2  /* an LZ4 block of the field's unshuffled bytes (n records of hi - lo) */
#define MODE_DICT 3     /* its distinct values, then each record's index into them (below) */
#define ENTRY_BYTES 16  /* lo u32, hi u32, mode u8, 3 zero bytes, compressed bytes u32 */
#define SAMPLE 256      /* records of a field's sample, both ways, to choose its mode */
#define HASH_BYTES 8    /* BLZ3: a block's xxh3_64 (u64), k of them after the table */

static inline uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v; /* (little-endian machines only: as the rest of bulkload) */
}

/* Unshuffle records [0, m) of ``w``-byte records from planes of pitch ``n`` into dst
 * (m * w bytes): dst[i * w + k] = src[k * n + i]. */
static void unshuffle_some(const uint8_t *src, uint8_t *dst, size_t n, size_t w, size_t m)
{
    if (m == n) {
        unshuffle_tiles(src, dst, n, w);
        return;
    }
    /* tile() writes dst[i * w + k] for records i0..: a dst of m records is enough */
    for (size_t i0 = 0; i0 < m; i0 += TILE)
        tile(src, dst, n, w, i0, m - i0 < TILE ? m - i0 : TILE, 0);
}

static int lz4_into(LZ4_stream_t *state, const uint8_t *src, size_t len, uint8_t *dst, int cap)
{
    return LZ4_compress_fast_extState_fastReset(state, (const char *)src, (char *)dst, (int)len, cap, 1);
}

/* ---- MODE_DICT: a block of w = hi - lo planes (w = 2, 4 or 8: one field's), n records:
 *
 *   offset  bytes    what
 *        0      4    d: the distinct values (u32, 1 <= d <= min(n, 65536))
 *        4      1    the index planes' coding: 0 = raw, 1 = an LZ4 block of them
 *        5      3    zero
 *        8  d * w    the distinct values, w bytes each as in a record, in first-seen order
 *        -      -    the index planes: iw = 1 byte an index if d <= 256, else 2; n * iw bytes
 *                    (plane 0: each record's index's low byte, plane 1: its high byte), raw
 *                    or LZ4 (which must give exactly n * iw bytes)
 *
 * Values are compared as bytes (NaNs of other bits, -0.0 and 0.0 are distinct values).
 * Record i's w bytes are the values' [index_i * w, (index_i + 1) * w). */
#define DICT_HEAD 8
#define DICT_MAX 65536
#define DICT_GOLDEN 0x9E3779B97F4A7C15ULL

/* The distinct values expected among m records drawn at random from D values:
 * D (1 - (1 - 1/D)^m). */
static double expect_distinct(double D, size_t m)
{
    double q = 1 - 1 / D, p = 1;
    for (size_t e = m; e; e >>= 1) {
        if (e & 1)
            p *= q;
        q *= q;
    }
    return D * (1 - p);
}

/* The distinct values of a block whose sample of m records has ``rep`` repeats: the D
 * that expect_distinct gives m - rep from (bisection, ~0.1 us); SIZE_MAX for none or over
 * DICT_MAX (m^2 / 2 rep, the birthday estimate, overshoots where rep is not small:
 * 250 values as ~340, which 1-byte indexes would have missed). */
static size_t guess_distinct(size_t rep, size_t m)
{
    size_t ds = m - rep, lo = ds, hi = DICT_MAX + 1;
    if (rep == 0 || expect_distinct((double)hi, m) < (double)ds)
        return SIZE_MAX;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (expect_distinct((double)mid, m) < (double)ds)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Hash slots for a dictionary of at most ``max_d`` values (half full at most). */
static size_t dict_slots(size_t max_d)
{
    size_t s = 64;
    while (s < 2 * max_d)
        s *= 2;
    return s;
}

/* Bytes of a dict_build's scratch (index planes, hash slots) for n records. */
static size_t dict_tmp(size_t n)
{
    return 2 * n + 8 + 4 * dict_slots(n < DICT_MAX ? n : DICT_MAX); /* (8: to align the slots) */
}

/* Build the dictionary of the n values of w bytes ``recs`` (``pitch`` bytes apart: a
 * field's records, or the field in whole records): the values into ``dict``
 * (first-seen order), each record's index into ix (low bytes) and ix + n (high bytes);
 * the values found, or 0 once more than ``max_d`` (then ``dict`` holds garbage).
 * ``slots``: room for dict_slots(max_d) u32s, of which the table uses dict_slots(4 *
 * guess) at first (at least 512), doubled (the values re-inserted) whenever it would be
 * over a quarter full: a batch of 16 values clears 2 KB, not the 64 KB its limit allows.
 * (Sparse: a lookup that probes twice is a mispredicted branch - ticks' prices took 55 us
 * a batch in a table a quarter full, 30 us in one an eighth full. Every record is looked
 * up: skipping a run of equal values was a branch mispredicted as often as they break -
 * ticks' 16 symbols took 14 us a batch with the skip, 9 us without.) One function per
 * width (the compiler specializes). */
#define DICT_BUILD(NAME, T)                                                                                    \
    static NOINLINE size_t NAME(const uint8_t *recs, size_t pitch, size_t n, uint8_t *dict, uint8_t *ix,        \
                                uint32_t *slots, size_t max_d, size_t guess)                                   \
    {                                                                                                          \
        size_t most = dict_slots(max_d), nslots = dict_slots(4 * guess > 256 ? 4 * guess : 256), d = 0;        \
        nslots = nslots < most ? nslots : most;                                                                \
        size_t mask = nslots - 1;                                                                              \
        int shift = 64;                                                                                        \
        for (size_t s = nslots; s > 1; s >>= 1)                                                                \
            shift--;                                                                                           \
        memset(slots, 0, nslots * sizeof *slots);                                                              \
        for (size_t i = 0; i < n; i++) {                                                                       \
            T v;                                                                                               \
            memcpy(&v, recs + i * pitch, sizeof(T));                                                           \
            uint32_t at;                                                                                       \
            size_t h = (size_t)(((uint64_t)v * DICT_GOLDEN) >> shift);                                         \
            for (;;) {                                                                                         \
                uint32_t s = slots[h];                                                                         \
                if (s == 0) {                                                                                  \
                    if (d == max_d)                                                                            \
                        return 0;                                                                              \
                    if (4 * (d + 1) > nslots && nslots < most) {                                               \
                        nslots *= 2, mask = nslots - 1, shift--;                                               \
                        memset(slots, 0, nslots * sizeof *slots);                                              \
                        for (size_t k = 0; k < d; k++) {                                                       \
                            T u;                                                                               \
                            memcpy(&u, dict + k * sizeof(T), sizeof(T));                                       \
                            size_t g = (size_t)(((uint64_t)u * DICT_GOLDEN) >> shift);                         \
                            while (slots[g])                                                                   \
                                g = (g + 1) & mask;                                                            \
                            slots[g] = (uint32_t)(k + 1);                                                      \
                        }                                                                                      \
                        h = (size_t)(((uint64_t)v * DICT_GOLDEN) >> shift);                                    \
                        while (slots[h])                                                                       \
                            h = (h + 1) & mask;                                                                \
                    }                                                                                          \
                    memcpy(dict + d * sizeof(T), &v, sizeof(T));                                               \
                    slots[h] = (uint32_t)++d;                                                                  \
                    at = (uint32_t)(d - 1);                                                                    \
                    break;                                                                                     \
                }                                                                                              \
                T u;                                                                                           \
                memcpy(&u, dict + (size_t)(s - 1) * sizeof(T), sizeof(T));                                     \
                if (u == v) {                                                                                  \
                    at = s - 1;                                                                                \
                    break;                                                                                     \
                }                                                                                              \
                h = (h + 1) & mask;                                                                            \
            }                                                                                                  \
            ix[i] = (uint8_t)at;                                                                               \
            ix[n + i] = (uint8_t)(at >> 8);                                                                    \
        }                                                                                                      \
        return d;                                                                                              \
    }
DICT_BUILD(dict_build2, uint16_t)
DICT_BUILD(dict_build4, uint32_t)
DICT_BUILD(dict_build8, uint64_t)

/* The most values a dictionary of n records of w bytes may have to take under ``limit``
 * bytes (raw index planes), 0 if none can. */
static size_t dict_max(size_t n, size_t w, size_t limit)
{
    size_t most = n < DICT_MAX ? n : DICT_MAX, d1 = 0, d2 = 0;
    if (limit > DICT_HEAD + n + w)
        d1 = (limit - 1 - DICT_HEAD - n) / w; /* 1-byte indexes */
    if (limit > DICT_HEAD + 2 * n + w)
        d2 = (limit - 1 - DICT_HEAD - 2 * n) / w;
    d1 = d1 < 256 ? d1 : 256;
    d2 = d2 < most ? d2 : most;
    return d2 > 256 ? d2 : (d1 < most ? d1 : most);
}

/* The MODE_DICT block of the n values of w (2, 4, 8) bytes ``recs`` (``pitch`` apart) into ``out``
 * (LZ4_compressBound(n * w) bytes) if it takes under ``limit`` bytes: its bytes; else 0,
 * as soon as it has too many values. ``scratch``: dict_tmp(n) bytes. */
static long dict_block(LZ4_stream_t *state, const uint8_t *recs, size_t pitch, size_t n, size_t w, uint8_t *out,
                       size_t limit, size_t guess, uint8_t *scratch)
{
    size_t max_d = dict_max(n, w, limit), d;
    if (max_d == 0)
        return 0;
    uint8_t *ix = scratch, *dict = out + DICT_HEAD;
    uint32_t *slots = (uint32_t *)(((uintptr_t)(scratch + 2 * n) + 7) & ~(uintptr_t)7);
    d = w == 8 ? dict_build8(recs, pitch, n, dict, ix, slots, max_d, guess)
        : w == 4 ? dict_build4(recs, pitch, n, dict, ix, slots, max_d, guess)
                 : dict_build2(recs, pitch, n, dict, ix, slots, max_d, guess);
    if (d == 0)
        return 0;
    size_t iw = d <= 256 ? 1 : 2, raw = n * iw, at = DICT_HEAD + d * w;
    uint32_t d32 = (uint32_t)d;
    memcpy(out, &d32, 4);
    memset(out + 4, 0, 4);
    /* LZ4 of index planes full of short matches costs ~1.5 us a KB for ~10 % (random
     * indexes: ticks' prices, 3 KB of 29 for 14 us a batch): tried only if a sample of each
     * plane (its last records: the first have the first, small, indexes) shrinks under 1/2
     * (runs: sorted data).
     * (at + LZ4_compressBound(raw) <= LZ4_compressBound(n * w): at + raw < limit <= n * w) */
    uint8_t sample[LZ4_COMPRESSBOUND(SAMPLE)];
    size_t m = n < SAMPLE ? n : SAMPLE, small = 0;
    for (size_t k = 0; k < iw; k++)
        small += (size_t)lz4_into(state, ix + k * n + n - m, m, sample, (int)sizeof sample);
    int got = 0;
    if (small * 2 < m * iw)
        got = lz4_into(state, ix, raw, out + at, LZ4_compressBound((int)raw));
    if (got > 0 && (size_t)got < raw) {
        out[4] = 1;
        return (long)(at + (size_t)got);
    }
    memcpy(out + at, ix, raw);
    return (long)(at + raw);
}

/* The repeats among the m records of w (2, 4, 8) bytes ``recs`` (m <= 256): records whose
 * value is the last one seen at its hash slot (of 512, on the stack: few repeats are missed,
 * none is made up but a first 0). Without a branch: ~0.2 us. One function per width. */
#define SAMPLE_REPEATS(NAME, T)                                                                                \
    static size_t NAME(const uint8_t *recs, size_t m)                                                         \
    {                                                                                                          \
        T last[512];                                                                                           \
        size_t rep = 0;                                                                                        \
        memset(last, 0, sizeof last);                                                                          \
        for (size_t i = 0; i < m; i++) {                                                                       \
            T v;                                                                                               \
            memcpy(&v, recs + i * sizeof(T), sizeof(T));                                                       \
            size_t h = (size_t)(((uint64_t)v * DICT_GOLDEN) >> 55);                                            \
            rep += last[h] == v;                                                                               \
            last[h] = v;                                                                                       \
        }                                                                                                      \
        return rep;                                                                                            \
    }
SAMPLE_REPEATS(sample_repeats2, uint16_t)
SAMPLE_REPEATS(sample_repeats4, uint32_t)
SAMPLE_REPEATS(sample_repeats8, uint64_t)

/* The distinct values among the m records of w (2, 4, 8) bytes ``recs`` (m <= 256), counted
 * exactly in an open-addressing table on the stack (~0.5 us: only for a sample that
 * repeats values). */
#define SAMPLE_DISTINCT(NAME, T)                                                                               \
    static size_t NAME(const uint8_t *recs, size_t m)                                                         \
    {                                                                                                          \
        uint16_t slots[512] = {0}; /* record index + 1 of the first of each value */                         \
        size_t d = 0;                                                                                          \
        for (size_t i = 0; i < m; i++) {                                                                       \
            T v, u;                                                                                            \
            memcpy(&v, recs + i * sizeof(T), sizeof(T));                                                       \
            size_t h = (size_t)(((uint64_t)v * DICT_GOLDEN) >> 55);                                            \
            for (;;) {                                                                                         \
                if (slots[h] == 0) {                                                                           \
                    slots[h] = (uint16_t)(i + 1), d++;                                                         \
                    break;                                                                                     \
                }                                                                                              \
                memcpy(&u, recs + (size_t)(slots[h] - 1) * sizeof(T), sizeof(T));                              \
                if (u == v)                                                                                    \
                    break;                                                                                     \
                h = (h + 1) & 511;                                                                             \
            }                                                                                                  \
        }                                                                                                      \
        return d;                                                                                              \
    }
SAMPLE_DISTINCT(sample_distinct2, uint16_t)
SAMPLE_DISTINCT(sample_distinct4, uint32_t)
SAMPLE_DISTINCT(sample_distinct8, uint64_t)

/* Compress planes [lo, hi) (``planes``: the whole shuffled region, n bytes a plane) into
 * ``out`` (at least LZ4_compressBound of the block's bytes); ``*mode`` gets the mode, the
 * return value the bytes written. ``tmp``: scratch for the samples and a field's records
 * (`blocks_tmp` bytes for ``size`` bytes of ``width``-byte records). A sample of the first
 * SAMPLE records chooses the way: the planes, unless they compress poorly (over 1/4); then
 * a dictionary (a field of 2, 4 or 8 bytes) if the sample repeats values (counted without
 * a branch, ~0.2 us: random values pay nothing more) and a dictionary of the values that
 * suggests (guess_distinct) could take under 7/8 of the planes' share of the block - built whole,
 * given up as soon as it has more values than could (dict_block); else the records if
 * they compress to under 4/5 of the planes (whole values that repeat, which the planes
 * split) - then only that way is compressed in full; raw when LZ4 does not shrink the
 * block. LZ4 of records full of short matches costs ~10 x that of poor planes, which it
 * skips; a dictionary costs ~2-3 ns a record (ticks' price: ~33 us for a 10,000-record
 * batch, 29 KB, against LZ4 of its records' ~69 us, 40 KB). Ticks: sym, price, size, bid
 * and ask as dictionaries, 229 KB -> 169 KB a batch, ~350 -> ~240 us (ad hoc, cold).
 * ``field``: the block's bytes in whole records ``pitch`` bytes long (the records the
 * planes were shuffled from), or NULL: a dictionary reads its values there instead of
 * unshuffling the planes. With the dictionary builds out of line (NOINLINE: inlined here
 * they kept their loop counters on the stack), a 23,414-record ticks batch's encoding
 * took 672 -> 605 us (ad hoc, best of 5). */
static long compress_block(LZ4_stream_t *state, const uint8_t *planes, size_t n, size_t lo, size_t hi,
                           const uint8_t *field, size_t pitch, uint8_t *out, uint8_t *tmp, size_t size,
                           size_t width, uint8_t *mode)
{
    size_t w = hi - lo, bytes = w * n;
    const uint8_t *src = planes + lo * n;
    int cap = LZ4_compressBound((int)bytes), got = 0;
    *mode = MODE_PLANES;
    if (w > 1 && n >= 2 * SAMPLE) {
        size_t m = SAMPLE, most = m * width; /* a sample's bytes are at most this */
        uint8_t *a = tmp, *b = a + size, *c = b + most; /* a: a sample's planes or a field's records */
        int bound = LZ4_compressBound((int)(m * w));
        for (size_t k = 0; k < w; k++)
            memcpy(a + k * m, src + k * n, m);
        int as_planes = lz4_into(state, a, m * w, c, bound), records = 0; /* records: a holds them */
        if ((size_t)as_planes * 4 > m * w) {
            unshuffle_some(src, b, n, w, m);
            if (w == 2 || w == 4 || w == 8) {
                /* values the sample repeats: a dictionary of about guess_distinct values,
                 * tried whole only if that beats 7/8 of the planes' share, given up once
                 * it has more values than could */
                size_t rep = w == 8 ? sample_repeats8(b, m) : w == 4 ? sample_repeats4(b, m) : sample_repeats2(b, m);
                if (rep) /* (exactly: the table above misses repeats of values that share a slot) */
                    rep = m - (w == 8 ? sample_distinct8(b, m) : w == 4 ? sample_distinct4(b, m) : sample_distinct2(b, m));
                /* (an estimate: 250 values may look like 264 - up to 320 may take 1 byte) */
                size_t guess = guess_distinct(rep, m), limit = (size_t)as_planes * n / m * 7 / 8;
                limit = limit < bytes ? limit : bytes;
                if (guess <= DICT_MAX && DICT_HEAD + guess * w + n * (guess <= 320 ? 1 : 2) < limit) {
                    const uint8_t *values = field;
                    size_t apart = pitch;
                    if (values == NULL) {
                        unshuffle_tiles(src, a, n, w);
                        records = 1, values = a, apart = w;
                    }
                    long as_dict = dict_block(state, values, apart, n, w, out, limit, guess, c + bound);
                    if (as_dict > 0) {
                        *mode = MODE_DICT;
                        return as_dict;
                    }
                }
            }
            if (lz4_into(state, b, m * w, c, bound) * 5 < as_planes * 4) {
                if (!records) /* (a dictionary given up left them there) */
                    unshuffle_tiles(src, a, n, w);
                got = lz4_into(state, a, bytes, out, cap);
                *mode = MODE_RECORDS;
            }
        }
    }
    if (*mode == MODE_PLANES && bytes)
        got = lz4_into(state, src, bytes, out, cap);
    if (got <= 0 || (size_t)got >= bytes) {
        memcpy(out, src, bytes);
        *mode = MODE_RAW;
        return (long)bytes;
    }
    return got;
}

/* The bytes of compress_block's ``tmp`` for ``size`` bytes of ``width``-byte records
 * (no sample, so none, under 2 * SAMPLE records). */
static size_t blocks_tmp(size_t size, size_t width)
{
    size_t most = SAMPLE * width, n = width ? size / width : 0;
    return n >= 2 * SAMPLE ? size + most + (size_t)LZ4_compressBound((int)most) + dict_tmp(n) : 0;
}

/* lz4_blocks(prefix, head, region, scratch, stride, cuts, tmp, records=b"", rsize=0) ->
 * bytes: prefix + head + the BLZ2 block table and blocks of shuffle(region, stride)
 * (shuffled in scratch; region is the planes already when stride is 0, and ``records``
 * then may be the rsize-byte records whose bytes the first rsize planes hold: a
 * dictionary reads a field's values there, compress_block). ``cuts``: u32 plane indexes
 * 0 = c0 < c1 < ... < ck = bytes per record; block j holds planes [c_j, c_j+1). ``tmp``: writable scratch
 * of at least blocks_tmp bytes (the samples that choose a block's mode, a dictionary's
 * index planes and hash slots; a thread's reused buffer: a malloc per batch cost more
 * than the samples, glibc handing back and faulting in its pages). The GIL released. */
static PyObject *py_lz4_blocks(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer prefix, head, region, scratch, cuts, tmp, records = {0};
    Py_ssize_t stride, rsize = 0;

    if (!PyArg_ParseTuple(args, "y*y*y*w*ny*w*|y*n", &prefix, &head, &region, &scratch, &stride, &cuts, &tmp,
                          &records, &rsize))
        return NULL;
    PyObject *result = NULL;
    int hashed = head.len >= 4 && memcmp(head.buf, "BLZ3", 4) == 0; /* each block's xxh3 after the table */
    size_t k = cuts.len >= 8 && cuts.len % 4 == 0 ? (size_t)cuts.len / 4 - 1 : 0;
    const uint8_t *cut = (const uint8_t *)cuts.buf;
    size_t width = k ? get32(cut + 4 * k) : 0;
    int ok = k > 0 && get32(cut) == 0;
    for (size_t j = 0; ok && j < k; j++)
        ok = get32(cut + 4 * j) < get32(cut + 4 * j + 4);
    if (!ok || (stride && (size_t)stride != width) || stride < 0) {
        PyErr_Format(PyExc_ValueError, "cuts must rise from 0 to the record's %zd bytes", stride);
    } else if (region.len % (Py_ssize_t)width) {
        PyErr_Format(PyExc_ValueError, "%zd bytes is not a whole number of %zu-byte records", region.len, width);
    } else if (records.buf && records.len &&
               (stride || rsize <= 0 || (size_t)rsize > width || records.len / rsize != region.len / (Py_ssize_t)width ||
                records.len % rsize)) {
        PyErr_Format(PyExc_ValueError, "records of %zd bytes do not match %zd bytes of planes of %zu (stride %zd)",
                     rsize, region.len, width, stride);
    } else if (scratch.len < region.len) {
        PyErr_Format(PyExc_ValueError, "scratch holds %zd bytes, the region %zd", scratch.len, region.len);
    } else if (region.len > LZ4_MAX_INPUT_SIZE) {
        PyErr_Format(PyExc_ValueError, "an LZ4 block of %zd bytes: over LZ4's limit", region.len);
    } else if ((size_t)tmp.len < blocks_tmp((size_t)region.len, width)) {
        PyErr_Format(PyExc_ValueError, "tmp holds %zd bytes, the blocks need %zu", tmp.len,
                     blocks_tmp((size_t)region.len, width));
    } else {
        size_t n = (size_t)region.len / width, size = (size_t)region.len;
        size_t hashes = 8 + ENTRY_BYTES * k, table = hashes + (hashed ? HASH_BYTES * k : 0);
        size_t at = (size_t)(prefix.len + head.len), bound = at + table;
        for (size_t j = 0; j < k; j++)
            bound += (size_t)LZ4_compressBound((int)((get32(cut + 4 * j + 4) - get32(cut + 4 * j)) * n));
        result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bound);
        if (result != NULL) {
            uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
            size_t pos = at + table;
            memcpy(out, prefix.buf, (size_t)prefix.len);
            memcpy(out + prefix.len, head.buf, (size_t)head.len);
            Py_BEGIN_ALLOW_THREADS
            LZ4_stream_t state;
            LZ4_initStream(&state, sizeof state);
            const uint8_t *planes = (const uint8_t *)region.buf, *recs = NULL; /* recs: pitch bytes apart */
            size_t pitch = 0;
            if (stride) {
                recs = planes, pitch = width;
                shuffle_tiles(planes, (uint8_t *)scratch.buf, n, width);
                planes = (const uint8_t *)scratch.buf;
            } else if (records.buf && records.len) {
                recs = (const uint8_t *)records.buf, pitch = (size_t)rsize;
            }
            uint32_t nblocks = (uint32_t)k, zero = 0;
            memcpy(out + at, &nblocks, 4);
            memcpy(out + at + 4, &zero, 4);
            for (size_t j = 0; j < k; j++) {
                uint32_t lo = get32(cut + 4 * j), hi = get32(cut + 4 * j + 4);
                uint8_t mode, *e = out + at + 8 + ENTRY_BYTES * j;
                const uint8_t *field = recs && hi <= pitch ? recs + lo : NULL;
                long got = compress_block(&state, planes, n, lo, hi, field, pitch, out + pos, (uint8_t *)tmp.buf, size,
                                          width, &mode);
                uint32_t csize = (uint32_t)got;
                memcpy(e, &lo, 4);
                memcpy(e + 4, &hi, 4);
                memset(e + 8, 0, 4);
                e[8] = mode;
                memcpy(e + 12, &csize, 4);
                if (hashed) {
                    uint64_t h = block_hash(out + pos, (size_t)got);
                    memcpy(out + at + hashes + HASH_BYTES * j, &h, HASH_BYTES);
                }
                pos += (size_t)got;
            }
            Py_END_ALLOW_THREADS
            if (_PyBytes_Resize(&result, (Py_ssize_t)pos) < 0)
                result = NULL;
        }
    }
    PyBuffer_Release(&tmp);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&head);
    PyBuffer_Release(&region);
    PyBuffer_Release(&scratch);
    PyBuffer_Release(&cuts);
    if (records.buf)
        PyBuffer_Release(&records);
    return result;
}

/* Decode the MODE_DICT block ``blk`` (``len`` bytes) of n records of w (2, 4, 8) bytes
 * into ``recs`` (n * w bytes); ``ix``: 2 * n bytes of scratch (LZ4 index planes). 0, or -1
 * with ``why`` saying what is damaged: every size and index is checked before it is used. */
static int dict_decode(const uint8_t *blk, size_t len, size_t n, size_t w, uint8_t *recs, uint8_t *ix, char *why,
                       size_t whylen)
{
    if (len < DICT_HEAD) {
        snprintf(why, whylen, "dictionary of %zu bytes: shorter than its head", len);
        return -1;
    }
    size_t d = get32(blk);
    if (d == 0 || d > DICT_MAX || d > n || blk[4] > 1 || blk[5] || blk[6] || blk[7]) {
        snprintf(why, whylen, "dictionary head says %zu values, coding %u, for %zu records", d, blk[4], n);
        return -1;
    }
    size_t iw = d <= 256 ? 1 : 2, raw = n * iw, at = DICT_HEAD + d * w;
    if (at > len || (blk[4] == 0 && len - at != raw)) {
        snprintf(why, whylen, "dictionary of %zu %zu-byte values in %zu bytes: not its %zu records' sizes", d, w, len,
                 n);
        return -1;
    }
    const uint8_t *dict = blk + DICT_HEAD, *lo = blk + at;
    if (blk[4] == 1) {
        int got = LZ4_decompress_safe((const char *)blk + at, (char *)ix, (int)(len - at), (int)raw);
        if (got != (int)raw) {
            snprintf(why, whylen, "dictionary's index planes do not decompress to %zu bytes", raw);
            return -1;
        }
        lo = ix;
    }
    size_t top = 0; /* the biggest index */
    if (iw == 1) {
        uint8_t t = 0;
        for (size_t i = 0; i < n; i++)
            t = lo[i] > t ? lo[i] : t;
        top = t;
    } else {
        uint16_t t = 0;
        for (size_t i = 0; i < n; i++) {
            uint16_t v = (uint16_t)(lo[i] | lo[n + i] << 8);
            t = v > t ? v : t;
        }
        top = t;
    }
    if (top >= d) {
        snprintf(why, whylen, "dictionary of %zu values: an index is %zu", d, top);
        return -1;
    }
#define DICT_GATHER(W)                                                                                         \
    for (size_t i = 0; i < n; i++)                                                                             \
        memcpy(recs + i * (W), dict + (size_t)(iw == 1 ? lo[i] : (lo[i] | lo[n + i] << 8)) * (W), (W));
    if (w == 8) {
        DICT_GATHER(8)
    } else if (w == 4) {
        DICT_GATHER(4)
    } else {
        DICT_GATHER(2)
    }
#undef DICT_GATHER
    return 0;
}

/* blocks_decode(src, dst, n, ranges, fields, hashed) -> int: decode into the writable ``dst``
 * (the shuffled region: n bytes a plane) the blocks of the BLZ2 table + blocks ``src``
 * that hold any plane of ``ranges`` (u32 pairs [lo, hi); None: every block), then give
 * each (offset, width, out) of ``fields`` (None: none) its records, as unshuffle_fields
 * does - except that a block of a field's very planes stored as records (MODE_RECORDS)
 * decompresses straight into its out, and not into dst (other such blocks decompress into
 * a buffer of the biggest one's size, malloc'd once a call, then shuffle into dst: a
 * whole decode's). The blocks decoded. The table is
 * checked whole first (blocks in order covering exactly the planes of dst, their sizes
 * adding up to src's), so a damaged value raises ValueError saying what is wrong, never
 * reads or writes outside the buffers. ``hashed`` (BLZ3): the table is followed by each
 * block's xxh3_64, and a block is decoded only once its bytes have that hash (a reader
 * hashes only the blocks it decodes; the caller checks the head, table and hashes against
 * the catalog row). One release of the GIL. */
static PyObject *py_blocks_decode(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer src, dst, ranges = {0};
    Py_ssize_t n;
    PyObject *rng, *fields;
    int hashed = 0;
    struct fieldset fs = {0};
    char *done = NULL;

    if (!PyArg_ParseTuple(args, "y*w*nOO|p", &src, &dst, &n, &rng, &fields, &hashed))
        return NULL;
    if (rng != Py_None && PyObject_GetBuffer(rng, &ranges, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        return NULL;
    }
    PyObject *result = NULL;
    if (fields != Py_None && (!fields_parse(fields, n, dst.len, &fs) || (done = PyMem_Calloc((size_t)fs.k + 1, 1)) == NULL)) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto finish;
    }
    const uint8_t *s = (const uint8_t *)src.buf, *r = (const uint8_t *)ranges.buf;
    size_t len = (size_t)src.len, k = len >= 8 ? get32(s) : 0, nr = rng == Py_None ? 0 : (size_t)ranges.len / 8;
    char why[160] = "";
    size_t most = 0; /* bytes of scratch of the biggest block of records (MODE_RECORDS, MODE_DICT) */
    size_t width = n > 0 ? (size_t)dst.len / (size_t)n : 0;
    if (n < 0 || (n > 0 && (size_t)dst.len % (size_t)n)) {
        PyErr_Format(PyExc_ValueError, "dst of %zd bytes is not whole planes of %zd bytes", dst.len, n);
        goto finish;
    }
    size_t entry = ENTRY_BYTES + (hashed ? HASH_BYTES : 0); /* a block's bytes of table (and hash) */
    if (len < 8 || get32(s + 4) != 0 || k == 0 || k > (len - 8) / entry || (n == 0 && dst.len)) {
        snprintf(why, sizeof why, "the block table (%zu bytes) is damaged: it names %zu blocks", len, k);
    } else {
        size_t expect = 0, total = 8 + entry * k;
        for (size_t j = 0; j < k && !why[0]; j++) {
            const uint8_t *e = s + 8 + ENTRY_BYTES * j;
            uint32_t lo = get32(e), hi = get32(e + 4), csize = get32(e + 12);
            uint8_t mode = e[8];
            size_t bytes = (size_t)(hi - lo) * (size_t)n;
            if (lo != expect || hi <= lo || mode > MODE_DICT || e[9] || e[10] || e[11] ||
                (mode == MODE_RAW && csize != bytes) ||
                (mode == MODE_DICT && hi - lo != 2 && hi - lo != 4 && hi - lo != 8))
                snprintf(why, sizeof why, "block %zu of the table (planes %u..%u, mode %u, %u bytes) is damaged", j,
                         lo, hi, mode, csize);
            expect = hi;
            total += csize;
            if (mode == MODE_RECORDS && bytes > most)
                most = bytes;
            if (mode == MODE_DICT && bytes + 2 * (size_t)n > most) /* its records, its index planes */
                most = bytes + 2 * (size_t)n;
        }
        if (!why[0] && (expect != width || total != len))
            snprintf(why, sizeof why,
                     "the block table covers %zu planes in %zu bytes; the records have %zu planes in %zu bytes",
                     expect, total, width, len);
    }
    if (why[0]) {
        PyErr_SetString(PyExc_ValueError, why);
        goto finish;
    }
    {
        long bad = -1, err = 0, decoded = 0, nomem = 0, mismatch = 0;
        char dwhy[128] = ""; /* a damaged MODE_DICT block: what */
        Py_BEGIN_ALLOW_THREADS
        uint8_t *tmp = NULL, *d = (uint8_t *)dst.buf;
        const uint8_t *hashes = s + 8 + ENTRY_BYTES * k;
        size_t pos = 8 + entry * k;
        for (size_t j = 0; j < k && bad < 0; j++) {
            const uint8_t *e = s + 8 + ENTRY_BYTES * j;
            uint32_t lo = get32(e), hi = get32(e + 4), csize = get32(e + 12);
            size_t w = hi - lo, bytes = w * (size_t)n;
            int want = rng == Py_None;
            for (size_t q = 0; q < nr && !want; q++)
                want = get32(r + 8 * q) < hi && get32(r + 8 * q + 4) > lo;
            if (want && bytes && hashed) {
                uint64_t h;
                memcpy(&h, hashes + HASH_BYTES * j, HASH_BYTES);
                if (block_hash(s + pos, csize) != h) {
                    bad = (long)j, mismatch = 1;
                    break;
                }
            }
            if (want && bytes) {
                uint8_t *to = d + (size_t)lo * (size_t)n;
                Py_ssize_t direct = -1;
                int whole = e[8] == MODE_RECORDS || e[8] == MODE_DICT; /* a field's records */
                for (Py_ssize_t f = 0; f < fs.k && whole && direct < 0; f++)
                    if ((size_t)fs.at[2 * f] == lo && (size_t)fs.at[2 * f + 1] == w && !done[f])
                        direct = f;
                if (e[8] == MODE_DICT) { /* gathered into its column, or records then planes */
                    if (tmp == NULL && (tmp = malloc(most)) == NULL) {
                        nomem = 1, bad = (long)j;
                        break;
                    }
                    uint8_t *recs = direct >= 0 ? (uint8_t *)fs.outs[direct].buf : tmp;
                    if (dict_decode(s + pos, csize, (size_t)n, w, recs, tmp + bytes, dwhy, sizeof dwhy) < 0) {
                        bad = (long)j;
                        break;
                    }
                    if (direct >= 0)
                        done[direct] = 1;
                    else
                        shuffle_tiles(tmp, to, (size_t)n, w);
                } else if (direct >= 0) { /* the field's records, straight into its column */
                    int got = LZ4_decompress_safe((const char *)s + pos, (char *)fs.outs[direct].buf, (int)csize,
                                                  (int)bytes);
                    if (got != (int)bytes) {
                        bad = (long)j, err = got;
                        break;
                    }
                    done[direct] = 1;
                } else if (e[8] == MODE_RAW) {
                    memcpy(to, s + pos, bytes);
                } else {
                    uint8_t *into = to;
                    if (e[8] == MODE_RECORDS) {
                        if (tmp == NULL && (tmp = malloc(most)) == NULL) {
                            nomem = 1, bad = (long)j;
                            break;
                        }
                        into = tmp;
                    }
                    int got = LZ4_decompress_safe((const char *)s + pos, (char *)into, (int)csize, (int)bytes);
                    if (got != (int)bytes) {
                        bad = (long)j, err = got;
                        break;
                    }
                    if (e[8] == MODE_RECORDS)
                        shuffle_tiles(into, to, (size_t)n, w);
                }
                decoded++;
            }
            pos += csize;
        }
        free(tmp);
        if (bad < 0)
            fields_unshuffle(&fs, d, (size_t)n, done);
        Py_END_ALLOW_THREADS
        if (nomem)
            PyErr_NoMemory();
        else if (mismatch)
            PyErr_Format(BlockHashError, "block %ld of the records: checksum mismatch (stored bytes changed)", bad);
        else if (bad >= 0 && dwhy[0])
            PyErr_Format(PyExc_ValueError, "block %ld of the records is damaged (%s)", bad, dwhy);
        else if (bad >= 0)
            PyErr_Format(PyExc_ValueError, "block %ld of the records is damaged (LZ4 %s %ld)", bad,
                         err < 0 ? "error at input byte" : "decoded bytes:", err < 0 ? -err - 1 : err);
        else
            result = PyLong_FromLong(decoded);
    }
finish:
    if (fields != Py_None)
        fields_release(&fs);
    PyMem_Free(done);
    if (rng != Py_None)
        PyBuffer_Release(&ranges);
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
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
    {"lz4_blocks", py_lz4_blocks, METH_VARARGS,
     "lz4_blocks($module, prefix, head, region, scratch, stride, cuts, tmp, records=b'', rsize=0, /)\n--\n\n"
     "prefix + head + the BLZ2 block table and blocks of shuffle(region, stride), a block per cut.\n"
     "records (stride 0): the rsize-byte records whose bytes the first rsize planes hold."},
    {"blocks_decode", py_blocks_decode, METH_VARARGS,
     "blocks_decode($module, src, dst, n, ranges, fields, hashed=False, /)\n--\n\n"
     "Decode the BLZ2 blocks of src holding planes of ranges (None: all) into dst, then each\n"
     "(offset, width, out) of fields its records; the blocks decoded. hashed (BLZ3): each\n"
     "block's xxh3 checked before it is decoded."},
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
    use_avx2 = shuffle_xxh3_avx2_ok();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    BlockHashError = PyErr_NewException("loader.serializers._shuffle.BlockHashError", PyExc_ValueError, NULL);
    if (BlockHashError == NULL || PyModule_AddObjectRef(m, "BlockHashError", BlockHashError) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
