"""gpu_peers.py - FlexGen's offline workload on FlexGen and on transformers, one GPU.

tests/gpu/bench.sh (through gpu_bench.py) runs this once per (peer, model, shape) in
the GPU image's own Python (torch 2.11, transformers 5.x, no network), in its own
process, and reads the one JSON line it prints last (an "error" key when it failed).

hf       transformers' OPTForCausalLM (the H2O paper's "HF Accelerate" baseline) in
         fp16 on the GPU, built from the OPT config with transformers' random init
         directly on the device: the same shapes as ours, not the same values (a
         throughput run never looks at them: greedy, EOS ignored). Timed as peer.py
         times it: prefill = generate(1 new token), total = generate(gen_len), decode =
         total - prefill; one warm-up generate first.
flexgen  FlexGen 0.1.7's own benchmark (flexgen.flex_opt.run_flexgen) on its _DUMMY_
         weights (all ones), everything on the GPU (--percent 100 0 100 0 100 0), one
         GPU batch; its numbers are read back from the log file it writes (FlexGen's
         own timers: prefill = the first step, decode = the others). Patched at run
         time, not forked (flexgen_patches): its tokenizer comes from the OPT tokenizer
         files in tests/data/opt-tokenizer instead of the hub, its CPU memory count uses
         untyped storages (TypedStorage is deprecated in torch 2.x), and its disk
         copy threads (4 x 2 GB of pinned memory, for disk offloading, which 0% on disk
         never uses) are not started.

The batch: --batch N, or --batch fit --max-batch N: the largest batch that fits the
GPU by the peer's own memory needs (FlexGen: its model_bytes and cache_bytes plus the
prefill's transients in its code; transformers: a measured 2-sequence probe), at most
N (bench.sh passes our full-cache batch: both peers keep the whole fp16 cache, as our
`full` does). On a CPU (--device cpu, the dry run) nothing is measured: N is taken.

Usage: python3 gpu_peers.py hf|flexgen --model opt-6.7b --batch N|fit [--max-batch N]
         [--prompt-len 512] [--gen-len 32] [--device cuda|cpu] [--dtype fp16|fp32]
         [--tokenizer DIR] [--work DIR] [--cpu-shim]
       python3 gpu_peers.py parse-flexgen-log FILE      (prints the parsed JSON)
The module imports without torch: the parsing and sizing helpers are tested on CI.
"""
import argparse
import glob
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOKENIZER = os.path.join(REPO, "tests", "data", "opt-tokenizer")
# Where tests/gpu/prepare.sh puts the wheels the GPU run carries.
CARRY = os.environ.get("H2O_GPU_CARRY", os.path.join(REPO, "tests", "gpu", "carry"))

# OPT shapes (REFERENCE.md section 5): layers, hidden, heads, ffn. All pre-LN with
# vocab 50272 and 2048 positions (OPT-350m, post-LN with project_in, is left out:
# FlexGen does not run it either).
OPT = {
    "opt-125m": (12, 768, 12, 3072),
    "opt-1.3b": (24, 2048, 32, 8192),
    "opt-2.7b": (32, 2560, 32, 10240),
    "opt-6.7b": (32, 4096, 32, 16384),
    "opt-13b": (40, 5120, 40, 20480),
    "opt-30b": (48, 7168, 56, 28672),
    "opt-66b": (64, 9216, 72, 36864),
}
VOCAB = 50272
# A peer may plan on this share of the memory the GPU reports free.
MEM_FRACTION = 0.92


# The batch a run chose, for its error line (gpu_bench.py retries an out-of-memory
# below it).
CHOSEN = {}


def log(msg):
    print(f"# {msg}", file=sys.stderr, flush=True)


# ---- FlexGen: its log, its command line, its memory ----

