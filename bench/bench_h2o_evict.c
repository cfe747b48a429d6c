/*
 * bench_h2o_evict.c - the cost of H2O's decode victim choice per decode step.
 *
 * Each decode step of an evicting batch runs h2o_select_evict_window for every
 * (sequence, layer, head) over the head's slots. This times that choice alone for a
 * step of `batch` sequences of a model with `layers` x `heads` heads and `slots` slots
 * per head (random scores, shuffled positions, no free slots: a full head), with the
 * portable reference and with what h2o_select_evict runs in this build (AVX-512 where
 * targeted), and checks that both pick the same slots. The CPU backend gathers each
 * head's state into one small buffer just before choosing (be_cpu_device.c), so the
 * choice reads cached data: by default the calls cycle over 16 heads' state (hot in
 * L1/L2); --distinct gives every head its own (the whole step's state from memory).
 *
 * Usage: bench_h2o_evict [--batch 37] [--layers 12] [--heads 12] [--slots 512]
 *                        [--reps 5] [--window 0] [--distinct]
 * Prints one line per repetition and implementation: ms per decode step.
 */
#include "h2o.h"
#include "util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

int main(int argc, char **argv)
{
    int32_t batch = 37, layers = 12, heads = 12, slots = 512, reps = 5, window = 0;
    int distinct = 0;
    static const struct option opts[] = {
        {"batch", required_argument, 0, 'b'},
        {"layers", required_argument, 0, 'l'},
        {"heads", required_argument, 0, 'H'},
        {"slots", required_argument, 0, 'n'},
        {"reps", required_argument, 0, 'r'},
        {"window", required_argument, 0, 'w'},
        {"distinct", no_argument, 0, 'x'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'b': batch = atoi(optarg); break;
        case 'l': layers = atoi(optarg); break;
        case 'H': heads = atoi(optarg); break;
        case 'n': slots = atoi(optarg); break;
        case 'r': reps = atoi(optarg); break;
        case 'w': window = atoi(optarg); break;
        case 'x': distinct = 1; break;
        default:
            fprintf(
                ch == 'h' ? stdout : stderr,
                "usage: bench_h2o_evict [--batch N] [--layers N] [--heads N] [--slots N] "
                "[--reps N] [--window N] [--distinct]\n");
            return ch == 'h' ? 0 : 2;
        }
    }
    if (batch <= 0 || layers <= 0 || heads <= 0 || slots <= 0 || reps <= 0 || window < 0)
        return fprintf(stderr, "sizes must be positive\n"), 2;
    /* Calls per step; heads of state they cycle over (see the top comment). */
    const int64_t n_heads = (int64_t)batch * layers * heads, n = slots;
    const int64_t n_state = distinct ? n_heads : MIN(n_heads, 16);
    float *score = xmalloc((size_t)(n_state * n) * sizeof *score);
    int32_t *pos = xmalloc((size_t)(n_state * n) * sizeof *pos);
    int32_t *pick = xmalloc((size_t)n_heads * sizeof *pick);
    uint64_t st = 1;
    const int32_t t = 4 * slots; /* the current position: evicted tokens left holes */
    for (int64_t hd = 0; hd < n_state; hd++) {
        int32_t *p = pos + hd * n;
        for (int64_t i = 0; i < n; i++) {
            /* Older heavy hitters then the recent run, shuffled by compaction. */
            p[i] = (int32_t)(i < n / 2 ? (int64_t)next(&st) % (t - n) : t - n + i);
            score[hd * n + i] = (float)(next(&st) % 100000) * 1e-3f;
        }
    }
    const int32_t recent = slots / 4;
    printf("batch %d, %d layers x %d heads, %d slots, recent %d, window %d, state of %lld "
           "heads\n",
           batch, layers, heads, slots, recent, window, (long long)n_state);
    for (int rep = 0; rep < reps; rep++) {
        for (int impl = 0; impl < 2; impl++) {
            const double t0 = time_now();
            int64_t sum = 0;
            for (int64_t hd = 0; hd < n_heads; hd++) {
                const int64_t at = hd % n_state * n;
                const int32_t e =
                    impl ? h2o_select_evict_window(score + at, pos + at, slots, t, recent,
                                                   window)
                         : h2o_select_evict_window_portable(score + at, pos + at, slots, t,
                                                            recent, window);
                if (impl)
                    CHECK(e == pick[hd]);
                else
                    pick[hd] = e;
                sum += e;
            }
            printf("%-10s %8.3f ms/step (checksum %lld)\n",
                   impl ? "vectorised" : "portable", 1e3 * (time_now() - t0),
                   (long long)sum);
        }
    }
    free(score);
    free(pos);
    free(pick);
    return 0;
}
