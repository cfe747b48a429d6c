#!/usr/bin/env python3
"""gpu_bench.py - tests/gpu/bench.sh's driver: FlexGen's workload on ours, FlexGen and
transformers, in order of importance, under one deadline, into one table.

For each model, then each shape (prompt + gen), it runs
  1. ours: bench_throughput --batch max --max-num-seqs CAP --kv-policy full,h2o (one
     load; each policy at the largest batch its KV fits in what the CUDA backend
     gives the pool, at most CAP);
  2. FlexGen (gpu_peers.py flexgen) at our full-cache batch, or less if FlexGen's
     own memory needs say it does not fit;
  3. transformers (gpu_peers.py hf) likewise;
so the default order is 6.7B 512+32 (ours, FlexGen, transformers), 6.7B 512+512,
then 30B. Each run is a child process in its own process group with its own
timeout, cut to the deadline; a run that the time left cannot hold (three
quarters of its estimate) is not started. A failed, stopped or skipped run is a row of the table
with its reason, never the end of the benchmark; a peer that runs out of memory is
tried once more at 70% of its batch. Every result goes to
OUT/bench.jsonl as it comes and the table (markdown) is rewritten to
OUT/bench-table.txt after every run; the children's output goes to stdout (run.sh's
log), each line prefixed with the run's name.

Exit status: 0 when ours ran at least the first shape (the peers' failures are
reported, not fatal), 1 otherwise.

Usage: gpu_bench.py --build BUILD --out OUT [--device cuda|cpu] [--models opt-6.7b,opt-30b]
         [--shapes 512+32,512+512] [--max-num-seqs 512] [--peers flexgen,hf]
         [--deadline EPOCH | --seconds N] [--peer-python PY] [--flexgen-cpu-shim]
"""
import argparse
import datetime
import json
import math
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from gpu_peers import OPT, VOCAB  # noqa: E402  (no torch needed)

NAMES = {"ours": "h2oserve", "flexgen": "FlexGen", "hf": "transformers"}

# ---- the time model (H200), for the plan's estimates and the start rule ----
# Rates are effective, not peak: fp16 GEMMs on cuBLAS at M >= 256 (the chip's dense
# fp16 peak is ~990 TFLOP/s; 790 was measured on bf16 8192^3); kernels that stream
# HBM (4.3 TB/s measured on a device copy); our prefill attention on CUDA cores
# (docs/cuda.md: 7-13 TFLOP/s expected); the dummy weights generated on 16 cores
# and uploaded from pageable memory (measured on 2 cores here, scaled: docs/cuda.md).
H200 = {"gemm": 550e12, "hbm": 3.0e12, "attn_prefill": 10e12, "launch": 6e-6,
        "mem": 143771 * 2**20, "dummy_ns_per_param": 1.0, "victims_ns": 5.0,
        "python_import_s": 6.0, "hf_step_cpu_s_per_layer": 0.5e-3}


def params(model):
    L, h, nh, f = OPT[model]
    return L * (4 * h * h + 2 * h * f) + VOCAB * h + 2050 * h


def kv_bytes_token(model):
    L, h, _, _ = OPT[model]
    return 2 * L * h * 2  # K and V, fp16


def h2o_slots(P, G):
    # The paper's 20%: heavy = recent = 10% of P + G (bench_throughput's default).
    return 2 * int(0.1 * (P + G))


