/*
 * test_comm_shm.c - the shared-memory TP communicator (engine/tp/comm_shm.c) with 1
 * to 4 rank threads.
 *
 * The all-reduce must give every rank the same bits, equal to the sequential fp32 sum
 * in rank order (acc = b0; acc += b1; ...), and within 1e-6 of the double-precision
 * sum relative to the sum of magnitudes (relative to the result itself would be
 * meaningless where the terms cancel). Inputs mix magnitudes from 2^-8 to 2^8, so a
 * different summation order would change low bits and fail the bit-exact check.
 * Rank threads cannot use EXPECT (it is not thread-safe): they count failures in
 * an atomic, printed as TAP comments and checked by the main thread.
 */
#include "test.h"

#include "comm_testlib.h"

#include "comm_shm.h"
#include "err.h"
#include "util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

/* ---- running N rank threads ---------------------------------------------------- */

typedef void rank_fn(struct comm *c, void *arg);

struct rank_thread {
    pthread_t tid;
    struct comm_shm_group *g;
    int rank;
    rank_fn *fn;
    void *arg;
};

static void *rank_main(void *p)
{
    struct rank_thread *t = p;
    struct comm *c = NULL;
    CHECK(comm_shm_open(t->g, t->rank, &c) == 0); /* a missing rank would hang the rest */
    if (comm_rank(c) != t->rank || comm_size(c) < 1)
        RANK_FAIL("rank %d: bad handle", t->rank);
    t->fn(c, t->arg);
    comm_destroy(c);
    return NULL;
}

/* Run fn(comm, arg) on n_ranks threads of one fresh group and join them. */
static void run_ranks(int n_ranks, rank_fn *fn, void *arg)
{
    struct comm_shm_group *g = NULL;
    CHECK(comm_shm_group_create(&g, n_ranks) == 0);
    struct rank_thread t[8];
    CHECK(n_ranks <= (int)ARRAY_LEN(t));
    for (int r = 0; r < n_ranks; r++) {
        t[r] = (struct rank_thread){.g = g, .rank = r, .fn = fn, .arg = arg};
        CHECK(pthread_create(&t[r].tid, NULL, rank_main, &t[r]) == 0);
    }
    for (int r = 0; r < n_ranks; r++)
        pthread_join(t[r].tid, NULL);
    comm_shm_group_destroy(g);
}

/* ---- fp32: fixed lengths, every rank's result checked by the main thread ------- */

struct fixed_ctx {
    int64_t n;
    float *buf[8]; /* [n] per rank: its input, then its result */
};

static void fixed_rank(struct comm *c, void *arg)
{
    struct fixed_ctx *x = arg;
    int r = comm_rank(c);
    for (int64_t i = 0; i < x->n; i++)
        x->buf[r][i] = comm_value((uint64_t)r, i);
    int err = comm_allreduce_sum(c, x->buf[r], x->n, DTYPE_F32);
    if (err) RANK_FAIL("rank %d: allreduce: %s", r, err_msg());
}

TEST(allreduce_f32_every_length_and_rank_count)
{
    /* Lengths 0, 1 and 7 leave some ranks an empty slice; 1,000,003 is prime, so no
     * rank count divides it. */
    static const int64_t lens[] = {0, 1, 7, 4096, 1000003};
    for (int N = 1; N <= 4; N++) {
        for (size_t li = 0; li < ARRAY_LEN(lens); li++) {
            int64_t n = lens[li];
            struct fixed_ctx x = {.n = n};
            for (int r = 0; r < N; r++)
                x.buf[r] = xmalloc((size_t)(n + 1) * sizeof(float));
            run_ranks(N, fixed_rank, &x);
            int64_t bad_bits = 0, bad_near = 0;
            for (int64_t i = 0; i < n; i++) {
                float ref = comm_value(0, i);
                double d = ref, mag = fabs(ref);
                for (int r = 1; r < N; r++) {
                    float v = comm_value((uint64_t)r, i);
                    ref += v;
                    d += v;
                    mag += fabs(v);
                }
                for (int r = 0; r < N; r++)
                    if (memcmp(&x.buf[r][i], &ref, sizeof ref) != 0) bad_bits++;
                if (!(fabs(x.buf[0][i] - d) <= 1e-6 * mag)) bad_near++;
            }
            if (bad_bits || bad_near)
                TEST_FAIL("N=%d n=%lld: %lld elements differ from the sequential sum, "
                          "%lld from the double sum",
                          N, (long long)n, (long long)bad_bits, (long long)bad_near);
            for (int r = 0; r < N; r++)
                free(x.buf[r]);
        }
    }
    EXPECT_EQ(atomic_exchange(&rank_failures, 0), 0);
}

