/*
 * test_backend_wrappers.c - engine/backend.c's wrappers on a table with its optional
 * entries left NULL, and on one with them set: the fallbacks the wrappers supply
 * and the calls they pass through (ggml's way: the caller never tests an entry).
 */
#include "test.h"

#include "backend.h"

#include <string.h>

/* A fake backend that counts its calls. */
struct fake {
    int n_forward, n_sample, n_profile, n_capacity, n_state, n_destroy;
    const float *last_logits;
    int32_t pos[4];
    float score[4];
};

static int fake_forward(void *ctx, const struct be_batch *b, float *logits)
{
    (void)b;
    struct fake *f = ctx;
    f->n_forward++;
    f->last_logits = logits;
    return 0;
}

static int fake_sample(void *ctx, const struct be_sample_row *rows, int32_t n,
                       struct sample_out *out)
{
    (void)rows;
    struct fake *f = ctx;
    f->n_sample++;
    for (int32_t i = 0; i < n; i++) out[i].token = 7;
    return 0;
}

static void fake_profile(void *ctx, struct be_profile *out)
{
    struct fake *f = ctx;
    f->n_profile++;
    memset(out, 0, sizeof *out);
    out->n_forward = 3;
}

static size_t fake_capacity(void *ctx)
{
    ((struct fake *)ctx)->n_capacity++;
    return 12345;
}

static int fake_kv_state(void *ctx, int32_t layer, int32_t **pos, float **score)
{
    (void)layer;
    struct fake *f = ctx;
    f->n_state++;
    *pos = f->pos;
    *score = f->score;
    return 0;
}

static int fake_victims(void *ctx, int32_t seq, int32_t *victims)
{
    (void)ctx;
    victims[0] = seq;
    return 0;
}

static void fake_destroy(void *ctx)
{
    ((struct fake *)ctx)->n_destroy++;
}

/* Every optional entry NULL, the state on the "device". */
static const struct be_ops bare_ops = {
    .name = "bare",
    .kv_victims = fake_victims,
    .forward = fake_forward,
    .destroy = fake_destroy,
};

/* Every optional entry set, the state on the host. */
static const struct be_ops full_ops = {
    .name = "full",
    .kv_state = fake_kv_state,
    .kv_capacity = fake_capacity,
    .forward = fake_forward,
    .sample = fake_sample,
    .profile = fake_profile,
    .destroy = fake_destroy,
};

TEST(null_entries_get_the_fallbacks)
{
    struct fake f = {0};
    struct backend be = {.ops = &bare_ops, .ctx = &f};
    EXPECT_STR(backend_name(&be), "bare");
    /* No kv_capacity: no bound, the engine sizes the pool from host RAM. */
    size_t cap = 7;
    EXPECT(!backend_kv_capacity(&be, &cap));
    EXPECT_EQ(cap, 7);
    /* No profile: all zeros, whatever *out held. */
    struct be_profile p;
    memset(&p, 0x5a, sizeof p);
    backend_profile(&be, &p);
    EXPECT_EQ(p.n_forward, 0);
    EXPECT(p.forward_s == 0.0 && p.gemm_s == 0.0 && p.attn_s == 0.0);
    /* No sample: the logits come to the host. */
    EXPECT(!backend_can_sample(&be));
    float logits[4];
    EXPECT_EQ(backend_forward(&be, &(struct be_batch){0}, logits), 0);
    EXPECT(f.last_logits == logits);
    /* No kv_state: the state is on the device, and the victims come from it. */
    EXPECT(backend_state_on_device(&be));
    int32_t v[1] = {-1};
    EXPECT_EQ(backend_kv_victims(&be, 2, v), 0);
    EXPECT_EQ(v[0], 2);
    backend_destroy(&be);
    EXPECT_EQ(f.n_destroy, 1);
    EXPECT(be.ops == NULL && be.ctx == NULL);
    backend_destroy(&be); /* safe on a zeroed struct */
    EXPECT_EQ(f.n_destroy, 1);
}

TEST(set_entries_are_called_through)
{
    struct fake f = {0};
    struct backend be = {.ops = &full_ops, .ctx = &f};
    size_t cap = 0;
    EXPECT(backend_kv_capacity(&be, &cap));
    EXPECT_EQ(cap, 12345);
    EXPECT_EQ(f.n_capacity, 1);
    struct be_profile p;
    backend_profile(&be, &p);
    EXPECT_EQ(f.n_profile, 1);
    EXPECT_EQ(p.n_forward, 3);
    /* With sample, a forward may keep its logits (NULL) for the sample call. */
    EXPECT(backend_can_sample(&be));
    EXPECT_EQ(backend_forward(&be, &(struct be_batch){0}, NULL), 0);
    EXPECT(f.last_logits == NULL);
    struct sample_out out[2];
    EXPECT_EQ(backend_sample(&be, (struct be_sample_row[2]){{0}}, 2, out), 0);
    EXPECT_EQ(f.n_sample, 1);
    EXPECT_EQ(out[1].token, 7);
    /* Host state: kv_state's own arrays. */
    EXPECT(!backend_state_on_device(&be));
    int32_t *pos = NULL;
    float *score = NULL;
    backend_kv_state(&be, 0, &pos, &score);
    EXPECT(pos == f.pos && score == f.score);
    EXPECT_EQ(f.n_state, 1);
    backend_destroy(&be);
    EXPECT_EQ(f.n_destroy, 1);
}

int main(void)
{
    RUN(null_entries_get_the_fallbacks);
    RUN(set_entries_are_called_through);
    return test_done();
}
