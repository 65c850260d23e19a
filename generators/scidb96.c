/* scidb96 record generator; see scidb96.h for the definition of record j.
 *
 * Speed: no division in the inner loop. Every modular field is an incremental counter
 * that wraps at its modulus; (double)j is computed once per record. Records are built in
 * registers and stored straight into the buffer.
 */
#include "scidb96.h"

#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#define SCIDB96_HAVE_STREAM 1
/* Buffers at least this large are written with non-temporal (streaming) stores: they do not
 * fit in cache anyway, and skipping the read-for-ownership nearly doubles the write rate to
 * memory. Smaller buffers (e.g. the 1 MiB block of bulkload-gen) stay in cache for the reader. */
#define SCIDB96_STREAM_MIN_BYTES ((uint64_t)4 << 20)
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define SCIDB96_BIG_ENDIAN 1
#endif

/* No fused multiply-add anywhere: build with -ffp-contract=off (GCC ignores the pragma). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

typedef struct {
    double d[10];
    int32_t i[4];
} scidb96_rec;

_Static_assert(sizeof(scidb96_rec) == SCIDB96_RECORD_SIZE, "scidb96 record must be 96 bytes");

/* Counter state for consecutive records. */
typedef struct {
    uint32_t m55, m113, m17, m3, m577, m10, i2, i3, lo;
} scidb96_state;

static void state_init(scidb96_state *s, uint64_t j)
{
    uint32_t r100 = (uint32_t)(j % 100);
    s->m55 = (uint32_t)(j % 55);
    s->m113 = (uint32_t)(j % 113);
    s->m17 = (uint32_t)(j % 17);
    s->m3 = (uint32_t)(j % 3);
    s->m577 = (uint32_t)(j % 577);
    s->m10 = r100 % 10;
    s->i2 = (17 * r100) % 100;  /* (17 j) mod 100 = (17 (j mod 100)) mod 100 */
    s->i3 = (13 * r100) % 100;  /* 113 = 13 (mod 100) */
    s->lo = (uint32_t)j;
}

#define WRAP(x, m) do { (x)++; (x) = ((x) == (m)) ? 0 : (x); } while (0)
#define ADDWRAP(x, k) do { (x) += (k); (x) = ((x) >= 100) ? (x) - 100 : (x); } while (0)

#ifdef SCIDB96_BIG_ENDIAN
static void to_le(scidb96_rec *r)
{
    for (int k = 0; k < 10; k++) {
        uint64_t u;
        memcpy(&u, &r->d[k], 8);
        u = __builtin_bswap64(u);
        memcpy(&r->d[k], &u, 8);
    }
    for (int k = 0; k < 4; k++)
        r->i[k] = (int32_t)__builtin_bswap32((uint32_t)r->i[k]);
}
#endif

/* One record from a double dj == (double)j and the counter state. */
static inline void build(scidb96_rec *rp, double dj, const scidb96_state *s)
{
    scidb96_rec r;
    r.d[0] = dj;
    r.d[1] = 2.0 * dj;
    r.d[2] = dj - 1.0;
    r.d[3] = dj * dj;
    r.d[4] = (double)(int32_t)s->m55;
    r.d[5] = (double)(int32_t)s->m113;
    r.d[6] = (double)(int32_t)s->m17;
    r.d[7] = (double)(int32_t)s->m3;
    r.d[8] = (double)(int32_t)s->m577;
    r.d[9] = 881.0 * dj;
    r.i[0] = (int32_t)s->m10;
    r.i[1] = (int32_t)s->lo;
    r.i[2] = (int32_t)s->i2;
    r.i[3] = (int32_t)s->i3;
#ifdef SCIDB96_BIG_ENDIAN
    to_le(&r);
#endif
    *rp = r;
}

static inline void put(unsigned char *p, double dj, const scidb96_state *s)
{
    scidb96_rec r;
    build(&r, dj, s);
    memcpy(p, &r, sizeof r);
}

#ifdef SCIDB96_HAVE_STREAM
/* p must be 16-byte aligned (then every record is: 96 = 6 * 16). */
static inline void put_stream(unsigned char *p, double dj, const scidb96_state *s)
{
    scidb96_rec r;
    const __m128i *q = (const __m128i *)(const void *)&r;
    build(&r, dj, s);
    for (int k = 0; k < 6; k++)
        _mm_stream_si128((__m128i *)(void *)p + k, _mm_loadu_si128(q + k));
}
#endif

static inline void step(scidb96_state *s)
{
    WRAP(s->m55, 55);
    WRAP(s->m113, 113);
    WRAP(s->m17, 17);
    WRAP(s->m3, 3);
    WRAP(s->m577, 577);
    WRAP(s->m10, 10);
    ADDWRAP(s->i2, 17);
    ADDWRAP(s->i3, 13);
    s->lo++;
}

#ifdef SCIDB96_HAVE_STREAM
static void fill_stream(unsigned char *p, uint64_t start, uint64_t n)
{
    scidb96_state s;
    uint64_t j = start, k = 0;

    state_init(&s, start);
    if (j < ((uint64_t)1 << 63)) {
        uint64_t room = ((uint64_t)1 << 63) - j;
        uint64_t m = n < room ? n : room;
        int64_t sj = (int64_t)j;
        for (; k < m; k++, sj++, p += SCIDB96_RECORD_SIZE) {
            put_stream(p, (double)sj, &s);
            step(&s);
        }
        j += m;
    }
    for (; k < n; k++, j++, p += SCIDB96_RECORD_SIZE) {
        put_stream(p, (double)j, &s);
        step(&s);
    }
    _mm_sfence();
}
#endif

void scidb96_fill(void *buf, uint64_t start, uint64_t n)
{
    unsigned char *p = (unsigned char *)buf;
    scidb96_state s;
    uint64_t j = start, k = 0;

    if (n == 0)
        return;
#ifdef SCIDB96_HAVE_STREAM
    if (n >= SCIDB96_STREAM_MIN_BYTES / SCIDB96_RECORD_SIZE && ((uintptr_t)p & 15) == 0) {
        fill_stream(p, start, n);
        return;
    }
#endif
    state_init(&s, start);

    /* j < 2^63: a signed conversion is exact-equivalent and cheaper. */
    if (j < ((uint64_t)1 << 63)) {
        uint64_t room = ((uint64_t)1 << 63) - j;
        uint64_t m = n < room ? n : room;
        int64_t sj = (int64_t)j;
        for (; k < m; k++, sj++, p += SCIDB96_RECORD_SIZE) {
            put(p, (double)sj, &s);
            step(&s);
        }
        j += m;
    }
    for (; k < n; k++, j++, p += SCIDB96_RECORD_SIZE) {
        put(p, (double)j, &s);
        step(&s);
    }
}
