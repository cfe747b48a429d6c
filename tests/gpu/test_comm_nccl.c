/*
 * test_comm_nccl.c - the NCCL communicator (cuda/comm_nccl.c) on every rank count from
 * 1 to the number of GPUs (at most 4), one rank thread per GPU.
 *
 * NCCL sums in its own order (ring or tree), so results are not compared bit for bit
 * with comm_shm; they must be identical on every rank and within 1e-6 of the double
 * sum relative to the sum of magnitudes (fp32), or within one 16-bit rounding per
 * addition (fp16). Lengths 0, 1, 7, 4096 and 1,000,003; then the barrier.
 *
 * NCCL's bootstrap (ncclGetUniqueId, ncclCommInitRank) talks over sockets even for
 * one process, and inside a VM it can wait for ever on an interface that goes
 * nowhere. So the test uses the loopback interface (NCCL_SOCKET_IFNAME=lo) and asks
 * for NCCL's warnings (NCCL_DEBUG=WARN), each unless already set, and a job that
 * takes over JOB_TIMEOUT_S seconds ends the process with a message naming it.
 *
 * Without a CUDA device it prints "no CUDA device: skipping" and exits 77 (meson's
 * skip code), as on every build machine. Never run on a GPU before it was committed:
 * tests/gpu/run.sh runs it.
 */
#include "comm_nccl.h"
#include "dtype.h"
#include "err.h"
#include "test.h"
#include "util.h"

#include "comm_testlib.h"
#include "gpu_testlib.h"

#include <cuda_runtime_api.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_RANKS 4

/* Seconds one job (group create, every rank's open, all-reduce and barrier) may take:
 * on a GPU it takes about one, most of it NCCL's set-up. */
#define JOB_TIMEOUT_S 30

/* What the alarm prints: the job that hung, written before the alarm is set. */
static char hang_msg[256];
static size_t hang_len;

static void on_alarm(int sig)
{
    (void)sig;
    if (write(1, hang_msg, hang_len) < 0) _exit(2);
    _exit(1);
}

struct job {
    struct comm_nccl_group *g;
    int n_ranks;
    int64_t n;
    enum dtype dt;
    void *out[MAX_RANKS]; /* [n] host copy of each rank's result */
};

struct rank_thread {
    pthread_t tid;
    struct job *job;
    int rank;
};

