#!/usr/bin/env python3
"""Writes a Kimi-K2-shaped checkpoint (DeepseekV3ForCausalLM, full-size layers,
random weights, INT4 routed experts) in the published layout, for decode
benchmarks (issue 18's performance section):

    /work/venv/bin/python tools/make_kimi_shaped.py /work/artifacts/kimi2          # 2 layers: dense + MoE, ~15.5 GB
    /work/venv/bin/python tools/make_kimi_shaped.py DIR --layers 3                  # one dense + two MoE layers

Shapes, names, dtypes and config.json are Kimi K2's (moonshotai/Kimi-K2-Thinking:
hidden 7168, 64 heads, MLA with q_lora_rank 1536, kv_lora_rank 512, qk_nope 128 /
qk_rope 64 / v_head 128, first_k_dense_replace 1 with a dense MLP of 18432, 384
routed experts of 2048 top-8 with one shared expert, sigmoid scores with
e_score_correction_bias, routed_scaling_factor 2.827, vocab 163840), with only
`--layers` layers. Routed experts are compressed-tensors `pack-quantized` INT4
(group 32, symmetric): `weight_packed` I32 [rows, cols/8], `weight_scale` BF16
[rows, cols/32], `weight_shape` I64 [2] (compressed-tensors saves it as
torch.int64); everything else BF16 (the ignore list: lm_head, attention,
shared experts, dense MLPs), the router bias F32.

Values are random with magnitudes that keep the forward finite and the routing
spread: BF16 matrices Gaussian with RMS 1/sqrt(in); INT4 codes uniform over all
16 (RMS ~4.6) under scales 1/(4.6 sqrt(in)) jittered by +-25%, so the experts'
RMS is ~1/sqrt(in) too; norms ~1. The model predicts noise; only its speed
means anything. Writing goes through tools/shaped_checkpoint.py (bounded
memory, the folder appears complete or not at all).
"""

import argparse

import ml_dtypes
import numpy as np

from shaped_checkpoint import write_checkpoint

V, D, HEADS = 163840, 7168, 64
Q_RANK, KV_RANK, NOPE, ROPE, VH = 1536, 512, 128, 64, 128
DENSE_I, MOE_I, E, TOPK, GROUP = 18432, 2048, 384, 8, 32


def config(layers):
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 163584,
        "eos_token_id": 163586,
        "first_k_dense_replace": 1,
        "hidden_act": "silu",
        "hidden_size": D,
        "initializer_range": 0.02,
        "intermediate_size": DENSE_I,
        "kv_lora_rank": KV_RANK,
        "max_position_embeddings": 262144,
        "model_type": "kimi_k2",
        "moe_intermediate_size": MOE_I,
        "moe_layer_freq": 1,
        "n_group": 1,
        "n_routed_experts": E,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": HEADS,
        "num_experts_per_tok": TOPK,
        "num_hidden_layers": layers,
        "num_key_value_heads": HEADS,
        "num_nextn_predict_layers": 0,
        "q_lora_rank": Q_RANK,
        "qk_nope_head_dim": NOPE,
        "qk_rope_head_dim": ROPE,
        "quantization_config": {
            "config_groups": {"group_0": {
                "input_activations": None, "output_activations": None, "targets": ["Linear"],
                "weights": {"actorder": None, "block_structure": None, "dynamic": False, "group_size": GROUP,
                            "num_bits": 4, "observer": "minmax", "observer_kwargs": {}, "strategy": "group",
                            "symmetric": True, "type": "int"}}},
            "format": "pack-quantized",
            "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
            "kv_cache_scheme": None,
            "quant_method": "compressed-tensors",
            "quantization_status": "compressed",
        },
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 64.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096, "type": "yarn"},
        "rope_theta": 50000.0,
        "routed_scaling_factor": 2.827,
        "scoring_func": "sigmoid",
        "tie_word_embeddings": False,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "v_head_dim": VH,
        "vocab_size": V,
    }


def bf16(name, shape, kind):
    return (name, "BF16", shape, kind)