def our_batches(model, P, G, cap, hw=H200):
    """Our full and h2o batches by the CUDA backend's pool rule (docs/cuda.md)."""
    L, h, nh, f = OPT[model]
    block = L * (2 * nh * 16 * (h // nh) * 2 + nh * 16 * 8)
    workspace = 4096 * 2 * (3 * h + 4 * h + f) + 512 * VOCAB * 4 + (256 << 20)
    pool = (0.9 * hw["mem"] - params(model) * 2 - 0.6e9 - workspace) / block
    full = int(pool // math.ceil((P + G - 1) / 16))
    h2o = int((pool - 4 * math.ceil(P / 16)) // math.ceil(h2o_slots(P, G) / 16))
    return max(0, min(full, cap)), max(0, min(h2o, cap))


def estimate(system, model, P, G, n, hw=H200, policy="full"):
    """Seconds one run takes on an H200 (load included), by the model above."""
    L, h, nh, f = OPT[model]
    pl = L * (4 * h * h + 2 * h * f)
    head = 2 * h * VOCAB
    wbytes = params(model) * 2
    kv = kv_bytes_token(model)
    attn_flops = 6 * (h // nh) * nh * L * P * (P + 1) / 2  # a prompt's, both passes

    def step(slots, copies, fixed):
        return fixed + max(wbytes / hw["hbm"], n * 2 * pl / hw["gemm"]) + \
            n * head / hw["gemm"] + n * slots * kv * copies / hw["hbm"]
    if system == "ours":
        prefill = n * (P * 2 * pl / hw["gemm"] + attn_flops / hw["attn_prefill"] +
                       head / hw["gemm"])
        slots = P + G / 2 if policy == "full" else h2o_slots(P, G)
        fixed = L * 12 * hw["launch"]
        if policy == "h2o":
            fixed += n * L * nh * hw["victims_ns"] * 1e-9
        return prefill + (G - 1) * step(slots, 1, fixed)
    # The peers' prefill attention is tensor-core bmm/SDPA (at half the GEMM rate);
    # FlexGen computes the LM head at every prompt position and copies its cache
    # (a reshape of a permuted view) every step; transformers' DynamicCache grows by
    # torch.cat, a copy of the whole cache per step, and its Python runs per layer.
    prefill = n * (P * 2 * pl / hw["gemm"] + 4 * P * P * h * L / (hw["gemm"] / 2))
    if system == "flexgen":
        prefill += n * P * head / hw["gemm"]
        return prefill + (G - 1) * step(P + G / 2, 3, L * 30 * hw["launch"])
    decode = (G - 1) * max(L * hw["hf_step_cpu_s_per_layer"],
                           step(P + G / 2, 3, L * 20 * hw["launch"]))
    return 2 * prefill + decode  # generate(1) and generate(gen_len)


def load_estimate(system, model, hw=H200):
    if system == "ours":
        return 3 + params(model) * hw["dummy_ns_per_param"] * 1e-9
    if system == "flexgen":  # np.ones per tensor, then a pageable copy
        return hw["python_import_s"] + params(model) * 2 / 3e9
    return hw["python_import_s"] + 2 + params(model) * 2 / 200e9


# ---- running children ----

def now():
    return time.time()


def run_child(cmd, name, timeout, env=None):
    """
    Run cmd in its own process group, echoing its output prefixed with [name];
    stop it (SIGTERM, then SIGKILL) after timeout seconds. Returns (rc or None when
    stopped, wall seconds, output lines).
    """
    print(f"[{name}] $ {' '.join(cmd)}", flush=True)
    t0 = now()
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, errors="replace", env=env, start_new_session=True,
                             cwd=REPO)
    except OSError as e:
        print(f"[{name}] cannot start: {e}", flush=True)
        return 127, 0.0, [f"cannot start: {e}"]
    lines, q = [], queue.Queue()

    def reader():
        for line in p.stdout:
            q.put(line.rstrip("\n"))
        q.put(None)
    threading.Thread(target=reader, daemon=True).start()
    stopped, done = False, False
    while not done:
        left = t0 + timeout - now()
        try:
            line = q.get(timeout=max(0.05, min(left, 1.0)))
        except queue.Empty:
            line = ""
        if line is None:
            done = True
        elif line:
            lines.append(line)
            print(f"[{name}] {line}", flush=True)
        if not done and now() > t0 + timeout and not stopped:
            print(f"[{name}] stopped after {timeout:.0f} s (its time limit)", flush=True)
            stopped = True
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    p.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    pass
            timeout = float("inf")  # drain what is left of the output
    rc = p.wait()
    return (None if stopped else rc), now() - t0, lines


def json_lines(lines, key):
    out = []
    for l in lines:
        if l.startswith("{") and key in l:
            try:
                out.append(json.loads(l))
            except ValueError:
                pass
    return out


def failure_reason(rc, wall, lines, prefix):
    if rc is None:
        return f"stopped at its time limit ({wall:.0f} s)"
    for l in reversed(lines):
        if l.startswith(prefix) or "Error" in l or "error" in l:
            return l.strip()[:200]
    return f"exit status {rc}" + (f": {lines[-1].strip()[:160]}" if lines else "")


# ---- results ----

class Results:
    def __init__(self, out_dir, header):
        self.rows = []
        self.jsonl = os.path.join(out_dir, "bench.jsonl")
        self.table = os.path.join(out_dir, "bench-table.txt")
        self.header = header
        with open(self.jsonl, "w") as f:
            f.write(json.dumps(header) + "\n")

    def add(self, row):
        self.rows.append(row)
        with open(self.jsonl, "a") as f:
            f.write(json.dumps(row) + "\n")
        self.write_table()

    def ours(self, model, P, G, policy):
        for r in self.rows:
            if (r["system"], r.get("policy"), r["model"], r["prompt_len"], r["gen_len"]) == \
                    ("ours", policy, model, P, G) and r["status"] == "ok":
                return r
        return None

    def render(self):
        h = self.header
        lines = [f"FlexGen's workload (greedy, EOS ignored; total throughput = n x gen_len / "
                 f"(prefill + decode), FlexGen's metric) on {h['device']}, {h['date']}, "
                 f"h2oserve {h['commit']}. Batch: each system's largest that fits, ours "
                 f"at most {h['max_num_seqs']}, the peers at most our full-cache batch.",
                 "",
                 "| model | prompt + gen | system | weights | batch | prefill s | decode s | "
                 "total tok/s | h2o / this | full / this | wall s" +
                 (" (estimate)" if h["estimates"] else "") + " |",
                 "|---|---|---|---|---|---|---|---|---|---|---|"]
        def wall(r):
            w = f"{r.get('wall_s', 0):.0f}"
            return w + (f" ({r['est_s']:.0f})" if h["estimates"] else "")
        for r in self.rows:
            name = r["label"]
            shape = f"{r['prompt_len']} + {r['gen_len']}"
            if r["status"] != "ok":
                what = "FAILED" if r["status"] == "failed" else "SKIPPED"
                lines.append(f"| {r['model']} | {shape} | {name} | {r.get('weights', '')} | "
                             f"{what}: {r['reason']} | | | | | | {wall(r)} |")
                continue
            h2o = self.ours(r["model"], r["prompt_len"], r["gen_len"], "h2o")
            full = self.ours(r["model"], r["prompt_len"], r["gen_len"], "full")
            t = r["total_throughput"]

            def ratio(x):
                return f"{x['total_throughput'] / t:.2f}x" if x and t else ""
            lines.append(f"| {r['model']} | {shape} | {name} | {r['weights']} | "
                         f"{r['batch_note']} | {r['prefill_s']:.2f} | {r['decode_s']:.2f} | "
                         f"{t:.1f} | {ratio(h2o)} | {ratio(full)} | {wall(r)} |")
        return "\n".join(lines) + "\n"

    def write_table(self):
        with open(self.table, "w") as f:
            f.write(self.render())


def git_commit():
    try:
        r = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"],
                           capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or "unknown (no git here)"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (no git here)"


def gpu_name():
    if not shutil.which("nvidia-smi"):
        return None
    r = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                       capture_output=True, text=True)
    return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else None


# ---- the plan ----

def parse_shape(s):
    p, g = s.split("+")
    return int(p), int(g)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--models", default="opt-6.7b,opt-30b")
    ap.add_argument("--shapes", default="512+32,512+512")
    ap.add_argument("--max-num-seqs", type=int, default=512)
    ap.add_argument("--peers", default="flexgen,hf")
    ap.add_argument("--deadline", type=float, help="seconds since the epoch")
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--peer-python", default=sys.executable)
    ap.add_argument("--flexgen-cpu-shim", action="store_true")
    ap.add_argument("--plan-only", action="store_true", help="print the plan and stop")
    a = ap.parse_args(argv)
    a.build = os.path.abspath(a.build)
    t_start = now()
    deadline = a.deadline or t_start + a.seconds
    models = [m for m in a.models.split(",") if m]
    shapes = [parse_shape(s) for s in a.shapes.split(",") if s]
    peers = [p for p in a.peers.split(",") if p]
    cuda = a.device == "cuda"
    os.makedirs(a.out, exist_ok=True)
    header = {"bench": "gpu", "device": (gpu_name() or "a CUDA device") if cuda else "the CPU "
              "(dry run)", "date": datetime.date.today().isoformat(), "commit": git_commit(),
              "max_num_seqs": a.max_num_seqs, "deadline_s": round(deadline - t_start),
              "models": models, "shapes": [f"{p}+{g}" for p, g in shapes], "peers": peers,
              "estimates": cuda}
    res = Results(a.out, header)

    # The plan, in order, with each run's estimate (H200 model; none on the CPU).
    plan = []
    for model in models:
        for P, G in shapes:
            nf, nh = our_batches(model, P, G, a.max_num_seqs)
            est = load_estimate("ours", model) + estimate("ours", model, P, G, nf) + \
                estimate("ours", model, P, G, nh, policy="h2o")
            plan.append(("ours", model, P, G, est))
            for peer in peers:
                plan.append((peer, model, P, G, load_estimate(peer, model) +
                             estimate(peer, model, P, G, nf)))
    print(f"gpu_bench: {len(plan)} runs, deadline in {deadline - now():.0f} s; "
          f"estimates{' (H200 model)' if cuda else ' (H200 model, meaningless on the CPU)'}:",
          flush=True)
    total = 0
    for system, model, P, G, est in plan:
        total += est
        print(f"gpu_bench:   {NAMES[system]:13s} {model:9s} {P} + {G:<5d} ~{est:4.0f} s "
              f"(cumulative ~{total:4.0f} s)", flush=True)
    if a.plan_only:
        return 0

    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTORCH_ALLOC_CONF="expandable_segments:True")
    bench = os.path.join(a.build, "bench", "bench_throughput")
    ours_ok_first = False
    for i, (system, model, P, G, est) in enumerate(plan):
        left = deadline - now()
        name = f"{system} {model} {P}+{G}"
        need = max(0.75 * est, 15) if cuda else 5
        base = {"system": system, "model": model, "prompt_len": P, "gen_len": G,
                "est_s": round(est, 1)}
        labels = {"full": "h2oserve full", "h2o": "h2oserve h2o 20%"}
        if left < need:
            reason = f"deadline ({left:.0f} s left, needs ~{est:.0f} s)"
            print(f"[{name}] skipped: {reason}", flush=True)
            for pol in (["full", "h2o"] if system == "ours" else [None]):
                res.add(dict(base, policy=pol, status="skipped", reason=reason,
                             label=labels.get(pol, NAMES[system])))
            continue
        limit = max(5, left - 5)
        print(f"gpu_bench: [{now() - t_start:.0f} s] {name}: estimate ~{est:.0f} s, "
              f"time limit {limit:.0f} s", flush=True)
        if system == "ours":
            cmd = [bench, "--device", a.device, "--model", f"dummy:{model}", "--batch", "max",
                   "--max-num-seqs", str(a.max_num_seqs), "--prompt-len", str(P),
                   "--gen-len", str(G), "--kv-policy", "full,h2o"]
            rc, wall, lines = run_child(cmd, name, limit, env)
            got = {j["kv_policy"]: j for j in json_lines(lines, '"bench": "throughput"')}
            missing = [pol for pol in ("full", "h2o") if pol not in got]
            retried = ""
            # Out of GPU memory (the workspace grew past the pool's reserve): once more,
            # for the policies still missing, with a smaller share of the GPU.
            if missing and "out of memory" in failure_reason(
                    rc, wall, lines, "bench_throughput:").lower() and \
                    deadline - now() >= need:
                retried = " (after an out-of-memory: --gpu-memory-utilization 0.8)"
                print(f"[{name}] out of memory: {','.join(missing)} once more at "
                      "--gpu-memory-utilization 0.8", flush=True)
                cmd[cmd.index("--kv-policy") + 1] = ",".join(missing)
                rc, wall2, more = run_child(cmd + ["--gpu-memory-utilization", "0.8"], name,
                                            max(5, deadline - now() - 5), env)
                wall += wall2
                lines += more
                got.update({j["kv_policy"]: dict(j, retried=True)
                            for j in json_lines(more, '"bench": "throughput"')})
            for pol in ("full", "h2o"):
                j = got.get(pol)
                row = dict(base, policy=pol, label=labels[pol], wall_s=round(wall, 1),
                           weights=f"dummy:{model} (splitmix64 N(0, 0.02)), "
                                   f"{j['dtype'] if j else 'fp16'}")
                if not j:
                    res.add(dict(row, status="failed", reason=failure_reason(
                        rc, wall, lines, "bench_throughput:") + retried))
                    continue
                note = f"{j['batch']}"
                if j["batch_fit"] > j["batch"]:
                    note += f" (cap; {j['batch_fit']} fit)"
                else:
                    note += " (all that fit)"
                if j.get("retried"):
                    note += retried
                res.add(dict(row, status="ok", batch=j["batch"], batch_note=note,
                             prefill_s=j["prefill_latency_s"], decode_s=j["decode_latency_s"],
                             total_throughput=j["total_throughput"], raw=j))
            ours_ok_first |= i == 0 and len(got) == 2
            continue
        # A peer: at most our full batch at this shape (or the cap if ours failed).
        full = res.ours(model, P, G, "full")
        cap = full["batch"] if full else a.max_num_seqs
        cmd = [a.peer_python, os.path.join(HERE, "gpu_peers.py"), system, "--model", model,
               "--batch", "fit", "--max-batch", str(cap), "--prompt-len", str(P),
               "--gen-len", str(G), "--device", a.device,
               "--work", os.path.join(a.build, "gpu-peers", f"{system}-{model}-{P}-{G}")]
        if system == "flexgen" and a.flexgen_cpu_shim:
            cmd.append("--cpu-shim")
        rc, wall, lines = run_child(cmd, name, limit, env)
        js = json_lines(lines, '"system"')
        j = js[-1] if js else None
        retried = ""
        # One retry below a batch that ran out of memory (the peers' fit is a model of
        # their allocations, not a measurement), if the deadline leaves time for it.
        if j and "out of memory" in j.get("error", "").lower() and j.get("batch", 0) > 1 and \
                deadline - now() >= need:
            smaller = max(1, int(j["batch"] * 0.7))
            retried = f" after an out-of-memory at batch {j['batch']}"
            print(f"[{name}] out of memory at batch {j['batch']}: once more at most {smaller}",
                  flush=True)
            cmd[cmd.index("--max-batch") + 1] = str(smaller)
            rc, wall2, lines = run_child(cmd, name, max(5, deadline - now() - 5), env)
            wall += wall2
            js = json_lines(lines, '"system"')
            j = js[-1] if js else None
        row = dict(base, policy=None, label=NAMES[system] + (f" {j['version']}" if j and
                   j.get("version") else ""), wall_s=round(wall, 1),
                   weights=(j or {}).get("weights", ""))
        if not j or "error" in j or rc != 0:
            reason = j["error"] if j and "error" in j else \
                failure_reason(rc, wall, lines, "gpu_peers.py:")
            res.add(dict(row, status="failed", reason=reason + retried, raw=j))
            continue
        note = f"{j['batch']}"
        if j["batch_rule"].startswith("fit"):
            note += " (our full's)" if j["batch"] == cap else " (all that fit)"
        note += retried
        res.add(dict(row, status="ok", batch=j["batch"], batch_note=note,
                     prefill_s=j["prefill_s"], decode_s=j["decode_s"],
                     total_throughput=j["total_throughput"], raw=j))

    table = res.render()
    print("gpu_bench: the table (also " + res.table + "):\n" + table, flush=True)
    print(f"gpu_bench: done in {now() - t_start:.0f} s", flush=True)
    return 0 if ours_ok_first else 1


if __name__ == "__main__":
    sys.exit(main())
