#!/usr/bin/env python3
"""DeepSeek-V4 checkpoint export: HF state dict -> official on-disk layout.

Library used by tools/gen_dsv4_fixtures.py (and usable on its own). It maps a
Hugging Face `DeepseekV4ForCausalLM` state dict to the tensor names and layout
of DeepSeek's official checkpoint (docs/dsv4.md §3), quantizes every tensor
into the format the real checkpoints store it in (docs/checkpoints.md §1, §2;
bit-level rules in docs/formats.md), writes safetensors shards plus the JSON
metadata, and dequantizes the stored bytes back so that an oracle can run on
exactly the values a reader of the files will see.

Formats (all quantizers follow docs/formats.md):
  - FP8 block-128 : F8_E4M3 weight + F8_E8M0 `.scale` [ceil(out/128), ceil(in/128)],
                    scale = smallest power of two >= amax(tile)/448.
  - MXFP4         : I8 [out, in/2] (element 2j = low nibble of byte j) + F8_E8M0
                    `.scale` [out, in/32], shared_exp = floor(log2(amax)) - 2.
  - NVFP4         : U8 `.weight` [out, in/2], F8_E4M3 `.weight_scale` [out, in/16],
                    F32 scalar `.weight_scale_2` (= amax/(6*448), shared by w1/w3),
                    F32 scalar `.input_scale`.
  - BF16 / F32 / I64 as the table in checkpoints.md §1.

Independent element codecs come from `ml_dtypes` (float8_e4m3fn,
float4_e2m1fn, bfloat16); nothing here is shared with nibble's C++ code.
"""
from __future__ import annotations

import json
import math
import pathlib
import re
import struct
from dataclasses import dataclass

import ml_dtypes
import numpy as np

# --------------------------------------------------------------------------------------
# Stored tensors
# --------------------------------------------------------------------------------------

# safetensors dtype string -> (numpy dtype used to hold the raw bytes, bytes per element)
_RAW_DTYPES = {
    "BF16": (np.uint16, 2),
    "F32": (np.float32, 4),
    "I64": (np.int64, 8),
    "I32": (np.int32, 4),
    "I8": (np.int8, 1),
    "U8": (np.uint8, 1),
    "F8_E4M3": (np.uint8, 1),
    "F8_E8M0": (np.uint8, 1),
}


@dataclass
class Stored:
    """One tensor as it lies on disk: safetensors dtype string + raw array."""

    dtype: str
    data: np.ndarray  # raw bits, numpy dtype from _RAW_DTYPES[dtype]

    def __post_init__(self):
        want = _RAW_DTYPES[self.dtype][0]
        if self.data.dtype != want:
            raise TypeError(f"{self.dtype} tensor held as {self.data.dtype}, want {want}")
        self.data = np.asarray(self.data, order="C")  # keeps 0-d scalars 0-d


