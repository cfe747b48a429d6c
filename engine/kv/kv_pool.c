/*
 * kv_pool.c - the paged KV block allocator (see kv_pool.h).
 *
 * A LIFO free stack: the most recently freed block is reused first, which keeps the
 * working set of the KV memory small and warm in cache.
 */
#include "kv_pool.h"

#include "err.h"
#include "util.h"

#include <stdlib.h>

void kv_pool_init(struct kv_pool *pool, int32_t n_blocks, int32_t block_size)
{
    CHECK(n_blocks >= 0 && block_size > 0);
    pool->n_blocks = n_blocks;
    pool->block_size = block_size;
    pool->n_free = n_blocks;
    pool->free_stack = xmalloc((size_t)MAX(n_blocks, 1) * sizeof *pool->free_stack);
    pool->is_free = xmalloc((size_t)MAX(n_blocks, 1) * sizeof *pool->is_free);
    /* Low ids on top of the stack, so a fresh pool hands out 0, 1, 2, ... */
    for (int32_t i = 0; i < n_blocks; i++) {
        pool->free_stack[i] = n_blocks - 1 - i;
        pool->is_free[i] = true;
    }
}

void kv_pool_deinit(struct kv_pool *pool)
{
    free(pool->free_stack);
    free(pool->is_free);
    pool->free_stack = NULL;
    pool->is_free = NULL;
    pool->n_blocks = pool->n_free = 0;
}

int kv_pool_alloc(struct kv_pool *pool, int32_t n, int32_t *out)
{
    CHECK(n >= 0);
    if (n > pool->n_free) return ENG_ENOSPC;
    for (int32_t i = 0; i < n; i++) {
        int32_t b = pool->free_stack[--pool->n_free];
        CHECK(pool->is_free[b]);
        pool->is_free[b] = false;
        out[i] = b;
    }
    return 0;
}

void kv_pool_free(struct kv_pool *pool, const int32_t *blocks, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        int32_t b = blocks[i];
        CHECK(b >= 0 && b < pool->n_blocks && !pool->is_free[b]);
        pool->is_free[b] = true;
        pool->free_stack[pool->n_free++] = b;
    }
}
