#!/usr/bin/env python3
"""
train_default.py - train h2oserve's built-in `default` model: a small OPT on the
English text of Debian packages, with its own byte-level BPE.

Steps: train a GPT-2 style byte-level BPE (Hugging Face tokenizers) on the corpus
that corpus.sh built; tokenize the corpus, each document opened by `</s>` as OPT does;
train an OPT decoder in plain PyTorch on random 512-token windows for a wall-clock
budget; measure held-out perplexity; write the Hugging Face layout:

  OUT/config.json         OPTForCausalLM configuration (fp16)
  OUT/model.safetensors   fp16 weights with Hugging Face's OPT names, lm_head tied
  OUT/vocab.json          GPT-2 byte-level vocabulary: <s> 0, <pad> 1, </s> 2, <unk> 3
  OUT/merges.txt          its merges, "#version: 0.2" first, as GPT-2's
  OUT/tokenizer_config.json  for AutoTokenizer (GPT2Tokenizer, OPT's specials)
  OUT/heldout.txt         the held-out text the perplexity is measured on
  OUT/train_log.json      data, sizes, steps, tokens, losses, perplexity, time

Held-out perplexity, so that other implementations can reproduce it: the token stream
is `</s>` + encode(heldout.txt); windows of 512 tokens start every 511 tokens, so every
token but the first is predicted exactly once, from up to 511 tokens of context; the
perplexity is exp(mean negative log-likelihood) over those predictions.

Run by train.sh (which builds the corpus and the venv); by hand:
  python train_default.py --corpus build-model/corpus [--minutes 60] [--out models/default]
  python train_default.py --corpus build-model/corpus-smoke --smoke   (about 2 minutes)
Needs Debian's python3-torch (1.13) and tokenizers (requirements.txt).
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

RS = "\x1e"  # corpus.py's document separator
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # ids 0..3, as in OPT's vocabulary
BOS = EOS = 2
PAD = 1
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, flush=True)


# ---- the tokenizer ----


def train_tokenizer(docs, vocab_size, out_dir):
    """A byte-level BPE like GPT-2's, written as OUT/vocab.json + OUT/merges.txt."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    # GPT-2's regex split, no prefix space: what engine/tokenizer_load.c implements.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(docs, trainer)
    tok.model.save(out_dir)  # vocab.json, merges.txt (with its "#version: 0.2" line)
    # Reload from the files, so that what trains the model is what the server reads.
    tok = Tokenizer(models.BPE.from_file(os.path.join(out_dir, "vocab.json"),
                                         os.path.join(out_dir, "merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    for i, s in enumerate(SPECIALS):
        if tok.token_to_id(s) != i:
            sys.exit(f"train_default.py: {s} has id {tok.token_to_id(s)}, expected {i}")
    return tok


def write_tokenizer_config(out_dir, max_pos):
    # OPT's published tokenizer_config.json: GPT2Tokenizer that prepends </s>.
    cfg = {"tokenizer_class": "GPT2Tokenizer", "add_bos_token": True,
           "add_prefix_space": False, "bos_token": "</s>", "eos_token": "</s>",
           "unk_token": "</s>", "pad_token": "<pad>", "errors": "replace",
           "model_max_length": max_pos}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def encode_stream(tok, docs):
    """One int32 tensor: every document as </s> + its tokens."""
    ids = []
    for enc in tok.encode_batch(docs):
        ids.append(BOS)
        ids.extend(enc.ids)
    return torch.tensor(ids, dtype=torch.int32)


# ---- the model: Hugging Face's OPTForCausalLM, pre-LN, in plain PyTorch ----


class OPTAttention(nn.Module):
    def __init__(self, hidden, n_head):
        super().__init__()
        self.n_head, self.head_dim = n_head, hidden // n_head
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, hidden)

    def forward(self, x, mask, budget=None):
        # x: [B, T, hidden]; q/k/v: [B, n_head, T, head_dim]; mask: [T, T] additive
        B, T, H = x.shape
        q = (self.q_proj(x) * self.head_dim ** -0.5).view(B, T, self.n_head, -1).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_head, -1).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_head, -1).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) + mask  # [B, n_head, T, T]
        if budget is not None:
            sel, masks = h2o_mask(scores.detach(), *budget)
            scores = scores.index_add(0, sel, masks.to(scores.dtype))
        att = torch.softmax(scores, dim=-1)
        return self.out_proj((att @ v).transpose(1, 2).reshape(B, T, H))


