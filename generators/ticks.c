/* ticks record generator; see ticks.h for the definition of record i.
 *
 * Speed: two splitmix64 hashes per record, no division (the jitter is the high half of a
 * 64x64-bit product), each field stored straight into the packed record. The hashes of
 * CHUNK records at a time come first, in a loop of their own that the compiler vectorizes
 * (AVX-512's 64-bit multiply, where the CPU has it): 6.7 -> 5.3 ns a record. A table of
 * the prices instead of the three divisions, or vectorizing those too, was no faster.
 */
#include "ticks.h"

#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define TICKS_BIG_ENDIAN 1
#endif

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define GOLDEN UINT64_C(0x9E3779B97F4A7C15)
#define SALT1 UINT64_C(0x632BE59BD9B4E019)
#define SALT2 UINT64_C(0x8CB92BA72F3D8DD7)

static const char SYMBOLS[16][8] = {
    "AAPL", "MSFT", "GOOG", "AMZN", "NVDA", "META", "TSLA", "BRK.B",
    "JPM", "V", "XOM", "UNH", "JNJ", "WMT", "PG", "MA",
};
/* prices in cents, around which each symbol's price moves */
static const int32_t BASE[16] = {
    19000, 41000, 17500, 18500, 12000, 50000, 25000, 41500,
    20000, 28000, 11500, 52000, 15500, 6800, 16800, 46000,
};

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xBF58476D1CE4E5B9);
    x ^= x >> 27;
    x *= UINT64_C(0x94D049BB133111EB);
    x ^= x >> 31;
    return x;
}

static inline uint64_t mulhi(uint64_t a, uint64_t b)
{
#if defined(__SIZEOF_INT128__)
    return (uint64_t)(((unsigned __int128)a * b) >> 64);
#else
    uint64_t a0 = a & 0xFFFFFFFFu, a1 = a >> 32, b0 = b & 0xFFFFFFFFu, b1 = b >> 32;
    uint64_t p01 = a0 * b1, p10 = a1 * b0;
    uint64_t mid = ((a0 * b0) >> 32) + (p01 & 0xFFFFFFFFu) + (p10 & 0xFFFFFFFFu);
    return a1 * b1 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
}

#ifdef TICKS_BIG_ENDIAN
#define LE64(x) __builtin_bswap64(x)
#define LE32(x) __builtin_bswap32(x)
#define LE16(x) __builtin_bswap16(x)
#else
#define LE64(x) (x)
#define LE32(x) (x)
#define LE16(x) (x)
#endif

/* record i, whose hashes are h1 and h2, at p */
static inline void put(unsigned char *p, uint64_t i, uint64_t h1, uint64_t h2, uint64_t t0, uint64_t step)
{
    unsigned s = (unsigned)(h1 & 15);
    uint64_t ts = t0 + i * step + mulhi(h1, step);
    unsigned w = (unsigned)((i >> 10) & 1023);
    int32_t drift = (int32_t)(w < 512 ? w : 1023 - w) - 256;
    int32_t cents = BASE[s] + drift + (int32_t)(h2 & 63) - 32;
    int32_t spread = 1 + (int32_t)((h2 >> 6) & 3);
    unsigned r = (unsigned)((h2 >> 8) & 255);
    int32_t size = r < 32 ? 1 + (int32_t)((h2 >> 16) & 63) : 100 * (1 + (int32_t)((h2 >> 16) & 31));
    double price = (double)cents / 100.0;
    float bid = (float)((double)(cents - spread) / 100.0);
    float ask = (float)((double)(cents + spread) / 100.0);
    unsigned char flags = (unsigned char)((h2 >> 24) & (h2 >> 32) & 0xFF);
    unsigned char halted = ((h2 >> 40) & 1023) == 0;
    unsigned char valid = ((h2 >> 50) & 7) != 0;
    uint16_t venue = valid ? (uint16_t)(1 + ((h2 >> 53) & 15)) : 0;
    uint64_t u64;
    uint32_t u32;

    u64 = LE64(ts);
    memcpy(p, &u64, 8);
    memcpy(p + 8, SYMBOLS[s], 8);
    memcpy(&u64, &price, 8);
    u64 = LE64(u64);
    memcpy(p + 16, &u64, 8);
    u32 = LE32((uint32_t)size);
    memcpy(p + 24, &u32, 4);
    memcpy(&u32, &bid, 4);
    u32 = LE32(u32);
    memcpy(p + 28, &u32, 4);
    memcpy(&u32, &ask, 4);
    u32 = LE32(u32);
    memcpy(p + 32, &u32, 4);
    p[36] = flags;
    p[37] = halted;
    venue = LE16(venue);
    memcpy(p + 38, &venue, 2);
    p[40] = valid;
}

#define CHUNK 64
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define TICKS_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
#endif
#ifndef TICKS_CLONES
#define TICKS_CLONES
#endif

/* h1 and h2 of records i .. i + CHUNK - 1 */
TICKS_CLONES static void hashes(uint64_t i, uint64_t *h1, uint64_t *h2)
{
    for (int k = 0; k < CHUNK; k++) {
        uint64_t x = (i + (uint64_t)k) * GOLDEN;
        h1[k] = mix(x + SALT1);
        h2[k] = mix(x + SALT2);
    }
}

void ticks_fill(void *buf, uint64_t start, uint64_t n, int64_t t0, uint64_t step)
{
    unsigned char *p = (unsigned char *)buf;
    uint64_t i = start, h1[CHUNK], h2[CHUNK];

    for (uint64_t k = 0; k < n; k += CHUNK) { /* (the last chunk's unused hashes: at most 63) */
        uint64_t m = n - k < CHUNK ? n - k : CHUNK;
        hashes(i, h1, h2);
        for (uint64_t j = 0; j < m; j++, i++, p += TICKS_RECORD_SIZE)
            put(p, i, h1[j], h2[j], (uint64_t)t0, step);
    }
}
