/*
 * test_h2o_evict.c - H2O's decode victim choice (engine/kv/h2o.c): the vectorised
 * h2o_select_evict and h2o_select_evict_window against their portable references,
 * slot for slot.
 *
 * Both promise the same slot: the lowest score among the slots outside the recent
 * window, the older position on a tie, the first slot on a full tie, the first
 * candidate when every score is NaN; with a sliding window the oldest slot outside it
 * first. The cases are the ones where a vector version goes wrong: ties across
 * lanes and within a lane, slot counts that are not multiples of 16 (a masked tail),
 * free slots, candidates only in the tail, none at all, NaN and infinite scores,
 * signed zeros, and positions out of slot order (after compaction). Where the build
 * has no AVX-512 both names run the portable code and the comparison still holds;
 * the hand-made cases then check the rule itself.
 */
#include "test.h"

#include "h2o.h"
#include "rnd.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#define MAX_N 700

/* A score from a few values (ties everywhere), or a random one, or a special. */
static float score_value(uint64_t *st, int mode)
{
    if (mode == 0) return (float)lcg_below(st, 4) * 0.5f;
    if (mode == 1) return lcg_float(st, 0.0f, 100.0f);
    switch (lcg_below(st, 8)) {
    case 0: return NAN;
    case 1: return INFINITY;
    case 2: return -0.0f;
    case 3: return 0.0f;
    default: return (float)lcg_below(st, 3);
    }
}

TEST(vectorised_choice_matches_portable_on_random_and_tied_slots)
{
    uint64_t st = 7;
    float score[MAX_N];
    int32_t pos[MAX_N];
    int n_checked = 0, n_none = 0;
    for (int iter = 0; iter < 40000; iter++) {
        const int32_t n = 1 + lcg_below(&st, MAX_N);
        const int mode = lcg_below(&st, 3);
        /* Positions: a shuffled run (compaction leaves them out of slot order),
         * with some slots free, or now and then duplicated positions (not made by the
         * engine, but the tie-break must still agree). */
        const int32_t t = n + lcg_below(&st, 50);
        for (int32_t i = 0; i < n; i++)
            pos[i] = t - n + 1 + i;
        for (int32_t i = n - 1; i > 0; i--) {
            const int32_t j = lcg_below(&st, i + 1), x = pos[i];
            pos[i] = pos[j];
            pos[j] = x;
        }
        const int free_pct = lcg_below(&st, 4) == 0 ? 90 : 10;
        const bool dup = lcg_below(&st, 8) == 0;
        for (int32_t i = 0; i < n; i++) {
            if (lcg_below(&st, 100) < free_pct)
                pos[i] = -1;
            else if (dup && lcg_below(&st, 4) == 0)
                pos[i] = pos[lcg_below(&st, i + 1)];
            score[i] = score_value(&st, mode);
        }
        const int32_t recent = 1 + lcg_below(&st, n + 8);
        const int32_t window = lcg_below(&st, 3) ? 0 : 1 + lcg_below(&st, n + 8);
        const int32_t got = h2o_select_evict(score, pos, n, t, recent);
        const int32_t want = h2o_select_evict_portable(score, pos, n, t, recent);
        if (got != want) {
            TEST_FAIL("n %d t %d recent %d mode %d: slot %d, portable %d", n, t, recent,
                      mode, got, want);
            return;
        }
        const int32_t gw = h2o_select_evict_window(score, pos, n, t, recent, window);
        const int32_t ww =
            h2o_select_evict_window_portable(score, pos, n, t, recent, window);
        if (gw != ww) {
            TEST_FAIL("n %d t %d recent %d window %d: slot %d, portable %d", n, t, recent,
                      window, gw, ww);
            return;
        }
        n_checked++;
        n_none += want < 0;
    }
    /* The generator reached both outcomes. */
    EXPECT(n_none > 0);
    EXPECT(n_checked - n_none > 1000);
}

TEST(ties_go_to_the_older_position_across_lanes)
{
    /* 40 slots, all score 1 but for two zeros: slot 35 (lane 3 of the third
     * vector, position 5) and slot 2 (lane 2 of the first, position 30). The older
     * position wins though its slot comes later. */
    float score[40];
    int32_t pos[40];
    for (int32_t i = 0; i < 40; i++) {
        score[i] = 1.0f;
        pos[i] = 40 + i;
    }
    score[2] = 0.0f, pos[2] = 30;
    score[35] = -0.0f, pos[35] = 5;
    EXPECT_EQ(h2o_select_evict(score, pos, 40, 100, 2), 35);
    EXPECT_EQ(h2o_select_evict_portable(score, pos, 40, 100, 2), 35);
    /* A lower score beats an older position: slot 2. */
    score[35] = 0.5f;
    EXPECT_EQ(h2o_select_evict(score, pos, 40, 100, 2), 2);
    /* Recent 72: positions above 100 - 71 = 29 stay, so slot 2 (position 30) is
     * protected and slot 35 goes. */
    EXPECT_EQ(h2o_select_evict(score, pos, 40, 100, 72), 35);
}

TEST(nan_scores_fall_back_to_the_first_candidate)
{
    /* Every candidate NaN: the first candidate (slot 1; slot 0 is free), 19 slots so
     * the second vector is a masked tail. */
    float score[19];
    int32_t pos[19];
    for (int32_t i = 0; i < 19; i++) {
        score[i] = NAN;
        pos[i] = i;
    }
    pos[0] = -1;
    EXPECT_EQ(h2o_select_evict(score, pos, 19, 40, 2), 1);
    /* A finite score among NaNs wins, here in the tail. */
    score[17] = 3.0f;
    EXPECT_EQ(h2o_select_evict(score, pos, 19, 40, 2), 17);
    /* No candidate at all: every position in the recent window. */
    EXPECT_EQ(h2o_select_evict(score, pos, 19, 18, 40), -1);
}

TEST(window_evicts_the_oldest_outside_first)
{
    /* Window 4 at t 9: positions <= 6 are outside; the oldest (2, slot 3) goes
     * whatever the scores, and the first slot of a duplicated position. */
    float score[20] = {0};
    int32_t pos[20];
    for (int32_t i = 0; i < 20; i++)
        pos[i] = 9 - (i % 8);
    pos[3] = 2;
    pos[18] = 2;
    score[3] = 50.0f;
    EXPECT_EQ(h2o_select_evict_window(score, pos, 20, 9, 2, 4), 3);
    EXPECT_EQ(h2o_select_evict_window_portable(score, pos, 20, 9, 2, 4), 3);
}

int main(void)
{
    RUN(vectorised_choice_matches_portable_on_random_and_tied_slots);
    RUN(ties_go_to_the_older_position_across_lanes);
    RUN(nan_scores_fall_back_to_the_first_candidate);
    RUN(window_evicts_the_oldest_outside_first);
    return test_done();
}