# --------------------------------------------------------------------------------------
# Element codecs (via ml_dtypes)
# --------------------------------------------------------------------------------------


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bf16 value (RNE), returned as float32."""
    return x.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return b.view(ml_dtypes.bfloat16).astype(np.float32)


def to_e4m3_bits(x: np.ndarray) -> np.ndarray:
    """RNE to E4M3fn. Callers guarantee |x| <= 448 (ml_dtypes gives NaN above)."""
    x = np.asarray(x, np.float32)
    if np.any(np.abs(x) > 448.0):
        raise ValueError("E4M3 overflow")
    return x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def from_e4m3_bits(b: np.ndarray) -> np.ndarray:
    return b.view(ml_dtypes.float8_e4m3fn).astype(np.float32)


def from_e8m0_bits(b: np.ndarray) -> np.ndarray:
    """UE8M0: 2^(e-127); 0xFF is NaN and never written here."""
    e = b.astype(np.int32)
    if np.any(e == 255):
        raise ValueError("E8M0 NaN code")
    return np.ldexp(np.float32(1.0), e - 127).astype(np.float32)


def to_e2m1_codes(x: np.ndarray) -> np.ndarray:
    """RNE to E2M1 saturating at +-6 -> 4-bit codes (bit 3 = sign) in uint8."""
    x = np.clip(np.asarray(x, np.float32), -6.0, 6.0)
    return x.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0x0F


def from_e2m1_codes(c: np.ndarray) -> np.ndarray:
    return (c.astype(np.uint8) & 0x0F).view(ml_dtypes.float4_e2m1fn).astype(np.float32)


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """[out, in] codes -> [out, in/2] bytes; element 2j is the LOW nibble of byte j."""
    lo = codes[:, 0::2].astype(np.uint8)
    hi = codes[:, 1::2].astype(np.uint8)
    return (lo | (hi << 4)).astype(np.uint8)


def unpack_nibbles(packed: np.ndarray) -> np.ndarray:
    p = packed.view(np.uint8)
    out = np.empty((p.shape[0], p.shape[1] * 2), np.uint8)
    out[:, 0::2] = p & 0x0F
    out[:, 1::2] = p >> 4
    return out


def _floor_log2(a: np.ndarray) -> np.ndarray:
    """Exact floor(log2(a)) for positive finite float32 (frexp, no log rounding)."""
    _, e = np.frexp(a.astype(np.float32))
    return (e - 1).astype(np.int32)


def _ceil_log2(a: np.ndarray) -> np.ndarray:
    """Exact ceil(log2(a)) for positive finite float32."""
    m, e = np.frexp(a.astype(np.float32))  # a = m * 2^e, m in [0.5, 1)
    return np.where(m == 0.5, e - 1, e).astype(np.int32)


# --------------------------------------------------------------------------------------
# Block formats
# --------------------------------------------------------------------------------------


def quantize_fp8_block(w: np.ndarray) -> tuple[Stored, Stored]:
    """FP8 block-128 with UE8M0 scales: per 128x128 tile, scale = 2^ceil(log2(amax/448))."""
    w = np.asarray(w, np.float32)
    out_dim, in_dim = w.shape
    to, ti = -(-out_dim // 128), -(-in_dim // 128)
    q = np.empty((out_dim, in_dim), np.uint8)
    sc = np.empty((to, ti), np.uint8)
    for i in range(to):
        for j in range(ti):
            tile = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            amax = np.float32(np.max(np.abs(tile)))
            # amax/448 computed in float64 so the power of two really is >= it.
            e = 0 if amax == 0 else math.ceil(math.log2(float(amax) / 448.0))
            while amax != 0 and float(amax) / 2.0 ** e > 448.0:
                e += 1
            while amax != 0 and float(amax) / 2.0 ** (e - 1) <= 448.0:
                e -= 1
            e = max(-127, min(127, e))
            sc[i, j] = e + 127
            q[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = to_e4m3_bits(tile / np.float32(2.0 ** e))
    return Stored("F8_E4M3", q), Stored("F8_E8M0", sc)


def dequantize_fp8_block(weight: Stored, scale: Stored) -> np.ndarray:
    w = from_e4m3_bits(weight.data)
    s = from_e8m0_bits(scale.data)
    s_full = np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)[: w.shape[0], : w.shape[1]]
    return (w * s_full).astype(np.float32)


def quantize_mxfp4(w: np.ndarray) -> tuple[Stored, Stored]:
    """OCP MXFP4: 32-element row blocks, shared_exp = floor(log2(amax)) - 2."""
    w = np.asarray(w, np.float32)
    out_dim, in_dim = w.shape
    if in_dim % 32:
        raise ValueError(f"MXFP4 needs in % 32 == 0, got {in_dim}")
    blocks = w.reshape(out_dim, in_dim // 32, 32)
    amax = np.max(np.abs(blocks), axis=-1)
    safe = np.where(amax > 0, amax, np.float32(1.0))
    shared = np.clip(_floor_log2(safe) - 2, -127, 127)
    shared = np.where(amax > 0, shared, 0)
    scaled = blocks / np.ldexp(np.float32(1.0), shared)[..., None].astype(np.float32)
    codes = to_e2m1_codes(scaled).reshape(out_dim, in_dim)
    packed = pack_nibbles(codes).view(np.int8)
    return Stored("I8", packed), Stored("F8_E8M0", (shared + 127).astype(np.uint8))


def dequantize_mxfp4(weight: Stored, scale: Stored) -> np.ndarray:
    codes = unpack_nibbles(weight.data)
    vals = from_e2m1_codes(codes)
    s = from_e8m0_bits(scale.data)
    return (vals * np.repeat(s, 32, axis=1)).astype(np.float32)


def nvfp4_global_scale(*ws: np.ndarray) -> np.float32:
    """ModelOpt weight_scale_2 = amax / (6 * 448), over all tensors that share it."""
    amax = max(float(np.max(np.abs(w))) for w in ws)
    return np.float32(np.float32(amax) / np.float32(6.0 * 448.0))


def quantize_nvfp4(w: np.ndarray, s_g: np.float32) -> tuple[Stored, Stored]:
    """NVFP4: 16-element blocks, s_b = E4M3(amax_b / 6 / s_g), codes RNE(x/(s_b*s_g))."""
    w = np.asarray(w, np.float32)
    out_dim, in_dim = w.shape
    if in_dim % 16:
        raise ValueError(f"NVFP4 needs in % 16 == 0, got {in_dim}")
    blocks = w.reshape(out_dim, in_dim // 16, 16)
    amax = np.max(np.abs(blocks), axis=-1).astype(np.float32)
    sb_bits = to_e4m3_bits(np.minimum(amax / np.float32(6.0) / s_g, np.float32(448.0)))
    s_b = from_e4m3_bits(sb_bits)
    denom = (s_b * s_g).astype(np.float32)
    safe = np.where(denom > 0, denom, np.float32(1.0))
    scaled = np.where((denom > 0)[..., None], blocks / safe[..., None], np.float32(0.0))
    codes = to_e2m1_codes(scaled).reshape(out_dim, in_dim)
    return Stored("U8", pack_nibbles(codes)), Stored("F8_E4M3", sb_bits)


def dequantize_nvfp4(weight: Stored, weight_scale: Stored, weight_scale_2: Stored) -> np.ndarray:
    """value = (E2M1 * s_b) * s_g in float32 (the first product is exact)."""
    vals = from_e2m1_codes(unpack_nibbles(weight.data))
    s_b = np.repeat(from_e4m3_bits(weight_scale.data), 16, axis=1)
    s_g = np.float32(weight_scale_2.data.reshape(()))
    return ((vals * s_b).astype(np.float32) * s_g).astype(np.float32)


# --------------------------------------------------------------------------------------
# Names: HF <-> official
# --------------------------------------------------------------------------------------

# (HF suffix under model.layers.N., official suffix under layers.N.)
_LAYER_RENAMES = [
    ("input_layernorm.weight", "attn_norm.weight"),
    ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ("attn_hc.fn", "hc_attn_fn"),
    ("attn_hc.base", "hc_attn_base"),
    ("attn_hc.scale", "hc_attn_scale"),
    ("ffn_hc.fn", "hc_ffn_fn"),
    ("ffn_hc.base", "hc_ffn_base"),
    ("ffn_hc.scale", "hc_ffn_scale"),
    ("self_attn.q_a_proj.weight", "attn.wq_a.weight"),
    ("self_attn.q_a_norm.weight", "attn.q_norm.weight"),
    ("self_attn.q_b_proj.weight", "attn.wq_b.weight"),
    ("self_attn.kv_proj.weight", "attn.wkv.weight"),
    ("self_attn.kv_norm.weight", "attn.kv_norm.weight"),
    ("self_attn.o_a_proj.weight", "attn.wo_a.weight"),
    ("self_attn.o_b_proj.weight", "attn.wo_b.weight"),
    ("self_attn.sinks", "attn.attn_sink"),
    ("self_attn.compressor.kv_proj.weight", "attn.compressor.wkv.weight"),
    ("self_attn.compressor.gate_proj.weight", "attn.compressor.wgate.weight"),
    ("self_attn.compressor.position_bias", "attn.compressor.ape"),
    ("self_attn.compressor.kv_norm.weight", "attn.compressor.norm.weight"),
    ("self_attn.compressor.indexer.q_b_proj.weight", "attn.indexer.wq_b.weight"),
    ("self_attn.compressor.indexer.scorer.weights_proj.weight", "attn.indexer.weights_proj.weight"),
    ("self_attn.compressor.indexer.kv_proj.weight", "attn.indexer.compressor.wkv.weight"),
    ("self_attn.compressor.indexer.gate_proj.weight", "attn.indexer.compressor.wgate.weight"),
    ("self_attn.compressor.indexer.position_bias", "attn.indexer.compressor.ape"),
    ("self_attn.compressor.indexer.kv_norm.weight", "attn.indexer.compressor.norm.weight"),
    ("mlp.gate.weight", "ffn.gate.weight"),
    ("mlp.gate.e_score_correction_bias", "ffn.gate.bias"),
    ("mlp.gate.tid2eid", "ffn.gate.tid2eid"),
    ("mlp.shared_experts.gate_proj.weight", "ffn.shared_experts.w1.weight"),
    ("mlp.shared_experts.up_proj.weight", "ffn.shared_experts.w3.weight"),
    ("mlp.shared_experts.down_proj.weight", "ffn.shared_experts.w2.weight"),
]
_GLOBAL_RENAMES = [
    ("model.embed_tokens.weight", "embed.weight"),
    ("lm_head.weight", "head.weight"),
    ("model.norm.weight", "norm.weight"),
    ("model.hc_head.hc_fn", "hc_head_fn"),
    ("model.hc_head.hc_base", "hc_head_base"),
    ("model.hc_head.hc_scale", "hc_head_scale"),
]
_HF_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_OFF_LAYER = re.compile(r"^(layers\.\d+|mtp\.\d+)\.(.+)$")


def hf_to_official(sd: dict[str, np.ndarray], moe_intermediate: int) -> dict[str, np.ndarray]:
    """HF state dict (float arrays) -> official names, experts unstacked, still float."""
    out: dict[str, np.ndarray] = {}
    g = dict(_GLOBAL_RENAMES)
    l = dict(_LAYER_RENAMES)
    for name, t in sd.items():
        if name in g:
            out[g[name]] = t
            continue
        m = _HF_LAYER.match(name)
        if not m:
            raise KeyError(f"unmapped HF tensor {name}")
        layer, rest = m.group(1), m.group(2)
        prefix = f"layers.{layer}."
        if rest == "mlp.experts.gate_up_proj":  # [E, 2I, D]: w1 rows then w3 rows
            for e in range(t.shape[0]):
                out[f"{prefix}ffn.experts.{e}.w1.weight"] = t[e, :moe_intermediate]
                out[f"{prefix}ffn.experts.{e}.w3.weight"] = t[e, moe_intermediate:]
        elif rest == "mlp.experts.down_proj":  # [E, D, I]
            for e in range(t.shape[0]):
                out[f"{prefix}ffn.experts.{e}.w2.weight"] = t[e]
        elif rest in l:
            out[prefix + l[rest]] = t
        else:
            raise KeyError(f"unmapped HF tensor {name}")
    return out


def official_to_hf(off: dict[str, np.ndarray], num_layers: int, num_experts: int) -> dict[str, np.ndarray]:
    """Inverse of hf_to_official for the main model (mtp.* is dropped, as HF does)."""
    g = {v: k for k, v in _GLOBAL_RENAMES}
    l = {v: k for k, v in _LAYER_RENAMES}
    out: dict[str, np.ndarray] = {}
    for name, t in off.items():
        if name.startswith("mtp."):
            continue
        if name in g:
            out[g[name]] = t
            continue
        m = _OFF_LAYER.match(name)
        if not m:
            raise KeyError(f"unmapped official tensor {name}")
        prefix, rest = m.group(1), m.group(2)
        layer = int(prefix.split(".")[1])
        if rest.startswith("ffn.experts."):
            continue  # stacked below
        if rest not in l:
            raise KeyError(f"unmapped official tensor {name}")
        out[f"model.layers.{layer}.{l[rest]}"] = t
    for layer in range(num_layers):
        p = f"layers.{layer}.ffn.experts."
        gate_up = [np.concatenate([off[f"{p}{e}.w1.weight"], off[f"{p}{e}.w3.weight"]], axis=0)
                   for e in range(num_experts)]
        down = [off[f"{p}{e}.w2.weight"] for e in range(num_experts)]
        out[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = np.stack(gate_up)
        out[f"model.layers.{layer}.mlp.experts.down_proj"] = np.stack(down)
    return out


# --------------------------------------------------------------------------------------
# Which format each official tensor is stored in (checkpoints.md §1)
# --------------------------------------------------------------------------------------

_FP8_SUFFIXES = (
    "attn.wq_a.weight", "attn.wq_b.weight", "attn.wkv.weight", "attn.wo_a.weight", "attn.wo_b.weight",
    "attn.indexer.wq_b.weight",
    "ffn.shared_experts.w1.weight", "ffn.shared_experts.w2.weight", "ffn.shared_experts.w3.weight",
    "e_proj.weight", "h_proj.weight",
)
_F32_SUFFIXES = ("attn.attn_sink", "compressor.ape", "ffn.gate.bias")
_EXPERT = re.compile(r"^(?:layers|mtp)\.\d+\.ffn\.experts\.\d+\.w[123]\.weight$")


def storage_kind(name: str) -> str:
    """'expert' | 'fp8' | 'f32' | 'i64' | 'bf16' for an official tensor name."""
    if _EXPERT.match(name):
        return "expert"
    base = name.split(".", 2)[-1] if _OFF_LAYER.match(name) else name
    if name.endswith("tid2eid"):
        return "i64"
    if any(base == s for s in _FP8_SUFFIXES):
        return "fp8"
    leaf = name.rsplit(".", 1)[-1]
    if leaf.startswith("hc_") or any(name.endswith(s) for s in _F32_SUFFIXES):
        return "f32"
    return "bf16"


def quantize_checkpoint(
    off: dict[str, np.ndarray],
    layout: str,
    expert_dtype: str = "fp4",
    input_amax: dict[str, float] | None = None,
) -> dict[str, Stored]:
    """Float official tensors -> stored tensors.

    layout "stock": experts MXFP4 (expert_dtype "fp4") or FP8 block (expert_dtype "fp8").
    layout "nvfp4": main-model experts NVFP4 (ModelOpt); mtp.* experts stay MXFP4.
    input_amax maps an expert projection prefix ("layers.0.ffn.experts.3.w1") to the
    calibration activation amax; missing entries default to 1.0.
    """
    if layout not in ("stock", "nvfp4"):
        raise ValueError(layout)
    stored: dict[str, Stored] = {}
    for name in sorted(off):
        t = off[name]
        kind = storage_kind(name)
        if kind == "bf16":
            stored[name] = Stored("BF16", to_bf16_bits(t))
        elif kind == "f32":
            stored[name] = Stored("F32", np.asarray(t, np.float32))
        elif kind == "i64":
            stored[name] = Stored("I64", np.asarray(t, np.int64))
        elif kind == "fp8":
            w, s = quantize_fp8_block(t)
            stored[name] = w
            stored[name[: -len("weight")] + "scale"] = s
        elif kind == "expert":
            stem = name[: -len(".weight")]
            if layout == "nvfp4" and not name.startswith("mtp."):
                continue  # done per expert below (w1/w3 share weight_scale_2)
            if expert_dtype == "fp8":
                w, s = quantize_fp8_block(t)
            else:
                w, s = quantize_mxfp4(t)
            stored[name] = w
            stored[stem + ".scale"] = s
    if layout == "nvfp4":
        experts = sorted({n.rsplit(".", 2)[0] for n in off if _EXPERT.match(n) and not n.startswith("mtp.")})
        for ex in experts:  # "layers.L.ffn.experts.E"
            pairs = [("w1", "w3"), ("w2",)]
            for group in pairs:
                ws = [off[f"{ex}.{p}.weight"] for p in group]
                s_g = nvfp4_global_scale(*ws)
                amax_in = max((input_amax or {}).get(f"{ex}.{p}", 1.0) for p in group)
                in_scale = np.float32(np.float32(amax_in) / np.float32(6.0 * 448.0))
                for p, w in zip(group, ws):
                    q, sb = quantize_nvfp4(w, s_g)
                    stored[f"{ex}.{p}.weight"] = q
                    stored[f"{ex}.{p}.weight_scale"] = sb
                    stored[f"{ex}.{p}.weight_scale_2"] = Stored("F32", np.array(s_g, np.float32).reshape(()))
                    stored[f"{ex}.{p}.input_scale"] = Stored("F32", np.array(in_scale, np.float32).reshape(()))
    return stored


def dequantize_checkpoint(stored: dict[str, Stored]) -> dict[str, np.ndarray]:
    """Stored tensors -> float32 (int64 for tid2eid) official tensors, from the raw bytes."""
    out: dict[str, np.ndarray] = {}
    for name, st in stored.items():
        if name.endswith((".scale", ".weight_scale", ".weight_scale_2", ".input_scale")):
            continue
        if st.dtype == "BF16":
            out[name] = from_bf16_bits(st.data)
        elif st.dtype in ("F32", "I64", "I32"):
            out[name] = st.data.copy()
        elif st.dtype == "F8_E4M3":
            out[name] = dequantize_fp8_block(st, stored[name[: -len("weight")] + "scale"])
        elif st.dtype == "I8":
            out[name] = dequantize_mxfp4(st, stored[name[: -len("weight")] + "scale"])
        elif st.dtype == "U8":
            stem = name[: -len("weight")]
            out[name] = dequantize_nvfp4(st, stored[stem + "weight_scale"], stored[stem + "weight_scale_2"])
        else:
            raise ValueError(f"{name}: cannot dequantize {st.dtype}")
    return out


# --------------------------------------------------------------------------------------
# safetensors writer (small and explicit, so every dtype string is under our control)
# --------------------------------------------------------------------------------------


def write_safetensors(path: pathlib.Path, tensors: dict[str, Stored], metadata: dict[str, str] | None = None):
    header: dict = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    names = sorted(tensors)
    for name in names:
        st = tensors[name]
        nbytes = st.data.nbytes
        header[name] = {"dtype": st.dtype, "shape": list(st.data.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * ((8 - len(hjson) % 8) % 8)  # align the data section to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for name in names:
            f.write(tensors[name].data.astype(tensors[name].data.dtype.newbyteorder("<"), copy=False).tobytes())


def _shard_key(name: str) -> tuple:
    """Order tensors so that shards split along layers, like the real checkpoints."""
    m = re.match(r"^(layers|mtp)\.(\d+)\.", name)
    if m:
        return (1 if m.group(1) == "layers" else 2, int(m.group(2)), name)
    return (0, 0, name)


def write_checkpoint(folder: pathlib.Path, stored: dict[str, Stored], n_shards: int) -> None:
    """One model.safetensors (n_shards == 1) or model-0000k-of-0000n shards + index."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("model*.safetensors*"):
        old.unlink()
    meta = {"format": "pt"}
    if n_shards == 1:
        write_safetensors(folder / "model.safetensors", stored, meta)
        return
    names = sorted(stored, key=_shard_key)
    total = sum(stored[n].data.nbytes for n in names)
    target = total / n_shards
    shards: list[list[str]] = [[]]
    acc = 0
    for n in names:
        if acc >= target * len(shards) and len(shards) < n_shards:
            shards.append([])
        shards[-1].append(n)
        acc += stored[n].data.nbytes
    weight_map = {}
    for k, shard_names in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(folder / fname, {n: stored[n] for n in shard_names}, meta)
        for n in shard_names:
            weight_map[n] = fname
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