_FLEX_LINE = {
    "prefill": re.compile(r"prefill latency:\s*([\d.eE+-]+)\s*s\s+prefill throughput:\s*"
                          r"([\d.eE+-]+)\s*token/s"),
    "decode": re.compile(r"decode latency:\s*([\d.eE+-]+)\s*s\s+decode throughput:\s*"
                         r"([\d.eE+-]+)\s*token/s"),
    "total": re.compile(r"total latency:\s*([\d.eE+-]+)\s*s\s+total throughput:\s*"
                        r"([\d.eE+-]+)\s*token/s"),
}
_FLEX_PEAK = re.compile(r"peak gpu mem:\s*([\d.eE+-]+)\s*GB")


def parse_flexgen_log(text):
    """
    FlexGen's benchmark log (flexgen/utils.py write_benchmark_log, appended one entry
    per run) to a dict of its last entry: prefill_s, prefill_throughput, decode_s,
    decode_throughput, total_s, total_throughput and peak_gpu_mem_bytes (its GB are
    2^30). Raises ValueError when a line is missing.
    """
    out = {}
    for key, rx in _FLEX_LINE.items():
        found = rx.findall(text)
        if not found:
            raise ValueError(f"FlexGen's log has no '{key} latency' line")
        lat, tput = found[-1]
        out[f"{key}_s"] = float(lat)
        out[f"{key}_throughput"] = float(tput)
    peak = _FLEX_PEAK.findall(text)
    out["peak_gpu_mem_bytes"] = int(float(peak[-1]) * (1 << 30)) if peak else None
    return out


def flexgen_argv(model, batch, prompt_len, gen_len, work):
    """flex_opt.py's command line for one all-GPU run on dummy weights."""
    return ["--model", f"facebook/{model}", "--path", "_DUMMY_",
            "--prompt-len", str(prompt_len), "--gen-len", str(gen_len),
            "--gpu-batch-size", str(batch), "--num-gpu-batches", "1",
            "--percent", "100", "0", "100", "0", "100", "0",
            "--offload-dir", os.path.join(work, "offload"),
            "--log-file", os.path.join(work, "flexgen.log"), "--verbose", "1"]


def flexgen_bytes(model, prompt_len, gen_len):
    """
    (weights, per-sequence) bytes of an all-GPU FlexGen run, from its own accounting
    (OptConfig.model_bytes, cache_bytes and hidden_bytes, restated here so the sizing
    is tested without FlexGen) plus the largest transient of its prefill, per
    sequence, with 15% slack: the attention scores [n_head, s, s] fp16 twice (torch.where
    and softmax each make a new tensor) with q, k, v and the input; fc1's output twice
    (ReLU) with three activations; or OutputEmbed's logits, which it computes for every
    prompt position [s, vocab].
    """
    L, h, nh, f = OPT[model]
    weights = 2 * (L * (h * (3 * h + 1) + h * (h + 1) + h * (4 * h + 1) + h * 4 * (h + 1)
                        + h * 4) + VOCAB * (h + 1))
    s = prompt_len + gen_len
    cache = 2 * s * L * h * 2
    hidden = s * h * 2
    P = prompt_len
    act = P * h * 2
    transient = max(2 * nh * P * P * 2 + 4 * act, 2 * P * f * 2 + 3 * act,
                    P * VOCAB * 2 + act)
    return weights, cache + hidden + int(1.15 * transient)


