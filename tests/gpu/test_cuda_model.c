/*
 * test_cuda_model.c - the whole CUDA backend against the CPU backend on a real GPU:
 * logits, greedy tokens, H2O evictions and slot state, through the engine's own step
 * driver, and the scheduler's path.
 *
 * The checks are tests/lib/cuda_parity.c's, the very ones test_cuda_host runs on
 * a fake device: the same sequences (engine_run.h's table: batched, prompts in
 * chunks, 64 greedy decode steps, budgets that evict during the prompt and
 * mid-decode, R = 1, H = 0, and full) on the CPU backend in fp32 and on the CUDA
 * backend in fp16. fp16 activations put the logits within a small tolerance of
 * fp32's, not bit for bit, so a greedy token may flip where the two best logits are
 * nearly tied: the runs must agree up to the first differing token, and that
 * difference must be such a near-tie in the CPU's logits. The H2O decisions
 * (evictions, slots, blocks) and the slot state kv_read_state returns must be the
 * same while the tokens are (a head may hold other tokens where two victims' scores
 * were near-tied under the GPU's own rounding: counted, at most one head in fifty;
 * see cuda_parity.h).
 * The models: test_cuda_host's (the golden tiny OPT, pre-LN, in chunks of 7 and of
 * 1; the golden tiny OPT-350m, post-LN with project_in/out; dummy:tiny) and
 * dummy:opt-125m (12 layers, 12 heads, the real vocabulary); and the other families
 * (tests/data/golden-arch's tiny Llama, Llama 3, Qwen2, Mistral, GPT-NeoX,
 * dummy:llama-tiny). With two GPUs, TP = 2 is compared with
 * the CPU and with TP = 1. Finally generate_run (the scheduler)
 * runs on CUDA, keeps the budget and repeats itself; its tokens are reported
 * against the CPU's (a near-tie may flip one here). The int8 KV cache runs on both
 * backends against cuda_parity.h's int8 bar (parity_check_int8, the CPU's own int8
 * test's relative bounds), as test_cuda_host runs it on the fake device.
 *
 * Without a GPU it prints why and exits 77 (skip).
 */
#include "test.h"

#include "backend_cuda.h"
#include "cuda_parity.h"

TEST(golden_tiny_opt)
{
    parity_check_model("golden/tiny-opt", 7, 1, false);
}
/* One-token prompt chunks: the backend runs them through the decode kernel. */
TEST(golden_tiny_opt_chunk1)
{
    parity_check_model("golden/tiny-opt", 1, 1, false);
}
TEST(golden_tiny_opt_350m)
{
    parity_check_model("golden/tiny-opt-350m", 1 << 20, 1, false);
}
TEST(dummy_tiny)
{
    parity_check_model("dummy:tiny", 5, 1, false);
}
TEST(dummy_opt_125m)
{
    parity_check_model("dummy:opt-125m", 9, 1, false);
}

/* The other families, as test_cuda_host checks them on the fake device and with its
 * prompts (seed 708, test_cuda_host.c's FAMILY_SEED, so the two logs read line for
 * line): GQA 4 : 2 with RMSNorm, SwiGLU and rotary (Llama, Llama 3's scaled
 * frequencies, Qwen2's q/k/v biases and tied head, Mistral's sliding window), GPT-NeoX
 * (partial rotary, GELU, parallel residual), and dummy:llama-tiny (hidden 128, 4 : 2
 * heads of 32, vocabulary 512). A real model's shape (dummy:tinyllama-1.1b) is left out:
 * its fp32 CPU reference alone would take minutes of the GPU run's 8. */
static void check_family(const char *name, int32_t chunk, int tp)
{
    parity_seed = 708;
    parity_check_model(name, chunk, tp, false);
    parity_seed = PARITY_SEED;
}

TEST(families)
{
    check_family("golden-arch/tiny-llama", 7, 1);
    check_family("golden-arch/tiny-llama3", 1 << 20, 1);
    check_family("golden-arch/tiny-qwen2", 5, 1);
    check_family("golden-arch/tiny-mistral", 7, 1);
    check_family("golden-arch/tiny-mistral", 1, 1);
    check_family("golden-arch/tiny-neox", 7, 1);
    check_family("dummy:llama-tiny", 5, 1);
}

/* --kv-cache-dtype int8 on both backends: OPT in chunks, GQA + rotary, the sliding
 * window in one-token chunks, NeoX's partial rotary, dummy:opt-125m's real vocabulary;
 * TP = 2 where two GPUs exist. */
TEST(int8_kv)
{
    parity_check_int8("golden/tiny-opt", 7, 1);
    parity_check_int8("golden-arch/tiny-llama", 7, 1);
    parity_check_int8("golden-arch/tiny-mistral", 1, 1);
    parity_check_int8("golden-arch/tiny-neox", 3, 1);
    parity_check_int8("dummy:opt-125m", 9, 1);
    if (backend_cuda_device_count() >= 2) parity_check_int8("golden/tiny-opt", 1 << 20, 2);
}

/* The families with TP = 2 (one KV head per rank on the tiny ones). */
TEST(families_tp2)
{
    check_family("golden-arch/tiny-llama", 9, 2);
    check_family("golden-arch/tiny-mistral", 1 << 20, 2);
    check_family("golden-arch/tiny-neox", 3, 2);
}

/* TP = 2 against the CPU and against TP = 1 (two GPUs). */
TEST(tp2)
{
    parity_check_model("golden/tiny-opt", 1 << 20, 2, false);
    parity_check_model("golden/tiny-opt", 5, 2, false);
    parity_check_model("golden/tiny-opt-350m", 9, 2, false);
    parity_check_model("dummy:tiny", 3, 2, false);
    parity_check_model("dummy:opt-125m", 5, 2, false);
}

static int n_dev;

/* The scheduler's path on CUDA: several prompts, H2O, greedy. */
TEST(generate_on_cuda)
{
    parity_generate("dummy:tiny", 40, n_dev, false);
    parity_generate("dummy:opt-125m", 48, n_dev, false);
}

int main(void)
{
    n_dev = backend_cuda_device_count();
    if (n_dev == 0) {
        printf("no CUDA device (or a build without CUDA): skipping\n");
        return 77;
    }
    printf("# %d CUDA device(s)\n", n_dev);
    RUN(golden_tiny_opt);
    RUN(golden_tiny_opt_chunk1);
    RUN(golden_tiny_opt_350m);
    RUN(dummy_tiny);
    RUN(dummy_opt_125m);
    RUN(families);
    RUN(int8_kv);
    if (n_dev >= 2) {
        RUN(tp2);
        RUN(families_tp2);
    } else {
        printf("# one GPU: TP = 2 not run\n");
    }
    RUN(generate_on_cuda);
    printf(
        "# worst |logit diff| cuda vs cpu %.3g, cuda tp 2 vs tp 1 %.3g, H2O score %.3g\n",
        parity_worst.logit, parity_worst.tp, parity_worst.score);
    return test_done();
}
