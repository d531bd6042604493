#!/usr/bin/env python3
"""Writes a DeepSeek-V4-Flash-shaped checkpoint with a few full-size layers and
random weights, for decode benchmarks (bench/decode_bound.sh, bench/DECODE.md).

    python tools/make_flash_shaped.py /work/artifacts/flash2              # layers 0,1
    python tools/make_flash_shaped.py /work/artifacts/flash2_csa --layers 2,3

Shapes, tensor names, dtypes and config come from the committed
DeepSeek-V4-Flash skeleton template
(tests/fixtures/checkpoints/dsv4_flash_skeleton.json, itself from
docs/dsv4.md): FP8 E4M3 block-128 attention / shared-expert weights with
UE8M0 (F8_E8M0) scales, MXFP4 routed experts (I8 nibble pairs + F8_E8M0 scale
per 32), BF16 embed / head / norms / router / compressors, F32 hc / sinks /
ape / router bias, I64 tid2eid. `--layers` picks which layers of the real
43-layer schedule to keep (default 0,1: the real config with
num_hidden_layers = 2, i.e. two sliding-window, hash-routed layers; 2,3 gives
one CSA + hash layer and one HCA + score-routed layer). `--mtp` adds the
MTP layer (mtp.0.*: a full sliding-window, score-routed block with 256
experts plus e_proj / h_proj / enorm / hnorm / norm / hc_head, ~3.7 GB) for
speculative-decoding measurements:

    python tools/make_flash_shaped.py /work/artifacts/flash2mtp --mtp

Values are random with magnitudes that keep the forward finite and the
routing spread: every matrix is scaled to an RMS of about 1/sqrt(in), FP4
codes are uniform over all 16 codes, E8M0 block scales jitter by ±1 binade,
tid2eid rows are distinct random experts, the score router is a random
Gaussian matrix. The model predicts noise; only its speed means anything.

Tokenizer: the real DeepSeek-V4 tokenizer is not available offline, and
`nibble run` needs one that can decode every id the model may sample. So the
folder gets the shipped model's tokenizer (models/dsv4-tiny/tokenizer.json,
4096 ids) with filler vocabulary entries up to id 129279 (two- and
three-character byte strings, never produced by encoding: no merges lead to
them). Sampled ids beyond 4095 decode to arbitrary bytes.

Memory stays bounded: tensors are generated and written in row chunks of at
most ~64 MB, never held whole. The folder is written under DIR.tmp-nibble
and renamed at the end, so it appears complete or not at all.
"""

import argparse
import json
import os
import shutil
import struct
import sys
import time

import numpy as np

# ml_dtypes (PyPI) rounds f32 to FP8 E4M3 and BF16; where it is missing (the
# GPU machine of scripts/gpu-check.sh has numpy and torch, no network) torch
# rounds the same way (round to nearest even; E4M3 saturating after the clip).
try:
    import ml_dtypes

    def to_e4m3(v):
        return v.astype(ml_dtypes.float8_e4m3fn)

    def to_bf16(v):
        return v.astype(ml_dtypes.bfloat16)

except ImportError:
    import torch

    def to_e4m3(v):
        return torch.from_numpy(np.ascontiguousarray(v)).to(torch.float8_e4m3fn).view(torch.uint8).numpy()

    def to_bf16(v):
        return torch.from_numpy(np.ascontiguousarray(v)).to(torch.bfloat16).view(torch.int16).numpy()

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE = os.path.join(REPO, "tests/fixtures/checkpoints/dsv4_flash_skeleton.json")
TINY_TOKENIZER = os.path.join(REPO, "models/dsv4-tiny/tokenizer.json")

DTYPE_SIZE = {"BF16": 2, "F32": 4, "F8_E4M3": 1, "F8_E8M0": 1, "I8": 1, "I64": 8}
CHUNK_BYTES = 64 << 20

# RMS of an FP4 (E2M1) value when all 16 codes are equally likely:
# magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}.
FP4_RMS = float(np.sqrt(np.mean(np.square([0, 0.5, 1, 1.5, 2, 3, 4, 6]))))
FP8_STORED_RMS = 64.0  # stored E4M3 values ~ N(0, 64), clipped to the ±448 range


def layer_groups(template, real_layer):
    """Template names a real Flash layer uses (block, csa/hca, hash/score gate, experts)."""
    shard = template["shards"][1 + real_layer]
    assert len(shard) == 1 and shard[0]["prefix"] == f"layers.{real_layer}.", shard
    return shard[0]["use"]


def expand(template, name):
    t = template["templates"][name]
    repeat = t.get("repeat", 1)
    prefix = t.get("prefix", "")
    out = []
    for i in range(repeat):
        p = prefix.replace("{i}", str(i))
        for tname, dtype, shape in t["tensors"]:
            out.append((p + tname, dtype, list(shape)))
    return out


