#!/usr/bin/env python3
"""Make the golden OPT fixtures under tests/data/golden/ with Hugging Face transformers.

Run from the repository root (see tests/data/README.md for creating the venv):

    /usr/bin/python3 -m venv --system-site-packages .venv
    .venv/bin/pip install -r tests/data/requirements-golden.txt
    .venv/bin/python tests/data/make_golden.py

Nothing is downloaded: both models are built from an OPTConfig with seeded random
weights (never from_pretrained of a hub name). Rerunning gives byte-identical files.

For each model NAME it writes:
  golden/NAME/      config.json, model.safetensors, golden.json, golden.bin
  golden/NAME-bin/  config.json, pytorch_model.bin   (same weights, .bin format)

golden.bin is raw little-endian float32; golden.json gives, per prompt, the prompt
token ids, the N_DECODE (20) greedy decode tokens, and float offsets into golden.bin of
prefill_logits [len(tokens), vocab] and decode_logits [n_decode, vocab], where
decode_logits[k] is the logits after feeding decode_tokens[k] (with the KV cache).
The script asserts that one forward over tokens + decode_tokens gives the same logits
(max abs diff < 1e-4), that every greedy choice wins by a top1-top2 logit margin of at
least 2e-3, and that all of golden/ stays under 3.6 MB as `du -sb` counts it.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import safetensors
import transformers
from transformers import OPTConfig, OPTForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "golden")

VOCAB = 1024
MAX_POS = 128  # room for the 64-step decode tests of the KV policies
PROMPT_LENS = [1, 9, 40]  # each starts with BOS (2); length 1 is just BOS
N_DECODE = 20
BOS = 2
SIZE_BUDGET = 3_600_000  # bytes, all of tests/data/golden (all fixtures stay under 4 MB)
CONSISTENCY_TOL = 1e-4
MIN_MARGIN = 2e-3  # greedy top1-top2 logit gap, 20x the tests' 1e-4 tolerance

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    ffn_dim=256,
    max_position_embeddings=MAX_POS,
    activation_function="relu",
    dropout=0.0,
    attention_dropout=0.0,
    layerdrop=0.0,
    bos_token_id=2,
    eos_token_id=2,
    pad_token_id=1,
    enable_bias=True,
    layer_norm_elementwise_affine=True,
    tie_word_embeddings=True,
    init_std=0.02,
    torch_dtype="float32",
)

MODELS = [
    # name, extra config, init seed, perturbation seed
    ("tiny-opt", dict(word_embed_proj_dim=64, do_layer_norm_before=True), 1234, 5678),
    # OPT-350m quirks: project_in/project_out (32 != 64), post-LN, no final layer norm
    ("tiny-opt-350m", dict(word_embed_proj_dim=32, do_layer_norm_before=False), 4321, 8765),
]

PROMPT_SEED = 2024


def perturb(model, seed):
    """Add seeded noise to every parameter so biases, LayerNorms, positions all matter.

    HF init gives weights N(0, 0.02), biases 0 and LayerNorm weight=1/bias=0, which
    would leave biases and LayerNorm untested, and its tiny weights make greedy decoding
    degenerate (one token repeated) with near-ties in the logits. After this:
      biases (incl. LayerNorm bias)        = N(0, 0.05)
      LayerNorm weights                    = 1 + N(0, 0.1)
      embed_tokens, embed_positions        += N(0, 0.1)
      Linear weights (incl. project_in/out) += N(0, 1.5 / sqrt(fan_in))
    The tied lm_head shares embed_tokens' tensor and is perturbed once with it.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith(".bias"):
                p.copy_(noise * 0.05)
            elif "layer_norm" in name:
                p.copy_(1.0 + noise * 0.1)
            elif "embed_" in name:
                p.add_(noise * 0.1)
            else:
                assert p.dim() == 2, name
                p.add_(noise * (1.5 / p.shape[1] ** 0.5))


def build(extra, init_seed, perturb_seed):
    torch.manual_seed(init_seed)
    config = OPTConfig(**COMMON, **extra)
    config._attn_implementation = "eager"
    model = OPTForCausalLM(config).to(torch.float32).eval()
    perturb(model, perturb_seed)
    assert model.lm_head.weight.data_ptr() == model.model.decoder.embed_tokens.weight.data_ptr(), \
        "lm_head must stay tied to embed_tokens"
    return config, model


def make_prompts():
    g = torch.Generator().manual_seed(PROMPT_SEED)
    prompts = []
    for n in PROMPT_LENS:
        rest = torch.randint(4, VOCAB, (n - 1,), generator=g).tolist()
        prompts.append([BOS] + rest)
    return prompts


def margin(logits_row):
    top2 = torch.topk(logits_row, 2).values
    return float(top2[0] - top2[1])