def linear(name, rows, cols):
    return bf16(name + ".weight", [rows, cols], ("normal", cols ** -0.5))


def int4(name, rows, cols):
    return [(name + ".weight_packed", "I32", [rows, cols // 8], ("codes",)),
            (name + ".weight_scale", "BF16", [rows, cols // GROUP], ("scale", cols)),
            (name + ".weight_shape", "I64", [2], ("shape", rows, cols))]


def tensors(layers):
    """(name, dtype, shape, kind) in published order; kind says how to fill it."""
    out = [bf16("model.embed_tokens.weight", [V, D], ("normal", 1.0))]
    for l in range(layers):
        p = f"model.layers.{l}."
        a = p + "self_attn."
        out += [
            bf16(p + "input_layernorm.weight", [D], ("around1", 0.05)),
            linear(a + "q_a_proj", Q_RANK, D),
            bf16(a + "q_a_layernorm.weight", [Q_RANK], ("around1", 0.05)),
            linear(a + "q_b_proj", HEADS * (NOPE + ROPE), Q_RANK),
            linear(a + "kv_a_proj_with_mqa", KV_RANK + ROPE, D),
            bf16(a + "kv_a_layernorm.weight", [KV_RANK], ("around1", 0.05)),
            linear(a + "kv_b_proj", HEADS * (NOPE + VH), KV_RANK),
            linear(a + "o_proj", D, HEADS * VH),
            bf16(p + "post_attention_layernorm.weight", [D], ("around1", 0.05)),
        ]
        m = p + "mlp."
        if l == 0:  # first_k_dense_replace = 1
            out += [linear(m + "gate_proj", DENSE_I, D), linear(m + "up_proj", DENSE_I, D),
                    linear(m + "down_proj", D, DENSE_I)]
            continue
        out += [linear(m + "gate", E, D), (m + "gate.e_score_correction_bias", "F32", [E], ("normal", 0.01))]
        for e in range(E):
            x = f"{m}experts.{e}."
            out += int4(x + "gate_proj", MOE_I, D) + int4(x + "up_proj", MOE_I, D) + int4(x + "down_proj", D, MOE_I)
        s = m + "shared_experts."
        out += [linear(s + "gate_proj", MOE_I, D), linear(s + "up_proj", MOE_I, D), linear(s + "down_proj", D, MOE_I)]
    out += [bf16("model.norm.weight", [D], ("around1", 0.05)), linear("lm_head", V, D)]
    return out


def fill(rng, dtype, shape, kind):
    n = int(np.prod(shape))
    if kind[0] == "codes":
        return rng.bytes(4 * n)
    if kind[0] == "shape":
        return np.array(kind[1:], dtype="<i8").tobytes()
    if kind[0] == "scale":
        s = (1.0 / (4.6 * np.sqrt(kind[1]))) * rng.uniform(0.75, 1.25, size=n)
        return s.astype(ml_dtypes.bfloat16).tobytes()
    x_dtype = np.float32 if dtype == "F32" else ml_dtypes.bfloat16
    out = np.empty(n, dtype=x_dtype)
    step = 1 << 24
    for a in range(0, n, step):  # bounded memory for the [163840, 7168] tables
        b = min(n, a + step)
        x = rng.standard_normal(b - a, dtype=np.float32) * np.float32(kind[1])
        if kind[0] == "around1":
            x += 1.0
        out[a:b] = x.astype(x_dtype)
    return out.tobytes()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--layers", type=int, default=2, help="layers (the first dense, the rest MoE); Kimi K2 has 61")
    ap.add_argument("--seed", type=int, default=18)
    a = ap.parse_args()
    if a.layers < 1:
        ap.error("--layers must be at least 1")
    write_checkpoint(a.dir, tensors(a.layers), fill, a.seed, {
        "config.json": config(a.layers),
        "generation_config.json": {"bos_token_id": 163584, "eos_token_id": 163586, "do_sample": True,
                                   "temperature": 1.0},
    })


if __name__ == "__main__":
    main()
