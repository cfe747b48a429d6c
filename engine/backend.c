/*
 * backend.c - the wrappers every caller reaches a backend through (see backend.h).
 *
 * The table (be_ops) says what a backend does; these functions say what the engine
 * may assume. They check the table's promises (an entry a backend must have when
 * another is NULL, a NULL logits destination only where the backend samples) and
 * supply what an optional entry left out, so no caller tests an entry itself.
 * Owns: nothing; the backend's context is its own (backend_destroy frees it).
 * Thread: the engine thread, except where backend.h says any.
 */
#include "backend.h"

#include "util.h"

#include <string.h>

const char *backend_name(const struct backend *be)
{
    return be->ops->name;
}

int backend_load(struct backend *be, const struct opt_config *cfg, const struct weights *w)
{
    return be->ops->load(be->ctx, cfg, w);
}

int backend_kv_alloc(struct backend *be, int32_t n_blocks, int32_t block_size)
{
    return be->ops->kv_alloc(be->ctx, n_blocks, block_size);
}

size_t backend_kv_block_bytes(const struct backend *be, int32_t block_size)
{
    return be->ops->kv_block_bytes(be->ctx, block_size);
}

bool backend_kv_capacity(const struct backend *be, size_t *bytes)
{
    if (!be->ops->kv_capacity) return false;
    *bytes = be->ops->kv_capacity(be->ctx);
    return true;
}

void backend_kv_init_blocks(struct backend *be, const int32_t *blocks, int32_t n)
{
    be->ops->kv_init_blocks(be->ctx, blocks, n);
}

void backend_kv_copy_blocks(struct backend *be, const int32_t *src, const int32_t *dst,
                            int32_t n)
{
    be->ops->kv_copy_blocks(be->ctx, src, dst, n);
}

void backend_kv_compact(struct backend *be, const int32_t *blocks, int32_t n_slots,
                        const int32_t *keep, int32_t n_keep)
{
    be->ops->kv_compact(be->ctx, blocks, n_slots, keep, n_keep);
}

bool backend_state_on_device(const struct backend *be)
{
    return be->ops->kv_state == NULL;
}

void backend_kv_state(struct backend *be, int32_t layer, int32_t **pos, float **score)
{
    CHECK(be->ops->kv_state); /* on a device there are no host pointers to give */
    CHECK(be->ops->kv_state(be->ctx, layer, pos, score) == 0);
}

int backend_kv_read_state(struct backend *be, const int32_t *blocks, int32_t n_slots,
                          int32_t *pos, float *score)
{
    CHECK(be->ops->kv_read_state); /* required of device state, optional on the host */
    return be->ops->kv_read_state(be->ctx, blocks, n_slots, pos, score);
}

int backend_kv_victims(struct backend *be, int32_t seq, int32_t *victims)
{
    /* Only a device picks victims in the forward; on the host the engine does. */
    CHECK(backend_state_on_device(be) && be->ops->kv_victims);
    return be->ops->kv_victims(be->ctx, seq, victims);
}

bool backend_can_sample(const struct backend *be)
{
    return be->ops->sample != NULL;
}

int backend_forward(struct backend *be, const struct be_batch *b, float *logits)
{
    CHECK(logits || backend_can_sample(be)); /* NULL keeps them for backend_sample */
    return be->ops->forward(be->ctx, b, logits);
}

int backend_sample(struct backend *be, const struct be_sample_row *rows, int32_t n,
                   struct sample_out *out)
{
    CHECK(backend_can_sample(be));
    return be->ops->sample(be->ctx, rows, n, out);
}

void backend_profile(struct backend *be, struct be_profile *out)
{
    if (be->ops->profile) be->ops->profile(be->ctx, out);
    else memset(out, 0, sizeof *out);
}

void backend_destroy(struct backend *be)
{
    if (be->ops) be->ops->destroy(be->ctx);
    be->ops = NULL;
    be->ctx = NULL;
}
