#!/usr/bin/env python3
"""Generates the fixtures of `nibble convert` under tests/fixtures/convert/.

Deterministic (fixed seed). Inputs are the checkpoint fixtures written by
tools/gen_checkpoint_fixtures.py (gen_all.py runs that one first):
tests/fixtures/checkpoints/{dsv4_stock, dsv4_nvfp4_current, dsv4_bf16}.

Writes:
  dsv4_wide/            dsv4_stock with a few expert scales raised so that
                        blocks fall outside the 17-binade window of the
                        MXFP4 -> NVFP4 cast (one w2 alone, one w1 whose pair
                        w3 follows it through the shared k_max, one all-zero
                        block out of the window), plus the other files of a
                        real model folder: tokenizer files, a README, a
                        sub-folder, and a hidden .cache/ that must not be copied
  dsv4_nvfp4_lossy/     dsv4_nvfp4_current with random E4M3 block scales and
                        non-power-of-two weight_scale_2, so that NVFP4 -> MXFP4
                        loses precision
  expected/<case>.safetensors   the converted expert tensors, computed here
  expected/<case>.json          the statistics the report must show
for the cases wide_to_nvfp4, bf16_to_nvfp4, bf16_to_mxfp4,
nvfp4_lossy_to_mxfp4.

The oracle is numpy + ml_dtypes, written from formats.md and ModelOpt's
arithmetic (f32, in ModelOpt's order), independently of nibble's C++.

input_scale follows docs/convert.md: w1/w3 sqrt(hidden) * max|ffn_norm| / 2688,
w2 max(1, routed_scaling_factor) * L * silu(L) / 2688 with L = swiglu_limit.

Usage: python3 tools/gen_convert_fixtures.py   (or `make fixtures`)
"""
import json
import math
import pathlib
import re
import shutil
import struct

import ml_dtypes
import numpy as np
import torch
from safetensors.torch import save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
CKPT = ROOT / "tests" / "fixtures" / "checkpoints"
OUT = ROOT / "tests" / "fixtures" / "convert"
SEED = 20260601

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)
EXPERT_RE = re.compile(r"^(((layers|mtp)\.\d+)\.ffn\.experts)\.(\d+)\.(w[123])$")
F32 = np.float32


# ---------------------------------------------------------------------------
# Raw safetensors access (every dtype, bytes exactly as stored).

def read_header(path):
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return data, 8 + n, header


def load_folder(folder):
    """name -> (dtype, shape, bytes, shard file, absolute offset)."""
    out = {}
    for shard in sorted(folder.glob("*.safetensors")):
        data, start, header = read_header(shard)
        for name, info in header.items():
            b, e = info["data_offsets"]
            out[name] = (info["dtype"], info["shape"], data[start + b:start + e], shard.name, start + b)
    return out


def patch(folder, tensors, name, new_bytes):
    """Overwrites a tensor's bytes in place in a copied folder."""
    dtype, shape, old, shard, offset = tensors[name]
    assert len(new_bytes) == len(old), name
    path = folder / shard
    data = bytearray(path.read_bytes())
    data[offset:offset + len(old)] = new_bytes
    path.write_bytes(bytes(data))
    tensors[name] = (dtype, shape, bytes(new_bytes), shard, offset)


def save(path, tensors):
    """tensors: name -> (torch dtype, shape, raw bytes)."""
    out = {}
    for name, (dt, shape, raw) in tensors.items():
        t = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dt).reshape(shape).clone() \
            if len(raw) else torch.zeros(shape, dtype=dt)
        out[name] = t
    save_file(out, str(path))


# ---------------------------------------------------------------------------
# Element and block codecs (formats.md), numpy + ml_dtypes.

def unpack(packed, rows, cols):
    p = np.frombuffer(packed, dtype=np.uint8).reshape(rows, cols // 2)
    codes = np.empty((rows, cols), dtype=np.uint8)
    codes[:, 0::2] = p & 0xF
    codes[:, 1::2] = p >> 4
    return codes


def pack(codes):
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8).tobytes()


def e2m1_codes(x):
    """RNE to E2M1, saturating at +-6 (ml_dtypes rounds to nearest even)."""
    return np.clip(x.astype(F32), -6, 6).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF


def e4m3_codes(x):
    return np.minimum(x.astype(F32), F32(448)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def e4m3_values(codes):
    return np.asarray(codes, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(F32)


def mx_dequant(codes, scales):
    """[rows, cols] E2M1 codes, [rows, cols/32] UE8M0 -> f32 (exact)."""
    k = scales.astype(np.int32) - 127
    pw = np.ldexp(np.ones_like(k, dtype=np.float64), k).astype(F32)  # 2^k, exact in f32 (or inf/0)
    return E2M1[codes] * np.repeat(pw, 32, axis=1)


def nv_dequant(codes, scales, s_g):
    """ModelOpt's order: code * (s_b * s_g), f32."""
    sbg = (e4m3_values(scales) * F32(s_g)).astype(F32)
    return (E2M1[codes] * np.repeat(sbg, 16, axis=1)).astype(F32)


def nv_quant(x, s_g):
    """[rows, cols] f32 -> (codes, E4M3 scale codes), ModelOpt arithmetic."""
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // 16, 16)
    amax = np.abs(blocks).max(axis=2).astype(F32)
    six_sg = F32(F32(6) * F32(s_g))
    with np.errstate(divide="ignore", invalid="ignore"):
        s_b = np.where(amax > 0, (amax / six_sg).astype(F32), F32(0))
    s_b = np.where(s_b == 0, F32(1), s_b)
    sc = e4m3_codes(s_b)
    sbv = e4m3_values(sc)
    denom = (sbv * F32(s_g)).astype(F32)
    zero = (amax == 0) | (sbv == 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = (blocks / np.where(zero, F32(1), denom)[:, :, None]).astype(F32)
    codes = e2m1_codes(q)
    codes[np.broadcast_to(zero[:, :, None], codes.shape)] = 0
    return codes.reshape(rows, cols), sc


def mx_quant(x):
    """OCP MX: shared_exp = floor(log2 amax) - 2 clamped; all-zero block -> 2^0."""
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // 32, 32).astype(F32)
    amax = np.abs(blocks).max(axis=2)
    _, e = np.frexp(amax)  # amax = m * 2^e, m in [0.5, 1)
    k = np.where(amax > 0, np.clip(e - 1 - 2, -127, 127), 0).astype(np.int32)
    inv = np.ldexp(np.ones_like(k, dtype=np.float64), -k).astype(F32)
    codes = e2m1_codes((blocks * inv[:, :, None]).astype(F32))
    return codes.reshape(rows, cols), (k + 127).astype(np.uint8)


def bf16_values(raw, shape):
    return np.frombuffer(raw, dtype=np.uint16).reshape(shape).view(ml_dtypes.bfloat16).astype(F32)


# ---------------------------------------------------------------------------
# The conversions, as docs/convert.md describes them.

def expert_groups(tensors, suffix):
    """expert key -> {proj: base}, for stored names `<base><suffix>`."""
    groups = {}
    for name in tensors:
        if not name.endswith(suffix):
            continue
        m = EXPERT_RE.match(name[: -len(suffix)])
        if m:
            groups.setdefault(m.group(1) + "." + m.group(4), {})[m.group(5)] = name[: -len(suffix)]
    return groups


def input_scales(tensors, config, base, cols):
    m = EXPERT_RE.match(base)
    if m.group(5) == "w2":
        limit = float(config.get("swiglu_limit", 10.0))
        rsf = max(1.0, float(config.get("routed_scaling_factor", 1.0)))
        bound = rsf * limit * (limit / (1.0 + math.exp(-limit)))
    else:
        dt, shape, raw, _, _ = tensors[m.group(2) + ".ffn_norm.weight"]
        g = bf16_values(raw, shape) if dt == "BF16" else np.frombuffer(raw, dtype=F32)
        bound = math.sqrt(cols) * float(np.abs(g).max())
    return F32(F32(bound) / F32(2688))


class Stats:
    def __init__(self):
        self.blocks = self.exact = self.requantized = 0
        self.max_abs_error = 0.0

    def add(self, src, dst, block, requantized_mask=None):
        a = src.reshape(src.shape[0], -1, block).astype(np.float64)
        b = dst.reshape(dst.shape[0], -1, block).astype(np.float64)
        same = np.all(a == b, axis=2)
        self.blocks += same.size
        self.exact += int(same.sum())
        self.requantized += same.size if requantized_mask is None else int(requantized_mask.sum())
        diff = np.where(a == b, 0.0, np.abs(a - b))
        self.max_abs_error = max(self.max_abs_error, float(diff.max()) if diff.size else 0.0)

    def json(self, op, block, tensors):
        return {"op": op, "block_elements": block, "tensors": tensors, "blocks": self.blocks,
                "blocks_exact": self.exact, "blocks_requantized": self.requantized,
                "max_abs_error": self.max_abs_error}


def mx_to_nv(tensors, config, mtp_keep=True):
    out, stats, n = {}, Stats(), 0
    for key, projs in sorted(expert_groups(tensors, ".scale").items()):
        if key.startswith("mtp.") and mtp_keep:
            continue
        src = {}
        for p, base in projs.items():
            dt, shape, raw, _, _ = tensors[base + ".weight"]
            if dt != "I8":
                continue
            rows, cols = shape[0], shape[1] * 2
            codes = unpack(raw, rows, cols)
            sc = np.frombuffer(tensors[base + ".scale"][2], dtype=np.uint8).reshape(rows, cols // 32)
            src[p] = (base, rows, cols, codes, sc)
        kmax = {p: int(v[4].max()) - 127 for p, v in src.items()}
        for p, (base, rows, cols, codes, sc) in src.items():
            k_max = max(kmax["w1"], kmax["w3"]) if p in ("w1", "w3") else kmax[p]
            s_g = F32(2.0 ** (k_max - 8))
            k = sc.astype(np.int32) - 127
            inside = (k_max - k) <= 17
            nv_codes = codes.copy()
            nv_sc = np.repeat(e4m3_codes(np.ldexp(np.ones_like(k, dtype=np.float64), k - k_max + 8)), 2, axis=1)
            values = mx_dequant(codes, sc)
            if not inside.all():
                q_codes, q_sc = nv_quant(values, s_g)
                wide = np.repeat(~inside, 32, axis=1)
                nv_codes[wide] = q_codes[wide]
                nv_sc[np.repeat(~inside, 2, axis=1)] = q_sc[np.repeat(~inside, 2, axis=1)]
            stats.add(values, nv_dequant(nv_codes, nv_sc, s_g), 32, ~inside)
            n += 1
            out[base + ".weight"] = (torch.uint8, [rows, cols // 2], pack(nv_codes))
            out[base + ".weight_scale"] = (torch.float8_e4m3fn, [rows, cols // 16], nv_sc.tobytes())
            out[base + ".weight_scale_2"] = (torch.float32, [], s_g.tobytes())
            out[base + ".input_scale"] = (torch.float32, [], input_scales(tensors, config, base, cols).tobytes())
    return out, stats.json("mxfp4->nvfp4", 32, n)


def float_to(tensors, config, target):
    out, stats, n = {}, Stats(), 0
    for key, projs in sorted(expert_groups(tensors, ".weight").items()):
        vals = {}
        for p, base in projs.items():
            dt, shape, raw, _, _ = tensors[base + ".weight"]
            assert dt == "BF16", base
            vals[p] = (base, bf16_values(raw, shape))
        amax = {p: F32(np.abs(v).max()) for p, (_, v) in vals.items()}
        for p, (base, x) in vals.items():
            rows, cols = x.shape
            if target == "nvfp4":
                a = max(amax["w1"], amax["w3"]) if p in ("w1", "w3") else amax[p]
                s_g = F32(F32(a) / F32(2688))
                codes, sc = nv_quant(x, s_g)
                stats.add(x, nv_dequant(codes, sc, s_g), 16)
                out[base + ".weight"] = (torch.uint8, [rows, cols // 2], pack(codes))
                out[base + ".weight_scale"] = (torch.float8_e4m3fn, [rows, cols // 16], sc.tobytes())
                out[base + ".weight_scale_2"] = (torch.float32, [], s_g.tobytes())
                out[base + ".input_scale"] = (torch.float32, [], input_scales(tensors, config, base, cols).tobytes())
            else:
                codes, sc = mx_quant(x)
                stats.add(x, mx_dequant(codes, sc), 32)
                out[base + ".weight"] = (torch.int8, [rows, cols // 2], pack(codes))
                out[base + ".scale"] = (torch.float8_e8m0fnu, [rows, cols // 32], sc.tobytes())
            n += 1
    block = 16 if target == "nvfp4" else 32
    return out, stats.json("float->" + target, block, n)


def nv_to_mx(tensors):
    out, stats, n = {}, Stats(), 0
    for key, projs in sorted(expert_groups(tensors, ".weight_scale_2").items()):
        for p, base in projs.items():
            dt, shape, raw, _, _ = tensors[base + ".weight"]
            rows, cols = shape[0], shape[1] * 2
            codes = unpack(raw, rows, cols)
            sc = np.frombuffer(tensors[base + ".weight_scale"][2], dtype=np.uint8).reshape(rows, cols // 16)
            s_g = np.frombuffer(tensors[base + ".weight_scale_2"][2], dtype=F32)[0]
            x = nv_dequant(codes, sc, s_g)
            mx_codes, mx_sc = mx_quant(x)
            stats.add(x, mx_dequant(mx_codes, mx_sc), 32)
            out[base + ".weight"] = (torch.int8, [rows, cols // 2], pack(mx_codes))
            out[base + ".scale"] = (torch.float8_e8m0fnu, [rows, cols // 32], mx_sc.tobytes())
            n += 1
    return out, stats.json("nvfp4->mxfp4", 32, n)


# ---------------------------------------------------------------------------
# Fixture folders.

OTHER_FILES = {
    "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}}) + "\n",
    "tokenizer_config.json": json.dumps({"bos_token": "<s>", "eos_token": "</s>"}) + "\n",
    "README.md": "# dsv4_wide\nA tiny DeepSeek-V4 layout for nibble convert's tests.\n",
    "encoding/encoding_dsv4.py": "# chat encoding of the model's release (copied verbatim by convert)\n",
}


def copy_folder(src, name):
    dst = OUT / name
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    return dst


def make_wide(rng):
    folder = copy_folder(CKPT / "dsv4_stock", "dsv4_wide")
    for rel, text in OTHER_FILES.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    (folder / ".cache").mkdir()
    (folder / ".cache" / "download.lock").write_text("hidden: not part of the model\n")
    t = load_folder(folder)

    def raise_scales(base, picks):
        dt, shape, raw, _, _ = t[base + ".scale"]
        sc = np.frombuffer(raw, dtype=np.uint8).reshape(shape).copy()
        for (r, b), e in picks.items():
            sc[r, b] = e
        patch(folder, t, base + ".scale", sc.tobytes())

    # A lone w2: one block 2^20 above the rest pushes most blocks out of the window.
    raise_scales("layers.1.ffn.experts.2.w2", {(0, 0): 140, (3, 0): 139})
    # w1 of a pair: its k_max becomes w3's too, so w3's blocks leave the window as well.
    raise_scales("layers.2.ffn.experts.1.w1", {(5, 0): 138})
    # An all-zero block far below the window: re-quantized, yet exact.
    base = "layers.1.ffn.experts.2.w2"
    dt, shape, raw, _, _ = t[base + ".weight"]
    w = np.frombuffer(raw, dtype=np.uint8).reshape(shape).copy()
    w[7, 0:16] = 0
    patch(folder, t, base + ".weight", w.tobytes())
    raise_scales(base, {(7, 0): 1})
    rng.random()  # keep the stream's position stable if more edits are added
    return folder


def make_nvfp4_lossy(rng):
    folder = copy_folder(CKPT / "dsv4_nvfp4_current", "dsv4_nvfp4_lossy")
    t = load_folder(folder)
    for name in sorted(t):
        if name.endswith(".weight_scale"):
            dt, shape, raw, _, _ = t[name]
            codes = rng.integers(0x28, 0x58, size=len(raw), dtype=np.uint8)  # E4M3 2^-2 .. 2^4, mantissas random
            patch(folder, t, name, codes.tobytes())
    for key, projs in sorted(expert_groups(t, ".weight_scale_2").items()):
        shared = F32(rng.uniform(0.001, 0.01))
        for p, base in projs.items():
            s_g = shared if p in ("w1", "w3") else F32(rng.uniform(0.001, 0.01))
            patch(folder, t, base + ".weight_scale_2", s_g.tobytes())
    return folder


def write_case(name, tensors, stats):
    exp = OUT / "expected"
    exp.mkdir(parents=True, exist_ok=True)
    save(exp / f"{name}.safetensors", tensors)
    (exp / f"{name}.json").write_text(json.dumps(stats, indent=2) + "\n")


def main():
    rng = np.random.default_rng(SEED)
    OUT.mkdir(parents=True, exist_ok=True)
    wide = make_wide(rng)
    lossy = make_nvfp4_lossy(rng)

    cfg = json.loads((wide / "config.json").read_text())
    write_case("wide_to_nvfp4", *mx_to_nv(load_folder(wide), cfg))

    bf = load_folder(CKPT / "dsv4_bf16")
    bf_cfg = json.loads((CKPT / "dsv4_bf16" / "config.json").read_text())
    write_case("bf16_to_nvfp4", *float_to(bf, bf_cfg, "nvfp4"))
    write_case("bf16_to_mxfp4", *float_to(bf, bf_cfg, "mxfp4"))

    write_case("nvfp4_lossy_to_mxfp4", *nv_to_mx(load_folder(lossy)))
    for case in ("wide_to_nvfp4", "bf16_to_nvfp4", "bf16_to_mxfp4", "nvfp4_lossy_to_mxfp4"):
        s = json.loads((OUT / "expected" / f"{case}.json").read_text())
        print(f"{case}: {s['tensors']} tensors, {s['blocks']} blocks, {s['blocks_exact']} exact, "
              f"{s['blocks_requantized']} re-quantized, max error {s['max_abs_error']:.6g}")


if __name__ == "__main__":
    main()
