/*
 * comm_shm.c - the shared-memory communicator: TP ranks as threads of one process.
 *
 * Owns: the group (its barrier and the table of published buffers) and each rank's
 * handle; never the buffers, which belong to the ranks and are only read and written
 * during a call.
 * Invariant: between the two barriers of a call, slot[r] holds rank r's arguments and
 * rank r alone touches slice r of any buffer; outside a call nobody reads the slots.
 * Thread: each handle by its rank's thread; the group's create/destroy by its owner.
 */
#include "comm_shm.h"

#include "err.h"
#include "util.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* What a rank brings to the current call. */
struct comm_shm_slot {
    void *buf;
    int64_t n;
    enum dtype dt;
    bool bad; /* the rank's own arguments were invalid: the whole call fails */
};

struct comm_shm_group {
    int n_ranks;
    pthread_barrier_t barrier;
    pthread_mutex_t mu;         /* guards opened[] */
    bool *opened;               /* [n_ranks] */
    struct comm_shm_slot *slot; /* [n_ranks], one cache line each (no false sharing) */
};

struct comm_shm {
    struct comm base; /* first member: a struct comm * is a struct comm_shm * */
    struct comm_shm_group *g;
};

/* Slot padding: each rank writes its own slot just before the first barrier. */
#define SLOT_STRIDE 64
/* Slices start on multiples of this many elements (64 bytes of fp32), so two ranks
 * never write one cache line. */
#define SLICE_ALIGN 16
/* The fp32 accumulator is this many elements (16 KiB, in L1) per pass. */
#define CHUNK 4096

static struct comm_shm_slot *slot_of(struct comm_shm_group *g, int r)
{
    return (struct comm_shm_slot *)((char *)g->slot + (size_t)r * SLOT_STRIDE);
}

static bool dtype_summable(enum dtype dt)
{
    return dt == DTYPE_F32 || dt == DTYPE_F16 || dt == DTYPE_BF16;
}

/* acc[j] = buf[off + j] for j < m, widened to fp32. */
static void load_f32(float *acc, const void *buf, int64_t off, int64_t m, enum dtype dt)
{
    if (dt == DTYPE_F32) {
        const float *p = (const float *)buf + off;
        for (int64_t j = 0; j < m; j++)
            acc[j] = p[j];
    } else if (dt == DTYPE_F16) {
        const uint16_t *p = (const uint16_t *)buf + off;
        for (int64_t j = 0; j < m; j++)
            acc[j] = f16_to_f32(p[j]);
    } else {
        const uint16_t *p = (const uint16_t *)buf + off;
        for (int64_t j = 0; j < m; j++)
            acc[j] = bf16_to_f32(p[j]);
    }
}

/* acc[j] += buf[off + j] for j < m, one fp32 add per element. */
static void add_f32(float *acc, const void *buf, int64_t off, int64_t m, enum dtype dt)
{
    if (dt == DTYPE_F32) {
        const float *p = (const float *)buf + off;
        for (int64_t j = 0; j < m; j++)
            acc[j] += p[j];
    } else if (dt == DTYPE_F16) {
        const uint16_t *p = (const uint16_t *)buf + off;
        for (int64_t j = 0; j < m; j++)
            acc[j] += f16_to_f32(p[j]);
    } else {
        const uint16_t *p = (const uint16_t *)buf + off;
        for (int64_t j = 0; j < m; j++)
            acc[j] += bf16_to_f32(p[j]);
    }
}

/* Round acc [m] once to dt (the first buffer's copy) and copy it into the others. */
static void store_all(struct comm_shm_group *g, const float *acc, int64_t off, int64_t m,
                      enum dtype dt)
{
    int sz = dtype_size(dt);
    void *first = (char *)slot_of(g, 0)->buf + off * sz;
    if (dt == DTYPE_F32) {
        memcpy(first, acc, (size_t)m * 4);
    } else if (dt == DTYPE_F16) {
        uint16_t *p = first;
        for (int64_t j = 0; j < m; j++)
            p[j] = f32_to_f16(acc[j]);
    } else {
        uint16_t *p = first;
        for (int64_t j = 0; j < m; j++)
            p[j] = f32_to_bf16(acc[j]);
    }
    for (int r = 1; r < g->n_ranks; r++)
        memcpy((char *)slot_of(g, r)->buf + off * sz, first, (size_t)(m * sz));
}

/*
 * Sum slice [lo, hi) of every published buffer into every buffer. The order of the
 * additions depends only on the element, never on which rank runs it or how the
 * slice is cut into chunks: acc = b0; acc += b1; ... acc += b{N-1}.
 */
static void reduce_slice(struct comm_shm_group *g, int64_t lo, int64_t hi, enum dtype dt)
{
    float acc[CHUNK]; // [m] fp32 partial sums of elements off .. off+m-1
    for (int64_t off = lo; off < hi; off += CHUNK) {
        int64_t m = MIN((int64_t)CHUNK, hi - off);
        load_f32(acc, slot_of(g, 0)->buf, off, m, dt);
        for (int r = 1; r < g->n_ranks; r++)
            add_f32(acc, slot_of(g, r)->buf, off, m, dt);
        store_all(g, acc, off, m, dt);
    }
}

