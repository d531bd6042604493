#include "kernels/random_weights.h"

#include <cmath>
#include <cstring>

#include "format/block.h"
#include "format/element.h"
#include "util/error.h"

namespace nibble {

namespace {

// splitmix64: fast, and each output is a full 64-bit mix of the counter.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint32_t below(uint32_t n) { return uint32_t((next() >> 32) * n >> 32); }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }
};

void fill_bytes(uint8_t* p, size_t n, Rng& rng) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rng.next();
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = uint8_t(rng.next());
}

// A random E4M3 code that is not NaN.
uint8_t e4m3_code(Rng& rng) {
  for (;;) {
    uint8_t c = uint8_t(rng.next());
    if ((c & 0x7F) != 0x7F) return c;
  }
}

}  // namespace

void random_normal(float* out, int64_t n, uint64_t seed, float stddev) {
  Rng rng{seed};
  for (int64_t i = 0; i < n; i += 2) {
    double u1 = rng.uniform(), u2 = rng.uniform();
    double r = std::sqrt(-2.0 * std::log(u1 > 0 ? u1 : 1e-300)) * stddev;
    out[i] = float(r * std::cos(6.283185307179586 * u2));
    if (i + 1 < n) out[i + 1] = float(r * std::sin(6.283185307179586 * u2));
  }
}

OwnedWeights random_weights(Format format, int64_t rows, int64_t cols, uint64_t seed,
                            Fp8ScaleType fp8_scale) {
  if (rows < 0 || cols <= 0) fail("random_weights: bad shape [", rows, ", ", cols, "]");
  Rng rng{seed * 0x2545F4914F6CDD1Dull + 1};
  OwnedWeights w;
  WeightView& v = w.view;
  v.format = format;
  v.rows = rows;
  v.cols = cols;
  v.fp8_scale = fp8_scale;
  v.name = std::string("random.") + format_name(format);
  const size_t n = size_t(rows) * size_t(cols);
  switch (format) {
    case Format::mxfp4: {
      if (cols % kMxfp4Block) fail("random_weights: MXFP4 needs cols % 32 == 0, got ", cols);
      w.data.resize(n / 2);
      fill_bytes(w.data.data(), w.data.size(), rng);
      // Block exponents 2^-10 .. 2^-4 around real expert weights' ~2^-7.
      w.scales.resize(n / kMxfp4Block);
      for (auto& s : w.scales) s = uint8_t(117 + rng.below(7));
      break;
    }
    case Format::nvfp4: {
      if (cols % kNvfp4Block) fail("random_weights: NVFP4 needs cols % 16 == 0, got ", cols);
      w.data.resize(n / 2);
      fill_bytes(w.data.data(), w.data.size(), rng);
      // Positive E4M3 block scales over the whole range (subnormals too),
      // and a global scale like ModelOpt's amax / (6 * 448).
      w.scales.resize(n / kNvfp4Block);
      for (auto& s : w.scales) s = uint8_t(1 + rng.below(0x7E));
      v.global_scale = 0.05f / (6.0f * 448.0f);
      break;
    }
    case Format::fp8_block128: {
      w.data.resize(n);
      for (auto& c : w.data) c = e4m3_code(rng);
      const size_t tiles = size_t((rows + kFp8Tile - 1) / kFp8Tile) * size_t((cols + kFp8Tile - 1) / kFp8Tile);
      if (fp8_scale == Fp8ScaleType::ue8m0) {
        w.scales.resize(tiles);
        for (auto& s : w.scales) s = uint8_t(116 + rng.below(6));
      } else {
        w.scales.resize(tiles * 4);
        for (size_t i = 0; i < tiles; ++i) {
          float s = float(std::ldexp(1.0 + rng.uniform(), -12 + int(rng.below(4))));
          std::memcpy(w.scales.data() + 4 * i, &s, 4);
        }
      }
      break;
    }
    case Format::int4: {
      // Kimi K2's group of 32; every code drawn (the -8 that a symmetric
      // quantizer rarely writes included), positive BF16 scales 2^-9 .. 2^-6.
      v.group = 32;
      if (cols % v.group) fail("random_weights: int4 needs cols % 32 == 0, got ", cols);
      w.data.resize(n / 2);
      fill_bytes(w.data.data(), w.data.size(), rng);
      w.scales.resize(n / size_t(v.group) * 2);
      for (size_t i = 0; i < n / size_t(v.group); ++i) {
        const uint16_t h = bf16_encode(float(std::ldexp(1.0 + rng.uniform(), -9 + int(rng.below(3)))));
        std::memcpy(w.scales.data() + 2 * i, &h, 2);
      }
      break;
    }
    case Format::bf16: {
      w.data.resize(n * 2);
      std::vector<float> f(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        random_normal(f.data(), cols, rng.next(), 0.02f);
        for (int64_t c = 0; c < cols; ++c) {
          uint16_t h = bf16_encode(f[size_t(c)]);
          std::memcpy(w.data.data() + (size_t(r) * size_t(cols) + size_t(c)) * 2, &h, 2);
        }
      }
      break;
    }
    case Format::f32: {
      w.data.resize(n * 4);
      random_normal(reinterpret_cast<float*>(w.data.data()), int64_t(n), rng.next(), 0.02f);
      break;
    }
    case Format::int_index: fail("random_weights: int is not a weight format");
  }
  v.data = w.data.data();
  v.scales = w.scales.empty() ? nullptr : w.scales.data();
  return w;
}

}  // namespace nibble
