/*
 * be_cuda_prof.c - the CUDA backend's time profile (be_ops.profile): CUDA events on
 * rank 0's stream around the projections and the attention, summed into
 * be_profile.gemm_s and attn_s (forward_s is the host's wall time of each forward,
 * be_cuda_fwd.c).
 *
 * Spans. The forward marks where its spans begin (be_cuda_mark): CU_SPAN_GEMM before a
 * projection (its bias epilogue included, as oneDNN fuses it on the CPU),
 * CU_SPAN_ATTN before a layer's attention kernels (K/V writes included, as on the
 * CPU), CU_SPAN_OTHER where neither runs (LayerNorm, all-reduce, residual add,
 * copies). Each mark is one cudaEventRecord, and a span is the time between its mark
 * and the next one on the stream. A layer is six marks (qkv | attention | out_proj |
 * rest | fc1 + fc2 | rest), OPT-6.7B's forward 194. Rank 0 alone is timed: the ranks
 * run the same shapes in lockstep, so its times are the step's (the CPU backend
 * reports rank 0's too).
 *
 * When the times are read. Every forward already ends with cudaStreamSynchronize
 * (the engine needs its logits before the next step), after which its events are
 * complete and cudaEventElapsedTime answers without waiting. So the events of forward
 * N are read during forward N + 1, once its layers are enqueued and before its logits
 * download (a copy to pageable memory, which blocks the host until the GPU is done),
 * while the host would only wait for the GPU anyway; the last forward's events are
 * read when the profile is. No synchronisation is added, the
 * read costs no GPU time, and two sets of events (recorded, and waiting to be read)
 * serve every forward. Reading each forward's events right after its own
 * synchronisation would put ~200 host calls between two steps, with the GPU idle;
 * reading them only at the profile read would keep every forward's events until
 * then, or wait on them.
 *
 * Cost. Nothing until be_ops.profile is first called (the serving path never reads
 * it): timing starts at that read, which bench/workload.c makes as its reset before
 * the decode phase. From then on 6 event records per layer per forward, each a host
 * call enqueued ahead of the GPU and a small command between two kernels on the
 * stream; what that costs a decode step on a GPU is not measured yet (against about
 * 450 kernel launches per OPT-6.7B step it should be a few percent at most).
 *
 * Thread: rank 0's (the engine thread), inside a forward job or from be_cuda_profile.
 */
#include "be_cuda_impl.h"

#include "util.h"

#include <stdlib.h>
#include <string.h>

int be_cuda_mark(struct cu_rank *r, enum cu_span kind)
{
    if (!r->timing || r->err) return r->err;
    struct cu_marks *m = &r->marks[r->mark_cur];
    if (m->n == m->cap) {
        const int32_t cap = MAX(64, 2 * m->cap);
        m->ev = xrealloc(m->ev, (size_t)cap * sizeof *m->ev);
        m->kind = xrealloc(m->kind, (size_t)cap * sizeof *m->kind);
        for (; m->cap < cap; m->cap++)
            if (be_cuda_fail(r, cudaEventCreate(&m->ev[m->cap]), "cudaEventCreate"))
                return r->err;
    }
    if (be_cuda_fail(r, cudaEventRecord(m->ev[m->n], r->stream), "cudaEventRecord"))
        return r->err;
    m->kind[m->n++] = (uint8_t)kind;
    return 0;
}

void be_cuda_marks_read(struct cu_rank *r, struct cu_marks *m)
{
    for (int32_t i = 0; i + 1 < m->n; i++) {
        if (m->kind[i] == CU_SPAN_OTHER) continue;
        float ms = 0.0f;
        /* Best effort: the events are complete (their forward synchronised), and a
         * device that fails here fails the next forward's own calls too. */
        if (cudaEventElapsedTime(&ms, m->ev[i], m->ev[i + 1]) == cudaSuccess)
            r->span_s[m->kind[i]] += 1e-3 * (double)ms;
    }
    m->n = 0;
}

void be_cuda_marks_done(struct cu_rank *r, bool ok)
{
    if (!r->timing) return;
    struct cu_marks *m = &r->marks[r->mark_cur];
    if (!ok) { /* the forward stopped early: its events may never complete */
        m->n = 0;
        return;
    }
    r->mark_cur ^= 1; /* the other set was read during this forward */
    r->marks[r->mark_cur].n = 0;
}

void be_cuda_marks_free(struct cu_rank *r)
{
    for (int i = 0; i < 2; i++) {
        struct cu_marks *m = &r->marks[i];
        for (int32_t j = 0; j < m->cap; j++)
            cudaEventDestroy(m->ev[j]);
        free(m->ev);
        free(m->kind);
        memset(m, 0, sizeof *m);
    }
}