@torch.no_grad()
def run_prompt(model, tokens):
    ids = torch.tensor([tokens], dtype=torch.long)
    out = model(input_ids=ids, use_cache=True)
    prefill = out.logits[0].clone()  # [P, V]
    past = out.past_key_values
    margins = [margin(prefill[-1])]
    tok = int(torch.argmax(prefill[-1]))
    decode_tokens, decode_logits = [], []
    for k in range(N_DECODE):
        decode_tokens.append(tok)
        out = model(input_ids=torch.tensor([[tok]], dtype=torch.long),
                    past_key_values=past, use_cache=True)
        past = out.past_key_values
        row = out.logits[0, -1].clone()
        decode_logits.append(row)
        if k + 1 < N_DECODE:
            margins.append(margin(row))
        tok = int(torch.argmax(row))
    decode = torch.stack(decode_logits)  # [N_DECODE, V]

    # Self-consistency: one forward over prompt + decode tokens gives the same logits.
    full = model(input_ids=torch.tensor([tokens + decode_tokens], dtype=torch.long),
                 use_cache=False).logits[0]
    diff = max(float((full[:len(tokens)] - prefill).abs().max()),
               float((full[len(tokens):] - decode).abs().max()))
    assert diff < CONSISTENCY_TOL, f"full forward differs from prefill+decode by {diff}"
    assert min(margins) >= MIN_MARGIN, f"greedy near-tie (margin {min(margins)}): pick other seeds"
    return prefill, decode_tokens, decode, diff, min(margins)


def dump_json(golden):
    """golden.json with one line per prompt field (token lists kept on one line)."""
    head = {k: v for k, v in golden.items() if k != "prompts"}
    lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    lines.append(' "prompts": [')
    for i, p in enumerate(golden["prompts"]):
        fields = ",\n".join(f"   {json.dumps(k)}: {json.dumps(v)}" for k, v in p.items())
        lines.append("  {\n" + fields + "\n  }" + ("," if i + 1 < len(golden["prompts"]) else ""))
    lines += [" ]", "}", ""]
    text = "\n".join(lines)
    assert json.loads(text) == golden
    return text


def debian_torch_version():
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "python3-torch"],
                             capture_output=True, text=True, check=False)
        return out.stdout.strip() or None
    except OSError:
        return None


def write_model_dirs(name, model):
    st_dir = os.path.join(OUT, name)
    bin_dir = os.path.join(OUT, name + "-bin")
    for d in (st_dir, bin_dir):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    model.save_pretrained(st_dir, safe_serialization=True)
    model.save_pretrained(bin_dir, safe_serialization=False)
    for d in (st_dir, bin_dir):
        # save_pretrained may also write generation_config.json; keep only what tests use
        gc = os.path.join(d, "generation_config.json")
        if os.path.exists(gc):
            os.remove(gc)
    return st_dir, bin_dir


def print_keys(st_dir, bin_dir):
    from safetensors import safe_open
    with safe_open(os.path.join(st_dir, "model.safetensors"), framework="pt") as f:
        keys = list(f.keys())
    print(f"  model.safetensors keys ({len(keys)}), lm_head.weight present: {'lm_head.weight' in keys}")
    for k in keys:
        print(f"    {k}")
    sd = torch.load(os.path.join(bin_dir, "pytorch_model.bin"), map_location="cpu")
    print(f"  pytorch_model.bin keys ({len(sd)}), lm_head.weight present: {'lm_head.weight' in sd}")
    for k, v in sd.items():
        print(f"    {k} {tuple(v.shape)} {v.dtype}")


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT, exist_ok=True)
    prompts = make_prompts()

    for name, extra, init_seed, perturb_seed in MODELS:
        print(f"== {name}")
        config, model = build(extra, init_seed, perturb_seed)
        st_dir, bin_dir = write_model_dirs(name, model)

        chunks, entries, offset = [], [], 0
        for tokens in prompts:
            prefill, decode_tokens, decode, diff, min_margin = run_prompt(model, tokens)
            entry = {"tokens": tokens, "decode_tokens": decode_tokens,
                     "prefill_offset": offset}
            chunks.append(prefill.numpy())
            offset += prefill.numel()
            entry["decode_offset"] = offset
            chunks.append(decode.numpy())
            offset += decode.numel()
            entries.append(entry)
            print(f"  prompt len {len(tokens):2d}: full-forward max abs diff {diff:.3g}, "
                  f"min greedy top1-top2 margin {min_margin:.4g}, decode {decode_tokens}")

        data = np.concatenate([c.reshape(-1) for c in chunks]).astype("<f4")
        assert data.size == offset
        with open(os.path.join(st_dir, "golden.bin"), "wb") as f:
            f.write(data.tobytes())
        golden = {
            "model": name,
            "vocab": VOCAB,
            "n_decode": N_DECODE,
            "dtype": "float32",
            "versions": {"torch": torch.__version__,
                         "python3-torch (Debian)": debian_torch_version(),
                         "transformers": transformers.__version__,
                         "safetensors": safetensors.__version__,
                         "python": sys.version.split()[0]},
            "prompts": entries,
        }
        with open(os.path.join(st_dir, "golden.json"), "w") as f:
            f.write(dump_json(golden))
        print_keys(st_dir, bin_dir)

    print("== files written")
    total = 0  # counted like `du -sb tests/data/golden`: files plus directory entries
    for root, dirs, files in os.walk(OUT):
        dirs.sort()
        total += os.path.getsize(root)
        for fn in sorted(files):
            p = os.path.join(root, fn)
            size = os.path.getsize(p)
            total += size
            with open(p, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()[:16]
            print(f"  {size:9d}  {digest}  {os.path.relpath(p, HERE)}")
    print(f"  {total:9d}  total bytes incl. directories, as du -sb (budget {SIZE_BUDGET})")
    if total >= SIZE_BUDGET:
        sys.exit(f"golden fixtures are {total} bytes, over the {SIZE_BUDGET}-byte budget")


if __name__ == "__main__":
    main()
