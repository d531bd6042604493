#!/usr/bin/env python3
"""Tiny DeepSeek-V3 checkpoints in the PUBLISHED layouts + transformers oracle logits.

For every fixture below this script
  1. writes a config.json spelled as the publishers write theirs (rope_theta +
     rope_scaling {type: yarn, mscale, mscale_all_dim, ...}; DeepSeek-V3's
     quantization_config {quant_method fp8, weight_block_size [128, 128]} or
     Kimi K2's compressed-tensors pack-quantized config with its `ignore`
     list) and checks what transformers' DeepseekV3Config reads from it;
  2. builds a random `DeepseekV3ForCausalLM` (fp32, CPU, eager attention)
     from a fixed seed, scaled so activations stay O(1), with a nonzero
     e_score_correction_bias;
  3. stores it in the published names (per-expert
     mlp.experts.E.{gate,up,down}_proj, not transformers' stacked
     gate_up_proj) and formats:
       bf16  every weight BF16, e_score_correction_bias F32;
       fp8   DeepSeek-V3 / R1: every linear weight of the layers F8_E4M3 with
             an F32 `weight_scale_inv` per 128x128 tile (amax / 448), the
             embeddings, lm_head, router and norms BF16;
       int4  Kimi K2: routed experts compressed-tensors pack-quantized
             (`weight_packed` I32 packed by compressed-tensors' own
             pack_to_int32, `weight_scale` BF16 per group of 32 = amax / 7.5
             as its minmax observer computes for symmetric int4,
             `weight_shape`), everything else BF16;
     plus, where num_nextn_predict_layers is 1, an MTP layer
     (model.layers.{num_hidden_layers}: enorm, hnorm, eh_proj, a decoder
     layer, shared_head, embed_tokens) of random weights (transformers does
     not run it: its oracle is step 7);
  4. loads exactly the DEQUANTIZED stored values into the HF model, so the
     oracle sees what a reader of the files computes with;
  5. runs HF on a few token sequences and writes little-endian f32
     [n_tokens][vocab] logits plus expected/manifest.json;
  6. checks the oracle is sound: HF's cached token-by-token decode equals its
     full forward, and every routing choice (group and expert) has a margin
     far above f32 rounding;
  7. for a fixture with an MTP layer, the MTP oracle (mtp_oracle below):
     transformers has no DeepSeek-V3 MTP, so it is assembled from
     transformers' own modules (DeepseekV3DecoderLayer, DeepseekV3RMSNorm,
     the model's rotary embedding) loaded with the layer's weights, read back
     from the committed model.safetensors and dequantized:
         h_i    = the main model's last_hidden_state (after model.norm)
         x_i    = eh_proj([enorm(embed_mtp(t_{i+1})) ; hnorm(h_i)])
         x      = DeepseekV3DecoderLayer(x) over rows 0.., causal, row i at RoPE position i
         logits = shared_head.head(shared_head.norm(x_i))
     (DeepSeek-V3 report eq. 21-23 with the column order and hidden state of
     vLLM's and SGLang's DeepSeek MTP; docs/deepseek_v3.md "The MTP layer").
     It writes expected/mtp/: seq<i>.bin f32 [n - 1][vocab] (row i predicts
     t_{i+2}) and chain<c>.bin f32 [k][vocab] (after a prefix of P tokens,
     draft 1 reads h_{P-1} and t_P, draft j + 1 the layer's own
     shared_head.norm output of draft j and draft j's argmax), with margins
     checked: every MTP routing choice >= 1e-4, every chain argmax's top-2 gap
     >= 1e-3 of the largest logit.

It also writes the full-size DeepSeek-V3 (671B, FP8) and Kimi K2 Thinking
(1T, INT4 experts) skeleton templates (tests/fixtures/dsv3/{deepseek_v3,
kimi_k2}_skeleton.json, expanded by src/checkpoint/skeleton.cpp into sparse
shards for `explain`): the published config.json, tensor names, dtypes and
shapes. Kimi's weight_shape tensors carry their values (detection reads them).

Usage: /work/venv-torch/bin/python tools/gen_dsv3_fixtures.py [--skeletons-only | --mtp-only]   (deterministic)
  --mtp-only: step 7 alone, from the committed fixtures (writes only expected/mtp/).
"""
from __future__ import annotations

import json
import pathlib
import shutil
import sys

import numpy as np
import torch
from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32, unpack_from_int32
from safetensors.torch import load_file, save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3DecoderLayer, DeepseekV3RMSNorm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import format_ref  # noqa: E402  (the FP8 block-128 reference quantizer)

ROOT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "dsv3"
GROUP = 32

