"""numpy reference of nibble's number formats (docs/formats.md), the oracle
side of tests/format.

Written from the spec, not from the C++: element rounding is delegated to
ml_dtypes (never to code of ours), block scales use numpy's log2/floor/ceil
rather than frexp/bit tricks, and divisions by powers of two are done in
float64. Where ml_dtypes does not do what formats.md asks, this module says
so and adapts its output explicitly:

- float8_e4m3fn: finite values past 448 (beyond the 464 midpoint) and
  +-inf become NaN (0x7F/0xFF), not 448. We clip to +-448 first (clipping
  before an RNE cast is exactly satfinite).
- float8_e5m2: overflow becomes +-inf. Clip to +-57344 first.
- float8_e8m0fnu: 0, negatives and NaN give 0xFF (NaN); values from
  1.5 * 2^127 up give 0xFF too. A tie 1.5 * 2^k rounds UP to 2^(k+1) (there
  is no even neighbour in a mantissa-less type; torch agrees). Positive
  values up to 2^-127 give code 0, but every f32 SUBNORMAL above 2^-127 gives
  code 1 (2^-126) even when 2^-127 is nearer (torch does the same). We clip
  to 2^127, refuse <= 0, and pick the nearest of 2^-127 / 2^-126 (ties up)
  ourselves for f32 subnormal inputs.
- float4_e2m1fn: saturates to +-6 on its own (inf too), but NaN becomes
  0x8 (-0). We refuse NaN.
- bfloat16: RNE, overflow to inf, NaN -> sign | 0x7FC0 (payload dropped).
"""
import ml_dtypes
import numpy as np

F32 = np.float32
E2M1_MAX, E4M3_MAX, E5M2_MAX = 6.0, 448.0, 57344.0


def _no_nan(x, what):
    if np.isnan(x).any():
        raise ValueError(f"NaN cannot be encoded as {what}")


# ---- element codecs (codes as uint8, value arrays as float32) ----------------


def e2m1_encode(x):
    x = np.asarray(x, F32)
    _no_nan(x, "E2M1")
    return np.clip(x, -E2M1_MAX, E2M1_MAX).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF


def e2m1_decode(c):
    return (np.asarray(c, np.uint8) & 0xF).view(ml_dtypes.float4_e2m1fn).astype(F32)


def e4m3_encode(x):
    x = np.asarray(x, F32)
    _no_nan(x, "E4M3")
    return np.clip(x, -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def e4m3_decode(c):
    return np.asarray(c, np.uint8).view(ml_dtypes.float8_e4m3fn).astype(F32)


def e5m2_encode(x):
    x = np.asarray(x, F32)
    _no_nan(x, "E5M2")
    return np.clip(x, -E5M2_MAX, E5M2_MAX).astype(ml_dtypes.float8_e5m2).view(np.uint8)


def e5m2_decode(c):
    return np.asarray(c, np.uint8).view(ml_dtypes.float8_e5m2).astype(F32)


def ue8m0_encode(x):
    x = np.asarray(x, F32)
    _no_nan(x, "UE8M0")
    if (x <= 0).any():
        raise ValueError("UE8M0 has no zero and no sign")
    codes = np.minimum(x, F32(2.0**127)).astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
    # ml_dtypes (and torch) send every f32 subnormal above 2^-127 to 2^-126,
    # nearer or not; the nearest of the two is what formats.md asks for.
    sub = x < F32(2.0**-126)
    return np.where(sub, (x >= F32(1.5 * 2.0**-127)).astype(np.uint8), codes)


def ue8m0_decode(c):
    return np.asarray(c, np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(F32)


def bf16_encode(x):
    return np.asarray(x, F32).astype(ml_dtypes.bfloat16).view(np.uint16)


# ---- FP4 packing: element 2j in the low nibble of byte j ---------------------


def pack_fp4(codes):
    codes = np.asarray(codes, np.uint8)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def unpack_fp4(packed):
    packed = np.asarray(packed, np.uint8)
    out = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), np.uint8)
    out[..., 0::2] = packed & 0xF
    out[..., 1::2] = packed >> 4
    return out


def _check_finite(x, what):
    if not np.isfinite(x).all():
        raise ValueError(f"{what}: NaN/inf input")


# ---- MXFP4 --------------------------------------------------------------------


def mxfp4_quantize(x):
    """x [rows, cols] f32 -> (packed [rows, cols/2] u8, scales [rows, cols/32] u8)."""
    x = np.asarray(x, F32)
    _check_finite(x, "MXFP4")
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // 32, 32).astype(np.float64)
    amax = np.abs(blocks).max(axis=-1)
    with np.errstate(divide="ignore"):
        k = np.floor(np.log2(amax)) - 2  # -inf for zero blocks
    k = np.where(amax > 0, np.clip(k, -127, 127), 0).astype(np.int64)
    scaled = (blocks / np.exp2(k.astype(np.float64))[..., None]).astype(F32)
    codes = e2m1_encode(scaled).reshape(rows, cols)
    return pack_fp4(codes), (k + 127).astype(np.uint8)