def h2o_mask(scores, heavy, recent, block=16):
    """The additive mask of the keys H2O keeps, for training under eviction.

    scores: [B, n_head, T, T] causal attention logits; heavy, recent: [B] budgets per
    window (heavy = 0: the full cache). Returns the windows under a budget, [n], and
    their additive masks, [n, n_head, T, T]. Query t sees its `recent` newest keys and the
    `heavy` older ones with the most attention accumulated under full attention by the
    queries before its block of `block` queries: H2O's kept set without its eviction
    history, chosen once a block (choosing it for every query costs a top-k over every
    row, as much as the rest of the step).
    """
    B, n_head, T, _ = scores.shape
    sel = (heavy > 0).nonzero().flatten()
    if len(sel) == 0:
        return sel, scores.new_zeros(0, n_head, T, T)
    n, nblk = len(sel), (T + block - 1) // block
    att = F.pad(torch.softmax(scores[sel].float(), dim=-1), (0, 0, 0, nblk * block - T))
    # Key j's mass from each block of queries, then from all the blocks before each one.
    mass = att.view(n, n_head, nblk, block, T).sum(dim=3).cumsum(dim=2)
    prev = torch.cat([torch.zeros(n, n_head, 1, T), mass[:, :, :-1]], dim=2)
    r = recent[sel].view(n, 1, 1, 1)
    t = torch.arange(T)
    last = torch.clamp(t[::block] + block - 1, max=T - 1)  # each block's last query
    older_blk = (last.view(1, 1, nblk, 1) - t.view(1, 1, 1, T)) >= r  # [n, 1, nblk, T]
    kmax = int(heavy.max())
    idx = prev.masked_fill(~older_blk, -1.0).topk(min(kmax, T), dim=-1).indices
    ranked = (torch.arange(idx.shape[-1]).view(1, -1) < heavy[sel].view(n, 1)).view(n, 1, 1, -1)
    heavy_blk = torch.zeros(n, n_head, nblk, T, dtype=torch.bool).scatter(
        -1, idx, ranked.expand_as(idx))
    age = (t[:, None] - t[None, :]).view(1, 1, T, T)  # query t, key j
    keep = ((age >= 0) & (age < r)) | (heavy_blk.repeat_interleave(block, dim=2)[:, :, :T] & (age >= r))
    return sel, torch.zeros(()).masked_fill(~keep, float("-inf"))


class OPTLayer(nn.Module):
    def __init__(self, hidden, n_head, ffn):
        super().__init__()
        self.self_attn = OPTAttention(hidden, n_head)
        self.self_attn_layer_norm = nn.LayerNorm(hidden, eps=1e-5)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)
        self.final_layer_norm = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x, mask, budget=None):
        x = x + self.self_attn(self.self_attn_layer_norm(x), mask, budget)
        return x + self.fc2(F.relu(self.fc1(self.final_layer_norm(x))))


class OPTDecoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        # OPT's learned positions are offset by 2: position p reads row p + 2.
        self.embed_positions = nn.Embedding(c["max_position_embeddings"] + 2, c["hidden_size"])
        self.layers = nn.ModuleList(
            OPTLayer(c["hidden_size"], c["num_attention_heads"], c["ffn_dim"])
            for _ in range(c["num_hidden_layers"]))
        self.final_layer_norm = nn.LayerNorm(c["hidden_size"], eps=1e-5)


