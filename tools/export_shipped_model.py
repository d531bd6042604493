#!/usr/bin/env python3
"""Export the trained tiny DeepSeek-V4 model to models/dsv4-tiny/ and record references.

Input: the fp32 `save_pretrained` folder written by tools/train_shipped_model.py
(default /work/artifacts/shipped/final) and the tokenizer files it wrote into
the output folder.

Steps:
1. HF state dict -> DeepSeek's official tensor names and on-disk formats with
   tools/dsv4_export.py (FP8 block-128 attention / shared expert / indexer
   wq_b, MXFP4 routed experts, BF16 embeddings/head/norms/router/compressor,
   F32 mHC / sinks / ape / router bias, I64 tid2eid) -> model.safetensors.
2. config.json in DeepSeek's style (legacy fields, FP8 quantization_config,
   `expert_dtype: fp4`), checked to parse with transformers' DeepseekV4Config;
   generation_config.json with BOS 0 / EOS 1.
3. Independent check of the stored values: tools/shipped_quant.py's torch
   rounding of the fp32 weights must equal the exporter's dequantized bytes.
4. Held-out perplexity (models/dsv4-tiny/heldout.txt) of the fp32 weights and
   of the stored (dequantized) weights.
5. greedy_reference.json: transformers' greedy continuations from the stored
   weights (fp32 math, eager, CPU), computed by re-running the full sequence
   for every new token (no cache), cross-checked against HF's cached
   generation.

Usage:
    python tools/export_shipped_model.py [--final DIR] [--out models/dsv4-tiny]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dsv4_export as dx  # noqa: E402
import shipped_quant  # noqa: E402
from train_shipped_model import TINY_CONFIG  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

# Prompts for greedy_reference.json. Text prompts are encoded without special
# tokens and prefixed with BOS (as DeepSeek's encoder writes it). The two
# "heldout_*" prompts are line-aligned prefixes of heldout.txt chosen by token
# count: one whose 40 generated tokens cross positions 127/128 (the first HCA
# window closes while decoding), one whose prefill alone spans several CSA and
# one HCA window.
TEXT_PROMPTS = [
    ("romeo", "ROMEO.\n"),
    ("to_be", "To be, or not to be"),
    ("king", "KING HENRY.\nNow, my lords,"),
    ("mercy", "The quality of mercy"),
    ("enter", "[Enter"),
]
NEW_TOKENS = 40


def official_config() -> dict:
    cfg = dict(TINY_CONFIG)
    cfg["torch_dtype"] = "bfloat16"
    cfg["use_cache"] = True
    cfg["expert_dtype"] = "fp4"
    cfg["quantization_config"] = dict(dx.FP8_QUANT_STANZA)
    return cfg


def hf_model_from_folder(folder: Path):
    """An fp32 eager HF model built from a DeepSeek-style config.json (weights uninitialised)."""
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    config = DeepseekV4Config.from_pretrained(folder)
    config.quantization_config = None  # weights are loaded dequantized, in fp32
    if hasattr(config, "expert_dtype"):
        del config.expert_dtype
    config._attn_implementation = "eager"
    return DeepseekV4ForCausalLM(config).eval().to(torch.float32)


def nll(model, ids: list[int], seq_len: int = 512) -> float:
    return shipped_quant.heldout_nll(model, ids, seq_len=seq_len)


@torch.no_grad()
def greedy_no_cache(model, ids: list[int], n_new: int, eos: int) -> tuple[list[int], list[float], list[dict]]:
    """Greedy decode by re-running the whole sequence per token; returns new ids,
    the top1-top2 logit gap of each step, and the first step's top-5."""
    seq = list(ids)
    out, gaps, first = [], [], []
    for step in range(n_new):
        logits = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].float()
        top = torch.topk(logits, 5)
        if step == 0:
            first = [{"id": int(i), "logit": float(v)} for v, i in zip(top.values, top.indices)]
        gaps.append(float(top.values[0] - top.values[1]))
        nxt = int(top.indices[0])
        out.append(nxt)
        seq.append(nxt)
        if nxt == eos:
            break
    return out, gaps, first


@torch.no_grad()
def greedy_hf_generate(model, ids: list[int], n_new: int, eos: int) -> list[int]:
    res = model.generate(torch.tensor([ids]), max_new_tokens=n_new, do_sample=False, eos_token_id=eos,
                         pad_token_id=eos)
    return res[0, len(ids):].tolist()


def line_prefix(text: str, tok, target_tokens: int) -> str:
    """The longest prefix of whole lines that encodes to at most target_tokens."""
    best = ""
    pos = 0
    while True:
        nl = text.find("\n", pos)
        if nl < 0:
            return best
        cand = text[: nl + 1]
        if len(tok.encode(cand, add_special_tokens=False).ids) + 1 > target_tokens:
            return best
        best, pos = cand, nl + 1


