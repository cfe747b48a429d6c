/*
 * comm_testlib.h - what the two communicator tests share: the shared-memory one
 * (tests/unit/test_comm_shm.c, engine/tp/comm_shm.c) and the NCCL one
 * (tests/gpu/test_comm_nccl.c, cuda/comm_nccl.c). Both run one thread per rank and
 * all-reduce inputs any thread can recompute.
 *
 * Rank threads cannot use EXPECT (test.h is not thread-safe): they report with
 * RANK_FAIL, which counts into rank_failures; the main thread checks the count
 * (atomic_exchange(&rank_failures, 0) == 0) after joining them. Include test.h first.
 */
#ifndef H2O_COMM_TESTLIB_H
#define H2O_COMM_TESTLIB_H

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

static atomic_int rank_failures;

/* A failure in a rank thread: counted always, printed as a TAP comment for the first
 * 20 (a broken all-reduce fails on every element; the log needs only a few). */
#define RANK_FAIL(...)                                                                     \
    do {                                                                                   \
        if (atomic_fetch_add(&rank_failures, 1) < 20) {                                    \
            flockfile(stdout);                                                             \
            printf("# %s:%d: ", __FILE__, __LINE__);                                       \
            printf(__VA_ARGS__);                                                           \
            printf("\n");                                                                  \
            funlockfile(stdout);                                                           \
        }                                                                                  \
    } while (0)

/* splitmix64's finaliser. */
static inline uint64_t comm_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/*
 * Element i of input stream `stream` (a rank, or a rank of one call), from the two
 * numbers alone so any thread can recompute any rank's input: a sign, a mantissa and
 * an exponent in [-8, 8]. Magnitudes from 2^-8 to 2^8 make a different summation
 * order change the low bits, which the bit-exact checks rely on.
 */
static inline float comm_value(uint64_t stream, int64_t i)
{
    const uint64_t h = comm_mix(stream * 0x100000001b3ull + (uint64_t)i);
    const float m = (float)(h >> 40) / (float)(1u << 24); /* [0, 1) */
    const int e = (int)((h >> 8) % 17) - 8;
    return (h & 1 ? -1.0f : 1.0f) * ldexpf(0.5f + m, e);
}

#endif