class OPT(nn.Module):
    """Parameter names are Hugging Face's without the leading "model."."""

    def __init__(self, c):
        super().__init__()
        self.decoder = OPTDecoder(c)
        std = 0.02
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "layer_norm" in name:
                nn.init.ones_(p)
            else:
                # GPT-2's scaling of the projections that feed the residual stream.
                scale = (2 * c["num_hidden_layers"]) ** -0.5 if (
                    "out_proj" in name or "fc2" in name) else 1.0
                nn.init.normal_(p, std=std * scale)

    def forward(self, ids, budget=None):
        # ids: [B, T] -> logits: [B, T, vocab]; budget: (heavy [B], recent [B]) or None
        d = self.decoder
        T = ids.shape[1]
        pos = torch.arange(T, device=ids.device) + 2
        x = d.embed_tokens(ids) + d.embed_positions(pos)
        mask = torch.full((T, T), float("-inf")).triu(1)
        for layer in d.layers:
            x = layer(x, mask, budget)
        return d.final_layer_norm(x) @ d.embed_tokens.weight.t()  # tied lm_head


# ---- writing the checkpoint ----


def save_safetensors(path, tensors):
    """The safetensors format by hand: an 8-byte little-endian header length, a JSON
    header of name -> dtype, shape, byte range, then the raw little-endian data."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float16).contiguous()
        b = t.numpy().tobytes()
        header[name] = {"dtype": "F16", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    """save_safetensors' files (F16 or F32) back, as fp32 tensors by name."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    dtypes = {"F16": torch.float16, "F32": torch.float32}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=dtypes[e["dtype"]])
        out[name] = t.view(e["shape"]).float()
    return out


def hf_config(a, vocab_size):
    return {
        "_name_or_path": "h2oserve-default",
        "architectures": ["OPTForCausalLM"],
        "model_type": "opt",
        "vocab_size": vocab_size,
        "hidden_size": a.hidden,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "ffn_dim": a.ffn,
        "max_position_embeddings": a.max_pos,
        "word_embed_proj_dim": a.hidden,
        "do_layer_norm_before": True,
        "activation_function": "relu",
        "enable_bias": True,
        "layer_norm_elementwise_affine": True,
        "tie_word_embeddings": True,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "prefix": "</s>",
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "layerdrop": 0.0,
        "init_std": 0.02,
        "use_cache": True,
        "torch_dtype": "float16",
    }


# ---- evaluation ----


@torch.no_grad()
def heldout_perplexity(model, ids, seq, max_windows=0):
    """exp(mean NLL) over windows of `seq` tokens starting every seq - 1 tokens."""
    model.eval()
    nll, n, w = 0.0, 0, 0
    for start in range(0, len(ids) - 1, seq - 1):
        x = ids[start:start + seq].long()[None]
        if x.shape[1] < 2:
            break
        logits = model(x[:, :-1])
        nll += F.cross_entropy(logits[0].float(), x[0, 1:], reduction="sum").item()
        n += x.shape[1] - 1
        w += 1
        if max_windows and w >= max_windows:
            break
    model.train()
    return math.exp(nll / n), n


def train_budget(a, gen):
    """(heavy [batch], recent [batch]) for one step: a share --h2o-windows of the windows
    keeps an H2O budget of f * seq tokens, half heavy and half recent, f uniform in
    0.1..0.5; the rest see the full cache. The model learns to do without what H2O
    evicts, as quantization-aware training teaches a model its rounding."""
    evict = torch.rand(a.batch, generator=gen) < a.h2o_windows
    half = torch.ceil((0.1 + 0.4 * torch.rand(a.batch, generator=gen)) * a.seq / 2).long()
    heavy = torch.where(evict, half, torch.zeros_like(half))
    recent = torch.where(evict, half, torch.full_like(half, a.seq))
    return heavy, recent


# ---- main ----


