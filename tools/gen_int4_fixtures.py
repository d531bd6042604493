#!/usr/bin/env python3
"""Writes tests/fixtures/int4/: compressed-tensors pack-quantized INT4 weights
packed by compressed-tensors itself, with oracle values for nibble's reader.

The packing is compressed_tensors.compressors.pack_quantized.helpers.
pack_to_int32 (the code that writes Kimi K2's published experts) and the
expected values come from its unpack_from_int32 times the BF16 scales widened
to f64: nibble's reader shares nothing with either. Deterministic (fixed
seed). Needs torch, compressed-tensors, safetensors, numpy:

    python3 tools/gen_int4_fixtures.py

Layout
------
ckpt/              a checkpoint folder: config.json with compressed-tensors'
                   quantization_config (pack-quantized, int4 symmetric,
                   group_size 32), model.safetensors with
                     a.weight_packed I32 [37, 12], a.weight_scale BF16 [37, 3],
                     a.weight_shape I64 [2] = [37, 96]     (group 32)
                     b.weight_packed I32 [8, 32],  b.weight_scale BF16 [8, 8],
                     b.weight_shape I64 [2] = [8, 256]     (group 32)
                     head.weight BF16 [8, 96]               (not quantized)
bad_shape/         the same tensors, a.weight_shape = [37, 100]
{a,b}_dequant.f32  [rows, cols] f32: q * scale (exact in f32)
{a,b}_x.f32        [5, cols] f32 activations
{a,b}_y.f32        [5, rows] f32: x . W^T summed in f64, rounded once
"""
from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import torch
from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32, unpack_from_int32
from safetensors.torch import save_file

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "int4"
GROUP = 32

CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "kimi_k2",
    "quantization_config": {
        "quant_method": "compressed-tensors", "format": "pack-quantized",
        "quantization_status": "compressed", "kv_cache_scheme": None,
        "config_groups": {"group_0": {
            "targets": ["Linear"], "input_activations": None, "output_activations": None,
            "weights": {"num_bits": 4, "type": "int", "symmetric": True, "group_size": GROUP,
                        "strategy": "group", "dynamic": False, "actorder": None, "observer": "minmax"}}},
        "ignore": ["head"],
    },
}


def make(rng: np.random.Generator, rows: int, cols: int):
    q = rng.integers(-8, 8, size=(rows, cols)).astype(np.int8)  # every code, -8 included
    q[0, :16] = np.arange(-8, 8)                                   # each code at a known place
    # Scales of several magnitudes, exactly BF16; some negative (a
    # quantizer writes positive ones, but a reader must not assume it).
    shape = (rows, cols // GROUP)
    scale = (rng.choice([-1.0, 1.0], size=shape, p=[0.2, 0.8]) * rng.uniform(0.5, 1.0, size=shape) *
             np.exp2(rng.integers(-12, -4, size=shape))).astype(np.float32)
    scale_bf16 = torch.from_numpy(scale).to(torch.bfloat16)
    packed = pack_to_int32(torch.from_numpy(q), num_bits=4)
    # The oracle: compressed-tensors' own unpacking, times the scales in f64.
    q_back = unpack_from_int32(packed, num_bits=4, shape=torch.Size([rows, cols])).numpy()
    assert (q_back == q).all()
    s64 = np.repeat(scale_bf16.to(torch.float64).numpy(), GROUP, axis=1)
    w = q_back.astype(np.float64) * s64
    assert (w.astype(np.float32).astype(np.float64) == w).all()  # exact in f32
    return packed, scale_bf16, w


def main() -> None:
    rng = np.random.default_rng(20261201)
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    tensors = {}
    for name, (rows, cols) in {"a": (37, 96), "b": (8, 256)}.items():
        packed, scale, w = make(rng, rows, cols)
        tensors[f"{name}.weight_packed"] = packed
        tensors[f"{name}.weight_scale"] = scale
        tensors[f"{name}.weight_shape"] = torch.tensor([rows, cols], dtype=torch.int64)
        x = rng.normal(0, 1, size=(5, cols)).astype(np.float32)
        y = (x.astype(np.float64) @ w.T).astype(np.float32)
        w.astype(np.float32).tofile(OUT / f"{name}_dequant.f32")
        x.tofile(OUT / f"{name}_x.f32")
        y.tofile(OUT / f"{name}_y.f32")
    tensors["head.weight"] = torch.from_numpy(rng.normal(0, 0.02, size=(8, 96)).astype(np.float32)).to(torch.bfloat16)
    for folder, edit in (("ckpt", None), ("bad_shape", ("a.weight_shape", torch.tensor([37, 100])))):
        d = OUT / folder
        d.mkdir()
        t = dict(tensors)
        if edit:
            t[edit[0]] = edit[1]
        save_file(t, str(d / "model.safetensors"))
        (d / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
