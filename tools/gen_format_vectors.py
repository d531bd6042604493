#!/usr/bin/env python3
"""Writes tests/fixtures/format/: oracle vectors for nibble's format layer.

The expected values come from ml_dtypes (element rounding) and from
tools/format_ref.py, a numpy implementation of docs/formats.md that shares
no code with src/format. Deterministic (fixed seed); run from anywhere:

    python3 tools/gen_format_vectors.py

Layout
------
``manifest.json`` lists every array and the scalar parameters of each case:

    {"version": 1,
     "arrays": {NAME: {"file": "NAME.bin", "dtype": "u8"|"u16"|"f32",
                       "shape": [d0, d1, ...]}, ...},
     "nvfp4": {CASE: {"global_scale": float, "amax": float|null}, ...},
     "fp8":   {CASE: {"rows": int, "cols": int}, ...},
     "cast":  {CASE: {...counts, k_max, global_scale, max_abs_error}}}

``NAME.bin`` is the raw little-endian array, row-major, no header. Floats in
the manifest are f32 (or f64) values printed by Python's repr, which reads
back to the same bits.

Arrays
------
decode_{e2m1,e4m3,e5m2,ue8m0}   f32 [16|256]  value of every code (NaN codes NaN)
encode_in                       f32 [N]       inputs, N >= 100,000 (see below)
encode_{e2m1,e4m3,e5m2,ue8m0}   u8  [N]       expected code; 0xFF = must throw
                                              (NaN input; <= 0 for UE8M0)
encode_bf16                     u16 [N]       expected BF16 bits
mxfp4_x / _packed / _scales     MXFP4 quantization of [256, 256]
nvfp4_<case>_x/_packed/_scales  NVFP4 quantization, cases tensor, ties,
nvfp4_<case>_y                  small_sg, odd_sg, order; _y dequantized
fp8_<case>_x, fp8_<case>_{w,s}_{ue8m0,f32}   FP8 block-128, awkward shapes
cast_<case>_mx_{packed,scales}, cast_<case>_nv_{packed,scales}, cast_in_values
nv2mx_<case>_{mx_packed,mx_scales}   NVFP4 -> MXFP4 of nvfp4_<case>

encode_in holds, for each of E2M1/E4M3/E5M2/UE8M0: every representable value,
every midpoint between neighbours (exact ties) and the f32 values next to it,
the first midpoint past the maximum, log-uniform random values from far
below the smallest subnormal to far past the maximum; BF16 ties (low 16 bits
0x8000) and their neighbours; random f32 bit patterns (NaN, inf,
subnormals); +-0, +-inf, NaNs, f32 extremes. Both signs throughout.
"""
import json
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import format_ref as ref  # noqa: E402

F32 = np.float32
OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "format"
rng = np.random.default_rng(0x5EED_F0A7)
manifest = {"version": 1, "arrays": {}, "nvfp4": {}, "fp8": {}, "cast": {}}
DTYPES = {np.dtype(np.uint8): "u8", np.dtype(np.uint16): "u16", np.dtype(np.float32): "f32"}


def save(name, arr):
    arr = np.ascontiguousarray(arr)
    assert arr.dtype in DTYPES, (name, arr.dtype)
    (OUT / f"{name}.bin").write_bytes(arr.astype(arr.dtype.newbyteorder("<")).tobytes())
    manifest["arrays"][name] = {"file": f"{name}.bin", "dtype": DTYPES[arr.dtype],
                                "shape": list(arr.shape)}


def f32_bits(u):
    return np.asarray(u, np.uint32).view(F32)


def next_up(x):
    return np.nextafter(x, F32(np.inf))


def next_down(x):
    return np.nextafter(x, F32(-np.inf))


def with_neighbours(x):
    x = np.asarray(x, F32)
    return np.concatenate([x, next_up(x), next_down(x)])


def both_signs(x):
    x = np.asarray(x, F32)
    return np.concatenate([x, -x])


# ---- element codecs ------------------------------------------------------------