static void *rank_main(void *p)
{
    struct rank_thread *t = p;
    struct job *j = t->job;
    int r = t->rank, sz = dtype_size(j->dt);
    cudaStream_t stream = NULL;
    struct comm *c = NULL;
    void *d = NULL, *h = xmalloc((size_t)(j->n + 1) * (size_t)sz);
    if (cudaSetDevice(r) != cudaSuccess || cudaStreamCreate(&stream) != cudaSuccess) {
        RANK_FAIL("rank %d: no device/stream", r);
        goto out; /* the other ranks then fail in ncclCommInitRank or hang: see the log */
    }
    if (comm_nccl_open(j->g, r, r, stream, &c) != 0) {
        RANK_FAIL("rank %d: open: %s", r, err_msg());
        goto out;
    }
    for (int64_t i = 0; i < j->n; i++) {
        float v = comm_value((uint64_t)r, i);
        if (j->dt == DTYPE_F32)
            ((float *)h)[i] = v;
        else
            ((uint16_t *)h)[i] = f32_to_f16(v);
    }
    size_t bytes = (size_t)j->n * (size_t)sz;
    if (cudaMalloc(&d, bytes + 4) != cudaSuccess ||
        cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        RANK_FAIL("rank %d: device buffer", r);
        goto out;
    }
    if (comm_allreduce_sum(c, d, j->n, j->dt) != 0) RANK_FAIL("rank %d: %s", r, err_msg());
    if (cudaStreamSynchronize(stream) != cudaSuccess ||
        cudaMemcpy(j->out[r], d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
        RANK_FAIL("rank %d: copy back", r);
    if (comm_barrier(c) != 0) RANK_FAIL("rank %d: barrier: %s", r, err_msg());
out:
    comm_destroy(c);
    if (d) cudaFree(d);
    if (stream) cudaStreamDestroy(stream);
    free(h);
    return NULL;
}

static void run_job(struct job *j)
{
    const char *ifname = getenv("NCCL_SOCKET_IFNAME");
    const int len =
        snprintf(hang_msg, sizeof hang_msg,
                 "Bail out! NCCL job (%s, %d ranks, n=%lld) did not finish in %d s: "
                 "a hang in NCCL's socket bootstrap? NCCL_SOCKET_IFNAME=%s, "
                 "rerun with NCCL_DEBUG=INFO\n",
                 dtype_name(j->dt), j->n_ranks, (long long)j->n, JOB_TIMEOUT_S,
                 ifname ? ifname : "(unset)");
    hang_len = len > 0 ? MIN((size_t)len, sizeof hang_msg - 1) : 0;
    alarm(JOB_TIMEOUT_S);
    CHECK(comm_nccl_group_create(&j->g, j->n_ranks) == 0);
    struct rank_thread t[MAX_RANKS];
    for (int r = 0; r < j->n_ranks; r++) {
        t[r] = (struct rank_thread){.job = j, .rank = r};
        CHECK(pthread_create(&t[r].tid, NULL, rank_main, &t[r]) == 0);
    }
    for (int r = 0; r < j->n_ranks; r++)
        pthread_join(t[r].tid, NULL);
    comm_nccl_group_destroy(j->g);
    alarm(0);
}

static int n_dev;

static void check_dtype(enum dtype dt)
{
    static const int64_t lens[] = {0, 1, 7, 4096, 1000003};
    int max_ranks = n_dev < MAX_RANKS ? n_dev : MAX_RANKS;
    for (int N = 1; N <= max_ranks; N++) {
        for (size_t li = 0; li < ARRAY_LEN(lens); li++) {
            struct job j = {.n_ranks = N, .n = lens[li], .dt = dt};
            size_t bytes = (size_t)(j.n + 1) * (size_t)dtype_size(dt);
            for (int r = 0; r < N; r++)
                j.out[r] = xcalloc(1, bytes);
            run_job(&j);
            int64_t bad_same = 0, bad_near = 0;
            for (int64_t i = 0; i < j.n; i++) {
                double d = 0, mag = 0;
                for (int r = 0; r < N; r++) {
                    float v = comm_value((uint64_t)r, i);
                    if (dt == DTYPE_F16) v = f16_to_f32(f32_to_f16(v));
                    d += v;
                    mag += fabs(v);
                }
                double got = dt == DTYPE_F32 ? ((float *)j.out[0])[i]
                                             : f16_to_f32(((uint16_t *)j.out[0])[i]);
                /* fp16: NCCL may round after each of the N-1 additions. */
                double tol = dt == DTYPE_F32 ? 1e-6 * mag : N * ldexp(1, -11) * mag + 6e-8;
                if (!(fabs(got - d) <= tol)) bad_near++;
                for (int r = 1; r < N; r++)
                    if (memcmp((char *)j.out[r] + i * dtype_size(dt),
                               (char *)j.out[0] + i * dtype_size(dt),
                               (size_t)dtype_size(dt)))
                        bad_same++;
            }
            if (bad_same || bad_near)
                TEST_FAIL(
                    "%s N=%d n=%lld: %lld differ between ranks, %lld from the double sum",
                    dtype_name(dt), N, (long long)j.n, (long long)bad_same,
                    (long long)bad_near);
            for (int r = 0; r < N; r++)
                free(j.out[r]);
        }
    }
    EXPECT_EQ(atomic_exchange(&rank_failures, 0), 0);
}

TEST(nccl_allreduce_f32_every_length)
{
    check_dtype(DTYPE_F32);
}

TEST(nccl_allreduce_f16_every_length)
{
    check_dtype(DTYPE_F16);
}

int main(void)
{
    /* Before any NCCL call (NCCL reads its environment once); the caller's wins. */
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    setenv("NCCL_DEBUG", "WARN", 0);
    signal(SIGALRM, on_alarm);
    n_dev = gpu_device_count();
    if (n_dev == 0) return 77; /* meson's skip code */
    const char *ifname = getenv("NCCL_SOCKET_IFNAME"), *dbg = getenv("NCCL_DEBUG");
    printf("# NCCL_SOCKET_IFNAME=%s NCCL_DEBUG=%s\n", ifname ? ifname : "(unset)",
           dbg ? dbg : "(unset)");
    printf("# %d devices: NCCL ranks 1..%d\n", n_dev,
           n_dev < MAX_RANKS ? n_dev : MAX_RANKS);
    RUN(nccl_allreduce_f32_every_length);
    RUN(nccl_allreduce_f16_every_length);
    return test_done();
}
