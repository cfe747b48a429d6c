#!/usr/bin/env python3
"""run.py - our bench_throughput against transformers, CTranslate2 and OpenVINO GenAI.

Every system runs FlexGen's offline workload (bench/workload.h: `batch` prompts of
exactly prompt_len tokens, gen_len greedy tokens each, EOS ignored) on the CPU, on the
same weights, in the same dtype, with the same thread count, and this prints each
one's prefill and total throughput and ours / peer ratios, then one JSON line.

Same weights: bench/export_dummy writes the built-in dummy model as a Hugging Face
checkpoint once (cached), checks that our engine reads it back bit for bit, and
saves our logits for a prompt; transformers must reproduce them (fp32 runs) before
it is timed. Ours runs from that same folder. CTranslate2 runs a conversion of it
(ct2-transformers-converter's quantization float32 / bfloat16, also cached).
OpenVINO GenAI runs optimum-cli's OpenVINO IR of it (fp32 weights; its plugin casts
to bf16 for --dtype bf16) through its ContinuousBatchingPipeline, on bench_throughput's
very prompt ids; before any timing its fp32 greedy ids must equal ours (h2oserve
generate on the same folder) token for token.

Policies: --kv-policy h2o runs ours under H2O with --h2o-kept tokens per head (half
heavy, half recent) and OpenVINO with its cache eviction (aggregation SUM) keeping the
same number: start one block, recent our recent half in whole blocks, max_cache_size
--h2o-kept. --kv-memory-of N gives every system the KV memory full needs for N
sequences of prompt_len + gen_len: ours runs the largest batch that fits, OpenVINO the
same requests in that many bytes of its own blocks. --kv-cache-dtype sets ours' KV
dtype, --ov-kv OpenVINO's KV_CACHE_PRECISION (a list: one row each).

Runs: --rounds N runs ours and every peer in turn, N times (A B A B ...), so that the
machine's drift hits all alike, and reports every run and each round's ratios.
--cpu-load N runs every system beside N busy processes (the shared-cores mode).

The peers live in venvs this script makes on first use under BUILD/peers: `venv`
over Debian's torch (`apt-get install python3-torch python3-venv`) for transformers
and CTranslate2 (requirements.txt); `ov-venv` for OpenVINO GenAI
(requirements-openvino.txt); `ov-export-venv` for optimum-intel and PyPI's torch 2.8,
used once for the export (requirements-openvino-export.txt, about 7 GB). They run in
their own processes (peer.py) one after the other, never beside each other or ours.
Debian's torch calls the system libblas.so.3 for fp32 GEMMs, so transformers runs on
OpenMP OpenBLAS (blas_dir).

Usage: python3 bench/peers/run.py [--build build] [--model dummy:opt-125m]
         [--batch 16] [--prompt-len 512] [--gen-len 32] [--dtype fp32|bf16]
         [--threads N] [--repeat 1] [--rounds 1] [--peers hf,ct2,ov]
         [--kv-policy full|h2o] [--h2o-kept 224] [--kv-cache-dtype auto|bf16|int8]
         [--ov-kv bf16,u8] [--kv-memory-of N] [--cpu-load N]
"""
import argparse
import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import time

from workload import OV_BLOCK, workload_prompts

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
NAMES = {"ours": "h2oserve", "hf": "transformers", "ct2": "ctranslate2",
         "ov": "openvino-genai"}
# The peers' venvs under BUILD/peers: requirements file, and whether the venv sees
# Debian's site packages (python3-torch for transformers and CTranslate2's converter).
VENVS = {"venv": ("requirements.txt", True),
         "ov-venv": ("requirements-openvino.txt", False),
         "ov-export-venv": ("requirements-openvino-export.txt", False)}


def log(msg):
    print(f"# {msg}", file=sys.stderr, flush=True)


def sh(cmd, env=None, capture=True):
    """Run cmd (a list); its stdout when capture. Stops the script on failure."""
    log(" ".join(cmd))
    r = subprocess.run(cmd, env=env, text=True, stdout=subprocess.PIPE if capture else None)
    if r.returncode != 0:
        sys.exit(f"run.py: {cmd[0]} failed with status {r.returncode}")
    return r.stdout