def main() -> None:
    from tokenizers import Tokenizer
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--final", type=Path, default=Path("/work/artifacts/shipped/final"))
    ap.add_argument("--out", type=Path, default=REPO / "models" / "dsv4-tiny")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--new-tokens", type=int, default=NEW_TOKENS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = args.out

    trained = DeepseekV4ForCausalLM.from_pretrained(args.final, dtype=torch.float32).eval()
    sd = {k: v.detach().cpu().numpy() for k, v in trained.state_dict().items()}
    off = dx.hf_to_official(sd, TINY_CONFIG["moe_intermediate_size"])
    stored = dx.quantize_checkpoint(off, "stock", "fp4")
    cfg = official_config()
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps(dx.generation_config(), indent=2) + "\n")
    dx.write_checkpoint(out, stored, 1)
    DeepseekV4Config.from_pretrained(out)  # must parse
    n_bytes = (out / "model.safetensors").stat().st_size
    by_dtype: dict[str, int] = {}
    for st in stored.values():
        by_dtype[st.dtype] = by_dtype.get(st.dtype, 0) + st.data.nbytes
    print(f"wrote {out / 'model.safetensors'}: {len(stored)} tensors, {n_bytes} bytes, by dtype {by_dtype}")

    # Stored weights, dequantized from the bytes, into an HF model built from config.json.
    deq = dx.dequantize_checkpoint(stored)
    hf_deq = dx.official_to_hf(deq, TINY_CONFIG["num_hidden_layers"], TINY_CONFIG["n_routed_experts"])
    model = hf_model_from_folder(out)
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in hf_deq.items()}, strict=True)

    # Cross-check: torch rounding (shipped_quant) of the fp32 weights == exporter bytes.
    rounded = DeepseekV4ForCausalLM.from_pretrained(args.final, dtype=torch.float32).eval()
    shipped_quant.round_to_storage(rounded)
    want = rounded.state_dict()
    mismatched = [k for k, v in model.state_dict().items() if not torch.equal(v, want[k])]
    if mismatched:
        raise SystemExit(f"stored values differ from shipped_quant rounding in {mismatched[:5]}")
    print("exporter bytes == shipped_quant rounding for every tensor")

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    held_text = (out / "heldout.txt").read_text(encoding="utf-8")
    held_ids = [0] + tok.encode(held_text, add_special_tokens=False).ids
    nll_fp32 = nll(trained, held_ids)
    nll_stored = nll(model, held_ids)
    partial = {}
    for fmts in (("mxfp4",), ("fp8",), ("bf16",)):
        m = DeepseekV4ForCausalLM.from_pretrained(args.final, dtype=torch.float32).eval()
        shipped_quant.round_to_storage(m, fmts)
        partial["+".join(fmts)] = nll(m, held_ids)
    print(f"held-out ({len(held_ids) - 1} tokens): fp32 nll {nll_fp32:.4f} ppl {math.exp(nll_fp32):.2f}; "
          f"stored nll {nll_stored:.4f} ppl {math.exp(nll_stored):.2f}; only-one-format {partial}")

    prompts = [(name, text) for name, text in TEXT_PROMPTS]
    prompts.append(("heldout_cross_128", line_prefix(held_text, tok, 110)))
    prompts.append(("heldout_long", line_prefix(held_text, tok, 300)))
    entries = []
    for name, text in prompts:
        ids = [0] + tok.encode(text, add_special_tokens=False).ids
        new, gaps, first = greedy_no_cache(model, ids, args.new_tokens, eos=1)
        cached = greedy_hf_generate(model, ids, args.new_tokens, eos=1)
        if cached != new:
            raise SystemExit(f"{name}: HF cached generate {cached} != stateless greedy {new}")
        entries.append({
            "name": name,
            "prompt": text,
            "input_ids": ids,
            "output_ids": new,
            "text": tok.decode(new, skip_special_tokens=False),
            "n_new": len(new),
            "stopped_at_eos": bool(new and new[-1] == 1),
            "min_top2_gap": min(gaps),
            "top2_gaps": [round(g, 6) for g in gaps],
            "first_step_top5": first,
        })
        print(f"--- {name} ({len(ids)} prompt tokens, min gap {min(gaps):.4f})\n{text}|{entries[-1]['text']}")
    ref = {
        "generator": "tools/export_shipped_model.py",
        "oracle": "transformers DeepseekV4ForCausalLM, fp32, CPU, eager; weights = dequantized model.safetensors; "
                  "greedy (argmax), whole sequence re-run per token, identical to HF generate with its cache",
        "transformers_version": __import__("transformers").__version__,
        "torch_version": torch.__version__,
        "bos_prepended": True,
        "max_new_tokens": args.new_tokens,
        "eos_token_id": 1,
        "heldout": {"file": "heldout.txt", "tokens": len(held_ids) - 1, "bos_prepended": True,
                    "window": 512, "nll_fp32_weights": nll_fp32, "nll_stored_weights": nll_stored,
                    "nll_one_format_rounded": partial},
        "prompts": entries,
    }
    (out / "greedy_reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {out / 'greedy_reference.json'}")


if __name__ == "__main__":
    main()
