#!/usr/bin/env python3
"""Writes a gpt-oss-20b-shaped checkpoint (all 24 layers at full size, random
weights) in the published layout, for decode benchmarks:

    /work/venv/bin/python tools/make_gptoss_shaped.py /work/artifacts/gptoss20b
    /work/venv/bin/python tools/make_gptoss_shaped.py DIR --layers 4     # fewer layers, same shapes

Names, dtypes, shapes and config.json are openai/gpt-oss-20b's (transformers'
GptOssConfig with the 20b's published values): BF16 embed_tokens / lm_head
[201088, 2880], per layer BF16 q/k/v/o projections with biases and sinks
(64 query heads, 8 KV heads of 64), BF16 router [32, 2880] + bias, MXFP4
experts as *_blocks U8 [32, R, C/32, 16] + *_scales U8 (E8M0) [32, R, C/32]
with BF16 biases (gate_up R = 5760 rows interleaving gate / up, C = 2880;
down R = 2880, C = 2880). It is a valid Hugging Face checkpoint folder
(config.json, sharded safetensors, model.safetensors.index.json), so other
engines' converters read it; it has no tokenizer.

Values are random with magnitudes that keep the forward finite and the
routing spread: BF16 matrices Gaussian with RMS 1/sqrt(in), FP4 codes
uniform over all 16 (RMS 2.93) under E8M0 block scales 2^-7 jittered by ±1
binade (so the experts' RMS is ~1/sqrt(in) too), norms ~1, biases small,
sinks N(0, 1). The model predicts noise; only its speed means anything.

Memory stays bounded (one tensor at a time, <= 270 MB); the folder appears
complete or not at all (tools/shaped_checkpoint.py).
"""

import argparse

import ml_dtypes
import numpy as np

from shaped_checkpoint import write_checkpoint

V, D, HEADS, KV, HD, I, E, TOPK = 201088, 2880, 64, 8, 64, 2880, 32, 4


def config(layers):
    return {
        "architectures": ["GptOssForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "eos_token_id": 200002,
        "experts_per_token": TOPK,
        "head_dim": HD,
        "hidden_act": "silu",
        "hidden_size": D,
        "initial_context_length": 4096,
        "initializer_range": 0.02,
        "intermediate_size": I,
        "layer_types": ["sliding_attention" if l % 2 == 0 else "full_attention" for l in range(layers)],
        "max_position_embeddings": 131072,
        "model_type": "gpt_oss",
        "num_attention_heads": HEADS,
        "num_experts_per_tok": TOPK,
        "num_hidden_layers": layers,
        "num_key_value_heads": KV,
        "num_local_experts": E,
        "output_router_logits": False,
        "pad_token_id": 199999,
        "quantization_config": {
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                       "model.embed_tokens", "lm_head"],
            "quant_method": "mxfp4",
        },
        "rms_norm_eps": 1e-05,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                         "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": False},
        "rope_theta": 150000,
        "router_aux_loss_coef": 0.9,
        "sliding_window": 128,
        "swiglu_limit": 7.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.55.0.dev0",
        "use_cache": True,
        "vocab_size": V,
    }


def tensors(layers):
    """(name, dtype, shape, kind) in published order; kind says how to fill it."""
    out = [("model.embed_tokens.weight", "BF16", [V, D], ("normal", 1.0))]
    for l in range(layers):
        p = f"model.layers.{l}."
        out += [
            (p + "input_layernorm.weight", "BF16", [D], ("around1", 0.05)),
            (p + "post_attention_layernorm.weight", "BF16", [D], ("around1", 0.05)),
            (p + "self_attn.q_proj.weight", "BF16", [HEADS * HD, D], ("normal", D ** -0.5)),
            (p + "self_attn.q_proj.bias", "BF16", [HEADS * HD], ("normal", 0.02)),
            (p + "self_attn.k_proj.weight", "BF16", [KV * HD, D], ("normal", D ** -0.5)),
            (p + "self_attn.k_proj.bias", "BF16", [KV * HD], ("normal", 0.02)),
            (p + "self_attn.v_proj.weight", "BF16", [KV * HD, D], ("normal", D ** -0.5)),
            (p + "self_attn.v_proj.bias", "BF16", [KV * HD], ("normal", 0.02)),
            (p + "self_attn.o_proj.weight", "BF16", [D, HEADS * HD], ("normal", (HEADS * HD) ** -0.5)),
            (p + "self_attn.o_proj.bias", "BF16", [D], ("normal", 0.02)),
            (p + "self_attn.sinks", "BF16", [HEADS], ("normal", 1.0)),
            (p + "mlp.router.weight", "BF16", [E, D], ("normal", D ** -0.5)),
            (p + "mlp.router.bias", "BF16", [E], ("normal", 0.1)),
            (p + "mlp.experts.gate_up_proj_blocks", "U8", [E, 2 * I, D // 32, 16], ("fp4",)),
            (p + "mlp.experts.gate_up_proj_scales", "U8", [E, 2 * I, D // 32], ("e8m0",)),
            (p + "mlp.experts.gate_up_proj_bias", "BF16", [E, 2 * I], ("normal", 0.02)),
            (p + "mlp.experts.down_proj_blocks", "U8", [E, D, I // 32, 16], ("fp4",)),
            (p + "mlp.experts.down_proj_scales", "U8", [E, D, I // 32], ("e8m0",)),
            (p + "mlp.experts.down_proj_bias", "BF16", [E, D], ("normal", 0.02)),
        ]
    out += [("model.norm.weight", "BF16", [D], ("around1", 0.05)),
            ("lm_head.weight", "BF16", [V, D], ("normal", D ** -0.5))]
    return out


def fill(rng, dtype, shape, kind):
    n = int(np.prod(shape))
    if kind[0] == "fp4":
        return rng.bytes(n)
    if kind[0] == "e8m0":
        return (127 - 7 + rng.integers(-1, 2, size=n)).astype(np.uint8).tobytes()
    out = np.empty(n, dtype=ml_dtypes.bfloat16)
    step = 1 << 24
    for a in range(0, n, step):  # bounded memory for the [201088, 2880] tables
        b = min(n, a + step)
        x = rng.standard_normal(b - a, dtype=np.float32) * np.float32(kind[1])
        if kind[0] == "around1":
            x += 1.0
        out[a:b] = x.astype(ml_dtypes.bfloat16)
    return out.tobytes()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--seed", type=int, default=20)
    a = ap.parse_args()
    write_checkpoint(a.dir, tensors(a.layers), fill, a.seed, {
        "config.json": config(a.layers),
        "generation_config.json": {"bos_token_id": 199998, "do_sample": True, "eos_token_id": [200002, 199999, 200012],
                                   "pad_token_id": 199999},
    })


if __name__ == "__main__":
    main()
