#!/usr/bin/env python3
"""Generates the checkpoint fixtures under tests/fixtures/checkpoints/.

Deterministic (fixed seeds). Writes, with the reference `safetensors` library:
  dsv4_stock/          DeepSeek-V4-Flash layout: FP8 block + MXFP4 experts, 2 shards + index
  dsv4_base_fp8/       the -Base variant: expert_dtype "fp8", FP8 block experts
  dsv4_nvfp4_current/  ModelOpt NVFP4 experts, current metadata schema, 2 shards + index
  dsv4_nvfp4_early/    the same weights, early metadata schema (no quantization_config)
  dsv4_bf16/           everything BF16/F32, no quantization metadata
  kimi_compressed_tensors/, gptq/, awq/, gpt_oss_mxfp4/
                       small models in formats nibble recognises but does not run
  manifests/<name>.json
                       every tensor's dtype, shape, shard and FNV-1a 64 of its bytes,
                       computed here: the C++ tests compare what they read against it
  writer/              expected bytes for the streaming writer's tests
  dsv4_flash_skeleton.json
                       compact template of the full DeepSeek-V4-Flash checkpoint
                       (69,187 tensors, 46 shards) that src/checkpoint/skeleton.cpp
                       expands into real headers with sparse data at test time
  dsv4_flash_nvfp4_{current,early}_skeleton.json
                       the same with NVFP4 routed experts (135,235 tensors) and
                       ModelOpt's hf_quant_config.json in either schema (the early
                       one names all 33,024 expert matrices)

Tensor names, dtypes and the config fields follow docs/checkpoints.md and
docs/dsv4.md section 3; only the dimensions are tiny. The NVFP4 experts are
the lossless MXFP4 -> NVFP4 cast of the stock experts (formats.md), so the two
fixtures hold the same FP4 codes, as NVIDIA's release does.

Usage: python3 tools/gen_checkpoint_fixtures.py   (or `make fixtures`)
"""
import copy
import json
import math
import pathlib
import shutil

import ml_dtypes
import numpy as np
import torch
from safetensors.torch import save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "checkpoints"
SHARD_METADATA = {"format": "pt"}

TORCH_DTYPE = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "U16": torch.uint16,
    "I16": torch.int16, "U32": torch.uint32, "I32": torch.int32, "U64": torch.uint64,
    "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32,
    "F64": torch.float64, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
    "F8_E8M0": torch.float8_e8m0fnu,
}
DTYPE_SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "U32": 4, "I32": 4, "U64": 8,
              "I64": 8, "F16": 2, "BF16": 2, "F32": 4, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1,
              "F8_E8M0": 1}


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


class Tensors:
    """Ordered tensors as (dtype name, shape, raw little-endian bytes)."""

    def __init__(self):
        self.items = {}

    def add(self, name, dtype, shape, raw: bytes):
        shape = [int(d) for d in shape]
        assert name not in self.items, name
        assert len(raw) == math.prod(shape) * DTYPE_SIZE[dtype], (name, dtype, shape, len(raw))
        self.items[name] = (dtype, shape, raw)


def to_torch(dtype, shape, raw):
    if len(raw) == 0:
        return torch.zeros(shape, dtype=TORCH_DTYPE[dtype])
    return torch.frombuffer(bytearray(raw), dtype=TORCH_DTYPE[dtype]).reshape(shape).clone()


def write_folder(name, tensors: Tensors, files: dict, shards=None):
    """Writes a checkpoint folder. `shards` maps tensor name -> shard number
    (1-based); None writes a single model.safetensors."""
    folder = OUT / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for fname, obj in files.items():
        (folder / fname).write_text(json.dumps(obj, indent=2) + "\n")
    manifest = {}
    if shards is None:
        groups = {"model.safetensors": list(tensors.items)}
    else:
        n = max(shards.values())
        groups = {}
        for t in tensors.items:
            groups.setdefault(f"model-{shards[t]:05d}-of-{n:05d}.safetensors", []).append(t)
        assert len(groups) == n
    total = 0
    for shard, names in groups.items():
        save_file({t: to_torch(*tensors.items[t]) for t in names}, str(folder / shard),
                  metadata=SHARD_METADATA)
        for t in names:
            dtype, shape, raw = tensors.items[t]
            manifest[t] = {"dtype": dtype, "shape": shape, "shard": shard, "fnv1a64": fnv1a64(raw)}
            total += len(raw)
    if shards is not None:
        index = {"metadata": {"total_size": total},
                 "weight_map": {t: manifest[t]["shard"] for t in manifest}}
        (folder / "model.safetensors.index.json").write_text(
            json.dumps(index, indent=2, sort_keys=True) + "\n")
    mdir = OUT / "manifests"
    mdir.mkdir(exist_ok=True)
    # One line per tensor: "name": [dtype, shape, shard, fnv1a64 of its bytes].
    lines = [f"{json.dumps(t)}: {json.dumps([m['dtype'], m['shape'], m['shard'], m['fnv1a64']])}"
             for t, m in sorted(manifest.items())]
    (mdir / f"{name}.json").write_text(
        f'{{"checkpoint": {json.dumps(name)}, "total_size": {total}, "tensors": {{\n'
        + ",\n".join(lines) + "\n}}\n")


# ---------------------------------------------------------------------------
# Random but valid element bytes.

class Rand:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def bf16(self, shape, std=0.02, mean=0.0):
        x = self.rng.normal(mean, std, size=shape).astype(np.float32)
        return x.astype(ml_dtypes.bfloat16).tobytes()

    def f16(self, shape, std=0.02, mean=0.0):
        return self.rng.normal(mean, std, size=shape).astype(np.float16).tobytes()

    def f32(self, shape, std=0.1, mean=0.0):
        return self.rng.normal(mean, std, size=shape).astype(np.float32).tobytes()

    def e4m3(self, shape, std=64.0):
        # Finite codes only: values well inside +-448 never round to NaN (0x7F/0xFF).
        x = np.clip(self.rng.normal(0.0, std, size=shape), -440.0, 440.0).astype(np.float32)
        b = x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        assert not np.any((b & 0x7F) == 0x7F)
        return b.tobytes()

    def e4m3_positive(self, shape, lo=1.0, hi=448.0):
        # Per-block NVFP4 scales: positive, finite, log-uniform in [lo, hi].
        x = np.exp(self.rng.uniform(math.log(lo), math.log(hi), size=shape)).astype(np.float32)
        return x.astype(ml_dtypes.float8_e4m3fn).tobytes()

    def e8m0(self, shape, lo, hi):
        # Biased exponents in [lo, hi]: 2^(lo-127) .. 2^(hi-127).
        return self.rng.integers(lo, hi + 1, size=shape, dtype=np.uint8).tobytes()

    def fp4_packed(self, shape):
        # Two random E2M1 codes per byte; every nibble is a valid code.
        return self.rng.integers(0, 256, size=shape, dtype=np.uint8).tobytes()

    def i64_table(self, rows, k, n):
        # tid2eid: k distinct expert ids per token id.
        t = np.stack([self.rng.permutation(n)[:k] for _ in range(rows)]).astype(np.int64)
        return t.tobytes()

    def u8(self, shape):
        return self.rng.integers(0, 256, size=shape, dtype=np.uint8).tobytes()

    def i32(self, shape):
        return self.rng.integers(-2**31, 2**31, size=shape, dtype=np.int64).astype(np.int32).tobytes()