FIXTURES = [
    # q_lora_rank set, 4 groups of 2 experts (top 2 groups), an mscale that
    # differs from mscale_all_dim (so both the cos/sin factor and the softmax
    # scale differ from 1), 3 layers with one dense.
    dict(name="tiny_bf16", fmt="bf16", seed=3101, model_type="deepseek_v3", vocab=160, hidden=72, layers=3,
         dense=1, inter=80, moe_inter=24, heads=3, q_lora=40, kv_lora=24, nope=12, rope=8, v=10, experts=8,
         n_group=4, topk_group=2, top_k=3, shared=1, scaling=2.5, norm_topk=True, mtp=0,
         rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 4.0, "mscale": 0.707, "mscale_all_dim": 1.0,
                       "original_max_position_embeddings": 64, "type": "yarn"},
         rope_theta=10000, max_pos=256, lengths=[23, 31, 4]),
    # DeepSeek-V3 / R1 FP8: q_lora_rank null (q_proj), two shared experts
    # (one MLP of twice the width), norm_topk_prob false, 2 groups of 4 with
    # one kept, the published mscale = mscale_all_dim = 1, an MTP layer.
    dict(name="tiny_fp8", fmt="fp8", seed=3202, model_type="deepseek_v3", vocab=144, hidden=80, layers=3,
         dense=1, inter=72, moe_inter=40, heads=4, q_lora=None, kv_lora=20, nope=10, rope=6, v=14, experts=8,
         n_group=2, topk_group=1, top_k=2, shared=2, scaling=1.5, norm_topk=False, mtp=1,
         rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 8.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                       "original_max_position_embeddings": 32, "type": "yarn"},
         rope_theta=10000, max_pos=256, lengths=[29, 17, 5],
         # The MTP oracle (step 7): token sequence lengths and chains
         # (sequence index, prefix P, drafts k).
         mtp_lengths=[70, 33, 6], mtp_chains=[(0, 41, 4), (1, 12, 3), (2, 5, 2)]),
    # Kimi K2: model_type kimi_k2, one group (n_group 1), INT4 routed experts
    # (hidden and moe_intermediate_size multiples of the group of 32), its
    # YaRN (beta_fast = beta_slow = 1: a zero-width ramp).
    dict(name="kimi_int4", fmt="int4", seed=3303, model_type="kimi_k2", vocab=176, hidden=96, layers=3,
         dense=1, inter=64, moe_inter=32, heads=2, q_lora=48, kv_lora=32, nope=16, rope=8, v=16, experts=12,
         n_group=1, topk_group=1, top_k=4, shared=1, scaling=2.827, norm_topk=True, mtp=0,
         rope_scaling={"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                       "original_max_position_embeddings": 16, "type": "yarn"},
         rope_theta=50000, max_pos=512, lengths=[27, 21, 3]),
]


def published_config(fx):
    cfg = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": fx["model_type"],
        "vocab_size": fx["vocab"], "hidden_size": fx["hidden"], "intermediate_size": fx["inter"],
        "moe_intermediate_size": fx["moe_inter"], "num_hidden_layers": fx["layers"],
        "num_nextn_predict_layers": fx["mtp"], "num_attention_heads": fx["heads"],
        "num_key_value_heads": fx["heads"], "n_shared_experts": fx["shared"], "n_routed_experts": fx["experts"],
        "routed_scaling_factor": fx["scaling"], "kv_lora_rank": fx["kv_lora"], "q_lora_rank": fx["q_lora"],
        "qk_rope_head_dim": fx["rope"], "v_head_dim": fx["v"], "qk_nope_head_dim": fx["nope"],
        "topk_method": "noaux_tc", "n_group": fx["n_group"], "topk_group": fx["topk_group"],
        "num_experts_per_tok": fx["top_k"], "moe_layer_freq": 1, "first_k_dense_replace": fx["dense"],
        "norm_topk_prob": fx["norm_topk"], "scoring_func": "sigmoid", "hidden_act": "silu",
        "max_position_embeddings": fx["max_pos"], "initializer_range": 0.02, "rms_norm_eps": 1e-6,
        "use_cache": True, "bos_token_id": 0, "eos_token_id": 1, "tie_word_embeddings": False,
        "rope_theta": fx["rope_theta"], "rope_scaling": fx["rope_scaling"], "attention_bias": False,
        "attention_dropout": 0.0, "torch_dtype": "bfloat16",
    }
    if fx["fmt"] == "fp8":
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                      "weight_block_size": [128, 128]}
    if fx["fmt"] == "int4":
        # As Kimi K2 (Thinking) publishes it: only the routed experts are int4.
        cfg["quantization_config"] = {
            "config_groups": {"group_0": {
                "input_activations": None, "output_activations": None, "targets": ["Linear"],
                "weights": {"actorder": None, "block_structure": None, "dynamic": False, "group_size": GROUP,
                            "num_bits": 4, "observer": "minmax", "observer_kwargs": {}, "strategy": "group",
                            "symmetric": True, "type": "int"}}},
            "format": "pack-quantized",
            "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
            "kv_cache_scheme": None, "quant_method": "compressed-tensors", "quantization_status": "compressed"}
    return cfg


def bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16)


