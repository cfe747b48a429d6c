#!/usr/bin/python3
"""Write the tiny checkpoints that tests/unit/test_weights.c reads.

Run with Debian's python (it has python3-torch 1.13; nothing else is needed):
    /usr/bin/python3 tests/data/make_weight_fixtures.py

Outputs, under tests/data/weights/ (a few KB each):
  expected.json           every fixture tensor's prefix-free name, shape and fp32 values
  bin/                    torch.save of a state dict: model.decoder. / decoder. / model.
                          prefixes, lm_head tied to embed_tokens (one storage), two views
                          into one storage at non-zero offsets, fp16 + bf16 + fp32, a 0-d
                          tensor, an nn.Parameter, a non-tensor entry, _metadata
  bin_sharded/            the same tensors in two shards plus pytorch_model.bin.index.json
  bin_zip64/              bin/ repacked with every size and offset in zip64 fields, as
                          torch writes shards over 4 GiB
  bin_v3/                 a hand-assembled torch 2.x style pickle: _rebuild_tensor_v3 over a
                          torch.UntypedStorage with a torch.bfloat16 dtype
  bin_deflated/           bin/ repacked with compressed entries (must be refused)
  bin_f64/                a float64 tensor (unsupported dtype)
  bin_noncontig/          a transposed, non-contiguous tensor (unsupported)
  safetensors/            the same tensors as bin/, written by the small writer below with
                          no padding, so an fp32 tensor starts at an unaligned offset
"""
import collections
import io
import json
import os
import struct
import zipfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "weights")


def strip(name):
    for p in ("model.decoder.", "decoder.", "model."):
        if name.startswith(p):
            return name[len(p):]
    return name


def state_dict():
    torch.manual_seed(1234)
    sd = collections.OrderedDict()
    emb = (torch.randn(8, 4) * 0.5).half()
    sd["model.decoder.embed_tokens.weight"] = emb
    sd["lm_head.weight"] = emb  # tied: the pickle names one storage twice
    base = torch.arange(40, dtype=torch.float32) * 0.25 - 3.0
    sd["model.decoder.embed_positions.weight"] = base[6:30].view(6, 4)  # offset 6
    sd["model.decoder.layers.0.fc1.bias"] = base[30:33]  # same storage, offset 30
    sd["model.decoder.layers.0.fc1.weight"] = torch.nn.Parameter(
        torch.randn(3, 5).bfloat16(), requires_grad=False)
    sd["model.decoder.layers.0.self_attn.q_proj.weight"] = torch.randn(4, 4)
    sd["decoder.final_layer_norm.weight"] = torch.ones(4).half() + torch.randn(4).half() * 0.1
    sd["model.layers.1.fc2.bias"] = torch.randn(4).bfloat16()
    sd["model.decoder.scale"] = torch.tensor(0.125)
    sd["step"] = 7  # not a tensor: readers skip it
    sd._metadata = collections.OrderedDict([("", {"version": 1}), ("model.decoder", {"version": 1})])
    return sd


def expected_of(sd):
    out = {}
    for k, v in sd.items():
        if isinstance(v, torch.Tensor):
            out[strip(k)] = {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", ""),
                             "values": [float(x) for x in v.detach().float().flatten().tolist()]}
    return out


def save(obj, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(obj, path)


def repack(src, dst, writer):
    """Copy every member of the zip `src` into a new archive written by `writer`."""
    with zipfile.ZipFile(src) as z:
        members = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    writer(dst, members)


def member(name, compress=zipfile.ZIP_STORED):
    """A zip member with a fixed timestamp, so reruns write identical bytes."""
    info = zipfile.ZipInfo(name, date_time=(2022, 5, 3, 0, 0, 0))
    info.compress_type = compress
    return info


def write_deflated(path, members):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members:
            z.writestr(member(name, zipfile.ZIP_DEFLATED), data)


def write_zip64(path, members):
    """A minimal stored zip whose sizes and offsets all live in zip64 extra fields."""
    import zlib
    out = io.BytesIO()
    central = []
    for name, data in members:
        nb = name.encode()
        offset = out.tell()
        crc = zlib.crc32(data)
        local_extra = struct.pack("<HHQQ", 1, 16, len(data), len(data))
        # Pad so the data starts on a 64-byte boundary, as torch does.
        pad = (-(offset + 30 + len(nb) + len(local_extra) + 4)) % 64
        local_extra += struct.pack("<HH", 0x4246, pad) + b"Z" * pad
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0, crc,
                              0xFFFFFFFF, 0xFFFFFFFF, len(nb), len(local_extra)))
        out.write(nb + local_extra + data)
        central.append((nb, crc, len(data), offset))
    cd_start = out.tell()
    for nb, crc, size, offset in central:
        extra = struct.pack("<HHQQQ", 1, 24, size, size, offset)
        out.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0, crc,
                              0xFFFFFFFF, 0xFFFFFFFF, len(nb), len(extra), 0, 0, 0, 0,
                              0xFFFFFFFF))
        out.write(nb + extra)
    cd_size = out.tell() - cd_start
    eocd64 = out.tell()
    out.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(central),
                          len(central), cd_size, cd_start))
    out.write(struct.pack("<IIQI", 0x07064B50, 0, eocd64, 1))
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF,
                          0xFFFFFFFF, 0))
    with open(path, "wb") as f:
        f.write(out.getvalue())


