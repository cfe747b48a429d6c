"""peer.py - FlexGen's offline workload on one peer engine, one JSON line out.

Runs inside the venv run.py makes (transformers, ctranslate2 over Debian's torch).
The workload is bench_throughput's (bench/workload.h): `batch` prompts of exactly
`prompt_len` random token ids, each generating exactly `gen_len` greedy tokens, EOS
ignored, all in one batch. Times as FlexGen's flex_opt.py takes them:

    prefill time = a generate of 1 new token (the prompt forward and its token)
    total time   = a generate of gen_len new tokens
    decode time  = total - prefill
    prefill throughput = batch * prompt_len / prefill time
    decode throughput  = batch * (gen_len - 1) / decode time
    total throughput   = batch * gen_len / total time          <- the headline

One warm-up generate of a single 64-token prompt comes first (as bench_throughput
does), and with --repeat N each time is the best of N (the machine may be shared).

OpenVINO GenAI (ov) runs in its own venv, on the OpenVINO IR of the same folder, through
its ContinuousBatchingPipeline (its engine with continuous batching, paged attention
and cache eviction), with bench_throughput's very prompt ids (workload_prompts), all
requests given to one generate call, every one generating exactly gen_len tokens.

Usage: python peer.py hf|ct2|ov --model-dir DIR [--ct2-dir DIR] [--ov-dir DIR]
         --batch 16 --prompt-len 512 --gen-len 32 --dtype fp32|bf16 --threads N
         [--repeat 1] [--verify-logits FILE] [--ov-kv bf16|f32|u8]
         [--ov-evict START,RECENT,MAX] [--kv-bytes N] [--verify-ids FILE]
"""
import argparse
import json
import os
import sys
import time

import numpy as np

from workload import OV_BLOCK, workload_prompts


def prompts(batch, prompt_len, seed):
    """batch x prompt_len ids among OPT's real tokens (4 .. 50264: no specials)."""
    rng = np.random.default_rng(seed)
    return rng.integers(4, 50265, size=(batch, prompt_len), dtype=np.int64)