def fp8_store(w: torch.Tensor):
    codes, scales = format_ref.fp8_block_quantize(w.numpy(), "f32")
    deq = format_ref.fp8_block_dequantize(codes, scales, "f32")
    return (torch.from_numpy(codes).view(torch.float8_e4m3fn), torch.from_numpy(np.asarray(scales, np.float32)),
            torch.from_numpy(np.asarray(deq, np.float32)))


def int4_store(w: torch.Tensor):
    rows, cols = w.shape
    g = w.reshape(rows, cols // GROUP, GROUP)
    # compressed-tensors' minmax observer, symmetric: scale = amax / (15 / 2),
    # in the weight's dtype (BF16); q = clamp(round(x / scale), -8, 7).
    scale = bf16(g.abs().amax(dim=-1) / 7.5)
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    q = torch.clamp(torch.round(g / scale.float()[..., None]), -8, 7).to(torch.int8).reshape(rows, cols)
    packed = pack_to_int32(q, 4)
    back = unpack_from_int32(packed, 4, torch.Size([rows, cols]))
    assert torch.equal(back, q), "pack_to_int32 round trip"
    deq = (q.float().reshape(rows, cols // GROUP, GROUP) * scale.float()[..., None]).reshape(rows, cols)
    return packed, scale, torch.tensor([rows, cols], dtype=torch.int64), deq


def randomize(model, fx, gen):
    """Weights scaled to keep activations O(1); norms near 1; a routing bias."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith("mlp.gate.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / p.shape[-1] ** 0.5))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=gen))


def published_tensors(model, fx):
    """HF state dict -> {published name: fp32 tensor}, experts split per expert."""
    out = {}
    I = fx["moe_inter"]
    for name, t in model.state_dict().items():
        t = t.detach().float().contiguous()
        if name.endswith("mlp.experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            for e in range(t.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = t[e, :I].contiguous()
                out[f"{base}{e}.up_proj.weight"] = t[e, I:].contiguous()
        elif name.endswith("mlp.experts.down_proj"):
            base = name[: -len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = t[e].contiguous()
        else:
            out[name] = t
    return out


def mtp_tensors(fx, gen):
    """A random MTP layer in DeepSeek-V3's published names (layer index = num_hidden_layers)."""
    D, V, H, L = fx["hidden"], fx["vocab"], fx["heads"], fx["layers"]
    p = f"model.layers.{L}."
    r = lambda *s: torch.randn(s, generator=gen) / s[-1] ** 0.5  # noqa: E731
    t = {p + "enorm.weight": torch.ones(D), p + "hnorm.weight": torch.ones(D), p + "eh_proj.weight": r(D, 2 * D),
         p + "shared_head.norm.weight": torch.ones(D), p + "shared_head.head.weight": r(V, D),
         p + "embed_tokens.weight": r(V, D), p + "input_layernorm.weight": torch.ones(D),
         p + "post_attention_layernorm.weight": torch.ones(D)}
    a = p + "self_attn."
    qk = fx["nope"] + fx["rope"]
    if fx["q_lora"]:
        t[a + "q_a_proj.weight"] = r(fx["q_lora"], D)
        t[a + "q_a_layernorm.weight"] = torch.ones(fx["q_lora"])
        t[a + "q_b_proj.weight"] = r(H * qk, fx["q_lora"])
    else:
        t[a + "q_proj.weight"] = r(H * qk, D)
    t[a + "kv_a_proj_with_mqa.weight"] = r(fx["kv_lora"] + fx["rope"], D)
    t[a + "kv_a_layernorm.weight"] = torch.ones(fx["kv_lora"])
    t[a + "kv_b_proj.weight"] = r(H * (fx["nope"] + fx["v"]), fx["kv_lora"])
    t[a + "o_proj.weight"] = r(D, H * fx["v"])
    m = p + "mlp."
    t[m + "gate.weight"] = r(fx["experts"], D)
    t[m + "gate.e_score_correction_bias"] = torch.zeros(fx["experts"])
    for e in range(fx["experts"]):
        t[f"{m}experts.{e}.gate_proj.weight"] = r(fx["moe_inter"], D)
        t[f"{m}experts.{e}.up_proj.weight"] = r(fx["moe_inter"], D)
        t[f"{m}experts.{e}.down_proj.weight"] = r(D, fx["moe_inter"])
    W = fx["shared"] * fx["moe_inter"]
    t[m + "shared_experts.gate_proj.weight"] = r(W, D)
    t[m + "shared_experts.up_proj.weight"] = r(W, D)
    t[m + "shared_experts.down_proj.weight"] = r(D, W)
    return t


def is_fp8_linear(name):
    # DeepSeek-V3's published FP8 checkpoint: every linear of the layers
    # (attention, dense MLP, experts, shared experts) is FP8; embeddings,
    # heads, the router, norms and the MTP layer's eh_proj stay BF16.
    if not name.startswith("model.layers.") or not name.endswith(".weight"):
        return False
    if ("norm" in name or name.endswith("mlp.gate.weight") or "embed_tokens" in name or "shared_head.head" in name
            or name.endswith("eh_proj.weight")):
        return False
    return True


def store(tensors, fx):
    """-> (stored {name: tensor}, dequantized {name: fp32} of what nibble reads)."""
    stored, deq = {}, {}
    for name, t in tensors.items():
        if name.endswith("e_score_correction_bias"):
            stored[name] = t.float().contiguous()
            deq[name] = t.float()
        elif fx["fmt"] == "fp8" and is_fp8_linear(name):
            codes, scales, d = fp8_store(t)
            stored[name] = codes
            stored[name[: -len(".weight")] + ".weight_scale_inv"] = scales
            deq[name] = d
        elif fx["fmt"] == "int4" and ".mlp.experts." in name:
            packed, scale, shape, d = int4_store(t)
            base = name[: -len(".weight")]
            stored[base + ".weight_packed"] = packed
            stored[base + ".weight_scale"] = scale
            stored[base + ".weight_shape"] = shape
            deq[name] = d
        else:
            stored[name] = bf16(t).contiguous()
            deq[name] = bf16(t).float()
    return stored, deq


def load_back(model, deq, fx):
    """Puts the dequantized published tensors into the HF model (experts re-stacked)."""
    sd = model.state_dict()
    new = {}
    for name in sd:
        if name.endswith("mlp.experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            E = sd[name].shape[0]
            new[name] = torch.stack([torch.cat([deq[f"{base}{e}.gate_proj.weight"], deq[f"{base}{e}.up_proj.weight"]])
                                     for e in range(E)])
        elif name.endswith("mlp.experts.down_proj"):
            base = name[: -len("down_proj")]
            new[name] = torch.stack([deq[f"{base}{e}.down_proj.weight"] for e in range(sd[name].shape[0])])
        else:
            new[name] = deq[name]
    missing, unexpected = model.load_state_dict(new, strict=True), None
    return missing


def hf_config(cfg):
    """transformers' DeepseekV3Config read from a published config.json dict (fp32, eager attention)."""
    hf_dict = {k: v for k, v in cfg.items() if k != "quantization_config"}
    hf_cfg = DeepseekV3Config(**{k: v for k, v in hf_dict.items() if k not in ("architectures", "model_type")})
    hf_cfg._attn_implementation = "eager"
    return hf_cfg


def routing_margin_hook(margins):
    """A forward hook for a DeepseekV3TopkRouter (mlp.gate) that appends the
    smallest margin of its group and expert choices, recomputed as HF selects."""
    def hook(mod, inp, out):
        logits = out[0].detach().float()
        scores = logits.sigmoid() + mod.e_score_correction_bias
        G, E = mod.num_group, mod.num_experts
        gs = scores.view(-1, G, E // G).topk(2, dim=-1)[0].sum(-1)
        if mod.topk_group < G:
            top = gs.topk(mod.topk_group + 1, dim=-1).values
            margins.append(float((top[:, -2] - top[:, -1]).min()))
        gidx = gs.topk(mod.topk_group, dim=-1).indices
        mask = torch.zeros_like(gs).scatter_(1, gidx, 1).bool()
        masked = scores.masked_fill(~mask.repeat_interleave(E // G, dim=1), float("-inf"))
        top = masked.topk(mod.top_k + 1, dim=-1).values if mod.top_k < E else None
        if top is not None:
            fin = torch.isfinite(top[:, -1])
            if fin.any():
                margins.append(float((top[fin, -2] - top[fin, -1]).min()))
    return hook


def build(fx):
    name = fx["name"]
    folder = ROOT / name
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "expected").mkdir(parents=True)
    cfg = published_config(fx)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    hf_cfg = hf_config(cfg)
    rp = hf_cfg.rope_parameters
    assert rp["rope_type"] == "yarn" and rp["factor"] == fx["rope_scaling"]["factor"], rp
    assert rp["mscale"] == fx["rope_scaling"]["mscale"] and rp["mscale_all_dim"] == fx["rope_scaling"]["mscale_all_dim"], rp
    assert hf_cfg.q_lora_rank == fx["q_lora"] and hf_cfg.n_group == fx["n_group"]

    torch.manual_seed(fx["seed"])
    gen = torch.Generator().manual_seed(fx["seed"])
    model = DeepseekV3ForCausalLM(hf_cfg).float().eval()
    randomize(model, fx, gen)
    tensors = published_tensors(model, fx)
    if fx["mtp"]:
        tensors.update(mtp_tensors(fx, gen))
    stored, deq = store(tensors, fx)
    save_file(stored, str(folder / "model.safetensors"), metadata={"format": "pt"})
    load_back(model, deq, fx)

    # Routing margins: every router's logits, recomputed as HF selects.
    margins = []
    hook = routing_margin_hook(margins)
    handles = [m.mlp.gate.register_forward_hook(hook) for m in model.model.layers if hasattr(m.mlp, "gate")]
    rng = np.random.default_rng(fx["seed"])
    entries = []
    with torch.no_grad():
        for i, n in enumerate(fx["lengths"]):
            toks = [int(x) for x in rng.integers(2, fx["vocab"], size=n)]
            logits = model(torch.tensor([toks]), use_cache=False).logits[0].float()
            if not torch.isfinite(logits).all():
                raise RuntimeError(f"{name}: non-finite logits in sequence {i}")
            fname = f"seq{i}.bin"
            logits.numpy().astype("<f4").tofile(folder / "expected" / fname)
            entries.append({"tokens": toks, "n_tokens": n, "logits": fname,
                            "max_abs_logit": float(logits.abs().max())})
    for h in handles:
        h.remove()
    min_margin = min(margins) if margins else float("inf")
    if min_margin < 1e-4:
        raise RuntimeError(f"{name}: a routing choice has margin {min_margin:.3g}; pick another seed")

    # Soundness: HF's cached decode equals its full forward (the latent cache).
    with torch.no_grad():
        toks = entries[0]["tokens"]
        full = model(torch.tensor([toks]), use_cache=False).logits[0].float()
        out = model(torch.tensor([toks[:1]]), use_cache=True)
        steps = [out.logits[0, -1]]
        for t in toks[1:]:
            out = model(torch.tensor([[t]]), cache=out.past_key_values, use_cache=True)
            steps.append(out.logits[0, -1])
        inc = torch.stack(steps).float()
        err = float((inc - full).abs().max() / full.abs().max())
        if err > 1e-5:
            raise RuntimeError(f"{name}: HF cached decode differs from its full forward by {err:.3g}")

    # The greedy path `nibble run --tokens` must print: argmax of full
    # forwards, each step's top-2 gap well above the logits' rounding.
    with torch.no_grad():
        ids = entries[0]["tokens"][:8]
        cont = []
        for _ in range(6):
            last = model(torch.tensor([ids + cont]), use_cache=False).logits[0, -1].float()
            top = torch.topk(last, 2)
            gap = float((top.values[0] - top.values[1]) / last.abs().max())
            if gap < 1e-3:
                raise RuntimeError(f"{name}: greedy step {len(cont)} has a top-2 gap of {gap:.3g}")
            cont.append(int(top.indices[0]))

    manifest = {
        "fixture": name, "format": fx["fmt"], "vocab_size": fx["vocab"], "sequences": entries,
        "greedy": {"prompt": ids, "continuation": cont},
        "min_routing_margin": min_margin, "hf_incremental_rel_err": err,
        "softmax_scale": float(model.model.layers[0].self_attn.scaling),
        "attention_factor": float(model.model.rotary_emb.attention_scaling),
        "logits_format": "little-endian f32 [n_tokens][vocab_size], full forward from position 0",
    }
    (folder / "expected" / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    print(f"{name}: {len(stored)} tensors, {size / 1e3:.0f} kB, min routing margin {min_margin:.3g}, "
          f"HF incremental err {err:.2g}, scale {manifest['softmax_scale']:.6f}, "
          f"attention_factor {manifest['attention_factor']:.6f}")


# ---- the MTP oracle (step 7) ----

def read_dequantized(folder):
    """{published name: fp32 tensor} of a fixture's model.safetensors, dequantized as nibble reads it."""
    st = load_file(str(folder / "model.safetensors"))
    deq = {}
    for name, t in st.items():
        if name.endswith((".weight_scale_inv", ".weight_scale", ".weight_shape")):
            continue
        if name.endswith(".weight_packed"):
            base = name[: -len(".weight_packed")]
            rows, cols = (int(x) for x in st[base + ".weight_shape"])
            q = unpack_from_int32(t, 4, torch.Size([rows, cols])).float()
            scale = st[base + ".weight_scale"].float()
            deq[base + ".weight"] = (q.reshape(rows, cols // GROUP, GROUP) * scale[..., None]).reshape(rows, cols)
        elif t.dtype == torch.float8_e4m3fn:
            scales = st[name[: -len(".weight")] + ".weight_scale_inv"].numpy()
            d = format_ref.fp8_block_dequantize(t.view(torch.uint8).numpy(), scales, "f32")
            deq[name] = torch.from_numpy(np.asarray(d, np.float32))
        else:
            deq[name] = t.float()
    return deq


def load_layer(layer, deq, prefix):
    """A transformers decoder layer loaded with the published tensors under `prefix` (experts re-stacked)."""
    sd = layer.state_dict()
    new = {}
    for name in sd:
        if name.endswith("mlp.experts.gate_up_proj"):
            base = prefix + name[: -len("gate_up_proj")]
            new[name] = torch.stack([torch.cat([deq[f"{base}{e}.gate_proj.weight"], deq[f"{base}{e}.up_proj.weight"]])
                                     for e in range(sd[name].shape[0])])
        elif name.endswith("mlp.experts.down_proj"):
            base = prefix + name[: -len("down_proj")]
            new[name] = torch.stack([deq[f"{base}{e}.down_proj.weight"] for e in range(sd[name].shape[0])])
        else:
            new[name] = deq[prefix + name]
    layer.load_state_dict(new, strict=True)


def top_gap(logits):
    top = torch.topk(logits, 2).values
    return float((top[0] - top[1]) / logits.abs().max())


def mtp_oracle(fx):
    """expected/mtp/ of a fixture with an MTP layer, from its committed files (header, step 7)."""
    name = fx["name"]
    folder = ROOT / name
    cfg = json.loads((folder / "config.json").read_text())
    hf_cfg = hf_config(cfg)
    deq = read_dequantized(folder)
    torch.manual_seed(0)  # the modules' init is overwritten below; seeded only to be deterministic
    model = DeepseekV3ForCausalLM(hf_cfg).float().eval()
    load_back(model, deq, fx)
    D, L, eps = fx["hidden"], fx["layers"], hf_cfg.rms_norm_eps
    p = f"model.layers.{L}."
    layer = DeepseekV3DecoderLayer(hf_cfg, layer_idx=L).float().eval()  # layer_idx >= first_k_dense: the MoE
    load_layer(layer, deq, p)
    norms = {}
    for key in ("enorm", "hnorm", "shared_head.norm"):
        norms[key] = DeepseekV3RMSNorm(D, eps=eps).float().eval()
        norms[key].weight.data.copy_(deq[p + key + ".weight"])
    # The layer's own embedding and head as stored (DeepSeek-V3 publishes
    # copies of the main model's); the main model's where a checkpoint has none.
    embed = deq.get(p + "embed_tokens.weight", deq["model.embed_tokens.weight"])
    head = deq.get(p + "shared_head.head.weight", deq["lm_head.weight"])
    eh = deq[p + "eh_proj.weight"]  # [D, 2D]
    margins = []
    hook = layer.mlp.gate.register_forward_hook(routing_margin_hook(margins))

    def main_hidden(toks):
        """The main model's last_hidden_state (after model.norm, lm_head's input) [n, D]."""
        out = model.model(torch.tensor([toks]), use_cache=False)
        h = out.last_hidden_state[0].float()
        ref = model(torch.tensor([toks]), use_cache=False).logits[0].float()
        assert float((model.lm_head(h) - ref).abs().max() / ref.abs().max()) < 1e-6, "last_hidden_state is lm_head's input"
        return h

    def mtp_rows(hidden, next_ids):
        """hidden [T, D] (row i: the hidden of position i), next_ids [T] (the token at i + 1) ->
        (shared_head.norm output [T, D], logits [T, V]), row i at RoPE position i, causal over the rows."""
        T = hidden.shape[0]
        e = norms["enorm"](embed[torch.tensor(next_ids)])
        x = (torch.cat([e, norms["hnorm"](hidden)], dim=-1) @ eh.T)[None]
        pos = torch.arange(T)[None]
        mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
        out = layer(x, attention_mask=mask, position_ids=pos, position_embeddings=model.model.rotary_emb(x, pos),
                    use_cache=False)
        out = out[0] if isinstance(out, tuple) else out
        y = norms["shared_head.norm"](out[0])
        return y, y @ head.T

    out_dir = folder / "expected" / "mtp"
    for attempt in range(20):
        margins.clear()
        rng = np.random.default_rng(fx["seed"] + 1000 + attempt)
        seqs = [[int(x) for x in rng.integers(2, fx["vocab"], size=n)] for n in fx["mtp_lengths"]]
        results, entries, chain_entries = {}, [], []
        min_gap = float("inf")
        with torch.no_grad():
            for i, toks in enumerate(seqs):
                _, logits = mtp_rows(main_hidden(toks)[:-1], toks[1:])
                results[f"seq{i}.bin"] = logits
                entries.append({"tokens": toks, "logits": f"seq{i}.bin", "max_abs_logit": float(logits.abs().max())})
                # Row by row over a growing prefix equals the whole: causal, as the cache reads it.
                part, _ = mtp_rows(main_hidden(toks)[: len(toks) // 2], toks[1: len(toks) // 2 + 1])
                whole, _ = mtp_rows(main_hidden(toks)[:-1], toks[1:])
                assert float((part - whole[: part.shape[0]]).abs().max()) < 1e-5, "the MTP rows are causal"
            for c, (si, P, k) in enumerate(fx["mtp_chains"]):
                toks = seqs[si]
                assert P < len(toks)
                rows_h = list(main_hidden(toks[:P]))
                rows_t = toks[1: P + 1]
                chain, drafts = [], []
                for _ in range(k):
                    y, logits = mtp_rows(torch.stack(rows_h), rows_t)
                    last = logits[-1]
                    chain.append(last)
                    min_gap = min(min_gap, top_gap(last))
                    d = int(torch.argmax(last))
                    drafts.append(d)
                    rows_h.append(y[-1])  # draft j + 1 reads draft j's own head input
                    rows_t = rows_t + [d]
                results[f"chain{c}.bin"] = torch.stack(chain)
                chain_entries.append({"sequence": si, "prefix": P, "drafts": drafts, "logits": f"chain{c}.bin"})
        min_margin = min(margins)
        if min_margin >= 1e-4 and min_gap >= 1e-3:
            break
        print(f"{name}: MTP oracle attempt {attempt}: routing margin {min_margin:.3g}, chain gap {min_gap:.3g}; "
              "next seed", flush=True)
    else:
        raise RuntimeError(f"{name}: no token draw gave safe MTP margins")
    hook.remove()
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    for fname, t in results.items():
        t.float().numpy().astype("<f4").tofile(out_dir / fname)
    manifest = {
        "fixture": name, "vocab_size": fx["vocab"], "sequences": entries, "chains": chain_entries,
        "checks": {"min_mtp_routing_margin": min_margin, "min_chain_rel_top2_gap": min_gap, "token_seed": attempt},
        "rows": "row i: hidden of main position i (model.norm output) and token i + 1 at RoPE position i, "
                "predicting token i + 2; chains: draft j + 1 reads draft j's shared_head.norm output",
        "logits_format": "little-endian f32 [rows][vocab_size]",
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{name}: MTP oracle, {len(entries)} sequences, {len(chain_entries)} chains, routing margin "
          f"{min_margin:.3g}, chain gap {min_gap:.3g}")


# ---- full-size skeleton templates (src/checkpoint/skeleton.cpp expands them) ----

def deepseek_v3_published_config():
    """deepseek-ai/DeepSeek-V3's config.json (auto_map and the training-only fields kept)."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                     "AutoModel": "modeling_deepseek.DeepseekV3Model",
                     "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
        "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3,
        "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432,
        "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v3",
        "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
        "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
        "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "weight_block_size": [128, 128]},
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096, "type": "yarn"},
        "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": True,
        "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
        "transformers_version": "4.33.1", "use_cache": True, "v_head_dim": 128, "vocab_size": 129280,
    }


def kimi_k2_published_config():
    """moonshotai/Kimi-K2-Thinking's config.json: INT4 routed experts (compressed-tensors)."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                     "AutoModel": "modeling_deepseek.DeepseekV3Model",
                     "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
        "aux_loss_alpha": 0.001, "bos_token_id": 163584, "eos_token_id": 163586, "ep_size": 1,
        "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02,
        "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 262144,
        "model_type": "kimi_k2", "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 1,
        "n_routed_experts": 384, "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 64,
        "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 64,
        "num_nextn_predict_layers": 0, "pretraining_tp": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "quantization_config": published_config(dict(FIXTURES[2], fmt="int4"))["quantization_config"],
        "rms_norm_eps": 1e-05,
        "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 64.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096, "type": "yarn"},
        "rope_theta": 50000.0, "routed_scaling_factor": 2.827, "scoring_func": "sigmoid", "seq_aux": True,
        "tie_word_embeddings": False, "topk_group": 1, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
        "transformers_version": "4.56.2", "use_cache": True, "v_head_dim": 128, "vocab_size": 163840,
    }


def skeleton(which):
    cfg = deepseek_v3_published_config() if which == "deepseek_v3" else kimi_k2_published_config()
    D, V, H = cfg["hidden_size"], cfg["vocab_size"], cfg["num_attention_heads"]
    L, K, E, I, Id = cfg["num_hidden_layers"], cfg["first_k_dense_replace"], cfg["n_routed_experts"], \
        cfg["moe_intermediate_size"], cfg["intermediate_size"]
    ql, C, n, r, v = cfg["q_lora_rank"], cfg["kv_lora_rank"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], \
        cfg["v_head_dim"]
    fp8 = which == "deepseek_v3"
    tiles = lambda x: -(-x // 128)  # noqa: E731

    def lin(name, rows, cols, quant=fp8):
        if quant:
            return [[name + ".weight", "F8_E4M3", [rows, cols]],
                    [name + ".weight_scale_inv", "F32", [tiles(rows), tiles(cols)]]]
        return [[name + ".weight", "BF16", [rows, cols]]]

    def int4(name, rows, cols):
        return [[name + ".weight_packed", "I32", [rows, cols // 8]],
                [name + ".weight_scale", "BF16", [rows, cols // GROUP]],
                [name + ".weight_shape", "I64", [2], [rows, cols]]]

    attn = [["input_layernorm.weight", "BF16", [D]], ["post_attention_layernorm.weight", "BF16", [D]],
            ["self_attn.q_a_layernorm.weight", "BF16", [ql]], ["self_attn.kv_a_layernorm.weight", "BF16", [C]]]
    attn += lin("self_attn.q_a_proj", ql, D) + lin("self_attn.q_b_proj", H * (n + r), ql)
    attn += lin("self_attn.kv_a_proj_with_mqa", C + r, D) + lin("self_attn.kv_b_proj", H * (n + v), C)
    attn += lin("self_attn.o_proj", D, H * v)
    dense = lin("mlp.gate_proj", Id, D) + lin("mlp.up_proj", Id, D) + lin("mlp.down_proj", D, Id)
    moe = [["mlp.gate.weight", "BF16", [E, D]], ["mlp.gate.e_score_correction_bias", "F32", [E]]]
    W = cfg["n_shared_experts"] * I
    moe += lin("mlp.shared_experts.gate_proj", W, D) + lin("mlp.shared_experts.up_proj", W, D) + \
        lin("mlp.shared_experts.down_proj", D, W)
    if fp8:
        expert = lin("gate_proj", I, D) + lin("up_proj", I, D) + lin("down_proj", D, I)
    else:
        expert = int4("gate_proj", I, D) + int4("up_proj", I, D) + int4("down_proj", D, I)
    mtp = [["enorm.weight", "BF16", [D]], ["hnorm.weight", "BF16", [D]], ["eh_proj.weight", "BF16", [D, 2 * D]],
           ["shared_head.norm.weight", "BF16", [D]], ["shared_head.head.weight", "BF16", [V, D]],
           ["embed_tokens.weight", "BF16", [V, D]]]
    size = {"BF16": 2, "F32": 4, "F8_E4M3": 1, "I32": 4, "I64": 8}
    nb = lambda ts: sum(int(np.prod(t[2])) * size[t[1]] for t in ts)  # noqa: E731
    templates = {"embed": {"tensors": [["model.embed_tokens.weight", "BF16", [V, D]]]},
                 "attn": {"tensors": attn}, "dense": {"tensors": dense}, "moe": {"tensors": moe},
                 "experts": {"repeat": E, "prefix": "mlp.experts.{i}.", "tensors": expert},
                 "mtp": {"tensors": mtp},
                 "final": {"tensors": [["model.norm.weight", "BF16", [D]], ["lm_head.weight", "BF16", [V, D]]]}}
    groups = [("", ["embed"], nb(templates["embed"]["tensors"]))]
    n_mtp = cfg["num_nextn_predict_layers"]
    for l in range(L + n_mtp):
        use = ["attn"] + (["dense"] if l < K else ["moe", "experts"]) + (["mtp"] if l >= L else [])
        size_l = sum(nb(templates[u]["tensors"]) * (E if u == "experts" else 1) for u in use)
        groups.append((f"model.layers.{l}.", use, size_l))
    groups.append(("", ["final"], nb(templates["final"]["tensors"])))
    n_shards = 163 if fp8 else 62
    total = sum(g[2] for g in groups)
    # Deal the groups out in order, a shard closing once it holds its share
    # (a MoE layer is a few GB: several layers per shard, never split).
    shards, cur, acc = [], [], 0
    for i, g in enumerate(groups):
        cur.append({"prefix": g[0], "use": g[1]})
        acc += g[2]
        left = len(groups) - i - 1
        if acc >= total * (len(shards) + 1) / n_shards and len(shards) < n_shards - 1 and left > 0:
            shards.append(cur)
            cur = []
    if cur:
        shards.append(cur)
    n_tensors = sum(len(templates[u]["tensors"]) * (E if u == "experts" else 1) for g in groups for u in g[1])
    doc = {
        "comment": [f"{'deepseek-ai/DeepSeek-V3 (FP8)' if fp8 else 'moonshotai/Kimi-K2-Thinking (INT4 experts)'} "
                    "checkpoint skeleton, written by tools/gen_dsv3_fixtures.py:",
                    "the published config.json, tensor names, dtypes and shapes, and shard names in the",
                    f"published pattern (model-00001-of-{n_shards:06}); the count and the tensor-to-shard",
                    "assignment are not the published index (whole layers dealt out in order).",
                    f"Expands to {n_tensors} tensors in {len(shards)} shards, {total} bytes (index total_size)."],
        "shard_name": "model-{n:05}-of-" + f"{len(shards):06}" + ".safetensors",
        "shard_metadata": {"format": "pt"},
        "config": cfg,
        "templates": templates,
        "shards": shards,
    }
    path = ROOT / f"{which}_skeleton.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{path.name}: {len(shards)} shards, {n_tensors} tensors, {total / 1e9:.2f} GB")


def main():
    if "--mtp-only" in sys.argv:
        for fx in FIXTURES:
            if fx["mtp"]:
                mtp_oracle(fx)
        return
    if "--skeletons-only" not in sys.argv:
        for fx in FIXTURES:
            build(fx)
            if fx["mtp"]:
                mtp_oracle(fx)
    ROOT.mkdir(parents=True, exist_ok=True)
    for which in ("deepseek_v3", "kimi_k2"):
        skeleton(which)


if __name__ == "__main__":
    main()