def element_vectors():
    codes256 = np.arange(256, dtype=np.uint8)
    save("decode_e2m1", ref.e2m1_decode(np.arange(16, dtype=np.uint8)))
    save("decode_e4m3", ref.e4m3_decode(codes256))
    save("decode_e5m2", ref.e5m2_decode(codes256))
    save("decode_ue8m0", ref.ue8m0_decode(codes256))

    parts = []
    # (finite non-negative values ascending, first midpoint past the max,
    #  log2 range for random values)
    grids = {
        "e2m1": (ref.e2m1_decode(np.arange(8)), 7.0, (-6, 6)),
        "e4m3": (ref.e4m3_decode(np.arange(0x7F)), 464.0, (-14, 13)),
        "e5m2": (ref.e5m2_decode(np.arange(0x7C)), 61440.0, (-20, 20)),
        "ue8m0": (ref.ue8m0_decode(np.arange(255)), 1.5 * 2.0**127, (-149, 128)),
    }
    for name, (vals, past_max, (lo, hi)) in grids.items():
        vals = vals.astype(np.float64)
        mids = (vals[:-1] + vals[1:]) / 2  # exact in f32: one more mantissa bit
        assert (mids.astype(F32) == mids).all(), name
        parts.append(both_signs(with_neighbours(vals)))
        parts.append(both_signs(with_neighbours(mids)))
        parts.append(both_signs(with_neighbours([past_max, past_max * 2, past_max * 1e3])))
        n = 22_000
        mag = np.exp2(rng.uniform(lo - 4, hi + 2, n))
        sign = rng.choice([-1.0, 1.0], n)
        parts.append((sign * np.minimum(mag, 3e38)).astype(F32))
        # Random values snapped to ties at random binades of the type.
        picks = rng.choice(mids, 2_000)
        parts.append(both_signs(picks))
    # BF16: exact ties (low half 0x8000) with odd and even upper halves, and
    # their neighbours; avoid exponent 0xFF (NaN/inf patterns).
    hi16 = rng.integers(0, 0x7F80, 4_000, dtype=np.uint32) | (rng.integers(0, 2, 4_000, dtype=np.uint32) << 15)
    parts.append(with_neighbours(f32_bits((hi16 << 16) | 0x8000)))
    # Arbitrary bit patterns: NaNs, infinities, subnormals, everything.
    parts.append(f32_bits(rng.integers(0, 2**32, 12_000, dtype=np.uint64).astype(np.uint32)))
    fmax = np.finfo(F32).max
    specials = [0.0, np.inf, np.nan, fmax, np.finfo(F32).tiny, np.finfo(F32).smallest_subnormal,
                2.0**-127, 2.0**-128, 1.5 * 2.0**-127, 2.0**127, 1.0, 0.1]
    parts.append(both_signs(specials))
    parts.append(f32_bits([0x7F800001, 0xFF800001, 0x7FA00000, 0x7FFFFFFF, 0xFFC00000]))
    x = np.concatenate(parts).astype(F32)
    nan = np.isnan(x)
    assert x.size >= 100_000, x.size

    def guarded(encode, bad):
        out = np.full(x.size, 0xFF, np.uint8)
        out[~bad] = encode(x[~bad])
        return out

    save("encode_in", x)
    save("encode_e2m1", guarded(ref.e2m1_encode, nan))
    save("encode_e4m3", guarded(ref.e4m3_encode, nan))
    save("encode_e5m2", guarded(ref.e5m2_encode, nan))
    save("encode_ue8m0", guarded(ref.ue8m0_encode, nan | (x <= 0)))
    save("encode_bf16", ref.bf16_encode(x))
    print(f"element vectors: {x.size} inputs, {int(nan.sum())} NaN")


# ---- MXFP4 ------------------------------------------------------------------------

E2M1_GRID = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])
E2M1_MIDS = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])


def random_sign(n):
    return rng.choice([-1.0, 1.0], n)


def mx_block(kind, n=32):
    """One block of n f32 values of the named kind."""
    if kind == "normal":
        return rng.standard_normal(n) * 2.0 ** rng.integers(-40, 40)
    if kind == "wide":  # elements spread over 40 binades inside one block
        return random_sign(n) * np.exp2(rng.uniform(-20, 20, n) + rng.integers(-80, 80))
    if kind == "outlier":
        v = rng.standard_normal(n) * 2.0 ** rng.integers(-20, 5)
        v[rng.integers(n)] *= 1000.0
        return v
    if kind == "zero":
        return np.where(rng.random(n) < 0.5, 0.0, -0.0)
    if kind == "ties":  # exact E2M1 midpoints after scaling by 2^k
        k = int(rng.integers(-120, 120))
        v = rng.choice(np.concatenate([E2M1_GRID, E2M1_MIDS, [7.0]]), n) * random_sign(n)
        v[rng.integers(n)] = 4.0  # pins amax in [4, 8) * 2^k, so the scale is 2^k
        return v * 2.0**k
    if kind == "tiny":  # f32 subnormals: the exponent clamps at -127
        return rng.integers(-(2**20), 2**20, n) * 2.0**-149
    if kind == "huge":
        return random_sign(n) * rng.uniform(1, 2, n) * 2.0 ** rng.integers(120, 128)
    if kind == "pow2":  # amax exactly a power of two, or just below one
        v = rng.uniform(-1, 1, n) * 2.0**10
        v[0] = 2.0**10 if rng.random() < 0.5 else float(next_down(F32(2.0**10)))
        return v * 2.0 ** rng.integers(-30, 30)
    if kind == "saturate":  # amax in (6, 8) * 2^k: the top elements clip to 6
        return random_sign(n) * rng.uniform(5, 8, n) * 2.0 ** rng.integers(-30, 30)
    raise ValueError(kind)


