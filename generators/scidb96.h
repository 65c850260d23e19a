/* scidb96 record generator: record j of layout scidb96 (96 bytes, little-endian, packed).
 *
 *   d0 = j          d1 = 2j         d2 = j - 1      d3 = j * j      (float64, from (double)j,
 *   d9 = 881 j                                                      one IEEE op each, no FMA)
 *   d4 = j % 55     d5 = j % 113    d6 = j % 17     d7 = j % 3      d8 = j % 577  (exact, as float64)
 *   i0 = j % 10     i1 = (int32)(j mod 2^32)
 *   i2 = (17 j) mod 100             i3 = (113 j) mod 100           (exact for any uint64 j)
 *
 * Field order in memory: d0..d9 (8 bytes each), then i0..i3 (4 bytes each).
 * Compile with -ffp-contract=off so that no multiply/add pair is ever fused.
 */
#ifndef BULKLOAD_SCIDB96_H
#define BULKLOAD_SCIDB96_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SCIDB96_RECORD_SIZE 96

/* Write records start .. start+n-1 into buf (n * 96 bytes, any alignment).
 * The caller guarantees that start + n - 1 does not exceed UINT64_MAX (when n > 0). */
void scidb96_fill(void *buf, uint64_t start, uint64_t n);

#ifdef __cplusplus
}
#endif

#endif
