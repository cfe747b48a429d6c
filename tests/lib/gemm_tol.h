/*
 * gemm_tol.h - how far a GPU projection (cuda/cuda_gemm.h) may be from the exact
 * result: the tolerances of tests/gpu/test_cuda_gemm.c, CUDA-free so that
 * tests/unit/test_gemm_tol.c checks them in CI against a simulated device on the GPU
 * test's own data.
 *
 * The device. cuda_gemm_linear computes y = act(x . w^T + b) with fp16 x, w, b:
 *   a = the k products x_j w_j summed in fp32   (each product is exact in fp32: two
 *       11-bit significands make 22 bits; cuBLAS picks the order, and tensor cores
 *       truncate rather than round inside their accumulation)
 *   h = rn16(a)                                 (cublasGemmEx stores C as fp16)
 *   y = rn16(max(h + b, 0)) with ReLU, else rn16(h + b)   (cuda_bias_relu: the add
 *       in fp32, ReLU in fp32, one more rounding)
 * Without a bias y = h. The reference is the exact r = act(s + b), s = sum x_j w_j
 * (the test sums in double: exact to k 2^-53 sum |x_j w_j|, a millionth of any term
 * below).
 *
 * The bound. Write A = sum |x_j w_j| and E for the accumulation error, |a - s| <= E
 * (below). Then
 *   |h - a| <= ulp16(|s| + E) / 2          round to nearest: half the spacing at a,
 *                                          and |a| <= |s| + E, ulp16 non-decreasing
 *   |z - (h + b)| <= t2 = ulp16(p) / 2 + 2^-24 p,  p = |s + b| + E + t1
 *                                          with z = rn16(fl32(h + b)) and t1 the
 *                                          line above: |h + b| <= |s + b| + |h - s|
 *                                          <= p, and the fp32 add errs by at most
 *                                          2^-24 of its sum before the fp16 rounding
 *                                          (it never changes the fp16 result, in
 *                                          fact, but the bound need not rely on that)
 *   ReLU is 1-Lipschitz and commutes with the rounding (rn16(max(v, 0)) =
 *   max(rn16(v), 0)), so |y - r| <= |z - (s + b)|: the errors pass through it, and
 *   the second rounding's ulp is the one at the pre-ReLU value s + b, not at the
 *   clamped r (a slightly negative s + b whose h came out positive is a positive y
 *   against r = 0).
 * So |y - r| <= E + t1 + t2. The first rounding t1 is the one that is easy to miss:
 * it is at the scale of s, and a bias that cancels s leaves a result whose own ulp
 * is far smaller (s = 1.5, b = -1.49: t1 = 2^-11, ulp16(r) = 2^-17). The old
 * tolerance, ulp16(r) + 2^-16 A, left it out, and an exact GEMM missed it on 656
 * of the 255,744 OPT-125m outputs the GPU test checks.
 *
 * fp16 range. ulp16 is 2^-24 below 2^-14 (the subnormals: the spacing stops
 * shrinking), so a result near zero is allowed half of that per rounding, not
 * nothing. A value of magnitude 65520 or more rounds to infinity; where the bound
 * reaches that the device may legitimately return inf and the tolerance is INFINITY
 * (no test data comes near it: the outputs are of order 1).
 *
 * The accumulation, E. The worst case over all summation orders, (k - 1) u A (u =
 * 2^-24 rounding to nearest, 2^-23 truncating), is 2^-9 A at k = 16384: a hundred
 * fp16 ulps of the test's outputs, loose enough to pass an fp16 accumulator. Sums of
 * products of random sign err far less, since each addition errs by at most u of a
 * partial sum, and the partial sums wander like sqrt(j), not like A. So E is
 *   E = 2^-22 sqrt(k) A,
 * the probabilistic bound of Higham and Mary (SIAM J. Sci. Comput. 41, 2019:
 * lambda sqrt(k) u A) with u = 2^-23 (a whole fp32 ulp per addition, as truncation
 * gives) and lambda = 2. It is not a worst case, so tests/unit/test_gemm_tol.c
 * measures it on the GPU test's own data against every fp32 order it simulates:
 * round-to-nearest sums (forward, reverse, pairwise) stay under 8% of E, a tensor-core
 * model (chunks of 16 products into a truncating accumulator, 4 split-K slices)
 * under 7%, and a sum truncated after every addition, the most biased fp32 sum there
 * is, under 65%; an fp16 accumulator misses the whole tolerance on two outputs in
 * three. (The old term, 2^-16 A, is this one at k = 4096, twice it at k = 1024 and
 * half of it at k = 16384.)
 *
 * The f32-out path (cuda_gemm_linear_f32, the LM head) has no fp16 rounding: y is
 * a itself, within E of s.
 *
 * Thread: any.
 */
#ifndef H2O_GEMM_TOL_H
#define H2O_GEMM_TOL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* fp16 values of this magnitude or more round to infinity (65504 + half its ulp). */
#define GEMM_TOL_F16_INF 65520.0

/* The spacing of binary16 at |v|: 2^(e - 10) in the binade [2^e, 2^(e+1)), and 2^-24
 * for |v| < 2^-14 (subnormals). Meaningful below GEMM_TOL_F16_INF. */
double gemm_tol_ulp16(double v);

/* E: the bound on |a - s| for a k-term fp32 sum of products with sum |x_j w_j| = mag. */
double gemm_tol_acc(double mag, int32_t k);

/*
 * The tolerance of one fp16 output of cuda_gemm_linear: y against the exact
 * act(sum + bias), where sum = sum_j x_j w_j (exact), mag = sum_j |x_j w_j|, and
 * `has_bias` says whether the bias epilogue (a second rounding) ran; bias is 0
 * without one. ReLU needs no argument: the bound holds through it (above).
 * INFINITY where the device may overflow to inf.
 */
double gemm_tol_f16(double sum, double bias, double mag, int32_t k, bool has_bias);

/* The tolerance of one fp32 output of cuda_gemm_linear_f32 against the exact sum. */
double gemm_tol_f32(double mag, int32_t k);

/* ---- test_cuda_gemm's cases, which test_gemm_tol replays on the CPU ---- */

/* The seed of test_cuda_gemm's input stream (tests/lib/gpu_rnd.h). */
#define GEMM_TEST_SEED 0x51a3f2d4c9e7b601ull

/* One projection the GPU test checks: y [m, n] = x [m, k] w^T (+ bias, ReLU), fp16
 * out, or the fp32-out LM head (f32). `group` is the test that runs it. */
struct gemm_case {
    const char *group; /* "opt-125m", "lm-head", "lm-head-f32", "opt-6.7b", "odd" */
    int32_t m, n, k;
    bool bias, relu, f32;
};

/* Every case in the order test_cuda_gemm draws their inputs (its tests run the groups
 * in this order), so that a replay from GEMM_TEST_SEED sees the same numbers. Returns
 * the count (at most 64). */
int32_t gemm_cases(struct gemm_case *out);

/* The rows of an m x n x k case the GPU test checks against its host GEMM: every row
 * when the host work is small, else 16 spread over m (the first, the last, 14 in
 * between). Writes their indices to idx (room for m) and returns the count. */
int32_t gemm_check_rows(int32_t m, int32_t n, int32_t k, int32_t *idx);

#endif
