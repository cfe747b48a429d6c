"""chatlib.py - a tiny Llama model folder with a real tokenizer and chat template,
made at test time for the chat tests (python3 standard library only).

The folder is what a Hugging Face Llama 3 checkpoint looks like, only tiny:
config.json (LlamaForCausalLM, 2 layers, hidden 64, 4 query heads over 2 KV heads),
model.safetensors with seeded random weights (the tensor names and shapes of
tests/data/golden-arch/tiny-llama, the vocabulary grown to the tokenizer's), and
the Llama-3-style tokenizer of tests/data/tokenizers/llama3 with Llama 3's own chat
template (tests/data/chat_templates/llama3.jinja) in its tokenizer_config.json.
The weights are random, so the text is noise; what the tests check is the protocol.
"""
import json
import os
import random
import shutil
import struct

VOCAB = 1536  # >= the tokenizer's 1510 ids, a multiple of 64 as real vocabularies are
BOS, EOT = 1500, 1508  # <|begin_of_text|>, <|eot_id|>


def _safetensors(path, tensors):
    """Write {name: (shape, values)} as F32 safetensors."""
    header, blobs, off = {}, [], 0
    for name, (shape, values) in tensors.items():
        blob = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def make_tiny_llama(dst, data_dir, template="llama3.jinja", seed=0):
    """Write the folder under dst (created) and return its path."""
    os.makedirs(dst, exist_ok=True)
    src = os.path.join(data_dir, "golden-arch", "tiny-llama")
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg.update(vocab_size=VOCAB, bos_token_id=BOS, eos_token_id=EOT,
               max_position_embeddings=1024)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(src, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        shapes = {k: v["shape"] for k, v in json.loads(f.read(n)).items()
                  if k != "__metadata__"}
    rng = random.Random(seed)
    tensors = {}
    for name, shape in sorted(shapes.items()):
        shape = [VOCAB if d == 320 else d for d in shape]
        count = 1
        for d in shape:
            count *= d
        if name.endswith("norm.weight"):
            values = [1.0 + rng.gauss(0, 0.1) for _ in range(count)]
        else:
            values = [rng.gauss(0, 0.5 / (shape[-1] ** 0.5)) for _ in range(count)]
        tensors[name] = (shape, values)
    _safetensors(os.path.join(dst, "model.safetensors"), tensors)
    tok = os.path.join(data_dir, "tokenizers", "llama3")
    for name in ("tokenizer.json", "generation_config.json"):
        shutil.copy(os.path.join(tok, name), dst)
    with open(os.path.join(tok, "tokenizer_config.json")) as f:
        tcfg = json.load(f)
    with open(os.path.join(data_dir, "chat_templates", template)) as f:
        tcfg["chat_template"] = f.read()
    with open(os.path.join(dst, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, indent=1)
    return dst