def v3_pickle():
    """Assemble, opcode by opcode, the pickle torch 2.x writes for a tensor whose
    storage is untyped: _rebuild_tensor_v3(storage, offset, size, stride, requires_grad,
    hooks, dtype). Also uses SHORT_BINUNICODE, LONG_BINPUT/LONG_BINGET and BINFLOAT."""
    def short_str(s):
        b = s.encode()
        return b"\x8c" + bytes([len(b)]) + b

    def glob(mod, name):
        return b"c" + mod.encode() + b"\n" + name.encode() + b"\n"

    p = b"\x80\x02" + glob("collections", "OrderedDict") + b"r" + struct.pack("<I", 0) + b")R"
    p += b"(" + short_str("model.decoder.layers.0.v3.weight")
    p += glob("torch._utils", "_rebuild_tensor_v3") + b"(("
    p += short_str("storage") + glob("torch", "UntypedStorage") + short_str("0")
    p += short_str("cpu") + b"K" + bytes([20]) + b"tQ"  # 20 bytes: 10 bf16 elements
    p += b"K\x02" + b"K\x02K\x03\x86" + b"K\x03K\x01\x86" + b"\x89"
    p += b"j" + struct.pack("<I", 0) + b")R"  # hooks: a fresh OrderedDict()
    p += glob("torch", "bfloat16") + b"tR"
    p += short_str("meta.ratio") + b"G" + struct.pack(">d", 0.5)  # a non-tensor entry
    p += b"u."
    return p


def main():
    os.makedirs(OUT, exist_ok=True)
    sd = state_dict()
    expected = {"main": expected_of(sd)}

    save(sd, os.path.join(OUT, "bin", "pytorch_model.bin"))

    names = [k for k in sd if isinstance(sd[k], torch.Tensor)]
    shard_of = {k: 1 if i < 4 else 2 for i, k in enumerate(names)}
    index = {"metadata": {"total_size": 0}, "weight_map": {}}
    for s in (1, 2):
        part = collections.OrderedDict((k, sd[k]) for k in names if shard_of[k] == s)
        fname = "pytorch_model-%05d-of-00002.bin" % s
        save(part, os.path.join(OUT, "bin_sharded", fname))
        for k in part:
            index["weight_map"][k] = fname
    with open(os.path.join(OUT, "bin_sharded", "pytorch_model.bin.index.json"), "w") as f:
        json.dump(index, f, indent=2)

    main_bin = os.path.join(OUT, "bin", "pytorch_model.bin")
    repack(main_bin, os.path.join(OUT, "bin_zip64", "pytorch_model.bin"), write_zip64)
    repack(main_bin, os.path.join(OUT, "bin_deflated", "pytorch_model.bin"), write_deflated)

    # torch 2.x style: 10 bf16 values in an untyped storage, the tensor a [2, 3] view at 2.
    v3 = torch.linspace(-1, 1, 10).bfloat16()
    os.makedirs(os.path.join(OUT, "bin_v3"), exist_ok=True)
    with zipfile.ZipFile(os.path.join(OUT, "bin_v3", "pytorch_model.bin"), "w") as z:
        z.writestr(member("archive/data.pkl"), v3_pickle())
        z.writestr(member("archive/byteorder"), "little")
        z.writestr(member("archive/data/0"), v3.view(torch.int16).numpy().tobytes())
        z.writestr(member("archive/version"), "3\n")
    expected["v3"] = {"layers.0.v3.weight": {
        "shape": [2, 3], "dtype": "bfloat16",
        "values": [float(x) for x in v3[2:8].float().tolist()]}}

    save(collections.OrderedDict([("model.decoder.layers.0.fc1.weight", torch.ones(2, 2).double())]),
         os.path.join(OUT, "bin_f64", "pytorch_model.bin"))
    save(collections.OrderedDict([("model.decoder.layers.0.fc1.weight", torch.randn(3, 2).t())]),
         os.path.join(OUT, "bin_noncontig", "pytorch_model.bin"))

    write_safetensors(os.path.join(OUT, "safetensors", "model.safetensors"), sd)

    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


def write_safetensors(path, sd):
    """The safetensors layout: u64 header length, JSON header, packed data."""
    codes = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
    header = {"__metadata__": {"format": "pt"}}
    blob = b""
    for k, v in sd.items():
        if not isinstance(v, torch.Tensor):
            continue
        t = v.detach().contiguous()
        raw = (t.view(torch.int16) if t.element_size() == 2 else t).numpy().tobytes()
        header[k] = {"dtype": codes[t.dtype], "shape": list(t.shape),
                     "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(header).encode()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)


if __name__ == "__main__":
    main()