def best_of(repeat, fn):
    """The smallest wall time of `repeat` calls of fn, and fn's last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def blas_library():
    """The BLAS this process mapped (torch's fp32 GEMMs go through it)."""
    with open("/proc/self/maps") as f:
        libs = {l.split()[-1] for l in f if "blas" in l.split()[-1]}
    return ", ".join(sorted(os.path.realpath(p) for p in libs)) or "none"


def run_hf(a):
    import torch
    import transformers
    from transformers import OPTForCausalLM

    torch.set_num_threads(a.threads)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    model = OPTForCausalLM.from_pretrained(a.model_dir, torch_dtype=dtype).eval()

    if a.verify_logits:
        # The logits export_dummy saved from our engine for ids (2 + 7919 i) mod V:
        # proof that transformers runs the very model we run.
        V = model.config.vocab_size
        ours = np.fromfile(a.verify_logits, dtype=np.float32).reshape(-1, V)
        ids = torch.tensor([[(2 + 7919 * i) % V for i in range(ours.shape[0])]])
        with torch.inference_mode():
            theirs = model.float()(ids).logits[0].numpy()
        model = model.to(dtype)
        diff = float(np.abs(theirs - ours).max())
        same = bool((theirs.argmax(-1) == ours.argmax(-1)).all())
        print(f"# transformers vs our engine on the exported weights: max |logit diff| "
              f"= {diff:.3g}, same argmax at every position: {same}", file=sys.stderr)
        if not (diff < 1e-3 and same):
            sys.exit("peer.py: transformers' logits differ from ours")

    def generate(ids, n_new):
        x = torch.from_numpy(ids)
        with torch.inference_mode():
            # min_new_tokens = max_new_tokens: EOS is never chosen before the end.
            return model.generate(input_ids=x, attention_mask=torch.ones_like(x),
                                  do_sample=False, num_beams=1, max_new_tokens=n_new,
                                  min_new_tokens=n_new, pad_token_id=1, use_cache=True)

    generate(prompts(1, min(a.prompt_len, 64), a.seed + 1), 4)
    ids = prompts(a.batch, a.prompt_len, a.seed)
    prefill_s, _ = best_of(a.repeat, lambda: generate(ids, 1))
    total_s, out = best_of(a.repeat, lambda: generate(ids, a.gen_len))
    assert out.shape == (a.batch, a.prompt_len + a.gen_len), out.shape
    return {"system": "transformers", "version": transformers.__version__,
            "torch": torch.__version__, "blas": blas_library(),
            "threads": torch.get_num_threads(),
            "prefill_s": prefill_s, "total_s": total_s}


def run_ct2(a):
    import ctranslate2

    compute = {"fp32": "float32", "bf16": "bfloat16"}[a.dtype]
    supported = sorted(ctranslate2.get_supported_compute_types("cpu"))
    base = {"system": "ctranslate2", "version": ctranslate2.__version__,
            "threads": a.threads}
    if compute not in supported:
        return dict(base, unsupported=f"CTranslate2 {ctranslate2.__version__} has no "
                    f"{compute} on this CPU (it offers {', '.join(supported)})")
    gen = ctranslate2.Generator(a.ct2_dir, device="cpu", compute_type=compute,
                                intra_threads=a.threads, inter_threads=1)
    with open(os.path.join(a.ct2_dir, "vocabulary.json")) as f:
        vocab = json.load(f)

    def generate(ids, n_new):
        # The Python API takes token strings; the converter's vocabulary maps ids.
        toks = [[vocab[i] for i in row] for row in ids.tolist()]
        # include_prompt_in_result=False: the prompt goes through the decoder in one
        # forward (CTranslate2's advice for long prompts); max_length then counts only
        # new tokens. min_length = max_length and no end token: EOS is ignored.
        return gen.generate_batch(toks, max_batch_size=0, beam_size=1, sampling_topk=1,
                                  max_length=n_new, min_length=n_new, end_token=[],
                                  include_prompt_in_result=False)

    generate(prompts(1, min(a.prompt_len, 64), a.seed + 1), 4)
    ids = prompts(a.batch, a.prompt_len, a.seed)
    prefill_s, _ = best_of(a.repeat, lambda: generate(ids, 1))
    total_s, out = best_of(a.repeat, lambda: generate(ids, a.gen_len))
    lens = {len(r.sequences_ids[0]) for r in out}
    assert lens == {a.gen_len}, lens
    return dict(base, compute_type=compute, prefill_s=prefill_s, total_s=total_s)


def ov_block_bytes(cfg, precision):
    """
    Bytes one of OpenVINO's KV blocks takes over all layers, K and V: 32 tokens x
    heads x head_dim elements each, and for u8 a scale and a zero point (fp32) per
    token and head, as its CPU plugin stores them by default. The KV-limited run sizes
    its pool as this many bytes per block.
    """
    L, H = cfg["num_hidden_layers"], cfg["num_attention_heads"]
    D = cfg["hidden_size"] // H
    elem = {"f32": 4, "bf16": 2, "f16": 2, "u8": 1}[precision]
    extra = 8 if precision == "u8" else 0
    return 2 * L * H * OV_BLOCK * (D * elem + extra)


def run_ov(a):
    import openvino as ov
    import openvino_genai as og

    with open(os.path.join(a.model_dir, "config.json")) as f:
        cfg = json.load(f)
    P, G = a.prompt_len, a.gen_len
    s = og.SchedulerConfig()
    s.max_num_batched_tokens = a.max_batched
    s.max_num_seqs = max(a.batch, 1)
    s.enable_prefix_caching = False
    if a.kv_bytes:
        s.num_kv_blocks = a.kv_bytes // ov_block_bytes(cfg, a.ov_kv)
    else:  # every sequence's whole cache, as bench_throughput's fixed batch has
        s.num_kv_blocks = a.batch * (-(-(P + G) // OV_BLOCK) + 1)
    evict = None
    if a.ov_evict:
        start, recent, most = (int(x) for x in a.ov_evict.split(","))
        evict = og.CacheEvictionConfig(start, recent, most, og.AggregationMode.SUM)
        s.use_cache_eviction = True
        s.cache_eviction_config = evict
    infer = {"fp32": "f32", "bf16": "bf16"}[a.dtype]
    props = {"INFERENCE_NUM_THREADS": a.threads, "INFERENCE_PRECISION_HINT": infer,
             "KV_CACHE_PRECISION": a.ov_kv}
    pipe = og.ContinuousBatchingPipeline(a.ov_dir, s, "CPU", props)

    def generate(ids, n_new):
        gc = og.GenerationConfig()
        gc.max_new_tokens = gc.min_new_tokens = n_new
        gc.ignore_eos = True
        gc.do_sample = False
        res = pipe.generate([ov.Tensor(np.ascontiguousarray(r[None, :])) for r in ids],
                            [gc] * len(ids))
        out = [list(r.m_generation_ids[0]) for r in res]
        assert {len(o) for o in out} == {n_new}, {len(o) for o in out}
        return out

    V, bos = cfg["vocab_size"], cfg.get("bos_token_id", 2)
    if a.verify_ids:
        # Our greedy ids for bench_throughput's first prompts (run.py ran `h2oserve
        # generate` on the same folder): proof that it runs the very model we run.
        with open(a.verify_ids) as f:
            ours = json.load(f)
        n, p_len = len(ours["ids"]), ours["prompt_len"]
        theirs = generate(np.array(workload_prompts(n, p_len, V, bos)), len(ours["ids"][0]))
        same = sum(x == y for o, t in zip(ours["ids"], theirs) for x, y in zip(o, t))
        total = sum(len(o) for o in ours["ids"])
        print(f"# OpenVINO GenAI vs our engine, greedy ids of {n} prompts x "
              f"{total // n} tokens ({a.dtype}, KV {a.ov_kv}): {same} / {total} equal",
              file=sys.stderr)
        if a.dtype == "fp32" and same != total:
            sys.exit("peer.py: OpenVINO GenAI's greedy ids differ from ours")
    ids = np.array(workload_prompts(a.batch, P, V, bos))
    # Warm-up: the timed batch's own prefill, so that every kernel the timed runs use
    # is compiled and cached first (more than bench_throughput's own warm-up gives us).
    generate(ids, 1)
    prefill_s, _ = best_of(a.repeat, lambda: generate(ids, 1))
    total_s, _ = best_of(a.repeat, lambda: generate(ids, G))
    return {"system": "openvino-genai", "version": og.__version__.split("-")[0],
            "openvino": ov.__version__.split("-")[0], "threads": a.threads,
            "kv_precision": a.ov_kv, "kv_blocks": s.num_kv_blocks,
            "eviction": evict.to_string() if evict else None,
            "prefill_s": prefill_s, "total_s": total_s}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("peer", choices=["hf", "ct2", "ov"])
    p.add_argument("--ov-dir", help="the model as OpenVINO IR (optimum-cli's export)")
    p.add_argument("--ov-kv", default="bf16", help="OpenVINO's KV_CACHE_PRECISION")
    p.add_argument("--ov-evict", help="start,recent,max_cache_size of its cache eviction")
    p.add_argument("--kv-bytes", type=int, default=0,
                   help="OpenVINO's KV pool in bytes (ov_block_bytes each block)")
    p.add_argument("--max-batched", type=int, default=2048)
    p.add_argument("--verify-ids", help="our greedy ids to match (JSON from run.py)")
    p.add_argument("--model-dir", required=True)
    p.add_argument("--ct2-dir")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--gen-len", type=int, default=32)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verify-logits")
    a = p.parse_args()
    r = {"hf": run_hf, "ct2": run_ct2, "ov": run_ov}[a.peer](a)
    if "total_s" in r:
        n, P, G = a.batch, a.prompt_len, a.gen_len
        r["prefill_throughput"] = n * P / r["prefill_s"]
        # A peer whose 1-token generate is not faster than the whole one (noise on a
        # tiny gen_len) has no measurable decode phase.
        dec = r["total_s"] - r["prefill_s"]
        r["decode_throughput"] = n * (G - 1) / dec if dec > 0 else None
        r["total_throughput"] = n * G / r["total_s"]
    r.update(dtype=a.dtype, batch=a.batch, prompt_len=a.prompt_len, gen_len=a.gen_len,
             repeat=a.repeat)
    print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
