/* docs generator; see docs_gen.h for the definition of document i.
 *
 * Speed: the text loop draws one 64-bit output per two candidate words, turns each word
 * into 4 characters with two divisions by constants and two lookups in a 9025-entry table
 * of character pairs, and stores them unconditionally, advancing the output only when the
 * word is accepted (no branch on the 98.6 % acceptance).
 */
#include "docs_gen.h"

#include <string.h>

#define GAMMA UINT64_C(0x9E3779B97F4A7C15)
#define P2 9025u                  /* 95**2 */
#define P4 81450625u              /* 95**4 */
#define CHAR_LIMIT (52u * P4)     /* largest multiple of 95**4 <= 2**32 */
#define LEN_MOD ((uint32_t)DOCS_TEXT_MAX + 1u)
#define LEN_LIMIT ((uint32_t)((UINT64_C(1) << 32) / LEN_MOD * LEN_MOD))
#define CA_MOD ((uint32_t)(DOCS_CREATED_MAX - DOCS_CREATED_MIN))
#define CA_LIMIT ((uint32_t)((UINT64_C(1) << 32) / CA_MOD * CA_MOD))

/* pairs[v] = the two characters 32 + v / 95, 32 + v % 95 */
static uint8_t pairs[P2][2];
static volatile int pairs_ready;

void docs_gen_init(void)
{
    if (pairs_ready)
        return;
    for (unsigned v = 0; v < P2; v++) {
        pairs[v][0] = (uint8_t)(32 + v / 95);
        pairs[v][1] = (uint8_t)(32 + v % 95);
    }
    pairs_ready = 1;
}

static inline uint64_t mix64(uint64_t z)
{
    z ^= z >> 30;
    z *= UINT64_C(0xBF58476D1CE4E5B9);
    z ^= z >> 27;
    z *= UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* The word stream of one document: x = key + c G of the last output, a pending high half. */
typedef struct {
    uint64_t x;
    uint32_t pend;
    int has;
} words;

static inline uint32_t next_word(words *s)
{
    uint64_t u;
    if (s->has) {
        s->has = 0;
        return s->pend;
    }
    s->x += GAMMA;
    u = mix64(s->x);
    s->pend = (uint32_t)(u >> 32);
    s->has = 1;
    return (uint32_t)u;
}

/* Start document i's stream and read its header (length, created_at). */
static inline uint32_t doc_header(uint64_t skey, uint64_t i, words *s, int64_t *created)
{
    uint32_t w;
    s->x = mix64(skey ^ mix64(i));
    s->has = 0;
    do
        w = next_word(s);
    while (w >= LEN_LIMIT);
    uint32_t len = w % LEN_MOD;
    do
        w = next_word(s);
    while (w >= CA_LIMIT);
    *created = DOCS_CREATED_MIN + (int64_t)(w % CA_MOD);
    return len;
}

/* The 4 characters of word w (any w: a rejected word's characters are overwritten). */
static inline void put4(uint8_t *p, uint32_t w)
{
    uint32_t r = w % P4;
    uint32_t hi = r / P2, lo = r - hi * P2;
    memcpy(p, pairs[hi], 2);
    memcpy(p + 2, pairs[lo], 2);
}

static inline uint8_t *doc_text(words *s, uint8_t *p, uint32_t len)
{
    uint32_t w, a0, a1;
    uint64_t u;

    if (len >= 4 && s->has) { /* the header ended on a low half: the high half is next */
        w = next_word(s);
        put4(p, w);
        a0 = w < CHAR_LIMIT;
        p += 4 * a0;
        len -= 4 * a0;
    }
    while (len >= 8) { /* room for two unconditional stores */
        s->x += GAMMA;
        u = mix64(s->x);
        w = (uint32_t)u;
        put4(p, w);
        a0 = w < CHAR_LIMIT;
        p += 4 * a0;
        w = (uint32_t)(u >> 32);
        put4(p, w);
        a1 = w < CHAR_LIMIT;
        p += 4 * a1;
        len -= 4 * (a0 + a1);
    }
    while (len >= 4) {
        w = next_word(s);
        if (w < CHAR_LIMIT) {
            put4(p, w);
            p += 4;
            len -= 4;
        }
    }
    if (len) {
        uint8_t c[4];
        do
            w = next_word(s);
        while (w >= CHAR_LIMIT);
        put4(c, w);
        memcpy(p, c, len);
        p += len;
    }
    return p;
}

uint64_t docs_gen_meta(uint64_t seed, uint64_t start, uint64_t n, int64_t *created_at,
                       int64_t *offsets)
{
    uint64_t skey = mix64(seed), total = 0;
    words s;
    int64_t ca, off = 0;

    memcpy(&offsets[0], &off, 8);
    for (uint64_t k = 0; k < n; k++) {
        total += doc_header(skey, start + k, &s, &ca);
        off = (int64_t)total;
        memcpy(&created_at[k], &ca, 8);
        memcpy(&offsets[k + 1], &off, 8);
    }
    return total;
}

uint64_t docs_gen_text(uint64_t seed, uint64_t start, uint64_t n, uint8_t *text, uint64_t cap)
{
    uint64_t skey = mix64(seed), used = 0;
    words s;
    int64_t ca;

    docs_gen_init();
    for (uint64_t k = 0; k < n; k++) {
        uint32_t len = doc_header(skey, start + k, &s, &ca);
        if (len > cap - used)
            return UINT64_MAX;
        doc_text(&s, text + used, len);
        used += len;
    }
    return used;
}