MX_KINDS = ["normal", "wide", "outlier", "zero", "ties", "tiny", "huge", "pow2", "saturate"]


def mxfp4_vectors():
    rows, cols = 256, 256
    kinds = rng.choice(MX_KINDS, rows * cols // 32, p=[.3, .1, .1, .05, .15, .05, .05, .1, .1])
    x = np.concatenate([mx_block(k) for k in kinds]).astype(F32).reshape(rows, cols)
    packed, scales = ref.mxfp4_quantize(x)
    # Sanity of the reference itself: within half an E2M1 step, or saturated.
    back = ref.mxfp4_dequantize(packed, scales).astype(np.float64)
    scale = ref.ue8m0_decode(scales).astype(np.float64).repeat(32, axis=1)
    a = np.abs(x) / scale
    half_step = np.select([a <= 2, a <= 4], [0.25, 0.5], 1.0) * scale
    ok = np.where(a <= 6, np.abs(back - x) <= half_step, np.abs(back) == 6 * scale)
    assert ok.all()
    save("mxfp4_x", x)
    save("mxfp4_packed", packed)
    save("mxfp4_scales", scales)
    print(f"mxfp4: {kinds.size} blocks")


# ---- NVFP4 ------------------------------------------------------------------------


def nv_save(case, x, s_g, amax=None):
    packed, scales = ref.nvfp4_quantize(x, s_g)
    save(f"nvfp4_{case}_x", x)
    save(f"nvfp4_{case}_packed", packed)
    save(f"nvfp4_{case}_scales", scales)
    save(f"nvfp4_{case}_y", ref.nvfp4_dequantize(packed, scales, s_g))
    manifest["nvfp4"][case] = {"global_scale": float(F32(s_g)),
                               "amax": None if amax is None else float(F32(amax))}
    # How many blocks would round differently in the other arithmetic order
    # (amax / 6 / s_g) -- these are what pin ModelOpt's order down.
    amax_b = np.abs(x.reshape(x.shape[0], -1, 16)).max(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = ref.e4m3_encode(np.nan_to_num(amax_b / (F32(6) * F32(s_g)), posinf=448))
        b = ref.e4m3_encode(np.nan_to_num(amax_b / F32(6) / F32(s_g), posinf=448))
    print(f"nvfp4 {case}: {scales.size} blocks, {int((scales == 0).sum())} zero scales, "
          f"{int((scales == 0x7E).sum())} saturated, {int((a != b).sum())} order-sensitive")
    return packed, scales


def nvfp4_vectors():
    out = {}
    # tensor: rows of different magnitudes (2^-24 relative spread), outliers,
    # all-zero blocks, blocks so small that s_b is subnormal or zero, -0.
    rows, cols = 128, 256
    x = rng.standard_normal((rows, cols)) * np.exp2(rng.uniform(-12, 0, (rows, 1)))
    blocks = x.reshape(rows, cols // 16, 16)
    flat = blocks.reshape(-1, 16)
    n = flat.shape[0]
    for i in rng.choice(n, 60, replace=False):
        flat[i] = 0.0
        flat[i, rng.integers(16)] = -0.0
    for i in rng.choice(n, 60, replace=False):  # s_b in E4M3's subnormal range or below
        flat[i] *= 2.0 ** -rng.integers(10, 30)
    for i in rng.choice(n, 40, replace=False):
        flat[i, rng.integers(16)] *= 200.0
    x = flat.reshape(rows, cols).astype(F32)
    x[rng.random(x.shape) < 0.01] = -0.0
    amax = np.abs(x).max()
    s_g = ref.nvfp4_global_scale(amax)
    out["tensor"] = (x, s_g) + nv_save("tensor", x, s_g, amax)

    # ties: s_g a power of two, every block's s_b an exact E4M3 value v
    # (amax = 6 v s_g), elements E2M1 values and midpoints times v s_g.
    rows, cols = 32, 128
    s_g = F32(2.0**-8)
    v = ref.e4m3_decode(rng.integers(0x08, 0x7F, rows * cols // 16)).astype(np.float64)
    t = rng.choice(np.concatenate([E2M1_GRID, E2M1_MIDS]), (v.size, 16)) * random_sign((v.size, 16))
    t[:, 0] = 6.0
    x = (t * v[:, None] * float(s_g)).astype(F32).reshape(rows, cols)
    assert (x.astype(np.float64).reshape(-1, 16) == t * v[:, None] * float(s_g)).all()
    nv_save("ties", x, s_g)

    # small_sg: s_g 64x too small, so block scales clip at 448 and codes at 6.
    x = (rng.standard_normal((32, 128)) * 3.0).astype(F32)
    nv_save("small_sg", x, ref.nvfp4_global_scale(np.abs(x).max()) / F32(64))

    # odd_sg: an s_g unrelated to the data (a shared w1/w3 scale), full mantissa.
    x = (rng.standard_normal((16, 64)) * 0.02).astype(F32)
    nv_save("odd_sg", x, F32(0.000123456789))

    # order: blocks built so that ModelOpt's f32 order matters. amax sits a
    # few ulps from (E4M3 midpoint) * 6 s_g, where amax / (6 s_g) and
    # amax / 6 / s_g round to different E4M3 scales; elements sit a few ulps
    # from (E2M1 midpoint) * s_b * s_g, where x / (s_b s_g) and x / s_b / s_g
    # round to different codes.
    s_g = F32(0.000123456789)
    x = order_sensitive_blocks(s_g, 64).reshape(32, 32)
    nv_save("order", x, s_g)
    return out


def ulp_walk(x, steps):
    x = F32(x)
    for _ in range(abs(steps)):
        x = np.nextafter(x, F32(np.inf) if steps > 0 else F32(-np.inf))
    return x


def order_sensitive_blocks(s_g, n_blocks):
    vals = ref.e4m3_decode(np.arange(0x08, 0x7E)).astype(np.float64)
    amaxes = []
    for m in (vals[:-1] + vals[1:]) / 2:
        for j in range(-4, 5):
            a = ulp_walk(m * 6 * float(s_g), j)
            if ref.e4m3_encode(a / (F32(6) * s_g)) != ref.e4m3_encode(a / F32(6) / s_g):
                amaxes.append(a)
    assert len(amaxes) >= 10
    blocks = []
    for i in range(n_blocks):
        amax = amaxes[i % len(amaxes)]
        v = ref.e4m3_decode(ref.e4m3_encode(amax / (F32(6) * s_g)))
        denom = v * s_g
        picks = []
        for t in rng.permutation(E2M1_MIDS):
            for j in range(-3, 4):
                e = ulp_walk(t * float(denom), j)
                if e <= amax and ref.e2m1_encode(e / denom) != ref.e2m1_encode(e / v / s_g):
                    picks.append(e)
        picks = list(rng.permutation(np.array(picks, F32)))[:15]
        rest = rng.uniform(-1, 1, 15 - len(picks)) * float(amax)
        block = np.concatenate([[amax], picks, rest]) * np.concatenate([[1], random_sign(15)])
        blocks.append(block.astype(F32))
    return np.concatenate(blocks)


# ---- FP8 block-128 ------------------------------------------------------------------


def fp8_tile(kind, shape):
    n = int(np.prod(shape))
    if kind == "normal":
        v = rng.standard_normal(n) * 2.0 ** rng.integers(-20, 20)
    elif kind == "zero":
        v = np.zeros(n)
    elif kind == "tiny":
        v = rng.integers(-1000, 1000, n) * 2.0**-149
    elif kind == "outlier":
        v = rng.standard_normal(n) * 1e-3
        v[rng.integers(n)] = 77.0
    elif kind == "huge":
        v = rng.uniform(-1, 1, n) * 3e38
    elif kind == "ties":  # amax = 448 * 2^k, elements E4M3 midpoints * 2^k
        k = int(rng.integers(-60, 60))
        vals = ref.e4m3_decode(np.arange(0x7F)).astype(np.float64)
        mids = (vals[:-1] + vals[1:]) / 2
        v = rng.choice(np.concatenate([vals, mids]), n) * random_sign(n)
        v[0] = 448.0
        v *= 2.0**k
    else:
        raise ValueError(kind)
    return v.reshape(shape)


def fp8_vectors():
    cases = {
        "mixed": (200, 300, [["normal", "ties", "zero"], ["tiny", "outlier", "huge"]]),
        "edge": (130, 129, [["ties", "normal"], ["normal", "zero"]]),
        "row": (1, 7, [["normal"]]),
        "col": (257, 1, [["outlier"], ["normal"], ["tiny"]]),
        "full": (128, 128, [["ties"]]),
    }
    for case, (rows, cols, kinds) in cases.items():
        x = np.zeros((rows, cols))
        for i, row_kinds in enumerate(kinds):
            for j, kind in enumerate(row_kinds):
                r0, c0 = i * 128, j * 128
                shape = (min(rows, r0 + 128) - r0, min(cols, c0 + 128) - c0)
                x[r0:r0 + shape[0], c0:c0 + shape[1]] = fp8_tile(kind, shape)
        x = x.astype(F32)
        save(f"fp8_{case}_x", x)
        for st in ("ue8m0", "f32"):
            w, s = ref.fp8_block_quantize(x, st)
            save(f"fp8_{case}_w_{st}", w)
            save(f"fp8_{case}_s_{st}", s)
        manifest["fp8"][case] = {"rows": rows, "cols": cols}
    print(f"fp8: {len(cases)} shapes")


# ---- casts --------------------------------------------------------------------------


def cast_vectors(nv):
    # in: every block inside the window, both ends of it included.
    rows, cols, k_max = 64, 256, 10
    k = rng.integers(k_max - 17, k_max + 1, (rows, cols // 32))
    k[0, 0], k[0, 1] = k_max, k_max - 17
    scales = (k + 127).astype(np.uint8)
    packed = rng.integers(0, 256, (rows, cols // 2), dtype=np.uint8)
    nv_packed, nv_scales, s_g, exact, requant, err = ref.mxfp4_to_nvfp4(packed, scales, k_max)
    values = ref.mxfp4_dequantize(packed, scales)
    assert exact == k.size and requant == 0 and err == 0
    assert (nv_packed == packed).all()
    assert (ref.nvfp4_dequantize(nv_packed, nv_scales, s_g) == values).all()
    save("cast_in_mx_packed", packed)
    save("cast_in_mx_scales", scales)
    save("cast_in_nv_scales", nv_scales)
    save("cast_in_values", values)
    manifest["cast"]["in"] = {"k_max": k_max, "global_scale": float(s_g), "blocks": int(k.size),
                              "exact": exact, "requantized": requant, "max_abs_error": err}

    # out: exponents spread over 40 binades; k_max 3 above the tensor's own
    # maximum, as when a w1/w3 pair shares one s_g.
    rows, cols, own_max = 32, 256, -5
    k = rng.integers(own_max - 40, own_max + 1, (rows, cols // 32))
    k[0, 0] = own_max
    k_max = own_max + 3
    k[0, 1], k[0, 2] = k_max - 17, k_max - 18  # last inside, first outside
    scales = (k + 127).astype(np.uint8)
    packed = rng.integers(0, 256, (rows, cols // 2), dtype=np.uint8)
    nv_packed, nv_scales, s_g, exact, requant, err = ref.mxfp4_to_nvfp4(packed, scales, k_max)
    assert requant > 0 and err > 0
    save("cast_out_mx_packed", packed)
    save("cast_out_mx_scales", scales)
    save("cast_out_nv_packed", nv_packed)
    save("cast_out_nv_scales", nv_scales)
    manifest["cast"]["out"] = {"k_max": k_max, "own_k_max": own_max, "global_scale": float(s_g),
                               "blocks": int(k.size), "exact": exact, "requantized": requant,
                               "max_abs_error": err}
    print(f"cast out: {exact} exact, {requant} requantized, max error {err}")

    # NVFP4 -> MXFP4 of the quantized nvfp4 "tensor" case.
    x, s_g, packed, scales = nv["tensor"]
    mx_packed, mx_scales, exact, requant, err = ref.nvfp4_to_mxfp4(packed, scales, s_g)
    save("nv2mx_tensor_mx_packed", mx_packed)
    save("nv2mx_tensor_mx_scales", mx_scales)
    manifest["cast"]["nv2mx_tensor"] = {"global_scale": float(F32(s_g)), "blocks": exact + requant,
                                        "exact": exact, "requantized": requant,
                                        "max_abs_error": err}
    print(f"nv2mx tensor: {exact} exact, {requant} requantized, max error {err}")


def main():
    np.seterr(over="ignore", invalid="ignore")  # inf / NaN inputs are deliberate
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.bin"):
        old.unlink()
    element_vectors()
    mxfp4_vectors()
    nv = nvfp4_vectors()
    fp8_vectors()
    cast_vectors(nv)
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {len(manifest['arrays'])} arrays, {total / 1e6:.2f} MB to {OUT}")


if __name__ == "__main__":
    main()
