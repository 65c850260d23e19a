/* xxh3_64 of a BLZ3 block, with AVX2 where the machine has it (for
 * loader/serializers/_shufflemodule.c; bulkload's, not part of xxHash).
 *
 * xxhash.h picks its vector code when it is compiled (SSE2 on any x86-64); python-xxhash
 * dispatches to AVX2 at run time, ~3 x SSE2's speed on a cached 864 KB value here (79
 * against 25 GB/s, ad hoc). This file compiles XXH3 with AVX2 enabled (GCC's target
 * pragma, which also defines __AVX2__ for xxhash.h); `shuffle_xxh3_avx2_ok` says whether
 * the CPU has AVX2 (the caller uses xxhash.h's own choice otherwise). Other compilers and
 * machines: this is that same choice. */
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2")
#define SHUFFLE_AVX2 1
#endif
#define XXH_INLINE_ALL
#include "xxhash.h"

uint64_t shuffle_xxh3_avx2(const void *data, size_t len);
int shuffle_xxh3_avx2_ok(void);

uint64_t shuffle_xxh3_avx2(const void *data, size_t len)
{
    return XXH3_64bits(data, len);
}
#ifdef SHUFFLE_AVX2
#pragma GCC pop_options
#endif

int shuffle_xxh3_avx2_ok(void)
{
#ifdef SHUFFLE_AVX2
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
#else
    return 0;
#endif
}
