#!/usr/bin/env python3
"""
attn_stats.py - where a model's attention mass goes, to explain a perplexity sweep
(`h2oserve bench quality --sweep`): how much of each query's attention falls on the
first tokens (the "attention sink"), on the recent window that `local` keeps, and on
the set that `h2o` keeps (the recent half of the budget plus the heavy hitters).

The text is one token stream without BOS, cut into windows of --len tokens, as the
quality benchmark cuts it; queries from position --prompt on are measured (the
decode steps of that benchmark). For a total budget B = --budget x --len:
  local  keeps the B newest keys: mass on keys k > t - B;
  h2o    keeps the B/2 newest keys plus the B/2 older keys with the largest attention
         accumulated by the queries before t (H2O's score). This is the heavy-hitter
         set without the effect of earlier evictions on later scores, so it slightly
         flatters h2o; it is a statistic, not the policy (the policy is measured by
         the benchmark itself).
Copying ("induction"): for the query at t, the keys k whose previous token equals
token t (x[k-1] == x[t]): where an earlier occurrence of the current token was
followed, which a model copies from. Reported: the share of queries with such a key
only beyond the local window (local cannot copy there at all), the attention mass on
copy keys beyond the window, and the share of that mass the h2o set keeps.
Usage: attn_stats.py MODEL_DIR TEXT [--windows 16] [--len 512] [--prompt 64]
       [--budget 0.2] [--sink 4]
Runs with the venv of train.sh (torch from Debian, tokenizers).
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_default as td  # noqa: E402  (the model definition)


def load_model(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    model = td.OPT(c)
    state = {k[len("model."):]: v for k, v in
             td.load_safetensors(os.path.join(model_dir, "model.safetensors")).items()}
    model.load_state_dict(state)
    return model.eval(), c


def encode(model_dir, text_path):
    """The text as one token stream without BOS, as `bench quality` reads it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    tok = Tokenizer(models.BPE.from_file(os.path.join(model_dir, "vocab.json"),
                                         os.path.join(model_dir, "merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    with open(text_path, encoding="utf-8", errors="replace") as f:
        return tok.encode(f.read()).ids


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    p.add_argument("model_dir")
    p.add_argument("text")
    p.add_argument("--windows", type=int, default=16)
    p.add_argument("--len", type=int, default=512)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--budget", type=float, default=0.2)
    p.add_argument("--sink", type=int, default=4)
    a = p.parse_args()
    torch.set_num_threads(os.cpu_count())

    ids = encode(a.model_dir, a.text)
    model, c = load_model(a.model_dir)

    # Record every layer's attention probabilities [n_head, T, T].
    probs = []

    def attend(self, x, mask, budget=None):
        B, T, H = x.shape
        q = (self.q_proj(x) * self.head_dim ** -0.5).view(B, T, self.n_head, -1).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_head, -1).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_head, -1).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-1, -2) + mask, dim=-1)
        probs.append(att[0])
        return self.out_proj((att @ v).transpose(1, 2).reshape(B, T, H))

    td.OPTAttention.forward = attend

    T, P = a.len, a.prompt
    B = max(2, round(a.budget * T))
    R, Hh = B - B // 2, B // 2
    L, NH = c["num_hidden_layers"], c["num_attention_heads"]
    sums = np.zeros((L, 3))  # sink, local, h2o
    far = np.zeros((L, 2))   # copy-key mass beyond the window: all, kept by h2o
    n_q = n_far_only = n_any = 0
    t_idx = torch.arange(T)
    n_win = min(a.windows, len(ids) // T)
    if n_win == 0:
        sys.exit(f"attn_stats.py: the text has {len(ids)} tokens, fewer than one window")
    for w in range(n_win):
        x = torch.tensor(ids[w * T:(w + 1) * T])[None]
        xs = x[0]
        prev = torch.cat([torch.tensor([-1]), xs[:-1]])
        copy = (prev[None, :] == xs[:, None]) & (t_idx[None, :] <= t_idx[:, None])  # [T, T]
        copy = copy[P:]
        beyond = t_idx[None, :] <= t_idx[P:, None] - B
        has_far, has_near = (copy & beyond).any(-1), (copy & ~beyond).any(-1)
        n_far_only += int((has_far & ~has_near).sum())
        n_any += int(copy.any(-1).sum())
        probs.clear()
        with torch.no_grad():
            model(x)
        for li, att in enumerate(probs):  # att: [NH, T, T], rows = queries
            q = slice(P, T)
            sink = att[:, q, :a.sink].sum(-1)
            keys = t_idx[None, :]
            tq = t_idx[q][:, None]
            local = (att[:, q, :] * (keys > tq - B)).sum(-1)
            # H2O's score of key k at query t: attention it got from queries < t.
            acc = torch.cumsum(att, dim=1) - att  # exclusive prefix over queries
            acc = acc[:, q, :]
            recent = keys > tq - R
            cand = (keys <= tq - R) & (keys <= tq)
            score = torch.where(cand, acc, torch.full_like(acc, -1.0))
            k_heavy = min(Hh, T)
            top = score.topk(k_heavy, dim=-1).indices
            heavy_mass = torch.gather(att[:, q, :], -1, top)
            heavy_ok = torch.gather(cand.expand_as(acc), -1, top)
            h2o = (att[:, q, :] * recent).sum(-1) + (heavy_mass * heavy_ok).sum(-1)
            sums[li] += [sink.sum().item(), local.sum().item(), h2o.sum().item()]
            far_keys = (copy & beyond)[None].float()
            kept = torch.zeros_like(att[:, q, :]).scatter(-1, top, heavy_ok.float())
            far[li] += [(att[:, q, :] * far_keys).sum().item(),
                        (att[:, q, :] * far_keys * kept).sum().item()]
        n_q += (T - P) * NH
    sums /= n_q
    print(f"model {a.model_dir}: {n_win} windows of {T} tokens, queries {P}..{T - 1}, "
          f"budget {B} ({a.budget:.0%}): h2o = {Hh} heavy + {R} recent, local = {B} recent")
    print(f"{'layer':>5} {'first ' + str(a.sink):>8} {'local':>8} {'h2o':>8}   "
          "(share of attention mass on the kept keys)")
    for li in range(L):
        print(f"{li:>5} {sums[li, 0]:>8.3f} {sums[li, 1]:>8.3f} {sums[li, 2]:>8.3f}")
    m = sums.mean(0)
    print(f"{'mean':>5} {m[0]:>8.3f} {m[1]:>8.3f} {m[2]:>8.3f}")
    n_queries = n_win * (T - P)
    print(f"copying: {n_any / n_queries:.1%} of the queries have a copy key, "
          f"{n_far_only / n_queries:.1%} only beyond the {B}-token window")
    print(f"{'layer':>5} {'mass on far copy keys':>22} {'of it kept by h2o':>18}")
    for li in range(L):
        share = far[li, 1] / far[li, 0] if far[li, 0] else 0.0
        print(f"{li:>5} {far[li, 0] / n_q:>22.3f} {share:>18.1%}")
    print(json.dumps({"model": a.model_dir, "windows": n_win, "len": T, "prompt": P,
                      "budget": B, "sink_tokens": a.sink,
                      "copy_queries": n_any / n_queries, "far_only_copy_queries":
                      n_far_only / n_queries,
                      "per_layer": [{"layer": i, "sink": round(s[0], 4), "local": round(s[1], 4),
                                     "h2o": round(s[2], 4),
                                     "far_copy_mass": round(far[i, 0] / n_q, 4),
                                     "far_copy_kept_by_h2o": round(far[i, 1] / max(far[i, 0], 1e-12), 4)}
                                    for i, s in enumerate(sums)]}))


if __name__ == "__main__":
    main()
