#!/usr/bin/env python3
"""
window_ablation.py - a sliding-window reference for `h2oserve bench quality
--kv-policy local`, and which layers need the long range.

A dense PyTorch forward (train_default.py's OPT, written apart from the engine) over
the same segments the benchmark scores: the text as one stream without BOS, segments
of --prompt + --gen tokens, the last --gen scored. With the attention of layer i
masked to the --window newest keys (the query's own included), every token's hidden
state is what the engine's `local` policy with R = --window computes (the prompt is
shorter than the window, so it is attended in full either way), so "window in every
layer" must equal the benchmark's local perplexity and "none" its full one. Masking
one layer at a time shows where the model needs more than the window.
Usage: window_ablation.py MODEL_DIR TEXT [--segments 24] [--prompt 64] [--gen 448]
       [--window 103]          (runs in train.sh's venv)
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attn_stats  # noqa: E402
import train_default as td  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    p.add_argument("model_dir")
    p.add_argument("text")
    p.add_argument("--segments", type=int, default=24)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--gen", type=int, default=448)
    p.add_argument("--window", type=int, default=103)
    a = p.parse_args()
    torch.set_num_threads(os.cpu_count())
    ids = attn_stats.encode(a.model_dir, a.text)
    model, c = attn_stats.load_model(a.model_dir)
    T, P, L = a.prompt + a.gen, a.prompt, c["num_hidden_layers"]
    if a.prompt >= a.window:
        sys.exit("window_ablation.py: the prompt must be shorter than the window")
    i = torch.arange(T)
    full = torch.full((T, T), float("-inf")).triu(1)
    win = full.masked_fill(i[None, :] <= i[:, None] - a.window, float("-inf"))
    masks = [full] * L
    layer_forward = td.OPTLayer.forward
    for li, layer in enumerate(model.decoder.layers):
        layer.index = li
    td.OPTLayer.forward = lambda self, x, mask, budget=None: layer_forward(
        self, x, masks[self.index])

    def perplexity():
        nll, n = 0.0, 0
        for s in range(min(a.segments, len(ids) // T)):
            x = torch.tensor(ids[s * T:(s + 1) * T])[None]
            with torch.no_grad():
                logits = model(x)
            nll += F.cross_entropy(logits[0, P - 1:T - 1], x[0, P:], reduction="sum").item()
            n += T - P
        return math.exp(nll / n)

    print(f"model {a.model_dir}: {a.segments} segments of {P} + {a.gen}, window {a.window}")
    base = perplexity()
    print(f"{'window in':<16} {'perplexity':>11} {'vs none':>8}")
    print(f"{'none (full)':<16} {base:>11.4f} {1:>7.3f}x")
    for li in range(L):
        masks = [win if k == li else full for k in range(L)]
        v = perplexity()
        print(f"{'layer ' + str(li):<16} {v:>11.4f} {v / base:>7.3f}x")
    masks = [win] * L
    v = perplexity()
    print(f"{'every layer':<16} {v:>11.4f} {v / base:>7.3f}x   (= bench quality --kv-policy local)")


if __name__ == "__main__":
    main()
