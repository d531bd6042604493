#!/usr/bin/env python3
"""Fixtures for the fused MoE layer: small DeepSeek-V4-style layers with
random stored-format weights and the layer's output computed here,
independently of nibble: weights dequantized with numpy / ml_dtypes, expert
math in float64, routing as HF transformers' DeepseekV4TopKRouter /
DeepseekV4HashRouter does it (torch f32 scores, torch.topk(sorted=False),
weights / (sum + 1e-20) * routed_scaling).

Cases cover: MXFP4 / NVFP4 / FP8 (UE8M0 and F32 scales) / BF16 experts, an
FP8 shared expert beside FP4 experts, hash routing with I64 and I32 tid2eid
(a repeated expert in one row, repeated token ids), the SwiGLU clamp
(checked to trigger), exact ties in top-k on both of torch's code paths
(nth_element when k*64 > E, partial_sort otherwise), and batches where
tokens share experts.

Output: tests/fixtures/moe/<case>.safetensors. Tensor names:
  x [n, D] F32, token_ids [n] I32, gate [E, D] BF16|F32, bias [E] F32,
  tid2eid [V, K] I64|I32, experts.<e>.<w1|w2|w3>.{data,scales,global_scale},
  shared.<w1|w2|w3>.{...}, expected.{logits [n,E], indices [n,K] I32,
  weights [n,K], y [n,D], y_q8 [n,D]} F32; y_q8 is the layer with x / h
  rounded to int8 blocks where the FP4 kernels round them.
Metadata: hidden, inter, n_experts, top_k, scoring, norm_topk_prob,
routed_scaling, swiglu_limit, expert_format, shared_format, fp8_scale.

Usage: python3 tools/gen_moe_fixtures.py   (deterministic)
"""
import json
import pathlib
import struct

import ml_dtypes
import numpy as np
import torch

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "moe"

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)


