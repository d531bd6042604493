"""Writing a large random checkpoint folder for benchmarks (the make_*_shaped.py
tools): tensors in the given order, sharded at <= 5 GB without splitting a
layer across two shards, safetensors headers, model.safetensors.index.json and
the JSON side files. Memory stays bounded (one tensor's bytes at a time); the
folder is written under DIR.tmp-nibble and renamed at the end, so it appears
complete or not at all.

A tensor is (name, dtype, shape, kind); `fill(rng, dtype, shape, kind)`
returns its bytes."""

import json
import os
import shutil
import struct
import sys
import time

import numpy as np

SHARD_BYTES = 5 << 30
DTYPE_BYTES = {"BF16": 2, "F32": 4, "U8": 1, "I8": 1, "I32": 4, "I64": 8, "F8_E4M3": 1}


def nbytes(dtype, shape):
    return int(np.prod(shape)) * DTYPE_BYTES[dtype]


def layer_of(name):
    """"model.layers.3" for model.layers.3.*; the whole name otherwise."""
    parts = name.split(".")
    return ".".join(parts[:3]) if len(parts) > 3 and parts[1] == "layers" else name


def write_checkpoint(final_dir, tensors, fill, seed, side_files):
    final = os.path.abspath(final_dir)
    if os.path.exists(final):
        sys.exit(f"{final} exists; remove it first")
    tmp = final + ".tmp-nibble"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    shards, cur, size = [], [], 0
    for t in tensors:
        b = nbytes(t[1], t[2])
        if cur and size + b > SHARD_BYTES and layer_of(t[0]) != layer_of(cur[-1][0]):
            shards.append(cur)
            cur, size = [], 0
        cur.append(t)
        size += b
    shards.append(cur)
    rng = np.random.default_rng(seed)
    weight_map, total, t0 = {}, 0, time.time()
    for k, group in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for name, dtype, shape, _ in group:
            b = nbytes(dtype, shape)
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + b]}
            off += b
            weight_map[name] = fname
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        with open(os.path.join(tmp, fname), "wb") as f:
            f.write(struct.pack("<Q", len(h)))
            f.write(h)
            for name, dtype, shape, kind in group:
                data = fill(rng, dtype, shape, kind)
                assert len(data) == nbytes(dtype, shape), name
                f.write(data)
        total += off
        print(f"{fname}: {len(group)} tensors, {off / 1e9:.2f} GB ({time.time() - t0:.0f} s)", flush=True)
    with open(os.path.join(tmp, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    for name, obj in side_files.items():
        with open(os.path.join(tmp, name), "w") as f:
            json.dump(obj, f, indent=2)
    os.rename(tmp, final)
    print(f"{final}: {len(tensors)} tensors, {total / 1e9:.2f} GB")