def fit_batch(free_bytes, fixed_bytes, per_seq_bytes, limit):
    """The largest n <= limit with fixed + n * per_seq <= MEM_FRACTION * free; 0 if none."""
    room = MEM_FRACTION * free_bytes - fixed_bytes
    return max(0, min(limit, int(room // per_seq_bytes))) if per_seq_bytes > 0 else limit


def find_flexgen():
    """Import flexgen: installed, or the wheel tests/gpu/carry holds (a pure-Python
    wheel is a zip Python imports from). Returns (module flex_opt, version)."""
    try:
        import flexgen  # noqa: F401
    except ImportError:
        wheels = sorted(glob.glob(os.path.join(CARRY, "**", "flexgen-*.whl"), recursive=True))
        if not wheels:
            raise ImportError("flexgen is not installed and tests/gpu/carry has no "
                              "flexgen wheel (tests/gpu/prepare.sh fetches it)")
        sys.path.insert(0, wheels[-1])
        log(f"flexgen from {os.path.relpath(wheels[-1], REPO)}")
    import flexgen.flex_opt as flex_opt
    try:
        from importlib.metadata import version
        ver = version("flexgen")
    except Exception:  # a zip on sys.path without readable metadata
        ver = "unknown"
    return flex_opt, ver


def local_opt_tokenizer(tokenizer_dir):
    """An AutoTokenizer stand-in whose from_pretrained ignores the hub name and builds
    OPT's byte-level BPE from the local vocab.json and merges.txt (pad <pad> = 1,
    </s> = 2 as BOS, EOS and UNK, as facebook/opt-* have them)."""
    import transformers
    cls = getattr(transformers, "GPT2TokenizerFast", None) or transformers.GPT2Tokenizer

    class LocalTokenizer:
        @staticmethod
        def from_pretrained(name, *args, **kw):
            log(f"tokenizer '{name}' from {tokenizer_dir} (no hub)")
            return cls(vocab_file=os.path.join(tokenizer_dir, "vocab.json"),
                       merges_file=os.path.join(tokenizer_dir, "merges.txt"),
                       pad_token="<pad>", bos_token="</s>", eos_token="</s>",
                       unk_token="</s>", **kw)
    return LocalTokenizer


def flexgen_patches(flex_opt, tokenizer_dir, timing):
    """The run-time patches (module docstring); timing["load_s"] gets OptLM's init."""
    import torch
    import flexgen.pytorch_backend as pb
    import flexgen.utils as fu

    flex_opt.AutoTokenizer = local_opt_tokenizer(tokenizer_dir)

    def cpu_mem_stats():
        import gc
        import warnings
        seen, total = set(), 0
        with warnings.catch_warnings():  # the gc walk touches deprecated torch aliases
            warnings.simplefilter("ignore")
            tensors = [o for o in gc.get_objects() if torch.is_tensor(o) and not o.is_cuda]
        for t in tensors:
            st = t.untyped_storage()
            if st.data_ptr() not in seen:
                seen.add(st.data_ptr())
                total += t.numel() * t.element_size()
        return total
    fu.cpu_mem_stats = pb.cpu_mem_stats = cpu_mem_stats

    disk = pb.TorchDisk

    class NoCopyThreadsDisk(disk):
        def __init__(self, path, mem_capacity=None, cuda_id=0, num_copy_threads=4):
            super().__init__(path, mem_capacity, cuda_id, num_copy_threads=0)
    flex_opt.TorchDisk = NoCopyThreadsDisk

    opt_lm = flex_opt.OptLM
    init = opt_lm.__init__

    def timed_init(self, *a, **k):
        t0 = time.perf_counter()
        init(self, *a, **k)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        timing["load_s"] = time.perf_counter() - t0
    opt_lm.__init__ = timed_init


def cpu_shim(flex_opt):
    """Dry run only: FlexGen's "cuda:0" becomes the CPU (streams, synchronisation and
    pinned memory become no-ops), so its code path runs end to end without a GPU."""
    import contextlib
    import torch
    import flexgen.pytorch_backend as pb

    class Stream:
        def __init__(self, *a, **k):
            pass

        def synchronize(self):
            pass
    torch.cuda.Stream = Stream
    torch.cuda.stream = lambda s=None: contextlib.nullcontext()
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.set_device = lambda *a, **k: None
    torch.Tensor.cuda = lambda self, *a, **k: self
    empty = torch.empty

    def empty_unpinned(*a, **k):
        k.pop("pin_memory", None)
        return empty(*a, **k)
    torch.empty = empty_unpinned
    device = pb.TorchDevice

    class CpuForCuda(device):
        def __init__(self, name, *a, **k):
            super().__init__("cpu" if name.startswith("cuda") else name, *a, **k)
    flex_opt.TorchDevice = CpuForCuda


def run_flexgen(a):
    import torch
    flex_opt, ver = find_flexgen()
    timing = {}
    flexgen_patches(flex_opt, a.tokenizer, timing)
    if a.cpu_shim:
        cpu_shim(flex_opt)
    weights, per_seq = flexgen_bytes(a.model, a.prompt_len, a.gen_len)
    base = {"system": "flexgen", "version": ver, "torch": torch.__version__,
            "weights": "FlexGen _DUMMY_ (all ones), fp16",
            "device": "cpu (shim)" if a.cpu_shim else torch.cuda.get_device_name(0)}
    batch, rule = a.batch, "fixed"
    if a.batch == 0:
        rule = f"fit, at most {a.max_batch}"
        if a.cpu_shim:
            batch, rule = a.max_batch, "the cap (nothing measured on the CPU)"
        else:
            free, _ = torch.cuda.mem_get_info()
            batch = fit_batch(free, weights, per_seq, a.max_batch)
            log(f"FlexGen: {free / 2**30:.1f} GiB free, weights {weights / 2**30:.1f} GiB, "
                f"{per_seq / 2**20:.0f} MiB a sequence: batch {batch}")
            if batch == 0:
                return dict(base, error="not even one sequence fits the GPU")
    CHOSEN["batch"] = batch
    os.makedirs(a.work, exist_ok=True)
    logfile = os.path.join(a.work, "flexgen.log")
    if os.path.exists(logfile):
        os.remove(logfile)
    parser = argparse.ArgumentParser()
    flex_opt.add_parser_arguments(parser)
    args = parser.parse_args(flexgen_argv(a.model, batch, a.prompt_len, a.gen_len, a.work))
    log("flex_opt " + " ".join(flexgen_argv(a.model, batch, a.prompt_len, a.gen_len, a.work)))
    flex_opt.run_flexgen(args)
    with open(logfile) as f:
        r = parse_flexgen_log(f.read())
    return dict(base, batch=batch, batch_rule=rule, load_s=timing.get("load_s"),
                prefill_s=r["prefill_s"], decode_s=r["decode_s"],
                total_s=r["prefill_s"] + r["decode_s"],
                prefill_throughput=r["prefill_throughput"],
                decode_throughput=r["decode_throughput"],
                total_throughput=r["total_throughput"],
                peak_mem_bytes=r["peak_gpu_mem_bytes"])


# ---- transformers ----

def opt_config(model):
    from transformers import OPTConfig
    L, h, nh, f = OPT[model]
    return OPTConfig(vocab_size=VOCAB, hidden_size=h, num_hidden_layers=L, ffn_dim=f,
                     num_attention_heads=nh, max_position_embeddings=2048,
                     word_embed_proj_dim=h, do_layer_norm_before=True, pad_token_id=1,
                     bos_token_id=2, eos_token_id=2)


def run_hf(a):
    import torch
    import transformers
    from transformers import OPTForCausalLM
    from peer import prompts  # the CPU peers' prompts, so both runs time the same work

    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    dtype = {"fp16": torch.float16, "fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    base = {"system": "transformers", "version": transformers.__version__,
            "torch": torch.__version__,
            "weights": f"transformers' random init on the {'GPU' if cuda else 'CPU'}, {a.dtype}",
            "device": torch.cuda.get_device_name(0) if cuda else "cpu"}
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t0 = time.perf_counter()
    with dev:
        model = OPTForCausalLM._from_config(opt_config(a.model), dtype=dtype)
    model.eval()
    sync()
    load_s = time.perf_counter() - t0
    log(f"transformers: {a.model} built on {dev} in {load_s:.1f} s "
        f"({model.config._attn_implementation} attention)")

    def generate(ids, n_new):
        x = torch.from_numpy(ids).to(dev)
        with torch.inference_mode():
            # min_new_tokens = max_new_tokens: EOS is never chosen before the end.
            out = model.generate(input_ids=x, attention_mask=torch.ones_like(x),
                                 do_sample=False, num_beams=1, max_new_tokens=n_new,
                                 min_new_tokens=n_new, pad_token_id=1, use_cache=True)
        sync()
        return out

    def timed(ids, n_new):
        t = time.perf_counter()
        out = generate(ids, n_new)
        return time.perf_counter() - t, out

    generate(prompts(1, min(a.prompt_len, 64), a.seed + 1), 4)
    batch, rule = a.batch, "fixed"
    if a.batch == 0:
        rule = f"fit, at most {a.max_batch}"
        if not cuda:
            batch, rule = a.max_batch, "the cap (nothing measured on the CPU)"
        else:
            # A 2-sequence probe measures the prefill's peak per sequence (the prompt's
            # KV, activations, logits); each further token adds its KV, plus the copy
            # DynamicCache's torch.cat makes of one layer while it grows.
            L, h, _, _ = OPT[a.model]
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            generate(prompts(2, a.prompt_len, a.seed + 2), 2)
            probe = (torch.cuda.max_memory_allocated() - before) / 2
            kv_tok = 2 * L * h * torch.finfo(dtype).bits // 8
            per_seq = probe + kv_tok * a.gen_len * (1 + 2 / L)
            torch.cuda.empty_cache()
            free, _ = torch.cuda.mem_get_info()
            batch = fit_batch(free, 0, per_seq, a.max_batch)
            log(f"transformers: probe {probe / 2**20:.0f} MiB a sequence at the prompt, "
                f"{per_seq / 2**20:.0f} MiB at the end; {free / 2**30:.1f} GiB free: "
                f"batch {batch}")
            if batch == 0:
                return dict(base, error="not even one sequence fits the GPU")
    CHOSEN["batch"] = batch
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    ids = prompts(batch, a.prompt_len, a.seed)
    prefill_s, _ = timed(ids, 1)
    total_s, out = timed(ids, a.gen_len)
    assert tuple(out.shape) == (batch, a.prompt_len + a.gen_len), tuple(out.shape)
    n, P, G = batch, a.prompt_len, a.gen_len
    dec = total_s - prefill_s
    return dict(base, batch=batch, batch_rule=rule, load_s=load_s, prefill_s=prefill_s,
                decode_s=dec, total_s=total_s, prefill_throughput=n * P / prefill_s,
                decode_throughput=n * (G - 1) / dec if dec > 0 else None,
                total_throughput=n * G / total_s,
                peak_mem_bytes=torch.cuda.max_memory_allocated() if cuda else None)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("peer", choices=["hf", "flexgen", "parse-flexgen-log"])
    p.add_argument("file", nargs="?", help="parse-flexgen-log: the log")
    p.add_argument("--model", choices=sorted(OPT), default="opt-6.7b")
    p.add_argument("--batch", default="fit", help="N, or fit (with --max-batch)")
    p.add_argument("--max-batch", type=int, default=512)
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--gen-len", type=int, default=32)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", choices=["fp16", "fp32", "bf16"], default=None)
    p.add_argument("--tokenizer", default=TOKENIZER)
    p.add_argument("--work", default=None, help="FlexGen's log and offload folder")
    p.add_argument("--cpu-shim", action="store_true", help="flexgen without a GPU (dry run)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.peer == "parse-flexgen-log":
        with open(a.file) as f:
            print(json.dumps(parse_flexgen_log(f.read())))
        return 0
    if a.batch != "fit" and not (a.batch.isdigit() and int(a.batch) > 0):
        p.error("--batch wants a positive number or fit")
    a.batch = 0 if a.batch == "fit" else int(a.batch)
    a.dtype = a.dtype or ("fp16" if a.device.startswith("cuda") else "fp32")
    a.work = a.work or os.path.join("/tmp", f"gpu-peers-{os.getpid()}")
    shape = {"model": a.model, "prompt_len": a.prompt_len, "gen_len": a.gen_len}
    try:
        r = run_hf(a) if a.peer == "hf" else run_flexgen(a)
    except Exception as e:  # reported, not fatal: bench.sh prints it in its table
        msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        if "out of memory" in msg.lower():
            msg = "out of memory: " + msg
        r = {"system": {"hf": "transformers"}.get(a.peer, a.peer), "error": msg, **CHOSEN}
        import traceback
        traceback.print_exc()
    r.update(shape)
    print(json.dumps(r), flush=True)
    return 1 if "error" in r else 0


if __name__ == "__main__":
    sys.exit(main())