# --------------------------------------------------------------------------------------
# JSON metadata
# --------------------------------------------------------------------------------------

FP8_QUANT_STANZA = {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "scale_fmt": "ue8m0",
    "weight_block_size": [128, 128],
}


def nvfp4_metadata(num_layers: int, modelopt_version: str = "0.37.0") -> tuple[dict, dict]:
    """(hf_quant_config.json, extra quantization_config keys) in ModelOpt's current schema."""
    quantized = {f"layers.{i}.ffn.experts": {"quant_algo": "NVFP4", "group_size": 16} for i in range(num_layers)}
    exclude = ["*.attn.*", "*.ffn.shared_experts.*", "*.ffn.gate*", "head", "embed", "mtp.*"]
    hf_quant = {
        "producer": {"name": "modelopt", "version": modelopt_version},
        "quantization": {
            "quant_algo": "MIXED_PRECISION",
            "kv_cache_quant_algo": None,
            "group_size": 16,
            "quantized_layers": quantized,
            "exclude_modules": exclude,
        },
    }
    extra = {
        "moe_quant_algo": "NVFP4",
        "quant_algo": "MIXED_PRECISION",
        "group_size": 16,
        "quantized_layers": quantized,
        "ignore": exclude,
        "config_groups": {
            "group_0": {
                "targets": [f"layers.{i}.ffn.experts" for i in range(num_layers)],
                "weights": {"num_bits": 4, "type": "float", "group_size": 16, "dynamic": False},
                "input_activations": {"num_bits": 4, "type": "float", "group_size": 16, "dynamic": False},
            }
        },
    }
    return hf_quant, extra