def nbytes(dtype, shape):
    n = 1
    for d in shape:
        n *= d
    return n * DTYPE_SIZE[dtype]


class Values:
    """Random contents for one tensor, produced in row chunks."""

    def __init__(self, rng, name, dtype, shape, config):
        self.rng, self.name, self.dtype, self.shape, self.config = rng, name, dtype, shape, config

    def chunks(self):
        rows = self.shape[0] if self.shape else 1
        row_bytes = nbytes(self.dtype, self.shape) // max(rows, 1)
        step = max(1, CHUNK_BYTES // max(row_bytes, 1))
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            a = self.make(r0, r1)
            assert a.nbytes == (r1 - r0) * row_bytes, (self.name, a.nbytes, (r1 - r0) * row_bytes)
            yield a.tobytes()

    def make(self, r0, r1):
        rng, name, dtype, shape = self.rng, self.name, self.dtype, self.shape
        rows = r1 - r0
        tail = shape[1:]
        base = name.rsplit(".", 1)[-1] if "." in name else name
        if dtype == "I8":  # MXFP4 nibble pairs: uniform over all codes
            return rng.integers(0, 256, size=(rows, *tail), dtype=np.uint8)
        if dtype == "F8_E8M0":
            # Scale of the matching weight: FP4 experts (scale per 32 along in) or FP8 tiles.
            if ".experts." in name:
                cols_in = shape[1] * 32
                target = 1.0 / (FP4_RMS * np.sqrt(cols_in))
            else:
                cols_in = shape[1] * 128
                target = 1.0 / (FP8_STORED_RMS * np.sqrt(cols_in))
            e = int(np.round(np.log2(target)))
            jitter = rng.integers(-1, 2, size=(rows, *tail))
            return (127 + e + jitter).astype(np.uint8)
        if dtype == "F8_E4M3":
            v = rng.standard_normal(size=(rows, *tail), dtype=np.float32) * FP8_STORED_RMS
            return to_e4m3(np.clip(v, -448, 448))
        if dtype == "I64":  # tid2eid: each row distinct random experts
            n_experts = self.config["n_routed_experts"]
            keys = rng.random(size=(rows, n_experts), dtype=np.float32)
            return np.argpartition(keys, tail[0], axis=1)[:, : tail[0]].astype(np.int64)
        # Float tensors by role.
        if base == "weight" and len(shape) == 1:  # norm weights
            v = 1.0 + 0.05 * rng.standard_normal(size=(rows,), dtype=np.float32)
        elif name.endswith("_fn"):  # hc mixes: [mix, hc * hidden]
            v = rng.standard_normal(size=(rows, *tail), dtype=np.float32) / np.sqrt(shape[1])
        elif name.endswith("_base"):
            v = 0.1 * rng.standard_normal(size=(rows, *tail), dtype=np.float32)
        elif name.endswith("_scale"):
            v = rng.uniform(0.5, 1.5, size=(rows, *tail)).astype(np.float32)
        elif name.endswith("attn_sink"):
            v = rng.standard_normal(size=(rows,), dtype=np.float32)
        elif name.endswith(".ape"):
            v = 0.02 * rng.standard_normal(size=(rows, *tail), dtype=np.float32)
        elif name.endswith("gate.bias"):
            v = 0.01 * rng.standard_normal(size=(rows,), dtype=np.float32)
        elif name == "embed.weight":
            v = rng.standard_normal(size=(rows, *tail), dtype=np.float32)
        elif len(shape) == 2:  # BF16 matrices: head, router, compressors, indexer
            v = rng.standard_normal(size=(rows, *tail), dtype=np.float32) / np.sqrt(shape[1])
        else:
            raise SystemExit(f"make_flash_shaped: no value rule for {name} {dtype} {shape}")
        if dtype == "BF16":
            return to_bf16(v)
        if dtype == "F32":
            return v.astype(np.float32)
        raise SystemExit(f"make_flash_shaped: unexpected dtype {dtype} for {name}")


def safetensors_order(tensors):
    # Same layout rule as the reference library: larger alignment first, then name.
    return sorted(tensors, key=lambda t: (-DTYPE_SIZE[t[1]], t[0]))


def write_shard(path, tensors, rng, config):
    tensors = safetensors_order(tensors)
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in tensors:
        n = nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, dtype, shape in tensors:
            written = 0
            for chunk in Values(rng, name, dtype, shape, config).chunks():
                f.write(chunk)
                written += len(chunk)
            assert written == nbytes(dtype, shape), name
    return offset


def filler_tokenizer(vocab_size):
    """The shipped tokenizer, padded with never-encoded entries to vocab_size ids."""
    with open(TINY_TOKENIZER, encoding="utf-8") as f:
        tok = json.load(f)
    used = set(tok["model"]["vocab"].values()) | {a["id"] for a in tok["added_tokens"]}
    strings = set(tok["model"]["vocab"].keys()) | {a["content"] for a in tok["added_tokens"]}
    # The 256 byte-level characters (GPT-2 byte map) are the first 256 vocab entries.
    alphabet = sorted((s for s in tok["model"]["vocab"] if len(s) == 1), key=lambda s: tok["model"]["vocab"][s])
    assert len(alphabet) >= 256, len(alphabet)
    alphabet = alphabet[:256]

    def candidates():
        for a in alphabet:
            for b in alphabet:
                yield a + b
        for a in alphabet:
            for b in alphabet:
                for c in alphabet:
                    yield a + b + c

    gen = candidates()
    for i in range(vocab_size):
        if i in used:
            continue
        s = next(gen)
        while s in strings:
            s = next(gen)
        tok["model"]["vocab"][s] = i
        strings.add(s)
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="output folder (created; must not exist unless --force)")
    ap.add_argument("--layers", default="0,1", help="real Flash layers to keep, comma-separated (default 0,1)")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--force", action="store_true", help="replace an existing output folder")
    ap.add_argument("--mtp", action="store_true", help="also write the MTP layer mtp.0.* (speculative decoding)")
    args = ap.parse_args()

    with open(TEMPLATE, encoding="utf-8") as f:
        template = json.load(f)
    real = template["config"]
    try:
        layers = [int(x) for x in args.layers.split(",")]
    except ValueError:
        raise SystemExit(f"--layers: '{args.layers}' is not a comma-separated list of layer numbers")
    n_real = real["num_hidden_layers"]
    if not layers or any(l < 0 or l >= n_real for l in layers):
        raise SystemExit(f"--layers: each layer must be in 0..{n_real - 1}")
    groups = [layer_groups(template, l) for l in layers]
    hashed = ["hash_gate" in g for g in groups]
    # Hash-routed layers must come first (num_hash_layers is a prefix count).
    n_hash = sum(hashed)
    if hashed != [True] * n_hash + [False] * (len(layers) - n_hash):
        raise SystemExit("--layers: hash-routed layers (0..2) must come before score-routed ones")

    config = dict(real)
    config["num_hidden_layers"] = len(layers)
    config["num_nextn_predict_layers"] = 1 if args.mtp else 0
    config["compress_ratios"] = [real["compress_ratios"][l] for l in layers] + ([0] if args.mtp else [])
    config["num_hash_layers"] = n_hash

    if os.path.exists(args.out) and not args.force:
        raise SystemExit(f"{args.out} exists (use --force to replace it)")
    tmp = args.out.rstrip("/") + ".tmp-nibble"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)

    shards = [expand(template, "embed")]
    for i, g in enumerate(groups):
        ts = []
        for name in g:
            ts += [(f"layers.{i}." + n, d, s) for n, d, s in expand(template, name)]
        shards.append(ts)
    if args.mtp:
        # The real checkpoint's last shard: mtp.0. with the groups the template lists for it.
        mtp_shard = template["shards"][-1]
        assert len(mtp_shard) == 1 and mtp_shard[0]["prefix"] == "mtp.0.", mtp_shard
        ts = []
        for name in mtp_shard[0]["use"]:
            ts += [("mtp.0." + n, d, s) for n, d, s in expand(template, name)]
        shards.append(ts)
    shards.append(expand(template, "head"))

    rng = np.random.default_rng(args.seed)
    weight_map, total = {}, 0
    t0 = time.time()
    for k, ts in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        total += write_shard(os.path.join(tmp, fname), ts, rng, config)
        for name, _, _ in ts:
            weight_map[name] = fname
        print(f"  {fname}: {len(ts)} tensors, {total / 1e9:.2f} GB so far, {time.time() - t0:.0f} s", flush=True)

    with open(os.path.join(tmp, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=1)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(tmp, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 0, "eos_token_id": 1, "do_sample": True, "temperature": 1.0, "top_p": 1.0}, f,
                  indent=2)
    with open(os.path.join(tmp, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(filler_tokenizer(config["vocab_size"]), f, ensure_ascii=False)
    shutil.copy(os.path.join(REPO, "models/dsv4-tiny/tokenizer_config.json"), tmp)
    with open(os.path.join(tmp, "README.md"), "w") as f:
        f.write(f"DeepSeek-V4-Flash-shaped checkpoint with random weights, written by "
                f"tools/make_flash_shaped.py --layers {args.layers} --seed {args.seed}"
                f"{' --mtp' if args.mtp else ''}.\n"
                f"Real Flash layers {layers} as layers 0..{len(layers) - 1}; {total} tensor bytes. "
                f"For speed measurements only.\n")
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    os.rename(tmp, args.out)
    print(f"wrote {args.out}: {len(weight_map)} tensors, {total} bytes, {time.time() - t0:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