# ---------------------------------------------------------------------------
# DeepSeek-V4: tiny configuration and tensor inventory.

TINY = dict(
    vocab_size=128, hidden_size=32, num_hidden_layers=3, num_nextn_predict_layers=1,
    num_attention_heads=8, num_key_value_heads=1, head_dim=32, qk_rope_head_dim=8,
    q_lora_rank=16, o_groups=2, o_lora_rank=16, sliding_window=8,
    moe_intermediate_size=32, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
    num_hash_layers=1, index_n_heads=2, index_head_dim=16, index_topk=4, hc_mult=4,
    # Layer 0 SWA (hash-routed), 1 CSA, 2 HCA; the MTP layer (last entry) SWA.
    compress_ratios=[0, 4, 128, 0],
)


def dsv4_config(dims, expert_dtype="fp4", quantization_config="fp8"):
    c = {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "vocab_size": dims["vocab_size"],
        "hidden_size": dims["hidden_size"],
        "num_hidden_layers": dims["num_hidden_layers"],
        "num_nextn_predict_layers": dims["num_nextn_predict_layers"],
        "num_attention_heads": dims["num_attention_heads"],
        "num_key_value_heads": dims["num_key_value_heads"],
        "head_dim": dims["head_dim"],
        "qk_rope_head_dim": dims["qk_rope_head_dim"],
        "q_lora_rank": dims["q_lora_rank"],
        "o_groups": dims["o_groups"],
        "o_lora_rank": dims["o_lora_rank"],
        "sliding_window": dims["sliding_window"],
        "moe_intermediate_size": dims["moe_intermediate_size"],
        "n_routed_experts": dims["n_routed_experts"],
        "n_shared_experts": dims["n_shared_experts"],
        "num_experts_per_tok": dims["num_experts_per_tok"],
        "num_hash_layers": dims["num_hash_layers"],
        "scoring_func": "sqrtsoftplus",
        "topk_method": "noaux_tc",
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.5,
        "swiglu_limit": 10.0,
        "hidden_act": "silu",
        "index_n_heads": dims["index_n_heads"],
        "index_head_dim": dims["index_head_dim"],
        "index_topk": dims["index_topk"],
        "hc_mult": dims["hc_mult"],
        "hc_sinkhorn_iters": 20,
        "hc_eps": 1e-06,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000,
        "compress_rope_theta": 160000,
        "max_position_embeddings": dims.get("max_position_embeddings", 4096),
        "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings":
                         dims.get("original_max_position_embeddings", 256),
                         "beta_fast": 32, "beta_slow": 1},
        "compress_ratios": dims["compress_ratios"],
        "bos_token_id": 0,
        "eos_token_id": 1,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    if expert_dtype is not None:
        c["expert_dtype"] = expert_dtype
    if quantization_config == "fp8":
        c["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                    "activation_scheme": "dynamic", "scale_fmt": "ue8m0",
                                    "weight_block_size": [128, 128]}
    return c