def mxfp4_dequantize(packed, scales):
    codes = unpack_fp4(packed)
    rows, cols = codes.shape
    vals = e2m1_decode(codes).reshape(rows, cols // 32, 32)
    with np.errstate(over="ignore"):
        return (vals * ue8m0_decode(scales)[..., None]).reshape(rows, cols)


# ---- NVFP4 (ModelOpt's f32 arithmetic) ----------------------------------------


def nvfp4_global_scale(amax):
    return F32(amax) / F32(6.0 * 448.0)


def nvfp4_quantize(x, s_g):
    """x [rows, cols] f32, s_g f32 -> (packed [rows, cols/2], scales [rows, cols/16])."""
    x = np.asarray(x, F32)
    _check_finite(x, "NVFP4")
    s_g = F32(s_g)
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // 16, 16)
    amax = np.abs(blocks).max(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        s_b = amax / (F32(6.0) * s_g)  # f32: product, then quotient
    s_b = np.where(amax == 0, F32(1.0), s_b)
    s_b = np.where(s_b == 0, F32(1.0), s_b)  # ModelOpt: zero scale -> 1.0
    sb_codes = e4m3_encode(s_b)
    denom = e4m3_decode(sb_codes) * s_g  # f32 product
    live = (denom > 0) & (amax > 0)
    safe = np.where(live, denom, F32(1.0))[..., None]
    codes = e2m1_encode(blocks / safe)
    codes = np.where(live[..., None] & (blocks != 0), codes, 0).astype(np.uint8)
    return pack_fp4(codes.reshape(rows, cols)), sb_codes


def nvfp4_dequantize(packed, scales, s_g):
    """ModelOpt's order: per_block_scale = s_b * s_g (f32), then code * that."""
    codes = unpack_fp4(packed)
    rows, cols = codes.shape
    vals = e2m1_decode(codes).reshape(rows, cols // 16, 16)
    return (vals * (e4m3_decode(scales) * F32(s_g))[..., None]).reshape(rows, cols)


# ---- FP8 block-128 ------------------------------------------------------------


def fp8_block_quantize(x, scale_type):
    """x [rows, cols] f32 -> (codes [rows, cols] u8, scales [ceil/128, ceil/128]).

    scale_type "f32": scales float32 = amax/448; "ue8m0": uint8 codes of the
    smallest power of two >= amax/448 (computed in f32), exponent in [-127, 127].
    All-zero tiles take scale 1.0.
    """
    x = np.asarray(x, F32)
    _check_finite(x, "FP8")
    rows, cols = x.shape
    tr, tc = -(-rows // 128), -(-cols // 128)
    codes = np.zeros((rows, cols), np.uint8)
    scales = np.zeros((tr, tc), F32 if scale_type == "f32" else np.uint8)
    for i in range(tr):
        for j in range(tc):
            tile = x[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            amax = np.abs(tile).max()
            if amax == 0:
                scale = F32(1.0)
                code = 127
            else:
                s = max(F32(amax) / F32(448.0), F32(2.0**-149))
                e = int(np.clip(np.ceil(np.log2(np.float64(s))), -127, 127))
                scale = F32(2.0**e) if scale_type == "ue8m0" else s
                code = e + 127
            scales[i, j] = code if scale_type == "ue8m0" else scale
            codes[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = e4m3_encode(tile / scale)
    return codes, scales


def fp8_block_dequantize(codes, scales, scale_type):
    rows, cols = codes.shape
    s = ue8m0_decode(scales) if scale_type == "ue8m0" else np.asarray(scales, F32)
    full = np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)[:rows, :cols]
    return e4m3_decode(codes) * full


# ---- MXFP4 <-> NVFP4 ----------------------------------------------------------


def mxfp4_to_nvfp4(packed, scales, k_max):
    """Returns (nv_packed, nv_scales, s_g, exact_blocks, requantized_blocks, max_abs_error)."""
    rows, nblk = scales.shape
    k = scales.astype(np.int64) - 127
    assert (scales != 0xFF).all() and (k <= k_max).all()
    s_g = F32(2.0 ** (k_max - 8))
    nv_packed = packed.copy()
    d = k_max - k
    inside = d <= 17
    s_b = e4m3_encode(np.exp2(np.where(inside, 8 - d, 0)).astype(F32))
    assert (e4m3_decode(s_b)[inside] == np.exp2(8.0 - d[inside])).all()  # exact powers of two
    nv_scales = np.repeat(s_b, 2, axis=1)
    values = mxfp4_dequantize(packed, scales)
    max_err = 0.0
    for r, b in zip(*np.nonzero(~inside)):
        v = values[r:r + 1, b * 32:(b + 1) * 32]
        p, s = nvfp4_quantize(v, s_g)
        nv_packed[r, b * 16:(b + 1) * 16] = p[0]
        nv_scales[r, 2 * b:2 * b + 2] = s[0]
        back = nvfp4_dequantize(p, s, s_g)
        max_err = max(max_err, float(np.abs(back.astype(np.float64) - v).max()))
    return nv_packed, nv_scales, s_g, int(inside.sum()), int((~inside).sum()), max_err


def nvfp4_to_mxfp4(packed, scales, s_g):
    """Returns (mx_packed, mx_scales, exact_blocks, requantized_blocks, max_abs_error)."""
    values = nvfp4_dequantize(packed, scales, s_g)
    mx_packed, mx_scales = mxfp4_quantize(values)
    back = mxfp4_dequantize(mx_packed, mx_scales)
    rows, cols = values.shape
    err = np.abs(back.astype(np.float64) - values).reshape(rows, cols // 32, 32).max(axis=-1)
    exact = int((err == 0).sum())
    return mx_packed, mx_scales, exact, err.size - exact, float(err.max())
