/* An example user generator for `bulkload load gen://c:PATH/libscidb96_gen.so:scidb96_gen?n=N&start=S&layout=scidb96`.
 *
 * The record of SciDB's binary-load example (layout scidb96: d0..d9 float64, then i0..i3 int32,
 * 96 bytes, little-endian, packed), record j computed directly from j with the same arithmetic
 * as bulkload's built-in generator (generators/scidb96.h), so that the two load byte-identical
 * datasets:
 *
 *   d0 = j    d1 = 2j    d2 = j - 1    d3 = j * j    d9 = 881 j       float64, one IEEE operation
 *                                                                     on (double)j each, no FMA
 *   d4 = j % 55   d5 = j % 113   d6 = j % 17   d7 = j % 3   d8 = j % 577      exact, as float64
 *   i0 = j % 10   i1 = (int32)(j mod 2^32)   i2 = (17 j) mod 100   i3 = (113 j) mod 100   exact
 *
 * The contract every user generator follows: write records start .. start+n-1 into buf (n times
 * the record size, any alignment) and return 0; any other value is an error that bulkload
 * reports with the record range. bulkload calls it in its workers, each for its own batches'
 * ranges, so the records must depend on j alone.
 *
 * Build:  gcc -O2 -shared -fPIC -ffp-contract=off -o libscidb96_gen.so scidb96_gen.c
 */
#include <stdint.h>
#include <string.h>

typedef struct {
    double d[10];
    int32_t i[4];
} record;

_Static_assert(sizeof(record) == 96, "a scidb96 record is 96 bytes");

int scidb96_gen(void *buf, uint64_t start, uint64_t n)
{
    unsigned char *p = buf;

    if (n && start + (n - 1) < start)
        return 1; /* the range runs past the last record index 2^64 - 1 */
    for (uint64_t k = 0; k < n; k++, p += sizeof(record)) {
        uint64_t j = start + k;
        double dj = (double)j; /* round to nearest, as the built-in generator */
        record r;
        r.d[0] = dj;
        r.d[1] = 2.0 * dj;
        r.d[2] = dj - 1.0;
        r.d[3] = dj * dj;
        r.d[4] = (double)(j % 55);
        r.d[5] = (double)(j % 113);
        r.d[6] = (double)(j % 17);
        r.d[7] = (double)(j % 3);
        r.d[8] = (double)(j % 577);
        r.d[9] = 881.0 * dj;
        r.i[0] = (int32_t)(j % 10);
        r.i[1] = (int32_t)(uint32_t)j;
        r.i[2] = (int32_t)((17 * (j % 100)) % 100);
        r.i[3] = (int32_t)((113 * (j % 100)) % 100);
        memcpy(p, &r, sizeof r); /* little-endian hosts: the layout's bytes */
    }
    return 0;
}
