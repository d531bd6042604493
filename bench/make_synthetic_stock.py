#!/usr/bin/env python3
"""Writes a synthetic checkpoint in DeepSeek-V4-Flash's stock layout, at the
real expert dimensions (w1/w3 [2048, 4096], w2 [4096, 2048], MXFP4), for
benchmarks: random FP4 codes, UE8M0 scales within the lossless window, a few
FP8 attention matrices and BF16 tensors per layer.

Usage: make_synthetic_stock.py OUT_DIR [--layers N] [--experts N] [--shards N]
Size: about 0.41 GB per (layer x 32 experts).
"""
import argparse
import json
import pathlib
import struct

import numpy as np

H, I = 4096, 2048


def tensors_of_layer(l, n_experts):
    p = f"layers.{l}."
    out = [(p + "attn_norm.weight", "BF16", [H]), (p + "ffn_norm.weight", "BF16", [H]),
           (p + "hc_attn_fn", "F32", [24, 4 * H]), (p + "ffn.gate.weight", "BF16", [n_experts, H]),
           (p + "ffn.gate.bias", "F32", [n_experts])]
    for name, (o, i) in {"attn.wq_a": (1024, H), "attn.wkv": (512, H), "attn.wo_b": (H, 8192),
                         "ffn.shared_experts.w1": (I, H), "ffn.shared_experts.w2": (H, I),
                         "ffn.shared_experts.w3": (I, H)}.items():
        out.append((p + name + ".weight", "F8_E4M3", [o, i]))
        out.append((p + name + ".scale", "F8_E8M0", [(o + 127) // 128, (i + 127) // 128]))
    for e in range(n_experts):
        for w, (o, i) in (("w1", (I, H)), ("w2", (H, I)), ("w3", (I, H))):
            b = f"{p}ffn.experts.{e}.{w}"
            out.append((b + ".weight", "I8", [o, i // 2]))
            out.append((b + ".scale", "F8_E8M0", [o, i // 32]))
    return out


SIZE = {"BF16": 2, "F32": 4, "F8_E4M3": 1, "F8_E8M0": 1, "I8": 1}


def data_for(name, dtype, n, rng):
    if dtype == "F8_E8M0":
        return rng.integers(117, 124, size=n, dtype=np.uint8).tobytes()
    if dtype == "F8_E4M3":
        b = rng.integers(0, 256, size=n, dtype=np.uint8)
        b[(b & 0x7F) == 0x7F] = 0x38  # no NaN codes
        return b.tobytes()
    if dtype == "BF16":
        return (rng.standard_normal(n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    if dtype == "F32":
        return rng.standard_normal(n).astype(np.float32).tobytes()
    return rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()


def write_shard(path, tensors, rng):
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape in tensors:
        n = int(np.prod(shape)) * SIZE[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, dtype, shape in tensors:
            f.write(data_for(name, dtype, int(np.prod(shape)), rng))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--shards", type=int, default=4)
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    glob = [("embed.weight", "BF16", [16384, H]), ("head.weight", "BF16", [16384, H]), ("norm.weight", "BF16", [H])]
    layers = [tensors_of_layer(l, a.experts) for l in range(a.layers)]
    groups = [[] for _ in range(a.shards)]
    groups[0] += glob
    for l, t in enumerate(layers):
        groups[l * a.shards // a.layers] += t
    weight_map, total = {}, 0
    for s, t in enumerate(groups):
        name = f"model-{s + 1:05d}-of-{a.shards:05d}.safetensors"
        write_shard(out / name, t, rng)
        for n, dtype, shape in t:
            weight_map[n] = name
            total += int(np.prod(shape)) * SIZE[dtype]
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    cfg = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "hidden_size": H,
           "moe_intermediate_size": I, "n_routed_experts": a.experts, "num_hidden_layers": a.layers,
           "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "expert_dtype": "fp4",
           "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                   "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}}
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    (out / "tokenizer.json").write_text("{}\n")
    print(f"{out}: {total / 1e9:.2f} GB of tensors in {a.shards} shards")


if __name__ == "__main__":
    main()