/* ---- many calls, varying lengths and alignments, checked by each rank ---------- */

#define MANY_CALLS 300
#define MANY_MAX 20000

static int64_t many_len(int call)
{
    /* Small, odd, empty and large lengths in a fixed pseudo-random order. */
    uint64_t h = comm_mix((uint64_t)call + 1000);
    switch (h % 4) {
    case 0: return (int64_t)(h >> 8) % 16;
    case 1: return (int64_t)(h >> 8) % 200;
    default: return (int64_t)(h >> 8) % MANY_MAX;
    }
}

static void many_rank(struct comm *c, void *arg)
{
    (void)arg;
    int r = comm_rank(c), N = comm_size(c);
    float *mem = xmalloc((MANY_MAX + 16) * sizeof(float));
    for (int call = 0; call < MANY_CALLS; call++) {
        int64_t n = many_len(call);
        /* A different element offset per rank and call: slices must not assume the
         * ranks' buffers are equally aligned. */
        float *buf = mem + (call + r) % 16;
        for (int64_t i = 0; i < n; i++)
            buf[i] = comm_value((uint64_t)(call * 8 + r), i);
        int err = comm_allreduce_sum(c, buf, n, DTYPE_F32);
        if (err) {
            RANK_FAIL("rank %d call %d: %s", r, call, err_msg());
            break;
        }
        for (int64_t i = 0; i < n; i++) {
            float ref = comm_value((uint64_t)(call * 8), i);
            for (int q = 1; q < N; q++)
                ref += comm_value((uint64_t)(call * 8 + q), i);
            if (memcmp(&buf[i], &ref, sizeof ref) != 0) {
                RANK_FAIL("rank %d call %d n=%lld: element %lld is %.9g, expected %.9g", r,
                          call, (long long)n, (long long)i, buf[i], ref);
                break;
            }
        }
    }
    free(mem);
}

TEST(allreduce_many_calls_varying_lengths)
{
    for (int N = 1; N <= 4; N++)
        run_ranks(N, many_rank, NULL);
    EXPECT_EQ(atomic_exchange(&rank_failures, 0), 0);
}

/* ---- fp16 and bf16: fp32 accumulation, one rounding ---------------------------- */

struct half_ctx {
    int64_t n;
    enum dtype dt;
    uint16_t *buf[8];
};

static uint16_t to_half(enum dtype dt, float f)
{
    return dt == DTYPE_F16 ? f32_to_f16(f) : f32_to_bf16(f);
}