def generation_config(bos: int = 0, eos: int = 1) -> dict:
    return {
        "_from_model_config": True,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "do_sample": True,
        "temperature": 1.0,
        "top_p": 1.0,
        "transformers_version": "4.57.1",
    }


def self_test() -> None:
    """Hand-computed cases for the quantizers (docs/formats.md), run by the generator."""
    # FP8 block: scale is the smallest power of two >= amax/448.
    for amax, want_e in ((448.0, 0), (449.0, 1), (3 * 448.0, 2), (0.5, -9), (448.0 * 2 ** -20, -20)):
        w = np.zeros((3, 5), np.float32)
        w[1, 2] = -amax
        q, s = quantize_fp8_block(w)
        assert s.data.shape == (1, 1) and int(s.data[0, 0]) - 127 == want_e, (amax, s.data)
        if amax in (448.0, 0.5):  # exactly representable after scaling
            assert dequantize_fp8_block(q, s)[1, 2] == np.float32(-amax)
    # FP8 tiles: [130, 260] -> scale [2, 3].
    _, s = quantize_fp8_block(np.ones((130, 260), np.float32))
    assert s.data.shape == (2, 3)
    # MXFP4: amax 5 -> shared_exp floor(log2 5) - 2 = 0; 5 ties to 4 (even code), 7 saturates to 6.
    row = np.zeros((1, 32), np.float32)
    row[0, :6] = [5.0, -7.0, 0.25, 0.75, 2.5, -1.5]
    row[0, 6] = 4.9
    q, s = quantize_mxfp4(row)
    assert int(s.data[0, 0]) == 127
    d = dequantize_mxfp4(q, s)[0, :7]
    assert np.array_equal(d, np.array([4, -6, 0, 1, 2, -1.5, 4], np.float32)), d
    # element 0 in the low nibble: code(4.0)=6, code(-6)=0xF -> byte 0xF6.
    assert q.data.view(np.uint8)[0, 0] == 0xF6
    # MXFP4 scale of a block with amax 0.1: floor(log2 0.1) = -4 -> -6.
    q, s = quantize_mxfp4(np.full((1, 32), 0.1, np.float32))
    assert int(s.data[0, 0]) - 127 == -6
    # NVFP4: s_g = amax/(6*448); the block holding amax gets s_b = E4M3(448) = 448.
    w = np.linspace(-1, 3, 32, dtype=np.float32).reshape(1, 32)
    s_g = nvfp4_global_scale(w)
    assert s_g == np.float32(3.0) / np.float32(2688.0)
    q, sb = quantize_nvfp4(w, s_g)
    assert from_e4m3_bits(sb.data)[0, 1] == 448.0
    d = dequantize_nvfp4(q, sb, Stored("F32", np.array(s_g, np.float32)))
    assert abs(float(d[0, -1]) - 3.0) < 1e-6
