/* ticks record generator: record i of layout ticks (41 bytes, little-endian, packed).
 *
 * Options: t0 (int64, ns since the Unix epoch, UTC) and step (uint64 ns, >= 1).
 * All arithmetic is on uint64, modulo 2^64 (the caller refuses ranges whose timestamps
 * would leave int64). With
 *
 *   mix(x) = the splitmix64 finaliser: x ^= x >> 30; x *= 0xBF58476D1CE4E5B9;
 *                                      x ^= x >> 27; x *= 0x94D049BB133111EB; x ^= x >> 31
 *   h1 = mix(i * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019)
 *   h2 = mix(i * 0x9E3779B97F4A7C15 + 0x8CB92BA72F3D8DD7)
 *   s  = h1 & 15                         (the symbol)
 *   w  = (i >> 10) & 1023;  drift = (w < 512 ? w : 1023 - w) - 256
 *   cents  = BASE[s] + drift + (int)(h2 & 63) - 32
 *   spread = 1 + ((h2 >> 6) & 3)
 *
 * the fields are
 *
 *   ts     int64   t0 + i * step + hi64(h1 * step)     (the jitter is < step: strictly increasing)
 *   sym    8 bytes SYMBOLS[s], ASCII, zero-padded
 *   price  float64 (double)cents / 100.0
 *   size   int32   r = (h2 >> 8) & 255: r < 32 ? 1 + ((h2 >> 16) & 63) : 100 * (1 + ((h2 >> 16) & 31))
 *   bid    float32 (float)((double)(cents - spread) / 100.0)
 *   ask    float32 (float)((double)(cents + spread) / 100.0)
 *   flags  uint8   (h2 >> 24) & (h2 >> 32) & 0xFF
 *   halted bool    ((h2 >> 40) & 1023) == 0      (one record in 1024)
 *   venue  int16   ((h2 >> 50) & 7) == 0 ? 0 (null) : 1 + ((h2 >> 53) & 15)
 *   _validity uint8  bit 0: venue holds a value
 *
 * at byte offsets 0, 8, 16, 24, 28, 32, 36, 37, 38, 40. Compile with -ffp-contract=off.
 */
#ifndef BULKLOAD_TICKS_H
#define BULKLOAD_TICKS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TICKS_RECORD_SIZE 41
/* 2026-01-02T14:30:00Z in ns since the epoch, and one second */
#define TICKS_DEFAULT_T0 INT64_C(1767364200000000000)
#define TICKS_DEFAULT_STEP UINT64_C(1000000000)

/* Write records start .. start+n-1 into buf (n * 41 bytes, any alignment). step >= 1. */
void ticks_fill(void *buf, uint64_t start, uint64_t n, int64_t t0, uint64_t step);

#ifdef __cplusplus
}
#endif

#endif