# ---------------------------------------------------------------- safetensors
def write_safetensors(path, tensors, metadata):
    """tensors: name -> (dtype string, shape, raw bytes)."""
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    offset = 0
    blobs = []
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        pad = (-len(raw)) % 16  # keep every tensor 16-byte aligned, as real shards are
        blobs.append(raw + b"\0" * pad)
        offset += len(raw) + pad
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((16 - (8 + len(h)) % 16) % 16)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# ------------------------------------------------------------- weight formats
def make_weight(rng, fmt, rows, cols, fp8_scale="ue8m0", global_scale=None):
    """Random stored weights and their exact float64 values.

    Returns (tensors suffix -> (dtype, shape, bytes), dequantized [rows, cols]).
    """
    t = {}
    if fmt == "mxfp4":
        assert cols % 32 == 0
        codes = rng.integers(0, 16, size=(rows, cols), dtype=np.uint8)
        exps = rng.integers(121, 127, size=(rows, cols // 32), dtype=np.uint8)  # 2^-6 .. 2^-1
        packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
        t["data"] = ("U8", (rows, cols // 2), packed.tobytes())
        t["scales"] = ("F8_E8M0", (rows, cols // 32), exps.tobytes())
        scale = np.exp2(exps.astype(np.float64) - 127.0)
        deq = E2M1[codes] * np.repeat(scale, 32, axis=1)
    elif fmt == "nvfp4":
        assert cols % 16 == 0
        codes = rng.integers(0, 16, size=(rows, cols), dtype=np.uint8)
        # E4M3 block scales: positive, from subnormal to large.
        sb = rng.integers(0x01, 0x70, size=(rows, cols // 16), dtype=np.uint8)
        sg = np.float32(global_scale if global_scale is not None else 0.01)
        packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
        t["data"] = ("U8", (rows, cols // 2), packed.tobytes())
        t["scales"] = ("F8_E4M3", (rows, cols // 16), sb.tobytes())
        t["global_scale"] = ("F32", (1,), np.array([sg], dtype=np.float32).tobytes())
        sbv = sb.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
        deq = E2M1[codes] * np.repeat(sbv, 16, axis=1) * np.float64(sg)
    elif fmt == "fp8_block128":
        codes = rng.integers(0, 256, size=(rows, cols), dtype=np.uint8)
        codes[(codes & 0x7F) == 0x7F] = 0x3C  # no NaN codes
        tr, tc = -(-rows // 128), -(-cols // 128)
        t["data"] = ("F8_E4M3", (rows, cols), codes.tobytes())
        vals = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
        if fp8_scale == "ue8m0":
            se = rng.integers(117, 121, size=(tr, tc), dtype=np.uint8)
            t["scales"] = ("F8_E8M0", (tr, tc), se.tobytes())
            sv = np.exp2(se.astype(np.float64) - 127.0)
        else:
            sv32 = (rng.uniform(1.0, 2.0, size=(tr, tc)) * 2.0 ** -9).astype(np.float32)
            t["scales"] = ("F32", (tr, tc), sv32.tobytes())
            sv = sv32.astype(np.float64)
        full = np.repeat(np.repeat(sv, 128, axis=0), 128, axis=1)[:rows, :cols]
        deq = vals * full
    elif fmt == "bf16":
        f = (rng.standard_normal((rows, cols)) * 0.08).astype(np.float32)
        b = f.astype(ml_dtypes.bfloat16)
        t["data"] = ("BF16", (rows, cols), b.tobytes())
        deq = b.astype(np.float64)
    else:
        raise ValueError(fmt)
    return t, deq


# ----------------------------------------------------------------- reference
def scores_torch(logits32, scoring):
    x = torch.from_numpy(logits32)
    if scoring == "softmax":
        return torch.softmax(x, dim=-1)
    if scoring == "sigmoid":
        return torch.sigmoid(x)
    return torch.nn.functional.softplus(x).sqrt()


def int8_grid(v):
    """v (float32 [cols]) rounded as nibble's FP4 kernels round activations:
    per block of 32, step amax / 127 (f32), q = round-half-even(v * (127 / amax))
    in f32. Returns the dequantized values in float64."""
    v = np.asarray(v, dtype=np.float32)
    out = np.zeros(v.shape, dtype=np.float64)
    for b in range(0, v.shape[0], 32):
        blk = v[b:b + 32]
        amax = np.float32(np.max(np.abs(blk)))
        if amax == 0:
            continue
        d = np.float32(amax / np.float32(127.0))
        inv = np.float32(np.float32(127.0) / amax)
        q = np.rint((blk * inv).astype(np.float32))
        out[b:b + 32] = q.astype(np.float64) * np.float64(d)
    return out


def expert_f64(w1, w3, w2, x, limit, int8_x=False, int8_h=False):
    """One expert in float64. int8_x / int8_h: first round x / h to the int8
    grid (what the FP4 kernels do before w1, w3 / before w2)."""
    xin = int8_grid(x) if int8_x else x.astype(np.float64)
    g = w1 @ xin
    u = w3 @ xin
    if limit > 0:
        g = np.minimum(g, limit)
        u = np.clip(u, -limit, limit)
    h = g / (1.0 + np.exp(-g)) * u
    if int8_h:
        h = int8_grid(h.astype(np.float32))
    return w2 @ h, g, u


def check_margins(keys, k, name):
    """Selections must not hinge on rounding: the k-th and (k+1)-th keys are
    either exactly equal (a tie torch breaks, which nibble must copy) or far
    apart."""
    for t, row in enumerate(keys):
        s = np.sort(row.astype(np.float64))[::-1]
        if s[k - 1] != s[k]:
            assert s[k - 1] - s[k] > 1e-4, f"{name}: token {t} has a near-tie at the top-{k} boundary"


def build_case(name, seed, *, n, D, I, E, K, expert_fmt, shared_fmt=None, scoring="sqrtsoftplus",
               bias=False, hash_dtype=None, vocab=0, dup_row=False, norm=True, scaling=1.5, limit=0.0,
               fp8_scale="ue8m0", gate_fmt="bf16", tie_groups=(), tie_tokens=None, x_scale=1.0,
               need_clamp=False):
    rng = np.random.default_rng(seed)
    tensors = {}
    meta = {"hidden": D, "inter": I, "n_experts": E, "top_k": K, "scoring": scoring,
            "norm_topk_prob": int(norm), "routed_scaling": repr(float(np.float32(scaling))),
            "swiglu_limit": repr(float(np.float32(limit))), "expert_format": expert_fmt,
            "shared_format": shared_fmt or "", "fp8_scale": fp8_scale}

    x = (rng.standard_normal((n, D)) * x_scale).astype(np.float32)
    gate32 = (rng.standard_normal((E, D)) * 0.1).astype(np.float32)
    if tie_tokens is not None:  # tokens that must hit the ties: multiples of token 0
        for t in tie_tokens:
            x[t] = x[tie_tokens[0]] * np.float32(1.0 + 0.25 * t)
        # Tie groups get identical router rows along token 0, strongest first,
        # so they lead every token's ranking and the top-k boundary cuts a
        # group of exactly equal scores.
        u = x[tie_tokens[0]].astype(np.float64)
        u /= np.linalg.norm(u)
        for gi, grp in enumerate(tie_groups):
            for e in grp:
                gate32[e] = (u * (0.6 - 0.2 * gi)).astype(np.float32)
    if gate_fmt == "bf16":
        gate_b = gate32.astype(ml_dtypes.bfloat16)
        tensors["gate"] = ("BF16", (E, D), gate_b.tobytes())
        gate = gate_b.astype(np.float64)
    else:
        tensors["gate"] = ("F32", (E, D), gate32.tobytes())
        gate = gate32.astype(np.float64)
    tensors["x"] = ("F32", (n, D), x.tobytes())

    token_ids = rng.integers(0, max(vocab, 1), size=n).astype(np.int32)
    if vocab:
        token_ids[-1] = token_ids[0]  # a repeated token
    tensors["token_ids"] = ("I32", (n,), token_ids.tobytes())

    bias_v = None
    if bias:
        bias_v = (rng.standard_normal(E) * 0.05).astype(np.float32)
        for grp in tie_groups:
            bias_v[list(grp)] = 0.3
        tensors["bias"] = ("F32", (E,), bias_v.tobytes())

    tid2eid = None
    if hash_dtype:
        tid2eid = np.stack([rng.permutation(E)[:K] for _ in range(vocab)]).astype(np.int64)
        if dup_row:
            tid2eid[token_ids[1], 1] = tid2eid[token_ids[1], 0]  # the same expert twice
        npdt, st = (np.int64, "I64") if hash_dtype == "I64" else (np.int32, "I32")
        tensors["tid2eid"] = (st, (vocab, K), tid2eid.astype(npdt).tobytes())

    # Router, in f32 like HF (logits from exact products, rounded once).
    logits = (x.astype(np.float64) @ gate.T).astype(np.float32)
    scores = scores_torch(logits, scoring)
    if tid2eid is not None:
        idx = torch.from_numpy(tid2eid[token_ids.astype(np.int64)])
    else:
        key = scores + (torch.from_numpy(bias_v) if bias_v is not None else 0.0)
        check_margins(key.numpy(), K, name)
        if tie_groups:
            ks = np.sort(key.numpy(), axis=1)[:, ::-1]
            assert np.sum(ks[:, K - 1] == ks[:, K]) >= 1, f"{name}: no tie at the top-{K} boundary"
        idx = torch.topk(key, K, dim=-1, sorted=False).indices
    wts = scores.gather(1, idx)
    if norm:
        wts = wts / (wts.sum(dim=-1, keepdim=True) + 1e-20)
    wts = wts * np.float32(scaling)
    idx = idx.numpy().astype(np.int32)
    wts = wts.numpy().astype(np.float32)

    # Experts. NVFP4 w1/w3 share one global scale (ModelOpt's fused gate/up).
    experts = []
    for e in range(E):
        gs = float(np.float32(rng.uniform(0.002, 0.02)))
        mats = {}
        for role, (r, c) in (("w1", (I, D)), ("w3", (I, D)), ("w2", (D, I))):
            t, deq = make_weight(rng, expert_fmt, r, c, fp8_scale,
                                 global_scale=gs if role != "w2" else None)
            for suffix, v in t.items():
                tensors[f"experts.{e}.{role}.{suffix}"] = v
            mats[role] = deq
        experts.append(mats)
    shared = None
    if shared_fmt:
        shared = {}
        for role, (r, c) in (("w1", (I, D)), ("w3", (I, D)), ("w2", (D, I))):
            t, deq = make_weight(rng, shared_fmt, r, c, fp8_scale, global_scale=0.01)
            for suffix, v in t.items():
                tensors[f"shared.{role}.{suffix}"] = v
            shared[role] = deq

    # The layer in float64: HF's order (experts ascending, weight after w2).
    # y_q8 is the same layer with activations rounded where nibble's FP4
    # kernels round them (to int8 blocks, x before an FP4 w1/w3, h before an
    # FP4 w2).
    fp4 = ("mxfp4", "nvfp4")
    y = np.zeros((n, D), dtype=np.float64)
    y_q8 = np.zeros((n, D), dtype=np.float64)
    clamped_g = clamped_u = 0
    for e in range(E):
        for t in range(n):
            for j in range(K):
                if idx[t, j] != e:
                    continue
                ws = (experts[e]["w1"], experts[e]["w3"], experts[e]["w2"])
                out, g, u = expert_f64(*ws, x[t], limit)
                clamped_g += int(np.sum(g >= limit)) if limit > 0 else 0
                clamped_u += int(np.sum(np.abs(u) >= limit)) if limit > 0 else 0
                y[t] += out * np.float64(wts[t, j])
                q = expert_fmt in fp4
                y_q8[t] += expert_f64(*ws, x[t], limit, q, q)[0] * np.float64(wts[t, j])
    if shared is not None:
        for t in range(n):
            ws = (shared["w1"], shared["w3"], shared["w2"])
            y[t] += expert_f64(*ws, x[t], limit)[0]
            q = shared_fmt in fp4
            y_q8[t] += expert_f64(*ws, x[t], limit, q, q)[0]
    if need_clamp:
        assert clamped_g > 0 and clamped_u > 0, f"{name}: the clamp never triggers ({clamped_g}, {clamped_u})"
    # Every case has tokens that share an expert.
    flat = idx.reshape(-1)
    assert len(set(flat.tolist())) < len(flat), f"{name}: no shared experts in the batch"

    tensors["expected.logits"] = ("F32", (n, E), logits.tobytes())
    tensors["expected.indices"] = ("I32", (n, K), idx.tobytes())
    tensors["expected.weights"] = ("F32", (n, K), wts.tobytes())
    tensors["expected.y"] = ("F32", (n, D), y.astype(np.float32).tobytes())
    tensors["expected.y_q8"] = ("F32", (n, D), y_q8.astype(np.float32).tobytes())
    OUT.mkdir(parents=True, exist_ok=True)
    write_safetensors(OUT / f"{name}.safetensors", tensors, meta)
    return idx


def main():
    # DeepSeek-V4 layout: MXFP4 routed experts, FP8 (UE8M0) shared expert,
    # sqrt(softplus) scores with a selection bias, the clamp at work.
    build_case("mxfp4_topk_clamp", 1, n=7, D=160, I=96, E=8, K=3, expert_fmt="mxfp4",
               shared_fmt="fp8_block128", bias=True, limit=1.0, need_clamp=True)
    # NVFP4 with hash routing (I64 tid2eid, one row naming an expert twice,
    # a repeated token id), in-features not multiples of 32.
    build_case("nvfp4_hash_i64", 2, n=6, D=144, I=80, E=8, K=2, expert_fmt="nvfp4",
               shared_fmt="nvfp4", hash_dtype="I64", vocab=40, dup_row=True, limit=0.75,
               need_clamp=True)
    # Exact ties at the top-k boundary, k*64 > E (torch's nth_element path):
    # experts 1, 5, 9 have identical router rows; softmax scores; FP8 experts
    # with F32 scales and a BF16 shared expert.
    idx = build_case("ties_nth_element", 3, n=5, D=96, I=64, E=16, K=4, expert_fmt="fp8_block128",
                     shared_fmt="bf16", scoring="softmax", fp8_scale="f32",
                     tie_groups=[(1, 5, 9), (2, 12)], tie_tokens=[0, 1, 2, 3, 4], x_scale=3.0)
    # Exact ties with k*64 <= E (torch's partial_sort path): sigmoid scores,
    # tied rows share their bias too; no renormalisation, no clamp, no
    # shared expert.
    build_case("ties_partial_sort", 4, n=4, D=64, I=32, E=128, K=2, expert_fmt="mxfp4",
               scoring="sigmoid", bias=True, norm=False, scaling=2.5, limit=0.0,
               tie_groups=[(3, 40, 77, 100), (8, 9)], tie_tokens=[0, 1, 2, 3], x_scale=3.0,
               gate_fmt="f32")
    # BF16 experts, I32 tid2eid, sigmoid.
    build_case("bf16_hash_i32", 5, n=3, D=48, I=40, E=6, K=3, expert_fmt="bf16",
               scoring="sigmoid", hash_dtype="I32", vocab=10, limit=5.0)
    print("wrote", sorted(p.name for p in OUT.glob("*.safetensors")))


if __name__ == "__main__":
    main()