static void barrier_wait(struct comm_shm_group *g)
{
    int rc = pthread_barrier_wait(&g->barrier);
    CHECK(rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD);
}

static int shm_allreduce_sum(struct comm *c, void *buf, int64_t n, enum dtype dt)
{
    struct comm_shm *s = (struct comm_shm *)c;
    struct comm_shm_group *g = s->g;
    int rank = c->rank, N = g->n_ranks;

    /* Publish, even invalid arguments: returning early here would leave the other
     * ranks waiting at the barrier forever. Every rank then sees the same slots and
     * takes the same decision. */
    struct comm_shm_slot *mine = slot_of(g, rank);
    mine->buf = buf;
    mine->n = n;
    mine->dt = dt;
    mine->bad = n < 0 || (n > 0 && !buf) || !dtype_summable(dt);
    barrier_wait(g);

    int err = 0;
    for (int r = 0; r < N && !err; r++) {
        const struct comm_shm_slot *o = slot_of(g, r);
        if (o->bad)
            err = err_set(ENG_EINVAL,
                          "comm_allreduce_sum: rank %d passed n=%lld, %s, dtype %d", r,
                          (long long)o->n, o->buf ? "a buffer" : "no buffer", (int)o->dt);
        else if (o->n != n || o->dt != dt)
            err = err_set(
                ENG_EINVAL,
                "comm_allreduce_sum: rank %d has n=%lld %s, rank %d has n=%lld %s", rank,
                (long long)n, dtype_name(dt), r, (long long)o->n, dtype_name(o->dt));
    }
    if (!err && N > 1) {
        /* Slice r: [r*len, (r+1)*len) clipped to n, len a multiple of SLICE_ALIGN.
         * Any n works (0, below N, not divisible by N): trailing ranks may get an
         * empty slice. */
        int64_t len = CEIL_DIV(CEIL_DIV(n, N), SLICE_ALIGN) * SLICE_ALIGN;
        int64_t lo = MIN(n, rank * len), hi = MIN(n, lo + len);
        reduce_slice(g, lo, hi, dt);
    }
    /* Nobody returns (and reuses its buffer or its slot) until every slice is written
     * into every buffer. */
    barrier_wait(g);
    return err;
}

static int shm_barrier(struct comm *c)
{
    barrier_wait(((struct comm_shm *)c)->g);
    return 0;
}

static void shm_destroy(struct comm *c)
{
    struct comm_shm *s = (struct comm_shm *)c;
    pthread_mutex_lock(&s->g->mu);
    s->g->opened[c->rank] = false;
    pthread_mutex_unlock(&s->g->mu);
    free(s);
}

static const struct comm_ops shm_ops = {
    .name = "shm",
    .allreduce_sum = shm_allreduce_sum,
    .barrier = shm_barrier,
    .destroy = shm_destroy,
};

int comm_shm_group_create(struct comm_shm_group **out, int n_ranks)
{
    *out = NULL;
    if (n_ranks < 1)
        return err_set(ENG_EINVAL, "comm_shm_group_create: %d ranks (need >= 1)", n_ranks);
    _Static_assert(sizeof(struct comm_shm_slot) <= SLOT_STRIDE, "slot fits its stride");
    struct comm_shm_group *g = xcalloc(1, sizeof *g);
    g->n_ranks = n_ranks;
    g->opened = xcalloc((size_t)n_ranks, sizeof *g->opened);
    g->slot = aligned_alloc(SLOT_STRIDE, (size_t)n_ranks * SLOT_STRIDE);
    CHECK(g->slot);
    memset(g->slot, 0, (size_t)n_ranks * SLOT_STRIDE);
    CHECK(pthread_barrier_init(&g->barrier, NULL, (unsigned)n_ranks) == 0);
    CHECK(pthread_mutex_init(&g->mu, NULL) == 0);
    *out = g;
    return 0;
}

int comm_shm_open(struct comm_shm_group *g, int rank, struct comm **out)
{
    *out = NULL;
    if (rank < 0 || rank >= g->n_ranks)
        return err_set(ENG_EINVAL, "comm_shm_open: rank %d of %d", rank, g->n_ranks);
    pthread_mutex_lock(&g->mu);
    bool was_open = g->opened[rank];
    g->opened[rank] = true;
    pthread_mutex_unlock(&g->mu);
    if (was_open)
        return err_set(ENG_EINVAL, "comm_shm_open: rank %d is already open", rank);
    struct comm_shm *s = xcalloc(1, sizeof *s);
    s->base.ops = &shm_ops;
    s->base.rank = rank;
    s->base.size = g->n_ranks;
    s->g = g;
    *out = &s->base;
    return 0;
}

void comm_shm_group_destroy(struct comm_shm_group *g)
{
    if (!g) return;
    pthread_barrier_destroy(&g->barrier);
    pthread_mutex_destroy(&g->mu);
    free(g->opened);
    free(g->slot);
    free(g);
}
