/*
 * quality.h - streaming (teacher-forced) perplexity on the engine's own path.
 *
 * A token stream is cut into segments of prompt_len + gen_len consecutive tokens.
 * Each segment's first P tokens are prefilled; the prefill's last logits score token
 * P, then each of the G - 1 decode steps feeds the true token and its logits score
 * the next one, so G tokens are scored per segment, with the KV policy compacting
 * and evicting exactly as in generation (kv_seq_finish_prefill after the prompt,
 * kv_seq_after_decode_many after every step). Perplexity = exp(mean negative
 * log-likelihood of the scored tokens, pooled over segments).
 *
 * Owns: nothing between calls. Thread: the model's (engine) thread.
 */
#ifndef H2O_BENCH_QUALITY_H
#define H2O_BENCH_QUALITY_H

#include "kv_budget.h"
#include "model.h"

#include <stdint.h>

struct quality_spec {
    int32_t prompt_len, gen_len; /* P >= 1, G >= 1 */
    int32_t segments;            /* at most this many; 0: every whole one in the text */
    int32_t batch;               /* segments run side by side (bounds the KV pool) */
    int32_t max_batched;         /* prompt tokens per prefill forward */
    int32_t block_size;          /* KV slots per block */
    struct kv_spec kv;
};

struct quality_result {
    struct kv_budget budget; /* the policy as resolved for P + G tokens */
    int32_t segments;        /* run */
    int64_t tokens;          /* scored: segments * G */
    double nll;              /* sum of -ln p(token) over the scored tokens */
    double perplexity;       /* exp(nll / tokens) */
};

/* P 64 + G 448, every segment, 16 side by side, 2048 prompt tokens a forward, blocks
 * of 16, the full policy. Thread: any. */
void quality_spec_default(struct quality_spec *q);

/*
 * Score stream[0..n) under q. Returns 0, ENG_EINVAL (message set) when the stream
 * holds no whole segment, the segment is longer than the model's positions or a
 * token is outside the vocabulary, or an error from the backend.
 * Borrows stream. Thread: engine.
 */
int quality_run(struct model *m, const int32_t *stream, int64_t n,
                const struct quality_spec *q, struct quality_result *res);

#endif