def cpu_has_bf16():
    """oneDNN runs bf16 matmuls fast with AVX512-BF16 or AMX (and emulates them with
    plain AVX512BW, still far faster than a generic fp32 BLAS)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next(l for l in f if l.startswith("flags")).split())
    except (OSError, StopIteration):
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16", "avx512bw"})


def main():
    ap = argparse.ArgumentParser(description="train the built-in default OPT model")
    ap.add_argument("--corpus", required=True, help="corpus.sh's output directory")
    ap.add_argument("--out", default=None,
                    help="output folder (default models/default; --smoke: a temp dir)")
    ap.add_argument("--minutes", type=float, default=60, help="training budget (default 60)")
    ap.add_argument("--smoke", action="store_true",
                    help="2 MB of corpus, 1.5 minutes, 16 held-out windows, temp output")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--max-pos", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=512, help="training window (tokens)")
    ap.add_argument("--batch", type=int, default=8, help="windows per step")
    ap.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    ap.add_argument("--warmup", type=int, default=40, help="warmup steps")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=["auto", "bf16", "fp32"], default="auto",
                    help="matmul precision while training (auto: bf16 where the CPU has "
                         "it); weights and optimizer state stay fp32")
    ap.add_argument("--h2o-windows", type=float, default=0.5,
                    help="share of training windows that see only H2O's kept set, with a "
                         "total budget drawn from 10..50%% of the window (default 0.5)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--eval-windows", type=int, default=0, help="0: all of heldout.txt")
    a = ap.parse_args()
    if a.smoke:
        a.minutes = min(a.minutes, 1.5)
        a.warmup = min(a.warmup, 10)
        a.eval_windows = a.eval_windows or 16
    out = a.out or (tempfile.mkdtemp(prefix="h2o-default-smoke-") if a.smoke
                    else os.path.join(ROOT, "models", "default"))
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    t_start = time.time()

    with open(os.path.join(a.corpus, "train.txt"), encoding="utf-8") as f:
        text = f.read(2_000_000 if a.smoke else -1)
    docs = [d for d in text.split(RS) if d.strip()]
    del text
    heldout_src = os.path.join(a.corpus, "heldout.txt")
    heldout_dst = os.path.join(out, "heldout.txt")
    if os.path.abspath(heldout_src) != os.path.abspath(heldout_dst):
        shutil.copyfile(heldout_src, heldout_dst)
    with open(heldout_dst, encoding="utf-8") as f:
        heldout_text = f.read()
    with open(os.path.join(a.corpus, "corpus.json")) as f:
        corpus_info = json.load(f)
    log(f"corpus: {len(docs)} documents, {sum(map(len, docs)) / 1e6:.1f} M characters")

    tok = train_tokenizer(docs, a.vocab, out)
    vocab_size = tok.get_vocab_size()
    write_tokenizer_config(out, a.max_pos)
    stream = encode_stream(tok, docs)
    heldout = torch.tensor([BOS] + tok.encode(heldout_text).ids, dtype=torch.int32)
    log(f"tokenizer: {vocab_size} tokens; train {len(stream)} tokens "
        f"({sum(map(len, docs)) / len(stream):.2f} characters/token), "
        f"held-out {len(heldout)} tokens; {time.time() - t_start:.0f} s")
    del docs

    config = hf_config(a, vocab_size)
    model = OPT(config)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {a.layers} layers, hidden {a.hidden}, {a.heads} heads, ffn {a.ffn}, "
        f"{n_params / 1e6:.2f} M parameters ({2 * n_params / 2**20:.1f} MiB fp16)")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)

    # Debian's torch does fp32 matmuls with the system BLAS (generic, netlib by default:
    # a few GFLOPS), but bf16 ones with oneDNN, which on a CPU with AVX512-BF16 is about
    # a hundred times faster. Autocast keeps fp32 weights, optimizer and reductions.
    if a.dtype == "auto":
        a.dtype = "bf16" if cpu_has_bf16() else "fp32"
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16")
    log(f"training matmuls in {a.dtype}")
    gen = torch.Generator().manual_seed(a.seed)
    budget = a.minutes * 60
    t0 = time.time()
    step, tokens, losses, ema, last_log = 0, 0, [], None, t0
    while True:
        elapsed = time.time() - t0
        if elapsed >= budget:
            break
        # Warmup by steps, then a cosine over the wall-clock budget down to lr / 10.
        frac = min(1.0, elapsed / budget)
        lr = a.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * frac)))
        lr *= min(1.0, (step + 1) / a.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(stream) - a.seq - 1, (a.batch,), generator=gen)
        batch = torch.stack([stream[s:s + a.seq + 1] for s in starts]).long()
        with autocast:
            logits = model(batch[:, :-1], train_budget(a, gen))  # [batch, seq, vocab]
        loss = F.cross_entropy(logits.float().reshape(-1, vocab_size),
                               batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += a.batch * a.seq
        v = loss.item()
        ema = v if ema is None else 0.95 * ema + 0.05 * v
        now = time.time()
        if now - last_log >= (10 if a.smoke else 60) or step == 1:
            rate = tokens / (now - t0)
            log(f"step {step} loss {v:.3f} (avg {ema:.3f}) lr {lr:.2e} "
                f"{rate:.0f} tokens/s {(now - t0) / 60:.1f} min")
            losses.append({"step": step, "minutes": round((now - t0) / 60, 2),
                           "loss": round(v, 4), "loss_avg": round(ema, 4)})
            last_log = now
    train_s = time.time() - t0
    log(f"trained {step} steps, {tokens} tokens in {train_s / 60:.1f} min "
        f"({tokens / train_s:.0f} tokens/s); final loss {ema:.3f}")

    # Evaluate what is shipped: the fp16-rounded weights.
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    t_eval = time.time()
    ppl, n_eval = heldout_perplexity(model, heldout, a.seq, a.eval_windows)
    log(f"held-out perplexity {ppl:.2f} over {n_eval} tokens ({time.time() - t_eval:.0f} s)")

    tensors = {"model." + k: v for k, v in model.state_dict().items()}
    save_safetensors(os.path.join(out, "model.safetensors"), tensors)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    train_log = {
        "data": {"sources": {"linux-doc": "/usr/share/doc/linux-doc-6.1/Documentation/**/*.rst.gz",
                             "python3.11-doc": "/usr/share/doc/python3.11/html/_sources/**/*.rst.txt",
                             "fortunes": "/usr/share/games/fortunes/*"},
                 "corpus": corpus_info, "smoke_slice_bytes": 2_000_000 if a.smoke else None,
                 "train_tokens": len(stream), "heldout_tokens": len(heldout)},
        "tokenizer": {"type": "byte-level BPE (GPT-2 pre-tokenizer)", "vocab_size": vocab_size},
        "model": {"parameters": n_params, "layers": a.layers, "hidden": a.hidden,
                  "heads": a.heads, "ffn": a.ffn, "max_position_embeddings": a.max_pos},
        "training": {"dtype": a.dtype, "seq": a.seq, "batch": a.batch, "lr": a.lr, "warmup_steps": a.warmup,
                     "h2o_windows": a.h2o_windows,
                     "h2o_budget": "heavy = recent = ceil(f * seq / 2), f uniform in 0.1..0.5",
                     "schedule": "linear warmup, cosine over the wall-clock budget to lr/10",
                     "optimizer": "AdamW betas (0.9, 0.95), weight decay 0.1 on matrices",
                     "steps": step, "tokens_seen": tokens, "minutes": round(train_s / 60, 2),
                     "tokens_per_second": round(tokens / train_s), "threads": a.threads,
                     "final_train_loss": round(ema, 4), "loss_log": losses},
        "heldout": {"perplexity": round(ppl, 3), "tokens_scored": n_eval, "window": a.seq,
                    "stride": a.seq - 1, "windows": a.eval_windows or "all"},
        "smoke": a.smoke,
        "total_minutes": round((time.time() - t_start) / 60, 2),
        "torch": torch.__version__,
        "tokenizers": __import__("tokenizers").__version__,
    }
    with open(os.path.join(out, "train_log.json"), "w") as f:
        json.dump(train_log, f, indent=1)
        f.write("\n")
    log(f"wrote {out} (model.safetensors "
        f"{os.path.getsize(os.path.join(out, 'model.safetensors')) / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