def venv_python(a, name="venv"):
    """The venv's python, made and filled from its requirements when missing or stale."""
    req_file, system_site = VENVS[name]
    venv = os.path.join(a.cache, name)
    py = os.path.join(venv, "bin", "python")
    req = os.path.join(HERE, req_file)
    with open(req, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    stamp = os.path.join(venv, "requirements.sha256")
    if os.path.exists(stamp) and open(stamp).read().strip() == digest:
        return py
    if system_site and subprocess.run([a.python, "-c", "import torch"],
                                      capture_output=True).returncode:
        sys.exit(f"run.py: {a.python} cannot import torch; on Debian: "
                 "apt-get install python3-torch python3-venv")
    if not os.path.exists(py):
        sh([a.python, "-m", "venv"] + (["--system-site-packages"] if system_site else []) +
           [venv], capture=False)
    sh([py, "-m", "pip", "install", "--disable-pip-version-check", "-q", "-r", req],
       capture=False)
    with open(stamp, "w") as f:
        f.write(digest + "\n")
    return py


def export(a):
    """The dummy model as an HF folder (cached), and our logits file for the check."""
    name = re.sub(r"[^A-Za-z0-9.-]", "_", a.model)
    out = os.path.join(a.cache, f"{name}-seed{a.seed}")
    logits = os.path.join(out, "ours_logits.f32")
    if os.path.exists(os.path.join(out, "export.ok")):
        return out, logits
    cmd = [os.path.join(a.build, "bench", "export_dummy"), "--model", a.model, "--seed",
           str(a.seed), "--dump-logits", logits]
    if os.path.exists(os.path.join(a.tokenizer, "vocab.json")):
        cmd += ["--tokenizer", a.tokenizer]
    else:
        log(f"no tokenizer at {a.tokenizer}: CTranslate2's converter will want one")
    sh(cmd + [out], capture=False)
    open(os.path.join(out, "export.ok"), "w").close()
    return out, logits


def ours_budget(a):
    """--h2o-heavy-ratio and --h2o-recent-ratio for our h2o runs: each half of
    --h2o-kept tokens of prompt_len + gen_len (bench_throughput rounds ratio * L up)."""
    half = a.h2o_kept / 2 / (a.prompt_len + a.gen_len)
    return ["--h2o-heavy-ratio", repr(half), "--h2o-recent-ratio", repr(half)]


def kv_bytes(a, model_dir):
    """The one KV memory of a KV-limited run: what full needs in --dtype (K and V only)
    for --kv-memory-of sequences of prompt_len + gen_len tokens; 0 without one."""
    if not a.kv_memory_of:
        return 0
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    per_token = c["num_hidden_layers"] * 2 * c["hidden_size"] * {"fp32": 4, "bf16": 2}[a.dtype]
    return a.kv_memory_of * (a.prompt_len + a.gen_len) * per_token


def run_ours(a, model_dir):
    """One bench_throughput run on the exported folder (best total of --repeat)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    cmd = [os.path.join(a.build, "bench", "bench_throughput"), "--model", model_dir,
           "--prompt-len", str(a.prompt_len), "--gen-len", str(a.gen_len), "--kv-policy",
           a.kv_policy, "--dtype", a.dtype]
    if a.kv_cache_dtype != "auto":
        cmd += ["--kv-cache-dtype", a.kv_cache_dtype]
    if a.kv_policy == "h2o":
        cmd += ours_budget(a)
    x = kv_bytes(a, model_dir)
    cmd += ["--kv-cache-bytes", str(x)] if x else ["--batch", str(a.batch)]
    best = None
    for _ in range(a.repeat):
        with cpu_load(a):
            out = sh(cmd, env=env)
        sys.stderr.write(out)
        j = next(json.loads(l) for l in out.splitlines() if l.startswith('{"bench"'))
        if best is None or j["total_throughput"] > best["total_throughput"]:
            best = j
    if best["dtype"] != a.dtype:
        sys.exit(f"run.py: bench_throughput ran {best['dtype']}, not {a.dtype}")
    return {"system": NAMES["ours"], "version": git_version(), "threads": a.threads,
            "batch": best["batch"], "kv_policy": a.kv_policy,
            "kv_dtype": best.get("kv_dtype", a.dtype), "kv_bytes": x or None,
            "prefill_s": best["prefill_latency_s"],
            "total_s": best["prefill_latency_s"] + best["decode_latency_s"],
            "prefill_throughput": best["prefill_throughput"],
            "decode_throughput": best["decode_throughput"],
            "total_throughput": best["total_throughput"]}


@contextlib.contextmanager
def cpu_load(a):
    """--cpu-load N: N busy processes (a fixed load: each spins without pause) for the
    length of one system's run, so every system meets the same competition for the
    cores. Nothing without it."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(a.cpu_load)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def write_tokenizer_files(model_dir):
    """The files beside OPT's vocab.json and merges.txt that optimum-cli's export needs
    to convert the tokenizer (OpenVINO GenAI's pipeline loads it even when it is given
    token ids): OPT's own tokenizer_config.json, special_tokens_map.json and
    generation_config.json, as facebook/opt-125m ships them."""
    files = {
        "tokenizer_config.json": {"add_bos_token": True, "add_prefix_space": False,
                                  "bos_token": "</s>", "eos_token": "</s>",
                                  "pad_token": "<pad>", "unk_token": "</s>",
                                  "errors": "replace", "model_max_length": 2048,
                                  "tokenizer_class": "GPT2Tokenizer"},
        "special_tokens_map.json": {"bos_token": "</s>", "eos_token": "</s>",
                                    "pad_token": "<pad>", "unk_token": "</s>"},
        "generation_config.json": {"bos_token_id": 2, "eos_token_id": 2,
                                   "pad_token_id": 1},
    }
    for name, body in files.items():
        path = os.path.join(model_dir, name)
        if not os.path.exists(path):
            with open(path, "w") as f:
                json.dump(body, f, indent=1)


def export_ov(a, model_dir):
    """The exported folder as OpenVINO IR, fp32 weights (cached beside it)."""
    out = model_dir + "-ov"
    if os.path.exists(os.path.join(out, "export.ok")):
        return out
    if not os.path.exists(os.path.join(model_dir, "vocab.json")):
        sys.exit(f"run.py: OpenVINO's export needs a tokenizer; none at {a.tokenizer}")
    write_tokenizer_files(model_dir)
    py = venv_python(a, "ov-export-venv")
    sh([os.path.join(os.path.dirname(py), "optimum-cli"), "export", "openvino", "--model",
        model_dir, "--task", "text-generation-with-past", "--weight-format", "fp32", out],
       capture=False)
    open(os.path.join(out, "export.ok"), "w").close()
    return out


def ours_ids(a, model_dir, n=2, prompt_len=64, gen=16):
    """Our fp32 greedy ids (h2oserve generate, full cache) for bench_throughput's first
    n prompts cut to prompt_len, as JSON in the cache: what OpenVINO GenAI must match
    token for token before it is timed."""
    path = os.path.join(a.cache, f"ours-ids-{os.path.basename(model_dir)}.json")
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    cmd = [os.path.join(a.build, "server", "h2oserve"), "generate", "--model", model_dir,
           "--dtype", "fp32", "--kv-policy", "full", "--temperature", "0", "--ignore-eos",
           "--max-tokens", str(gen), "--print-ids"]
    for row in workload_prompts(n, prompt_len, c["vocab_size"], c.get("bos_token_id", 2)):
        cmd += ["--prompt-ids", json.dumps(row)]
    ids = [json.loads(l) for l in sh(cmd).splitlines() if l.startswith("[")]
    if len(ids) != n:
        sys.exit(f"run.py: h2oserve generate printed {len(ids)} id lines, not {n}")
    with open(path, "w") as f:
        json.dump({"prompt_len": prompt_len, "ids": ids}, f)
    return path


def git_version():
    r = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"],
                       capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def blas_dir(a):
    """
    A folder holding OpenBLAS's libblas.so.3 for the peers' torch, or None. Debian
    builds torch against the generic libblas.so.3, which without OpenBLAS installed is
    the netlib reference BLAS: some 20x slower at fp32 GEMMs, a strawman. OpenBLAS's
    OpenMP build shares torch's libgomp threads; the pthread one (Debian's default)
    fights them for the cores in decode. So: the system's OpenMP OpenBLAS, else that
    package fetched with `apt-get download` and unpacked into the cache (nothing is
    installed system-wide), else the system's pthread OpenBLAS.
    """
    if a.blas:
        return a.blas
    lib = "usr/lib/x86_64-linux-gnu"
    own = os.path.join(a.cache, "openblas")
    system = [os.path.join("/", lib, "openblas-openmp"), os.path.join(own, lib, "openblas-openmp")]
    for d in system:
        if os.path.exists(os.path.join(d, "libblas.so.3")):
            return d
    os.makedirs(own, exist_ok=True)
    r = subprocess.run(["apt-get", "download", "libopenblas0-openmp"], cwd=own,
                       capture_output=True, text=True)
    debs = [f for f in os.listdir(own) if f.endswith(".deb")]
    if r.returncode == 0 and debs:
        sh(["dpkg", "-x", os.path.join(own, debs[0]), own], capture=False)
        if os.path.exists(os.path.join(system[1], "libblas.so.3")):
            return system[1]
    pthread = os.path.join("/", lib, "openblas-pthread")
    if os.path.exists(os.path.join(pthread, "libblas.so.3")):
        return pthread
    log("WARNING: no OpenBLAS (apt-get install libopenblas0-openmp): transformers runs on "
        "whatever libblas.so.3 is, perhaps the slow reference BLAS")
    return None


def ov_eviction(a):
    """OpenVINO GenAI's CacheEvictionConfig at our budget's kept tokens: one block of
    start tokens (the attention sinks, which H2O keeps as heavy hitters anyway), our
    recent half rounded down to blocks as its recent, and max_cache_size = --h2o-kept,
    so that both keep the same number of tokens; the rest is its evictable area."""
    recent = max(OV_BLOCK, (a.h2o_kept // 2) // OV_BLOCK * OV_BLOCK)
    return f"{OV_BLOCK},{recent},{a.h2o_kept}"


def verify_ov(a, py, model_dir):
    """Before any timing: OpenVINO GenAI in fp32 with an fp32 KV cache must give our
    greedy ids token for token on the same folder and prompts (peer.py exits if not)."""
    sh([py, os.path.join(HERE, "peer.py"), "ov", "--model-dir", model_dir, "--ov-dir",
        export_ov(a, model_dir), "--ov-kv", "f32", "--dtype", "fp32", "--threads",
        str(a.threads), "--batch", "1", "--prompt-len", "64", "--gen-len", "2",
        "--verify-ids", ours_ids(a, model_dir)])


def run_peer(a, py, peer, model_dir, logits, ov_kv=None):
    cmd = [py, os.path.join(HERE, "peer.py"), peer, "--model-dir", model_dir,
           "--batch", str(a.batch), "--prompt-len", str(a.prompt_len), "--gen-len",
           str(a.gen_len), "--dtype", a.dtype, "--threads", str(a.threads), "--repeat",
           str(a.repeat), "--seed", str(a.seed)]
    if peer == "hf" and a.dtype == "fp32":
        cmd += ["--verify-logits", logits]
    if peer == "ct2":
        quant = {"fp32": "float32", "bf16": "bfloat16"}[a.dtype]
        ct2 = f"{model_dir}-ct2-{quant}"
        if not os.path.exists(os.path.join(ct2, "model.bin")) and ct2_supports(py, quant):
            sh([os.path.join(os.path.dirname(py), "ct2-transformers-converter"), "--model",
                model_dir, "--output_dir", ct2, "--quantization", quant, "--force"],
               capture=False)
        cmd += ["--ct2-dir", ct2]
    if peer == "ov":
        cmd += ["--ov-dir", export_ov(a, model_dir), "--ov-kv", ov_kv, "--max-batched",
                str(a.max_batched_tokens), "--kv-bytes", str(kv_bytes(a, model_dir))]
        if a.kv_policy == "h2o":
            cmd += ["--ov-evict", ov_eviction(a)]
    env = dict(os.environ)
    blas = blas_dir(a) if peer == "hf" else None
    if blas:
        env["LD_LIBRARY_PATH"] = blas + ":" + env.get("LD_LIBRARY_PATH", "")
        env["OPENBLAS_NUM_THREADS"] = str(a.threads)
    t0 = time.time()
    with cpu_load(a):
        out = sh(cmd, env=env)
    log(f"{NAMES[peer]}: {time.time() - t0:.0f} s")
    r = json.loads(out.strip().splitlines()[-1])
    if ov_kv:
        r["system"] = f"{r['system']} kv {ov_kv}"
    return r


def ct2_supports(py, compute):
    r = subprocess.run([py, "-c", "import ctranslate2; print(' '.join("
                        "ctranslate2.get_supported_compute_types('cpu')))"],
                       capture_output=True, text=True)
    return compute in r.stdout.split()


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def fmt(x, spec):
    """x in format spec ("10.2f"), or a dash as wide when there is no number."""
    if isinstance(x, (int, float)):
        return format(x, spec)
    return format("-", ">" + spec.split(".")[0])


def ratio_rows(rounds):
    """Each peer row gets ours / its total and prefill throughput, within its round."""
    for rows in rounds:
        ours = rows[0]
        for r in rows[1:]:
            if "total_throughput" in r:
                r["ratio_total"] = ours["total_throughput"] / r["total_throughput"]
                r["ratio_prefill"] = ours["prefill_throughput"] / r["prefill_throughput"]


def bars_for(a):
    """The acceptance bars of this run's shape: (peer system prefix, metric, need)."""
    shape = (a.batch, a.prompt_len, a.gen_len)
    if "ov" not in a.peers:
        if a.kv_policy == "full" and shape == (16, 512, 512):  # issue 7
            return [("transformers", "ratio_total", 2.0), ("ctranslate2", "ratio_total", 1.0)]
        if a.kv_policy == "full" and shape == (16, 512, 32):
            return [("transformers", "ratio_total", 1.2)]
        return []
    if a.dtype != "bf16":
        return []
    bars = [("openvino-genai kv bf16", "ratio_prefill", 1.0)]  # issue 21
    if a.kv_memory_of == 8 and a.prompt_len == 512 and a.gen_len == 512:
        bars.append(("openvino-genai kv u8", "ratio_total", 1.5))
    elif a.kv_policy == "full" and shape == (16, 512, 32):
        bars.append(("openvino-genai kv bf16", "ratio_total", 1.2))
    elif a.kv_policy == "h2o" and shape == (16, 512, 512):
        bars.append(("openvino-genai kv bf16", "ratio_total", 1.5))
    return bars


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def report(a, rounds):
    ratio_rows(rounds)
    kv = f", KV {a.kv_cache_dtype}" if a.kv_cache_dtype != "auto" else ""
    mem = f", KV memory {kv_bytes(a, a.model_dir) / 2**20:.0f} MiB" if a.kv_memory_of else ""
    pol = a.kv_policy + (f" ({a.h2o_kept} kept tokens)" if a.kv_policy == "h2o" else "")
    load = f", beside {a.cpu_load} busy processes" if a.cpu_load else ", quiet machine"
    print(f"FlexGen offline workload on the CPU: {a.model} (seed {a.seed}), "
          f"{a.prompt_len} + {a.gen_len} tokens, {a.dtype}, {pol}{kv}{mem}, {a.threads} "
          f"threads{load}, {cpu_name()}, {a.rounds} interleaved rounds, best of {a.repeat} "
          "within each")
    print(f"{'round':>5} {'system':<24} {'batch':>5} {'prefill s':>10} {'prefill t/s':>12} "
          f"{'decode t/s':>11} {'total s':>9} {'total t/s':>10} {'ours/peer':>10} "
          f"{'prefill ours/peer':>18}")
    for k, rows in enumerate(rounds):
        for r in rows:
            ratio, pre = r.get("ratio_total"), r.get("ratio_prefill")
            print(f"{k + 1:>5} {r['system']:<24} {fmt(r.get('batch'), '5d')} "
                  f"{fmt(r.get('prefill_s'), '10.2f')} "
                  f"{fmt(r.get('prefill_throughput'), '12.1f')} "
                  f"{fmt(r.get('decode_throughput'), '11.1f')} {fmt(r.get('total_s'), '9.2f')} "
                  f"{fmt(r.get('total_throughput'), '10.1f')} "
                  f"{fmt(ratio, '9.2f') + 'x' if ratio else '-':>10} "
                  f"{fmt(pre, '17.2f') + 'x' if pre else '-':>18}")
            if "unsupported" in r:
                print(f"      {r['system']}: {r['unsupported']}")
    summary = []
    for system in [r["system"] for r in rounds[0][1:]]:
        got = [r for rows in rounds for r in rows[1:] if r["system"] == system]
        tot = [r["ratio_total"] for r in got if "ratio_total" in r]
        pre = [r["ratio_prefill"] for r in got if "ratio_prefill" in r]
        if tot:
            summary.append({"peer": system, "ratio_total": tot, "ratio_prefill": pre})
            print(f"ours / {system}: total {' '.join(f'{x:.2f}' for x in tot)} (median "
                  f"{median(tot):.2f}), prefill {' '.join(f'{x:.2f}' for x in pre)} "
                  f"(median {median(pre):.2f})")
    results = []
    for system, metric, need in bars_for(a):
        rows = [r for rs in rounds for r in rs[1:] if r["system"] == system and metric in r]
        if not rows:
            continue
        got = median([r[metric] for r in rows])
        met = got >= need
        results.append({"peer": system, "metric": metric, "need": need, "median": got,
                        "met": met})
        print(f"bar: ours >= {need}x {system} ({metric[6:]}) at {a.prompt_len}+{a.gen_len}, "
              f"{a.dtype}: median {got:.2f}x, {'met' if met else 'NOT met'}")
    print(json.dumps({"bench": "peers", "model": a.model, "seed": a.seed, "batch": a.batch,
                      "prompt_len": a.prompt_len, "gen_len": a.gen_len, "dtype": a.dtype,
                      "kv_policy": a.kv_policy, "kv_cache_dtype": a.kv_cache_dtype,
                      "h2o_kept": a.h2o_kept if a.kv_policy == "h2o" else None,
                      "kv_memory_of": a.kv_memory_of, "cpu_load": a.cpu_load,
                      "threads": a.threads, "cpu": cpu_name(), "repeat": a.repeat,
                      "rounds": rounds, "summary": summary,
                      "date": time.strftime("%Y-%m-%d"), "bars": results}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(REPO, "build"),
                   help="meson build folder with bench/bench_throughput and export_dummy")
    p.add_argument("--model", default="dummy:opt-125m")
    p.add_argument("--seed", type=int, default=0, help="seed of the dummy weights")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--gen-len", type=int, default=32)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--repeat", type=int, default=1, help="best of N runs for each system")
    p.add_argument("--rounds", type=int, default=1, help="run ours and every peer in turn "
                   "N times (A B A B ...) and report every run")
    p.add_argument("--peers", default="hf,ct2", help="comma-separated: hf, ct2, ov")
    p.add_argument("--kv-policy", choices=["full", "h2o"], default="full",
                   help="ours; a peer that has eviction (ov) evicts at the same kept tokens")
    p.add_argument("--h2o-kept", type=int, default=224, help="kept tokens per head under "
                   "h2o, half heavy, half recent: a multiple of OpenVINO's 32-token block "
                   "(224 is the one just above 20%% of 512 + 512)")
    p.add_argument("--kv-cache-dtype", choices=["auto", "fp32", "bf16", "int8"],
                   default="auto", help="our KV cache dtype")
    p.add_argument("--ov-kv", default="bf16", help="OpenVINO's KV_CACHE_PRECISION, a "
                   "list (bf16,u8: one row each)")
    p.add_argument("--kv-memory-of", type=int, default=0, help="KV-limited: every system "
                   "gets the KV memory full needs for N sequences (K and V in --dtype); ours "
                   "runs the largest batch that fits, the peers the same requests")
    p.add_argument("--max-batched-tokens", type=int, default=2048,
                   help="tokens per forward (ours' default; OpenVINO's scheduler gets it too)")
    p.add_argument("--cpu-load", type=int, default=0, help="run every system beside N "
                   "busy processes (the shared-cores mode)")
    p.add_argument("--jsonl", help="append one line per peer measured (system, version, "
                   "batch, prompt_len, gen_len, dtype, total_throughput) to this file, "
                   "the PEERS input of bench/plots.sh")
    p.add_argument("--cache", help="venvs, exported model and conversions (BUILD/peers)")
    p.add_argument("--python", default="/usr/bin/python3",
                   help="the Python whose torch the venv uses")
    p.add_argument("--blas", help="folder with the libblas.so.3 transformers' torch "
                   "should use (default: OpenBLAS, found or fetched)")
    p.add_argument("--tokenizer", default=os.path.join(REPO, "tests", "data", "opt-tokenizer"),
                   help="folder with OPT's vocab.json and merges.txt")
    a = p.parse_args()
    a.build = os.path.abspath(a.build)
    a.cache = os.path.abspath(a.cache or os.path.join(a.build, "peers"))
    a.peers = [x for x in a.peers.split(",") if x]
    if any(x not in NAMES or x == "ours" for x in a.peers):
        sys.exit("run.py: --peers takes hf, ct2 and/or ov")
    if a.kv_policy == "h2o" and (a.h2o_kept % OV_BLOCK or a.h2o_kept < 3 * OV_BLOCK):
        sys.exit(f"run.py: --h2o-kept must be a multiple of {OV_BLOCK}, at least "
                 f"{3 * OV_BLOCK} (OpenVINO's start + recent blocks and one to evict)")
    if a.kv_memory_of and any(x != "ov" for x in a.peers):
        sys.exit("run.py: --kv-memory-of compares with ov only (a peer with a paged pool)")
    os.makedirs(a.cache, exist_ok=True)
    pys = {}
    if any(x in ("hf", "ct2") for x in a.peers):
        pys["hf"] = pys["ct2"] = venv_python(a, "venv")
    if "ov" in a.peers:
        pys["ov"] = venv_python(a, "ov-venv")
    model_dir, logits = export(a)
    a.model_dir = model_dir
    runs = []  # (peer, its KV precision): OpenVINO once per --ov-kv
    for peer in a.peers:
        runs += [(peer, kv) for kv in a.ov_kv.split(",")] if peer == "ov" else [(peer, None)]
    if "ov" in a.peers:
        verify_ov(a, pys["ov"], model_dir)
    rounds = []
    for k in range(a.rounds):
        log(f"round {k + 1} of {a.rounds}")
        rows = [run_ours(a, model_dir)]
        if a.kv_memory_of:  # the peers run the same requests: the batch ours fit
            a.batch = rows[0]["batch"]
        for peer, ov_kv in runs:
            rows.append(run_peer(a, pys.get(peer), peer, model_dir, logits, ov_kv))
        rounds.append(rows)
    report(a, rounds)
    if a.jsonl:
        with open(a.jsonl, "a") as f:
            for rows in rounds:
                for r in rows[1:]:
                    if "total_throughput" in r:
                        f.write(json.dumps({"system": r["system"], "version": r["version"],
                                            "batch": a.batch, "prompt_len": a.prompt_len,
                                            "gen_len": a.gen_len, "dtype": a.dtype,
                                            "total_throughput": r["total_throughput"]}) + "\n")


if __name__ == "__main__":
    main()
