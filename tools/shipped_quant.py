#!/usr/bin/env python3
"""Storage rounding of the shipped tiny DeepSeek-V4 model, and its effect.

DeepSeek-V4 stores (shared/docs/checkpoints.md):
- routed experts as MXFP4: E2M1 codes, one UE8M0 scale per 32 consecutive
  elements of a row;
- attention projections (wq_a wq_b wkv wo_a wo_b), the indexer's wq_b and the
  shared expert as FP8 E4M3 with one UE8M0 scale per 128x128 tile;
- embeddings, head, norms, router weights, compressor / indexer projections as
  BF16; mHC parameters, sinks, compressor `ape`, router bias as F32.

`round_to_storage(model)` rounds an HF `DeepseekV4ForCausalLM`'s fp32 weights
in place to exactly the values those formats can hold (quantize, then
dequantize), so running the HF model afterwards gives the reference that an
engine reading the stored file must reproduce.

Scale rules (the decoded value is code * scale either way; these choose it):
- MXFP4: OCP MX v1.0, `shared_exp = floor(log2(amax)) - 2`, elements rounded
  to nearest-even on the E2M1 grid and saturated to +-6 (shared/docs/formats.md).
- FP8: `scale = 2^ceil(log2(amax / 448))`, the power of two that keeps the
  tile's largest magnitude within E4M3's range (DeepSeek's ue8m0 rule).

Usage (after training):
    python tools/shipped_quant.py --model /work/artifacts/shipped/final \
        --tokenizer models/dsv4-tiny/tokenizer.json --heldout models/dsv4-tiny/heldout.txt
prints held-out perplexity before and after rounding.
"""
from __future__ import annotations

import argparse
import math

import ml_dtypes
import numpy as np
import torch

E2M1_MAX = 6.0
E4M3_MAX = 448.0


def mxfp4_round(w: torch.Tensor) -> torch.Tensor:
    """Quantize-dequantize along the last dim in blocks of 32 (OCP MX scale rule)."""
    if w.shape[-1] % 32:
        raise ValueError(f"MXFP4 needs an in-dim divisible by 32, got shape {tuple(w.shape)}")
    x = w.detach().float().reshape(-1, 32)
    amax = x.abs().amax(dim=1, keepdim=True)
    # floor(log2(amax)) exactly: amax = m * 2^e with m in [0.5, 1) -> e - 1.
    # (torch.log2 rounds to the integer for amax just below a power of two.)
    _, e = torch.frexp(amax.clamp_min(torch.finfo(torch.float32).tiny))
    exp = ((e - 1) - 2).clamp(-127, 127).float()
    scale = torch.exp2(exp)
    scaled = (x / scale).clamp(-E2M1_MAX, E2M1_MAX).numpy()
    codes = scaled.astype(ml_dtypes.float4_e2m1fn).astype(np.float32)
    out = torch.from_numpy(codes) * scale
    out[amax.squeeze(1) == 0] = 0.0
    return out.reshape(w.shape).to(w.dtype)


def fp8_block_round(w: torch.Tensor, block: int = 128) -> torch.Tensor:
    """Quantize-dequantize a 2-D weight to E4M3 with one power-of-two scale per tile."""
    if w.ndim != 2:
        raise ValueError(f"FP8 block rounding needs a 2-D weight, got shape {tuple(w.shape)}")
    rows, cols = w.shape
    out = torch.empty_like(w, dtype=torch.float32)
    src = w.detach().float()
    for r in range(0, rows, block):
        for c in range(0, cols, block):
            tile = src[r: r + block, c: c + block]
            amax = tile.abs().max().item()
            if amax == 0.0:
                out[r: r + block, c: c + block] = 0.0
                continue
            # Smallest power of two with amax / scale <= 448, checked exactly.
            e = math.ceil(math.log2(amax / E4M3_MAX))
            while amax / 2.0 ** e > E4M3_MAX:
                e += 1
            while amax / 2.0 ** (e - 1) <= E4M3_MAX:
                e -= 1
            scale = 2.0 ** e
            codes = (tile / scale).numpy().astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
            out[r: r + block, c: c + block] = torch.from_numpy(codes) * scale
    return out.to(w.dtype)


