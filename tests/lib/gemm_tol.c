/*
 * gemm_tol.c - the GEMM tolerances and cases of gemm_tol.h.
 */
#include "gemm_tol.h"

#include <math.h>

double gemm_tol_ulp16(double v)
{
    v = fabs(v);
    if (v < 0x1p-14) return 0x1p-24;
    int e;
    frexp(v, &e); /* v = f 2^e, 0.5 <= f < 1 */
    return ldexp(1.0, e - 11);
}

double gemm_tol_acc(double mag, int32_t k)
{
    return 0x1p-22 * sqrt((double)k) * mag;
}

double gemm_tol_f16(double sum, double bias, double mag, int32_t k, bool has_bias)
{
    const double e = gemm_tol_acc(mag, k);
    if (fabs(sum) + e >= GEMM_TOL_F16_INF) return INFINITY;
    const double t1 = gemm_tol_ulp16(fabs(sum) + e) / 2; /* the GEMM's fp16 store */
    if (!has_bias) return e + t1;
    const double p = fabs(sum + bias) + e + t1; /* |h + b| at most */
    if (p >= GEMM_TOL_F16_INF) return INFINITY;
    return e + t1 + gemm_tol_ulp16(p) / 2 + 0x1p-24 * p; /* the bias epilogue */
}

double gemm_tol_f32(double mag, int32_t k)
{
    return gemm_tol_acc(mag, k);
}

int32_t gemm_cases(struct gemm_case *out)
{
    static const int32_t ms[] = {1, 3, 17, 512};
    static const struct {
        const char *name;
        int32_t hd, f;
    } models[2] = {{"opt-125m", 768, 3072}, {"opt-6.7b", 4096, 16384}};
    static const int32_t f32[6][3] = {{1, 50272, 768},   {17, 50272, 768}, {3, 50272, 4096},
                                      {64, 50272, 4096}, {5, 37, 29},      {1, 1, 1}};
    int32_t n = 0;
    for (int mi = 0; mi < 2; mi++) {
        const int32_t hd = models[mi].hd, f = models[mi].f;
        for (int i = 0; i < 4; i++) { /* qkv, out_proj, fc1 + ReLU, fc2 */
            out[n++] =
                (struct gemm_case){models[mi].name, ms[i], 3 * hd, hd, true, false, false};
            out[n++] =
                (struct gemm_case){models[mi].name, ms[i], hd, hd, true, false, false};
            out[n++] = (struct gemm_case){models[mi].name, ms[i], f, hd, true, true, false};
            out[n++] =
                (struct gemm_case){models[mi].name, ms[i], hd, f, true, false, false};
        }
        if (mi == 1) break;
        /* OPT-125m's tied LM head without bias, then the fp32-out heads. */
        out[n++] = (struct gemm_case){"lm-head", 1, 50272, 768, false, false, false};
        out[n++] = (struct gemm_case){"lm-head", 17, 50272, 768, false, false, false};
        for (int i = 0; i < 6; i++)
            out[n++] = (struct gemm_case){"lm-head-f32", f32[i][0], f32[i][1], f32[i][2],
                                          false,         false,     true};
    }
    /* n, k not multiples of 8 (cuBLAS's non-tensor-core fallbacks), with and without
     * a bias. */
    out[n++] = (struct gemm_case){"odd", 5, 37, 29, false, false, false};
    out[n++] = (struct gemm_case){"odd", 3, 38, 29, true, true, false};
    return n;
}

int32_t gemm_check_rows(int32_t m, int32_t n, int32_t k, int32_t *idx)
{
    const bool all = (double)m * n * k <= 3e8;
    const int32_t n_rows = all ? m : (m < 16 ? m : 16);
    for (int32_t ri = 0; ri < n_rows; ri++)
        idx[ri] = all || n_rows == m ? ri : (int32_t)((int64_t)ri * (m - 1) / 15);
    return n_rows;
}
