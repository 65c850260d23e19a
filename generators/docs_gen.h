/* docs generator: the documents of ``gen://docs`` (layout docs; see loader/docs_gen.py).
 *
 * Document i (a uint64 index, also its id) of stream `seed`, with M = the splitmix64
 * finalizer (z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB;
 * z ^= z >> 31) and G = 0x9E3779B97F4A7C15, all arithmetic mod 2**64:
 *
 *   key = M(M(seed) ^ M(i));   u_c = M(key + (c + 1) G)  for c = 0, 1, 2, ...
 *   words w_0, w_1, ... (uint32) = lo32(u_0), hi32(u_0), lo32(u_1), hi32(u_1), ...
 *
 * consumed in order: length L = the first w < 2001 * floor(2**32 / 2001), mod 2001; then
 * created_at = DOCS_CREATED_MIN + (the next w < R * floor(2**32 / R), mod R) with
 * R = DOCS_CREATED_MAX - DOCS_CREATED_MIN; then each next w < 52 * 95**4 gives 4
 * characters: 32 + the base-95 digits of (w mod 95**4), most significant first, until L
 * characters are written (the last word's surplus characters are dropped).
 */
#ifndef BULKLOAD_DOCS_GEN_H
#define BULKLOAD_DOCS_GEN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DOCS_TEXT_MAX 2000
#define DOCS_CREATED_MIN INT64_C(1420070400) /* 2015-01-01 UTC */
#define DOCS_CREATED_MAX INT64_C(1767225600) /* 2026-01-01 UTC, exclusive */

/* Build the character table once (idempotent; the fill functions call it too). */
void docs_gen_init(void);

/* Documents start .. start+n-1 of stream seed: created_at[k] and offsets[0..n] (offsets[0]
 * = 0, offsets[k+1] - offsets[k] = the text length of document start+k). Returns the total
 * text length offsets[n]. Arrays may be unaligned. The caller guarantees that start + n - 1
 * does not exceed UINT64_MAX (when n > 0). */
uint64_t docs_gen_meta(uint64_t seed, uint64_t start, uint64_t n, int64_t *created_at,
                       int64_t *offsets);

/* Write the texts of documents start .. start+n-1, one after the other, into text (capacity
 * cap bytes). Returns the number of bytes written, or UINT64_MAX (writing nothing past cap)
 * when they do not fit. */
uint64_t docs_gen_text(uint64_t seed, uint64_t start, uint64_t n, uint8_t *text, uint64_t cap);

#ifdef __cplusplus
}
#endif

#endif