def bf16_round(w: torch.Tensor) -> torch.Tensor:
    return w.detach().to(torch.bfloat16).to(w.dtype)


# HF parameter-name suffixes by storage format (names as in
# transformers' modeling_deepseek_v4.py; DeepSeek names in the comments).
FP8_SUFFIXES = (
    "self_attn.q_a_proj.weight",  # attn.wq_a
    "self_attn.q_b_proj.weight",  # attn.wq_b
    "self_attn.kv_proj.weight",  # attn.wkv
    "self_attn.o_a_proj.weight",  # attn.wo_a
    "self_attn.o_b_proj.weight",  # attn.wo_b
    "compressor.indexer.q_b_proj.weight",  # attn.indexer.wq_b
    "mlp.shared_experts.gate_proj.weight",  # ffn.shared_experts.w1
    "mlp.shared_experts.up_proj.weight",  # ffn.shared_experts.w3
    "mlp.shared_experts.down_proj.weight",  # ffn.shared_experts.w2
)
FP4_SUFFIXES = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")  # ffn.experts.E.w1/w3, w2
F32_MARKERS = ("attn_hc.", "ffn_hc.", "hc_head.", ".sinks", "position_bias", "e_score_correction_bias")


def storage_format(name: str) -> str:
    if name.endswith(FP8_SUFFIXES):
        return "fp8"
    if name.endswith(FP4_SUFFIXES):
        return "mxfp4"
    if any(m in name for m in F32_MARKERS) or "tid2eid" in name:
        return "f32"
    return "bf16"


@torch.no_grad()
def round_to_storage(model, formats: tuple[str, ...] = ("mxfp4", "fp8", "bf16")) -> dict[str, int]:
    """Round parameters in place; returns how many tensors each format touched."""
    counts: dict[str, int] = {}
    for name, p in model.named_parameters():
        fmt = storage_format(name)
        if fmt not in formats:
            continue
        if fmt == "mxfp4":
            p.copy_(mxfp4_round(p))
        elif fmt == "fp8":
            p.copy_(fp8_block_round(p))
        elif fmt == "bf16":
            p.copy_(bf16_round(p))
        counts[fmt] = counts.get(fmt, 0) + 1
    return counts


@torch.no_grad()
def heldout_nll(model, ids: list[int], seq_len: int = 512, batch: int = 4) -> float:
    """Mean next-token NLL over non-overlapping windows of seq_len (+1 target)."""
    t = torch.tensor(ids, dtype=torch.long)
    n = (len(t) - 1) // seq_len
    windows = torch.stack([t[i * seq_len: i * seq_len + seq_len + 1] for i in range(n)])
    total, count = 0.0, 0
    for i in range(0, n, batch):
        w = windows[i: i + batch]
        logits = model(input_ids=w[:, :-1], use_cache=False).logits.float()
        total += torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="sum").item()
        count += w[:, 1:].numel()
    return total / count


def main() -> None:
    from tokenizers import Tokenizer
    from transformers import DeepseekV4ForCausalLM

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--heldout", required=True)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tok = Tokenizer.from_file(args.tokenizer)
    text = open(args.heldout, encoding="utf-8").read()
    ids = [0] + tok.encode(text, add_special_tokens=False).ids
    model = DeepseekV4ForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    base = heldout_nll(model, ids)
    print(f"fp32: nll {base:.4f} ppl {math.exp(base):.2f} ({len(ids) - 1} tokens)")
    for fmts in (("mxfp4",), ("mxfp4", "fp8"), ("mxfp4", "fp8", "bf16")):
        m = DeepseekV4ForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
        counts = round_to_storage(m, fmts)
        nll = heldout_nll(m, ids)
        print(f"{'+'.join(fmts)} {counts}: nll {nll:.4f} ppl {math.exp(nll):.2f}")


if __name__ == "__main__":
    main()
