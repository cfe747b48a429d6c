#!/usr/bin/env python3
"""
check_hf.py - check a folder that train_default.py wrote against Hugging Face
transformers: OPTForCausalLM and the GPT-2 tokenizer loaded from it must give the same
token ids and the same logits as train_default.py's own model and tokenizer. A
mismatch means a tensor name, the position offset, the tied lm_head or a config field
is wrong.

Usage (in a venv with transformers, e.g. the one bench/peers/run.py makes):
  python models/train/check_hf.py DIR
Exits 1 on a mismatch.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_default  # noqa: E402


def main():
    d = sys.argv[1]
    from transformers import AutoTokenizer, OPTForCausalLM

    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    ours = train_default.OPT(cfg)
    sd = {k[len("model."):]: v.float() for k, v in train_default.load_safetensors(
        os.path.join(d, "model.safetensors")).items()}
    ours.load_state_dict(sd)
    ours.eval()
    hf = OPTForCausalLM.from_pretrained(d, torch_dtype=torch.float32)
    hf.eval()
    tok = AutoTokenizer.from_pretrained(d)

    text = "The kernel's memory barriers, explained.\nHello, world! 3.14 \u00e9t\u00e9 \u2014 ok"
    ids = tok(text)["input_ids"]
    from tokenizers import Tokenizer, models, pre_tokenizers
    raw = Tokenizer(models.BPE.from_file(os.path.join(d, "vocab.json"),
                                         os.path.join(d, "merges.txt")))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    want = [train_default.BOS] + raw.encode(text).ids
    ok = ids == want
    print("token ids", "match" if ok else f"DIFFER: hf {ids} ours {want}")
    x = torch.tensor([ids])
    with torch.no_grad():
        a = ours(x)
        b = hf(x).logits
    diff = (a - b).abs().max().item()
    print(f"logits max |ours - hf| = {diff:.2e} over {tuple(a.shape)}")
    ok = ok and diff < 1e-3
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