def fp8_scale_shape(out, inp):
    return [(out + 127) // 128, (inp + 127) // 128]


def dsv4_inventory(d):
    """[(name, kind, [out, in] or shape, dtype)] for every tensor of a DSV4
    checkpoint with dims `d`. kind: 'fp8' (a linear stored FP8 block-128 in the
    stock checkpoint: .weight + .scale), 'expert' (routed expert projection),
    or 'plain' (stored as is with the given dtype)."""
    H, V, HC = d["hidden_size"], d["vocab_size"], d["hc_mult"]
    heads, hd = d["num_attention_heads"], d["head_dim"]
    ql, og, ol = d["q_lora_rank"], d["o_groups"], d["o_lora_rank"]
    E, I, K = d["n_routed_experts"], d["moe_intermediate_size"], d["num_experts_per_tok"]
    ih, idim = d["index_n_heads"], d["index_head_dim"]
    mix = (2 + HC) * HC
    inv = []

    def plain(name, dtype, shape):
        inv.append((name, "plain", list(shape), dtype))

    def fp8(name, out, inp):
        inv.append((name, "fp8", [out, inp], None))

    def block(p, hash_layer, ratio):
        plain(p + "attn_norm.weight", "BF16", [H])
        plain(p + "ffn_norm.weight", "BF16", [H])
        for k in ("attn", "ffn"):
            plain(p + f"hc_{k}_fn", "F32", [mix, HC * H])
            plain(p + f"hc_{k}_base", "F32", [mix])
            plain(p + f"hc_{k}_scale", "F32", [3])
        fp8(p + "attn.wq_a", ql, H)
        plain(p + "attn.q_norm.weight", "BF16", [ql])
        fp8(p + "attn.wq_b", heads * hd, ql)
        fp8(p + "attn.wkv", hd, H)
        plain(p + "attn.kv_norm.weight", "BF16", [hd])
        fp8(p + "attn.wo_a", og * ol, heads * hd // og)
        fp8(p + "attn.wo_b", H, og * ol)
        plain(p + "attn.attn_sink", "F32", [heads])
        if ratio == 4:  # CSA: overlapping compressor (2 series) + Lightning Indexer
            plain(p + "attn.compressor.wkv.weight", "BF16", [2 * hd, H])
            plain(p + "attn.compressor.wgate.weight", "BF16", [2 * hd, H])
            plain(p + "attn.compressor.ape", "F32", [4, 2 * hd])
            plain(p + "attn.compressor.norm.weight", "BF16", [hd])
            fp8(p + "attn.indexer.wq_b", ih * idim, ql)
            plain(p + "attn.indexer.weights_proj.weight", "BF16", [ih, H])
            plain(p + "attn.indexer.compressor.wkv.weight", "BF16", [2 * idim, H])
            plain(p + "attn.indexer.compressor.wgate.weight", "BF16", [2 * idim, H])
            plain(p + "attn.indexer.compressor.ape", "F32", [4, 2 * idim])
            plain(p + "attn.indexer.compressor.norm.weight", "BF16", [idim])
        elif ratio == 128:  # HCA
            plain(p + "attn.compressor.wkv.weight", "BF16", [hd, H])
            plain(p + "attn.compressor.wgate.weight", "BF16", [hd, H])
            plain(p + "attn.compressor.ape", "F32", [128, hd])
            plain(p + "attn.compressor.norm.weight", "BF16", [hd])
        plain(p + "ffn.gate.weight", "BF16", [E, H])
        if hash_layer:
            plain(p + "ffn.gate.tid2eid", "I64", [V, K])
        else:
            plain(p + "ffn.gate.bias", "F32", [E])
        sh = I * d["n_shared_experts"]
        fp8(p + "ffn.shared_experts.w1", sh, H)
        fp8(p + "ffn.shared_experts.w2", H, sh)
        fp8(p + "ffn.shared_experts.w3", sh, H)
        for e in range(E):
            for w, (o, i) in (("w1", (I, H)), ("w2", (H, I)), ("w3", (I, H))):
                inv.append((p + f"ffn.experts.{e}.{w}", "expert", [o, i], None))

    plain("embed.weight", "BF16", [V, H])
    ratios = d["compress_ratios"]
    for i in range(d["num_hidden_layers"]):
        block(f"layers.{i}.", i < d["num_hash_layers"], ratios[i])
    plain("norm.weight", "BF16", [H])
    plain("head.weight", "BF16", [V, H])
    plain("hc_head_fn", "F32", [HC, HC * H])
    plain("hc_head_base", "F32", [HC])
    plain("hc_head_scale", "F32", [1])
    for m in range(d["num_nextn_predict_layers"]):
        p = f"mtp.{m}."
        block(p, False, ratios[d["num_hidden_layers"] + m])
        fp8(p + "e_proj", H, H)
        fp8(p + "h_proj", H, H)
        plain(p + "enorm.weight", "BF16", [H])
        plain(p + "hnorm.weight", "BF16", [H])
        plain(p + "norm.weight", "BF16", [H])
        plain(p + "hc_head_fn", "F32", [HC, HC * H])
        plain(p + "hc_head_base", "F32", [HC])
        plain(p + "hc_head_scale", "F32", [1])
    return inv


def plain_bytes(r: Rand, name, dtype, shape):
    if dtype == "BF16":
        if name.endswith("norm.weight"):
            return r.bf16(shape, std=0.05, mean=1.0)
        return r.bf16(shape)
    if dtype == "F32":
        return r.f32(shape)
    if dtype == "I64":
        return r.i64_table(shape[0], shape[1], TINY["n_routed_experts"])
    raise ValueError(dtype)


# MXFP4 expert scale exponents: 2^-10 .. 2^-4, well within the 17-octave
# window of the lossless NVFP4 cast.
MX_E_LO, MX_E_HI = 117, 123


def mxfp4_expert(r: Rand, out, inp):
    return r.fp4_packed([out, inp // 2]), r.e8m0([out, inp // 32], MX_E_LO, MX_E_HI)


def mx_to_nvfp4_scales(scale_bytes_list):
    """Lossless MXFP4 -> NVFP4 scales (formats.md) for tensors sharing one
    global scale: returns (s_g float, [per-tensor E4M3 block scale bytes])."""
    ks = [np.frombuffer(s, dtype=np.uint8).astype(np.int32) - 127 for s in scale_bytes_list]
    k_max = max(int(k.max()) for k in ks)
    s_g = np.float32(2.0 ** (k_max - 8))
    out = []
    for k in ks:
        assert int(k.min()) >= k_max - 17
        sb = np.repeat(np.exp2((k - k_max + 8).astype(np.float32)), 2)  # both 16-halves
        e4 = sb.astype(ml_dtypes.float8_e4m3fn)
        assert np.all(e4.astype(np.float32) == sb)  # exact powers of two
        out.append(e4.tobytes())
    return s_g, out


def build_dsv4(d, variant, seed):
    """variant: stock | base_fp8 | nvfp4 | bf16. Every variant draws the same
    random stream for the shared tensors, so non-expert tensors (and, for
    nvfp4, the FP4 codes) agree with the stock fixture."""
    r = Rand(seed)
    t = Tensors()
    experts = {}  # stock MXFP4 experts, for the NVFP4 cast
    for name, kind, shape, dtype in dsv4_inventory(d):
        if kind == "plain":
            t.add(name, dtype, shape, plain_bytes(r, name, dtype, shape))
        elif kind == "fp8":
            out, inp = shape
            w = r.e4m3([out, inp])
            s = r.e8m0(fp8_scale_shape(out, inp), 119, 123)
            if variant == "bf16":
                t.add(name + ".weight", "BF16", [out, inp], r.bf16([out, inp]))
            else:
                t.add(name + ".weight", "F8_E4M3", [out, inp], w)
                t.add(name + ".scale", "F8_E8M0", fp8_scale_shape(out, inp), s)
        else:  # routed expert projection [out, in]
            out, inp = shape
            w, s = mxfp4_expert(r, out, inp)
            fp8w = r.e4m3([out, inp])
            fp8s = r.e8m0(fp8_scale_shape(out, inp), 119, 123)
            if variant == "stock" or (variant == "nvfp4" and name.startswith("mtp.")):
                t.add(name + ".weight", "I8", [out, inp // 2], w)
                t.add(name + ".scale", "F8_E8M0", [out, inp // 32], s)
            elif variant == "nvfp4":
                experts[name] = (out, inp, w, s)
                t.add(name + ".weight", "U8", [out, inp // 2], w)  # scales added below
            elif variant == "base_fp8":
                t.add(name + ".weight", "F8_E4M3", [out, inp], fp8w)
                t.add(name + ".scale", "F8_E8M0", fp8_scale_shape(out, inp), fp8s)
            else:
                t.add(name + ".weight", "BF16", [out, inp], r.bf16([out, inp]))
    if variant == "nvfp4":
        # w1 and w3 of an expert share weight_scale_2 and input_scale.
        for name in [n for n in experts if n.endswith(".w1")]:
            base = name[:-3]
            for group in ((base + ".w1", base + ".w3"), (base + ".w2",)):
                s_g, block_scales = mx_to_nvfp4_scales([experts[g][3] for g in group])
                input_scale = np.float32(r.rng.uniform(0.5, 2.0) / (6 * 448))
                for g, bs in zip(group, block_scales):
                    out, inp = experts[g][0], experts[g][1]
                    t.add(g + ".weight_scale", "F8_E4M3", [out, inp // 16], bs)
                    t.add(g + ".weight_scale_2", "F32", [], np.float32(s_g).tobytes())
                    t.add(g + ".input_scale", "F32", [], input_scale.tobytes())
    return t


def dsv4_shards(t: Tensors):
    """Two shards: embedding + the first two layers, then the rest."""
    def shard(name):
        if name.startswith("embed.") or name.startswith("layers.0.") or name.startswith("layers.1."):
            return 1
        return 2
    return {n: shard(n) for n in t.items}


def expert_modules(d, prefix="layers"):
    return [f"{prefix}.{i}.ffn.experts" for i in range(d["num_hidden_layers"])]


def nvfp4_current_files(d):
    quantized = {m: {"quant_algo": "NVFP4", "group_size": 16} for m in expert_modules(d)}
    exclude = ["*.attn.*", "*.ffn.shared_experts.*", "head", "mtp.*"]
    hf_quant = {
        "producer": {"name": "modelopt", "version": "0.39.0"},
        "quantization": {"quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": None,
                         "group_size": 16, "quantized_layers": quantized,
                         "exclude_modules": exclude},
    }
    config = dsv4_config(d)
    qc = config["quantization_config"]
    qc.update({
        "moe_quant_algo": "NVFP4",
        "quant_algo": "MIXED_PRECISION",
        "group_size": 16,
        "quantized_layers": quantized,
        "ignore": exclude,
        "config_groups": {"group_0": {
            "targets": [f"re:{m}\\..*" for m in expert_modules(d)],
            "weights": {"num_bits": 4, "type": "float", "group_size": 16,
                        "strategy": "tensor_group", "dynamic": False, "symmetric": True},
            "input_activations": {"num_bits": 4, "type": "float", "group_size": 16,
                                  "strategy": "tensor_group", "dynamic": False,
                                  "symmetric": True}}},
    })
    return {"config.json": config, "hf_quant_config.json": hf_quant}


def nvfp4_early_files(d):
    quantized = {}
    for i in range(d["num_hidden_layers"]):
        for e in range(d["n_routed_experts"]):
            for w in ("w1", "w2", "w3"):
                quantized[f"layers.{i}.ffn.experts.{e}.{w}"] = {"quant_algo": "NVFP4",
                                                                 "awq_block_size": 16}
    # The early export lists every excluded module by name.
    exclude = []
    prefixes = [f"layers.{i}." for i in range(d["num_hidden_layers"])]
    prefixes += [f"mtp.{m}." for m in range(d["num_nextn_predict_layers"])]
    for p in prefixes:
        for m in ("attn.wq_a", "attn.wq_b", "attn.wkv", "attn.wo_a", "attn.wo_b",
                  "ffn.shared_experts.w1", "ffn.shared_experts.w2", "ffn.shared_experts.w3"):
            exclude.append(p + m)
    exclude += [f"mtp.{m}.ffn.experts.{e}.{w}" for m in range(d["num_nextn_predict_layers"])
                for e in range(d["n_routed_experts"]) for w in ("w1", "w2", "w3")]
    exclude += ["head"]
    hf_quant = {
        "producer": {"name": "modelopt", "version": "0.29.0"},
        "quantization": {"quant_algo": None, "kv_cache_quant_algo": None,
                         "quantized_layers": quantized, "exclude_modules": exclude},
    }
    # The early release shipped the stock config.json with its
    # quantization_config removed; expert_dtype stayed.
    config = dsv4_config(d, expert_dtype="fp4", quantization_config=None)
    return {"config.json": config, "hf_quant_config.json": hf_quant}


GENERATION = {"bos_token_id": 0, "eos_token_id": 1, "do_sample": True, "temperature": 0.6,
              "top_p": 0.95}


def gen_dsv4():
    d = TINY
    seed = 4242
    stock = build_dsv4(d, "stock", seed)
    files = {"config.json": dsv4_config(d), "generation_config.json": GENERATION}
    write_folder("dsv4_stock", stock, files, dsv4_shards(stock))

    base = build_dsv4(d, "base_fp8", seed)
    write_folder("dsv4_base_fp8", base, {"config.json": dsv4_config(d, expert_dtype="fp8")})

    nv = build_dsv4(d, "nvfp4", seed)
    # Same weights as the stock fixture: every tensor both have, and the FP4
    # codes (stock I8 .weight -> NVFP4 U8 .weight).
    for n, (dt, sh, raw) in nv.items.items():
        if n in stock.items:
            assert stock.items[n][2] == raw, n
    assert sum(dt == "U8" for dt, _, _ in nv.items.values()) == 3 * d["num_hidden_layers"] * d["n_routed_experts"]
    write_folder("dsv4_nvfp4_current", nv, nvfp4_current_files(d), dsv4_shards(nv))
    write_folder("dsv4_nvfp4_early", nv, nvfp4_early_files(d))

    bf = build_dsv4(d, "bf16", seed)
    write_folder("dsv4_bf16", bf, {"config.json": dsv4_config(d, expert_dtype=None,
                                                               quantization_config=None)})


# ---------------------------------------------------------------------------
# Formats nibble must recognise but not run.

def llama_like_attention(t: Tensors, r: Rand, p, H, dtype="BF16"):
    for m in ("q_proj", "k_proj", "v_proj", "o_proj"):
        t.add(f"{p}self_attn.{m}.weight", dtype, [H, H],
              r.bf16([H, H]) if dtype == "BF16" else r.f16([H, H]))


def gen_kimi_compressed_tensors():
    """Kimi-K2 style: DeepseekV3 backbone, routed experts compressed-tensors
    pack-quantized INT4 (symmetric, group 32), everything else BF16."""
    r = Rand(7)
    H, I, E, V = 64, 32, 2, 64
    t = Tensors()
    t.add("model.embed_tokens.weight", "BF16", [V, H], r.bf16([V, H]))
    for layer in range(2):
        p = f"model.layers.{layer}."
        t.add(p + "input_layernorm.weight", "BF16", [H], r.bf16([H], mean=1.0))
        t.add(p + "post_attention_layernorm.weight", "BF16", [H], r.bf16([H], mean=1.0))
        t.add(p + "self_attn.q_proj.weight", "BF16", [H, H], r.bf16([H, H]))
        t.add(p + "self_attn.kv_a_proj_with_mqa.weight", "BF16", [40, H], r.bf16([40, H]))
        t.add(p + "self_attn.kv_a_layernorm.weight", "BF16", [32], r.bf16([32], mean=1.0))
        t.add(p + "self_attn.kv_b_proj.weight", "BF16", [H, 32], r.bf16([H, 32]))
        t.add(p + "self_attn.o_proj.weight", "BF16", [H, H], r.bf16([H, H]))
        if layer == 0:  # first_k_dense_replace = 1
            for m, (o, i) in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
                t.add(p + f"mlp.{m}.weight", "BF16", [o, i], r.bf16([o, i]))
            continue
        t.add(p + "mlp.gate.weight", "BF16", [E, H], r.bf16([E, H]))
        t.add(p + "mlp.gate.e_score_correction_bias", "F32", [E], r.f32([E]))
        for m, (o, i) in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
            t.add(p + f"mlp.shared_experts.{m}.weight", "BF16", [o, i], r.bf16([o, i]))
        for e in range(E):
            for m, (o, i) in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
                q = r.rng.integers(-8, 8, size=(o, i))  # int4 values
                nib = (q + 8).astype(np.uint32).reshape(o, i // 8, 8)
                words = np.zeros((o, i // 8), dtype=np.uint32)
                for k in range(8):  # element i in bits 4*(i%8) of word i/8
                    words |= nib[:, :, k] << np.uint32(4 * k)
                q_name = p + f"mlp.experts.{e}.{m}."
                t.add(q_name + "weight_packed", "I32", [o, i // 8], words.view(np.int32).tobytes())
                t.add(q_name + "weight_scale", "BF16", [o, i // 32],
                      np.abs(r.rng.normal(0.01, 0.002, size=(o, i // 32))).astype(np.float32)
                      .astype(ml_dtypes.bfloat16).tobytes())
                t.add(q_name + "weight_shape", "I64", [2], np.array([o, i], dtype=np.int64).tobytes())
    t.add("model.norm.weight", "BF16", [H], r.bf16([H], mean=1.0))
    t.add("lm_head.weight", "BF16", [V, H], r.bf16([V, H]))
    config = {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
        "vocab_size": V, "hidden_size": H, "intermediate_size": I, "moe_intermediate_size": I,
        "num_hidden_layers": 2, "first_k_dense_replace": 1, "n_routed_experts": E,
        "n_shared_experts": 1, "num_experts_per_tok": 1, "num_attention_heads": 2,
        "num_key_value_heads": 2, "q_lora_rank": None, "kv_lora_rank": 32,
        "qk_nope_head_dim": 24, "qk_rope_head_dim": 8, "v_head_dim": 32,
        "torch_dtype": "bfloat16",
        "quantization_config": {
            "quant_method": "compressed-tensors", "format": "pack-quantized",
            "quantization_status": "compressed", "kv_cache_scheme": None,
            "config_groups": {"group_0": {
                "targets": ["Linear"], "input_activations": None, "output_activations": None,
                "weights": {"num_bits": 4, "type": "int", "symmetric": True, "group_size": 32,
                            "strategy": "group", "dynamic": False, "actorder": None,
                            "observer": "minmax"}}},
            "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                       "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
        },
    }
    write_folder("kimi_compressed_tensors", t, {"config.json": config})


def llama_config(H, I, V, layers, qc):
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V,
            "hidden_size": H, "intermediate_size": I, "num_hidden_layers": layers,
            "num_attention_heads": 2, "num_key_value_heads": 2, "torch_dtype": "float16",
            "quantization_config": qc}


def gen_gptq_awq():
    H, I, V, G = 64, 128, 64, 32
    for name, seed in (("gptq", 11), ("awq", 12)):
        r = Rand(seed)
        t = Tensors()
        t.add("model.embed_tokens.weight", "F16", [V, H], r.f16([V, H]))
        p = "model.layers.0."
        t.add(p + "input_layernorm.weight", "F16", [H], r.f16([H], mean=1.0))
        t.add(p + "post_attention_layernorm.weight", "F16", [H], r.f16([H], mean=1.0))
        mods = [("self_attn.q_proj", H, H), ("self_attn.k_proj", H, H), ("self_attn.v_proj", H, H),
                ("self_attn.o_proj", H, H), ("mlp.gate_proj", I, H), ("mlp.up_proj", I, H),
                ("mlp.down_proj", H, I)]
        for m, out, inp in mods:
            q = p + m + "."
            if name == "gptq":  # qweight packs 8 input rows per int32 word
                t.add(q + "qweight", "I32", [inp // 8, out], r.i32([inp // 8, out]))
                t.add(q + "qzeros", "I32", [inp // G, out // 8], r.i32([inp // G, out // 8]))
                t.add(q + "scales", "F16", [inp // G, out],
                      np.abs(r.rng.normal(0.01, 0.002, size=(inp // G, out))).astype(np.float16).tobytes())
                t.add(q + "g_idx", "I32", [inp],
                      (np.arange(inp) // G).astype(np.int32).tobytes())
            else:  # AWQ GEMM packs 8 output columns per int32 word
                t.add(q + "qweight", "I32", [inp, out // 8], r.i32([inp, out // 8]))
                t.add(q + "qzeros", "I32", [inp // G, out // 8], r.i32([inp // G, out // 8]))
                t.add(q + "scales", "F16", [inp // G, out],
                      np.abs(r.rng.normal(0.01, 0.002, size=(inp // G, out))).astype(np.float16).tobytes())
        t.add("model.norm.weight", "F16", [H], r.f16([H], mean=1.0))
        t.add("lm_head.weight", "F16", [V, H], r.f16([V, H]))
        if name == "gptq":
            qc = {"quant_method": "gptq", "bits": 4, "group_size": G, "desc_act": False,
                  "sym": True, "damp_percent": 0.01, "true_sequential": True,
                  "checkpoint_format": "gptq"}
        else:
            qc = {"quant_method": "awq", "bits": 4, "group_size": G, "zero_point": True,
                  "version": "gemm", "modules_to_not_convert": None}
        write_folder(name, t, {"config.json": llama_config(H, I, V, 1, qc)})


def gen_gpt_oss():
    r = Rand(13)
    H, I, E, V, heads, hd = 64, 64, 4, 64, 2, 32
    t = Tensors()
    t.add("model.embed_tokens.weight", "BF16", [V, H], r.bf16([V, H]))
    p = "model.layers.0."
    t.add(p + "input_layernorm.weight", "BF16", [H], r.bf16([H], mean=1.0))
    t.add(p + "post_attention_layernorm.weight", "BF16", [H], r.bf16([H], mean=1.0))
    for m, o in (("q_proj", heads * hd), ("k_proj", hd), ("v_proj", hd)):
        t.add(p + f"self_attn.{m}.weight", "BF16", [o, H], r.bf16([o, H]))
        t.add(p + f"self_attn.{m}.bias", "BF16", [o], r.bf16([o]))
    t.add(p + "self_attn.o_proj.weight", "BF16", [H, heads * hd], r.bf16([H, heads * hd]))
    t.add(p + "self_attn.o_proj.bias", "BF16", [H], r.bf16([H]))
    t.add(p + "self_attn.sinks", "BF16", [heads], r.bf16([heads]))
    t.add(p + "mlp.router.weight", "BF16", [E, H], r.bf16([E, H]))
    t.add(p + "mlp.router.bias", "BF16", [E], r.bf16([E]))
    x = p + "mlp.experts."
    t.add(x + "gate_up_proj_blocks", "U8", [E, 2 * I, H // 32, 16], r.fp4_packed([E, 2 * I, H // 32, 16]))
    t.add(x + "gate_up_proj_scales", "U8", [E, 2 * I, H // 32], r.e8m0([E, 2 * I, H // 32], MX_E_LO, MX_E_HI))
    t.add(x + "gate_up_proj_bias", "BF16", [E, 2 * I], r.bf16([E, 2 * I]))
    t.add(x + "down_proj_blocks", "U8", [E, H, I // 32, 16], r.fp4_packed([E, H, I // 32, 16]))
    t.add(x + "down_proj_scales", "U8", [E, H, I // 32], r.e8m0([E, H, I // 32], MX_E_LO, MX_E_HI))
    t.add(x + "down_proj_bias", "BF16", [E, H], r.bf16([E, H]))
    t.add("model.norm.weight", "BF16", [H], r.bf16([H], mean=1.0))
    t.add("lm_head.weight", "BF16", [V, H], r.bf16([V, H]))
    config = {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "vocab_size": V,
        "hidden_size": H, "intermediate_size": I, "num_hidden_layers": 1,
        "num_local_experts": E, "num_experts_per_tok": 2, "num_attention_heads": heads,
        "num_key_value_heads": 1, "head_dim": hd, "sliding_window": 8,
        "layer_types": ["sliding_attention"], "swiglu_limit": 7.0, "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
            "lm_head"]},
    }
    write_folder("gpt_oss_mxfp4", t, {"config.json": config})


# ---------------------------------------------------------------------------
# Expected output of the C++ streaming writer (tests/checkpoint/safetensors_writer_test.cpp).

WRITER_TENSORS = [  # name, dtype, shape
    ("layers.0.attn.wq_a.weight", "F8_E4M3", [4, 6]),
    ("layers.0.attn.wq_a.scale", "F8_E8M0", [1, 1]),
    ("layers.0.ffn.experts.0.w1.weight", "I8", [4, 3]),
    ("norm.weight", "BF16", [6]),
    ("hc_head_fn", "F32", [2, 3]),
    ("layers.0.ffn.gate.tid2eid", "I64", [3, 2]),
    ("odd_u8", "U8", [5]),
    ("f16", "F16", [3]),
    ("i32", "I32", [2]),
    ("u16", "U16", [1]),
    ("i16", "I16", [2]),
    ("u32", "U32", [1]),
    ("u64", "U64", [1]),
    ("f64", "F64", [1]),
    ("bool", "BOOL", [3]),
    ("e5m2", "F8_E5M2", [2]),
    ("empty", "F32", [0, 4]),
    ("scalar", "F32", []),
    ("we\"ird\\name\n\ttab", "U8", [2]),
    ("\u00fcn\u00efcode.\u6f22", "U8", [1]),
]


def writer_pattern(name, dtype, nbytes):
    """Byte j of a tensor: (seed + 131 j) mod 251, seed from the UTF-8 name;
    BOOL keeps the low bit. Recomputed by the C++ test."""
    seed = sum(name.encode()) % 251
    b = bytes((seed + 131 * j) % 251 for j in range(nbytes))
    if dtype == "BOOL":
        b = bytes(x & 1 for x in b)
    return b


def gen_writer():
    folder = OUT / "writer"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    tensors = {}
    for name, dtype, shape in WRITER_TENSORS:
        raw = writer_pattern(name, dtype, math.prod(shape) * DTYPE_SIZE[dtype])
        tensors[name] = to_torch(dtype, shape, raw)
    save_file(tensors, str(folder / "reference.safetensors"), metadata={"format": "pt"})
    index = {"metadata": {"total_size": 159609485896},
             "weight_map": {"b.weight": "model-00002-of-00002.safetensors",
                            "a.weight": "model-00001-of-00002.safetensors",
                            "\u00fcn\u00efcode.\u6f22": "model-00001-of-00002.safetensors",
                            "mtp.0.e_proj.scale": "model-00002-of-00002.safetensors"}}
    # As transformers' save_pretrained writes it.
    (folder / "reference.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------
# Full-size DeepSeek-V4-Flash skeleton template.

FLASH = dict(
    vocab_size=129280, hidden_size=4096, num_hidden_layers=43, num_nextn_predict_layers=1,
    num_attention_heads=64, num_key_value_heads=1, head_dim=512, qk_rope_head_dim=64,
    q_lora_rank=1024, o_groups=8, o_lora_rank=1024, sliding_window=128,
    moe_intermediate_size=2048, n_routed_experts=256, n_shared_experts=1, num_experts_per_tok=6,
    num_hash_layers=3, index_n_heads=64, index_head_dim=128, index_topk=512, hc_mult=4,
    compress_ratios=[0, 0] + [4, 128] * 20 + [4, 0],
    max_position_embeddings=1048576, original_max_position_embeddings=65536,
)


def template_entries(inv, prefix):
    """Stock-checkpoint tensors of an inventory slice as [name, dtype, shape],
    names relative to `prefix`."""
    out = []
    for name, kind, shape, dtype in inv:
        assert name.startswith(prefix), (name, prefix)
        rel = name[len(prefix):]
        if kind == "plain":
            out.append([rel, dtype, shape])
        elif kind == "fp8":
            out.append([rel + ".weight", "F8_E4M3", shape])
            out.append([rel + ".scale", "F8_E8M0", fp8_scale_shape(*shape)])
        else:
            o, i = shape
            out.append([rel + ".weight", "I8", [o, i // 2]])
            out.append([rel + ".scale", "F8_E8M0", [o, i // 32]])
    return out


def brace_expand(text):
    """Bash-style brace expansion as src/checkpoint/skeleton.cpp does it:
    "a.{0..2}.{x,y}" -> a.0.x a.0.y a.1.x ... (first brace slowest)."""
    start = 0
    while True:
        open_ = text.find("{", start)
        if open_ < 0:
            return [text]
        close = text.index("}", open_)
        inner = text[open_ + 1:close]
        if ".." in inner:
            lo, hi = inner.split("..")
            alts = [str(v) for v in range(int(lo), int(hi) + 1)]
        elif "," in inner:
            alts = inner.split(",")
        else:
            start = close
            continue
        tails = brace_expand(text[close + 1:])
        return [text[:open_] + a + t for a in alts for t in tails]


def brace_expand_json(j):
    if isinstance(j, dict):
        out = {}
        for k, v in j.items():
            for key in brace_expand(k):
                assert key not in out, key
                out[key] = brace_expand_json(v)
        return out
    if isinstance(j, list):
        out = []
        for e in j:
            out.extend(brace_expand(e) if isinstance(e, str) else [brace_expand_json(e)])
        return out
    return j


def nvfp4_expert_entries(mxfp4_entries):
    """The NVFP4 tensors of one routed expert for its MXFP4 [name, dtype, shape]
    entries: U8 weight, F8_E4M3 weight_scale per 16, F32 weight_scale_2 and
    input_scale scalars (as build_dsv4's nvfp4 variant writes them)."""
    out = []
    for n, dt, sh in mxfp4_entries:
        if n.endswith(".scale"):
            continue
        assert n.endswith(".weight") and dt == "I8", (n, dt)
        base = n[:-len(".weight")]
        o, half = sh
        out += [[base + ".weight", "U8", [o, half]], [base + ".weight_scale", "F8_E4M3", [o, half * 2 // 16]],
                [base + ".weight_scale_2", "F32", []], [base + ".input_scale", "F32", []]]
    return out


def nvfp4_early_hf_quant_braced(d):
    """nvfp4_early_files' hf_quant_config.json, written with brace ranges."""
    L = d["num_hidden_layers"] - 1
    E = d["n_routed_experts"] - 1
    mods = "attn.wq_a,attn.wq_b,attn.wkv,attn.wo_a,attn.wo_b,ffn.shared_experts.w1,ffn.shared_experts.w2," \
           "ffn.shared_experts.w3"
    assert d["num_nextn_predict_layers"] == 1
    return {
        "producer": {"name": "modelopt", "version": "0.29.0"},
        "quantization": {
            "quant_algo": None, "kv_cache_quant_algo": None,
            "quantized_layers": {f"layers.{{0..{L}}}.ffn.experts.{{0..{E}}}.{{w1,w2,w3}}":
                                 {"quant_algo": "NVFP4", "awq_block_size": 16}},
            "exclude_modules": [f"layers.{{0..{L}}}.{{{mods}}}", f"mtp.0.{{{mods}}}",
                                f"mtp.0.ffn.experts.{{0..{E}}}.{{w1,w2,w3}}", "head"]}}


# variant -> (file name, expected tensors, expected total_size); the NVFP4
# numbers follow from the stock ones: each of the 43 x 256 x 3 routed expert
# matrices [o, i] (o * i = 2048 * 4096) trades its UE8M0 scale (o*i/32 bytes)
# for an E4M3 weight_scale (o*i/16) and two F32 scalars, 2 tensors more.
SKELETON_MATRICES = 43 * 256 * 3
SKELETONS = {
    "stock": ("dsv4_flash_skeleton.json", 69187, 159609485896),
    "nvfp4_current": ("dsv4_flash_nvfp4_current_skeleton.json", 69187 + 2 * SKELETON_MATRICES,
                      159609485896 + SKELETON_MATRICES * (2048 * 4096 // 32 + 8)),
    "nvfp4_early": ("dsv4_flash_nvfp4_early_skeleton.json", 69187 + 2 * SKELETON_MATRICES,
                    159609485896 + SKELETON_MATRICES * (2048 * 4096 // 32 + 8)),
}


def gen_skeleton(variant="stock"):
    d = FLASH
    inv = dsv4_inventory(d)
    # Split the inventory into the template pieces the skeleton writer expands.
    by_layer = {}
    for item in inv:
        name = item[0]
        parts = name.split(".")
        key = ".".join(parts[:2]) + "." if parts[0] in ("layers", "mtp") else ""
        by_layer.setdefault(key, []).append(item)

    def rel_names(key):
        return [n for n, *_ in template_entries(by_layer[key], key)]

    # Per-layer pieces, recovered from the inventory of representative layers
    # and checked against every other layer below.
    def select(key, pred):
        return [e for e in template_entries(by_layer[key], key) if pred(e[0])]

    is_expert = lambda n: n.startswith("ffn.experts.")
    compressor = lambda n: n.startswith("attn.compressor.") or n.startswith("attn.indexer.")
    gate_extra = lambda n: n in ("ffn.gate.tid2eid", "ffn.gate.bias")
    mtp_only = lambda n: n.split(".")[0] in ("e_proj", "h_proj", "enorm", "hnorm", "norm") or \
        n.startswith("hc_head_")
    templates = {
        "embed": {"tensors": [e for e in template_entries(by_layer[""], "") if e[0] == "embed.weight"]},
        "head": {"tensors": [e for e in template_entries(by_layer[""], "") if e[0] != "embed.weight"]},
        "block": {"tensors": select("layers.0.", lambda n: not (is_expert(n) or compressor(n) or gate_extra(n)))},
        "hash_gate": {"tensors": select("layers.0.", lambda n: n == "ffn.gate.tid2eid")},
        "score_gate": {"tensors": select("layers.3.", lambda n: n == "ffn.gate.bias")},
        "csa": {"tensors": select("layers.2.", compressor)},
        "hca": {"tensors": select("layers.3.", compressor)},
        "experts": {"repeat": d["n_routed_experts"], "prefix": "ffn.experts.{i}.",
                    "tensors": [[n[len("ffn.experts.0."):], dt, sh]
                                for n, dt, sh in select("layers.0.", lambda n: n.startswith("ffn.experts.0."))]},
        "mtp": {"tensors": select("mtp.0.", mtp_only)},
    }
    nvfp4 = variant != "stock"
    if nvfp4:
        templates["experts_nvfp4"] = {"repeat": d["n_routed_experts"], "prefix": "ffn.experts.{i}.",
                                      "tensors": nvfp4_expert_entries(templates["experts"]["tensors"])}
    layer_experts = "experts_nvfp4" if nvfp4 else "experts"
    ratios = d["compress_ratios"]
    kind = {0: [], 4: ["csa"], 128: ["hca"]}
    shards = [[{"prefix": "", "use": ["embed"]}]]
    for i in range(d["num_hidden_layers"]):
        gate = "hash_gate" if i < d["num_hash_layers"] else "score_gate"
        shards.append([{"prefix": f"layers.{i}.", "use": ["block"] + kind[ratios[i]] + [gate, layer_experts]}])
    shards.append([{"prefix": "", "use": ["head"]}])
    shards.append([{"prefix": "mtp.0.", "use": ["block"] + kind[ratios[-1]] + ["score_gate", "experts", "mtp"]}])

    # Expand exactly as the C++ writer does and compare with the inventory.
    def expand():
        names = {}
        for s, groups in enumerate(shards):
            for g in groups:
                for use in g["use"]:
                    tp = templates[use]
                    for k in range(tp.get("repeat", 1)):
                        sub = tp.get("prefix", "").replace("{i}", str(k))
                        for n, dt, sh in tp["tensors"]:
                            full = g["prefix"] + sub + n
                            assert full not in names, full
                            names[full] = (dt, sh, s + 1)
        return names
    expanded = expand()
    stock = {n: (dt, sh) for n, dt, sh in template_entries(inv, "")}
    want = dict(stock)
    if nvfp4:  # the routed experts of layers.* (not mtp.*) re-quantized
        for n in [n for n in stock if n.startswith("layers.") and ".ffn.experts." in n]:
            del want[n]
        for n, (dt, sh) in stock.items():
            if n.startswith("layers.") and ".ffn.experts." in n and n.endswith(".weight"):
                for e in nvfp4_expert_entries([[n, dt, sh]]):
                    want[e[0]] = (e[1], e[2])
    assert {n: v[:2] for n, v in expanded.items()} == want
    total = sum(math.prod(sh) * DTYPE_SIZE[dt] for dt, sh, _ in expanded.values())
    # dsv4.md section 3 and the header audits it cites.
    file_name, n_tensors, total_size = SKELETONS[variant]
    assert len(expanded) == n_tensors, len(expanded)
    assert sum(n.startswith("mtp.0.") for n in expanded) == 1575
    assert total == total_size, total
    counts = {}
    for dt, _, _ in expanded.values():
        counts[dt] = counts.get(dt, 0) + 1
    if not nvfp4:
        assert counts == {"BF16": 433, "F32": 417, "F8_E4M3": 375, "F8_E8M0": 34167, "I64": 3,
                          "I8": 33792}, counts
    assert len(shards) == 46

    files = {}
    config = dsv4_config(d)
    if variant == "nvfp4_current":
        cur = nvfp4_current_files(d)
        config, files = cur["config.json"], {"hf_quant_config.json": cur["hf_quant_config.json"]}
    elif variant == "nvfp4_early":
        early = nvfp4_early_files(d)
        braced = nvfp4_early_hf_quant_braced(d)
        assert brace_expand_json(braced) == early["hf_quant_config.json"]
        config, files = early["config.json"], {"hf_quant_config.json": braced}

    doc = {
        "comment": [{"stock": "DeepSeek-V4-Flash (deepseek-ai/DeepSeek-V4-Flash) checkpoint skeleton, generated by",
                     "nvfp4_current": "DeepSeek-V4-Flash NVFP4 (ModelOpt current schema) checkpoint skeleton, generated by",
                     "nvfp4_early": "DeepSeek-V4-Flash NVFP4 (ModelOpt early schema) checkpoint skeleton, generated by"}[variant],
                    "tools/gen_checkpoint_fixtures.py from docs/dsv4.md section 3. Every shard is the",
                    "concatenation of its groups; a group prefixes the tensors of the templates it uses,",
                    "a template with 'repeat' N is expanded N times with {i} = 0..N-1 in its prefix.",
                    "Shard assignment (inferred from public header audits: layer 0 in shard 2,",
                    "head/hc_head in shard 45, mtp.0 in shard 46): embed, one shard per layer, head, MTP.",
                    f"Expands to {n_tensors} tensors, {total_size} bytes (index total_size)."] +
                   (["Routed experts of layers.* in NVFP4 (the lossless MXFP4 cast), mtp.0 experts MXFP4.",
                     "'files' are written beside config.json after brace expansion of keys and",
                     "array strings: {a..b} a range, {x,y} alternatives."] if nvfp4 else []),
        "shard_name": "model-{n:05}-of-{count:05}.safetensors",
        "shard_metadata": SHARD_METADATA,
        "config": config,
        "templates": templates,
        "shards": shards,
    }
    if files:
        doc["files"] = files
    # One tensor / shard per line keeps the file short and diffable.
    lines = ["{"]
    for key in ("comment", "shard_name", "shard_metadata", "config"):
        lines.append(f" {json.dumps(key)}: {json.dumps(doc[key])},")
    lines.append(' "templates": {')
    tnames = list(templates)
    for ti, tn in enumerate(tnames):
        tp = templates[tn]
        head = {k: v for k, v in tp.items() if k != "tensors"}
        lines.append(f"  {json.dumps(tn)}: {{" + "".join(f"{json.dumps(k)}: {json.dumps(v)}, " for k, v in head.items()) + '"tensors": [')
        for ei, e in enumerate(tp["tensors"]):
            lines.append("   " + json.dumps(e) + ("," if ei + 1 < len(tp["tensors"]) else ""))
        lines.append("  ]}" + ("," if ti + 1 < len(tnames) else ""))
    lines.append(" },")
    lines.append(' "shards": [')
    for si, s in enumerate(shards):
        lines.append("  " + json.dumps(s) + ("," if si + 1 < len(shards) else ""))
    lines.append(" ]" + ("," if files else ""))
    if files:
        lines.append(f' "files": {json.dumps(files)}')
    lines.append("}")
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == doc
    (OUT / file_name).write_text(text)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    if (OUT / "manifests").exists():
        shutil.rmtree(OUT / "manifests")
    gen_dsv4()
    gen_kimi_compressed_tensors()
    gen_gptq_awq()
    gen_gpt_oss()
    gen_writer()
    for variant in SKELETONS:
        gen_skeleton(variant)
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"wrote {OUT.relative_to(ROOT)} ({total / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
