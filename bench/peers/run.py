#!/usr/bin/env python3
"""run.py - our bench_throughput against transformers and CTranslate2, one command.

All three run FlexGen's offline workload (bench/workload.h: `batch` prompts of
exactly prompt_len tokens, gen_len greedy tokens each, EOS ignored) on the CPU, on
the same weights, in the same dtype, with the same thread count, and this prints
each one's prefill and total throughput and ours / peer ratios, then one JSON line.

Same weights: bench/export_dummy writes the built-in dummy model as a Hugging Face
checkpoint once (cached), checks that our engine reads it back bit for bit, and
saves our logits for a prompt; transformers must reproduce them (fp32 runs) before
it is timed. Ours runs from that same folder. CTranslate2 runs a conversion of it
(ct2-transformers-converter's quantization float32 / bfloat16, also cached).

The peers live in a venv that this script makes on first use (BUILD/peers/venv),
over Debian's torch (`apt-get install python3-torch python3-venv`), with the pinned
packages of requirements.txt; they run in their own processes (peer.py) one after
the other, never beside each other or ours. Debian's torch calls the system
libblas.so.3 for fp32 GEMMs, so transformers runs on OpenMP OpenBLAS (blas_dir).

Usage: python3 bench/peers/run.py [--build build] [--model dummy:opt-125m]
         [--batch 16] [--prompt-len 512] [--gen-len 32] [--dtype fp32|bf16]
         [--threads N] [--repeat 1] [--peers hf,ct2]
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
NAMES = {"ours": "h2oserve", "hf": "transformers", "ct2": "ctranslate2"}


def log(msg):
    print(f"# {msg}", file=sys.stderr, flush=True)


def sh(cmd, env=None, capture=True):
    """Run cmd (a list); its stdout when capture. Stops the script on failure."""
    log(" ".join(cmd))
    r = subprocess.run(cmd, env=env, text=True, stdout=subprocess.PIPE if capture else None)
    if r.returncode != 0:
        sys.exit(f"run.py: {cmd[0]} failed with status {r.returncode}")
    return r.stdout


def venv_python(a):
    """The venv's python, made and filled from requirements.txt when missing or stale."""
    venv = os.path.join(a.cache, "venv")
    py = os.path.join(venv, "bin", "python")
    req = os.path.join(HERE, "requirements.txt")
    with open(req, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    stamp = os.path.join(venv, "requirements.sha256")
    if os.path.exists(stamp) and open(stamp).read().strip() == digest:
        return py
    if subprocess.run([a.python, "-c", "import torch"], capture_output=True).returncode:
        sys.exit(f"run.py: {a.python} cannot import torch; on Debian: "
                 "apt-get install python3-torch python3-venv")
    if not os.path.exists(py):
        sh([a.python, "-m", "venv", "--system-site-packages", venv], capture=False)
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


def run_ours(a, model_dir):
    """bench_throughput on the exported folder, best total of --repeat runs."""
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    best = None
    for _ in range(a.repeat):
        out = sh([os.path.join(a.build, "bench", "bench_throughput"), "--model", model_dir,
                  "--batch", str(a.batch), "--prompt-len", str(a.prompt_len), "--gen-len",
                  str(a.gen_len), "--kv-policy", "full", "--dtype", a.dtype], env=env)
        sys.stderr.write(out)
        j = next(json.loads(l) for l in out.splitlines() if l.startswith('{"bench"'))
        if best is None or j["total_throughput"] > best["total_throughput"]:
            best = j
    if best["dtype"] != a.dtype:
        sys.exit(f"run.py: bench_throughput ran {best['dtype']}, not {a.dtype}")
    return {"system": NAMES["ours"], "version": git_version(), "threads": a.threads,
            "prefill_s": best["prefill_latency_s"],
            "total_s": best["prefill_latency_s"] + best["decode_latency_s"],
            "prefill_throughput": best["prefill_throughput"],
            "decode_throughput": best["decode_throughput"],
            "total_throughput": best["total_throughput"]}


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


def run_peer(a, py, peer, model_dir, logits):
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
    env = dict(os.environ)
    blas = blas_dir(a) if peer == "hf" else None
    if blas:
        env["LD_LIBRARY_PATH"] = blas + ":" + env.get("LD_LIBRARY_PATH", "")
        env["OPENBLAS_NUM_THREADS"] = str(a.threads)
    t0 = time.time()
    out = sh(cmd, env=env)
    log(f"{NAMES[peer]}: {time.time() - t0:.0f} s")
    return json.loads(out.strip().splitlines()[-1])


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


def report(a, rows):
    ours = rows[0]
    print(f"FlexGen offline workload on the CPU: {a.model} (seed {a.seed}), batch {a.batch}, "
          f"{a.prompt_len} + {a.gen_len} tokens, {a.dtype}, {a.threads} threads, "
          f"{cpu_name()}, best of {a.repeat}")
    print(f"{'system':<13} {'version':<14} {'prefill s':>10} {'prefill t/s':>12} "
          f"{'decode t/s':>11} {'total s':>9} {'total t/s':>10} {'ours/peer':>10} "
          f"{'prefill ours/peer':>18}")
    for r in rows:
        ratio = pre = None
        if r is not ours and "total_throughput" in r:
            ratio = ours["total_throughput"] / r["total_throughput"]
            pre = ours["prefill_throughput"] / r["prefill_throughput"]
            r["ratio_total"], r["ratio_prefill"] = ratio, pre
        print(f"{r['system']:<13} {r['version']:<14} {fmt(r.get('prefill_s'), '10.2f')} "
              f"{fmt(r.get('prefill_throughput'), '12.1f')} "
              f"{fmt(r.get('decode_throughput'), '11.1f')} {fmt(r.get('total_s'), '9.2f')} "
              f"{fmt(r.get('total_throughput'), '10.1f')} "
              f"{fmt(ratio, '9.2f') + 'x' if ratio else '-':>10} "
              f"{fmt(pre, '17.2f') + 'x' if pre else '-':>18}")
        if "unsupported" in r:
            print(f"  {r['system']}: {r['unsupported']}")
    # Issue 7's acceptance bars (CPU, batch 16, full policy).
    bars = []
    if a.batch == 16 and a.prompt_len == 512 and a.gen_len == 512:
        bars = [("transformers", 2.0), ("ctranslate2", 1.0)]
    elif a.batch == 16 and a.prompt_len == 512 and a.gen_len == 32:
        bars = [("transformers", 1.2)]
    results = []
    for system, need in bars:
        r = next((r for r in rows if r["system"] == system and "ratio_total" in r), None)
        if r is None:
            continue
        met = r["ratio_total"] >= need
        results.append({"peer": system, "need": need, "ratio": r["ratio_total"], "met": met})
        print(f"bar: ours >= {need}x {system} at {a.prompt_len}+{a.gen_len}, {a.dtype}: "
              f"{r['ratio_total']:.2f}x, {'met' if met else 'NOT met'}")
    print(json.dumps({"bench": "peers", "model": a.model, "seed": a.seed, "batch": a.batch,
                      "prompt_len": a.prompt_len, "gen_len": a.gen_len, "dtype": a.dtype,
                      "threads": a.threads, "cpu": cpu_name(), "repeat": a.repeat,
                      "date": time.strftime("%Y-%m-%d"), "systems": rows, "bars": results}))


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
    p.add_argument("--peers", default="hf,ct2", help="comma-separated: hf, ct2")
    p.add_argument("--jsonl", help="append one line per peer measured (system, version, "
                   "batch, prompt_len, gen_len, dtype, total_throughput) to this file, "
                   "the PEERS input of bench/plots.sh")
    p.add_argument("--cache", help="venv, exported model and conversions (BUILD/peers)")
    p.add_argument("--python", default="/usr/bin/python3",
                   help="the Python whose torch the venv uses")
    p.add_argument("--blas", help="folder with the libblas.so.3 transformers' torch "
                   "should use (default: OpenBLAS, found or fetched)")
    p.add_argument("--tokenizer", default=os.path.join(os.path.dirname(REPO), "shared",
                                                       "data", "opt-tokenizer"),
                   help="folder with OPT's vocab.json and merges.txt")
    a = p.parse_args()
    a.build = os.path.abspath(a.build)
    a.cache = os.path.abspath(a.cache or os.path.join(a.build, "peers"))
    peers = [x for x in a.peers.split(",") if x]
    if any(x not in ("hf", "ct2") for x in peers):
        sys.exit("run.py: --peers takes hf and/or ct2")
    os.makedirs(a.cache, exist_ok=True)
    py = venv_python(a) if peers else None
    model_dir, logits = export(a)
    rows = [run_ours(a, model_dir)]
    for peer in peers:
        rows.append(run_peer(a, py, peer, model_dir, logits))
    report(a, rows)
    if a.jsonl:
        with open(a.jsonl, "a") as f:
            for r in rows[1:]:
                if "total_throughput" in r:
                    f.write(json.dumps({"system": r["system"], "version": r["version"],
                                        "batch": a.batch, "prompt_len": a.prompt_len,
                                        "gen_len": a.gen_len, "dtype": a.dtype,
                                        "total_throughput": r["total_throughput"]}) + "\n")


if __name__ == "__main__":
    main()