static float from_half(enum dtype dt, uint16_t h)
{
    return dt == DTYPE_F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

static void half_rank(struct comm *c, void *arg)
{
    struct half_ctx *x = arg;
    int r = comm_rank(c);
    for (int64_t i = 0; i < x->n; i++)
        x->buf[r][i] = to_half(x->dt, comm_value((uint64_t)r, i));
    if (comm_allreduce_sum(c, x->buf[r], x->n, x->dt) != 0)
        RANK_FAIL("rank %d: allreduce: %s", r, err_msg());
}

TEST(allreduce_f16_bf16_accumulate_in_f32)
{
    static const int64_t lens[] = {0, 1, 7, 4097, 100003};
    static const enum dtype dts[] = {DTYPE_F16, DTYPE_BF16};
    for (size_t di = 0; di < ARRAY_LEN(dts); di++) {
        enum dtype dt = dts[di];
        /* One rounding of a value within 1e-6 of the exact sum: half an ulp of the
         * 16-bit type (2^-11 for fp16, 2^-8 for bf16) relative to the result. */
        double half_ulp = dt == DTYPE_F16 ? ldexp(1, -11) : ldexp(1, -8);
        for (int N = 1; N <= 4; N++) {
            for (size_t li = 0; li < ARRAY_LEN(lens); li++) {
                int64_t n = lens[li];
                struct half_ctx x = {.n = n, .dt = dt};
                for (int r = 0; r < N; r++)
                    x.buf[r] = xmalloc((size_t)(n + 1) * 2);
                run_ranks(N, half_rank, &x);
                int64_t bad_bits = 0, bad_near = 0;
                for (int64_t i = 0; i < n; i++) {
                    float acc = from_half(dt, to_half(dt, comm_value(0, i)));
                    double d = acc, mag = fabs(acc);
                    for (int r = 1; r < N; r++) {
                        float v = from_half(dt, to_half(dt, comm_value((uint64_t)r, i)));
                        acc += v;
                        d += v;
                        mag += fabs(v);
                    }
                    uint16_t ref = to_half(dt, acc);
                    for (int r = 0; r < N; r++)
                        bad_bits += x.buf[r][i] != ref;
                    double got = from_half(dt, x.buf[0][i]);
                    if (!(fabs(got - d) <= half_ulp * fabs(d) + 1e-6 * mag + 6e-8))
                        bad_near++;
                }
                if (bad_bits || bad_near)
                    TEST_FAIL("%s N=%d n=%lld: %lld differ from the fp32-accumulated sum, "
                              "%lld from the double sum",
                              dtype_name(dt), N, (long long)n, (long long)bad_bits,
                              (long long)bad_near);
                for (int r = 0; r < N; r++)
                    free(x.buf[r]);
            }
        }
    }
    EXPECT_EQ(atomic_exchange(&rank_failures, 0), 0);
}

/* ---- barrier ------------------------------------------------------------------- */

#define BARRIER_ROUNDS 200
static atomic_int arrived;

static void barrier_rank(struct comm *c, void *arg)
{
    (void)arg;
    int r = comm_rank(c), N = comm_size(c);
    for (int k = 0; k < BARRIER_ROUNDS; k++) {
        /* Stagger the ranks so a barrier that let anyone through early would show. */
        if ((k + r) % 7 == 0) nanosleep(&(struct timespec){.tv_nsec = 200000}, NULL);
        atomic_fetch_add(&arrived, 1);
        if (comm_barrier(c) != 0) RANK_FAIL("rank %d: barrier failed", r);
        /* Everyone arrived for round k; nobody can be past round k+1's barrier, which
         * needs this rank, so at most N-1 arrivals of round k+1 are counted. */
        int a = atomic_load(&arrived);
        if (a < N * (k + 1) || a > N * (k + 1) + N - 1)
            RANK_FAIL("rank %d round %d: %d arrivals after the barrier, N=%d", r, k, a, N);
    }
}

TEST(barrier_waits_for_every_rank)
{
    for (int N = 1; N <= 4; N++) {
        atomic_store(&arrived, 0);
        run_ranks(N, barrier_rank, NULL);
        EXPECT_EQ(atomic_load(&arrived), N * BARRIER_ROUNDS);
    }
    EXPECT_EQ(atomic_exchange(&rank_failures, 0), 0);
}

/* ---- errors -------------------------------------------------------------------- */

static void mismatch_rank(struct comm *c, void *arg)
{
    (void)arg;
    int r = comm_rank(c), N = comm_size(c);
    float buf[64];
    for (int i = 0; i < 64; i++)
        buf[i] = (float)(r + 1);
    /* Rank 1 disagrees on the length, then rank 0 on the dtype, then rank N-1 passes
     * no buffer: every rank fails together, and the group stays usable. */
    int err = comm_allreduce_sum(c, buf, r == 1 ? 32 : 64, DTYPE_F32);
    if (err != ENG_EINVAL) RANK_FAIL("rank %d: length mismatch gave %d", r, err);
    err = comm_allreduce_sum(c, buf, 64, r == 0 ? DTYPE_F16 : DTYPE_F32);
    if (err != ENG_EINVAL) RANK_FAIL("rank %d: dtype mismatch gave %d", r, err);
    err = comm_allreduce_sum(c, r == N - 1 ? NULL : buf, 64, DTYPE_F32);
    if (err != ENG_EINVAL) RANK_FAIL("rank %d: NULL buffer gave %d", r, err);
    err = comm_allreduce_sum(c, buf, -1, DTYPE_F32);
    if (err != ENG_EINVAL) RANK_FAIL("rank %d: negative length gave %d", r, err);
    for (int i = 0; i < 64; i++)
        if (buf[i] != (float)(r + 1)) {
            RANK_FAIL("rank %d: a failed call changed the buffer", r);
            break;
        }
    err = comm_allreduce_sum(c, buf, 64, DTYPE_F32);
    if (err) RANK_FAIL("rank %d: valid call after errors: %s", r, err_msg());
    if (buf[63] != (float)(N * (N + 1) / 2)) RANK_FAIL("rank %d: sum %g", r, buf[63]);
}

TEST(errors_fail_every_rank_and_leave_the_group_usable)
{
    run_ranks(2, mismatch_rank, NULL);
    run_ranks(3, mismatch_rank, NULL);
    EXPECT_EQ(atomic_exchange(&rank_failures, 0), 0);

    struct comm_shm_group *g = NULL;
    EXPECT_EQ(comm_shm_group_create(&g, 0), ENG_EINVAL);
    EXPECT(g == NULL);
    EXPECT_EQ(comm_shm_group_create(&g, 2), 0);
    struct comm *a = NULL, *b = NULL;
    EXPECT_EQ(comm_shm_open(g, 2, &a), ENG_EINVAL);
    EXPECT_EQ(comm_shm_open(g, -1, &a), ENG_EINVAL);
    EXPECT_EQ(comm_shm_open(g, 1, &a), 0);
    EXPECT_EQ(comm_shm_open(g, 1, &b), ENG_EINVAL);
    EXPECT(b == NULL);
    comm_destroy(a);
    EXPECT_EQ(comm_shm_open(g, 1, &b), 0); /* reopened after destroy */
    comm_destroy(b);
    comm_destroy(NULL);
    comm_shm_group_destroy(g);
}

/* ---- throughput (printed, never asserted) -------------------------------------- */

#define BW_N ((int64_t)4 << 20) /* 16 MiB of fp32 */
#define BW_ITERS 20

#define SMALL_N ((int64_t)32 * 4096) /* 512 KiB: one decode all-reduce, 32 x n_embd 4096   \
                                      */
#define SMALL_ITERS 200

struct bw_ctx {
    double seconds, small_seconds;
};

static void bw_rank(struct comm *c, void *arg)
{
    struct bw_ctx *x = arg;
    float *buf = xmalloc((size_t)BW_N * sizeof(float));
    for (int64_t i = 0; i < BW_N; i++)
        buf[i] = 1e-3f;
    comm_allreduce_sum(c, buf, BW_N, DTYPE_F32); /* warm-up: page faults */
    comm_barrier(c);
    double t0 = time_now();
    for (int k = 0; k < BW_ITERS; k++)
        comm_allreduce_sum(c, buf, BW_N, DTYPE_F32);
    if (comm_rank(c) == 0) x->seconds = time_now() - t0;
    comm_barrier(c);
    t0 = time_now();
    for (int k = 0; k < SMALL_ITERS; k++)
        comm_allreduce_sum(c, buf, SMALL_N, DTYPE_F32);
    if (comm_rank(c) == 0) x->small_seconds = time_now() - t0;
    free(buf);
}

TEST(allreduce_throughput_16mib_two_ranks)
{
    struct bw_ctx x = {0};
    run_ranks(2, bw_rank, &x);
    double bytes = (double)BW_N * sizeof(float) * BW_ITERS;
    printf("# all-reduce fp32 16 MiB, N=2 threads: %.2f ms per call, %.2f GB/s "
           "(buffer bytes per second per rank)\n",
           x.seconds / BW_ITERS * 1e3, bytes / x.seconds / 1e9);
    printf("# all-reduce fp32 512 KiB, N=2 threads: %.1f us per call\n",
           x.small_seconds / SMALL_ITERS * 1e6);
    EXPECT(x.seconds > 0);
}

int main(void)
{
    RUN(allreduce_f32_every_length_and_rank_count);
    RUN(allreduce_many_calls_varying_lengths);
    RUN(allreduce_f16_bf16_accumulate_in_f32);
    RUN(barrier_waits_for_every_rank);
    RUN(errors_fail_every_rank_and_leave_the_group_usable);
    RUN(allreduce_throughput_16mib_two_ranks);
    return test_done();
}
