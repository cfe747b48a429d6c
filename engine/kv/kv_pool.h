/*
 * kv_pool.h - the paged KV block allocator.
 *
 * Owns: the free list of block ids; not the K/V memory itself (the backend allocates
 * that and addresses it by block index).
 * Invariant: n_free + blocks held by live sequences == n_blocks, checked in tests
 * after every run.
 * Thread: engine only.
 */
#ifndef H2O_KV_POOL_H
#define H2O_KV_POOL_H

#include <stdbool.h>
#include <stdint.h>

struct kv_pool {
    int32_t n_blocks;
    int32_t block_size;  /* token slots per block */
    int32_t n_free;
    int32_t *free_stack; /* [n_blocks], the top n_free entries are free ids */
    bool *is_free;       /* [n_blocks], catches double frees */
};

/* Set up a pool of n_blocks free blocks. Caller-owned struct. Thread: engine. */
void kv_pool_init(struct kv_pool *pool, int32_t n_blocks, int32_t block_size);
void kv_pool_deinit(struct kv_pool *pool);

/*
 * Take `n` blocks into out[0..n), all or nothing. Returns 0, or ENG_ENOSPC when
 * fewer than `n` are free (the scheduler then waits; not an error to log).
 * Thread: engine.
 */
int kv_pool_alloc(struct kv_pool *pool, int32_t n, int32_t *out);

/* Give blocks back. Freeing a free block is a bug (CHECK). Thread: engine. */
void kv_pool_free(struct kv_pool *pool, const int32_t *blocks, int32_t n);

#endif
