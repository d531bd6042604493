// compressed-tensors pack-quantized INT4 (format/int4.h) against weights that
// compressed-tensors itself packed (tools/gen_int4_fixtures.py): detection
// with provenance, the WeightView, dequantization bit for bit against its own
// unpacking times the scales, the scalar reference kernel against an f64 dot
// product, contradicting shapes and NaN scales refused naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "format/int4.h"
#include "kernels/linear.h"
#include "kernels/weights.h"
#include "support/temp_dir.h"

namespace nibble {
namespace {

const std::string kDir = std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/int4/";

std::vector<float> read_f32(const std::string& name, size_t n) {
  std::vector<float> v(n);
  std::ifstream f(kDir + name, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(float)));
  EXPECT_TRUE(f.good() && f.peek() == EOF) << name << " is not " << n << " f32 values";
  return v;
}

const DetectedTensor& find(const Detection& det, const std::string& name) {
  for (const auto& t : det.tensors)
    if (t.name == name) return t;
  throw std::runtime_error("no detected tensor " + name);
}

struct Case {
  const char* name;
  int64_t rows, cols;
};

TEST(Int4, DetectedAndDequantizedAsCompressedTensorsPackedThem) {
  auto ck = Checkpoint::open(kDir + "ckpt");
  const Detection det = detect_formats(*ck);
  EXPECT_TRUE(det.unsupported.empty()) << det.unsupported[0].method;
  EXPECT_TRUE(det.warnings.empty());
  for (Case c : {Case{"a", 37, 96}, Case{"b", 8, 256}}) {
    const DetectedTensor& t = find(det, c.name);
    EXPECT_EQ(t.format, Format::int4);
    EXPECT_TRUE(t.is_matrix);
    EXPECT_EQ(t.rows, c.rows);
    EXPECT_EQ(t.cols, c.cols);
    EXPECT_EQ(t.params, uint64_t(c.rows * c.cols));
    EXPECT_EQ(t.parts.size(), 3u);  // packed, scale, shape: none left over for pass 2
    EXPECT_NE(t.provenance.find("config.json quantization_config (compressed-tensors pack-quantized: num_bits 4, "
                                "type int, symmetric, strategy group, group_size 32); tensors agree: I32 "
                                ".weight_packed + BF16 .weight_scale per 32 + .weight_shape"),
              std::string::npos)
        << t.provenance;
    const WeightView w = weight_view(t);
    EXPECT_EQ(w.group, 32);
    EXPECT_EQ(w.bytes(), uint64_t(c.rows * c.cols / 2 + c.rows * c.cols / 32 * 2));
    const std::vector<float> want = read_f32(std::string(c.name) + "_dequant.f32", size_t(c.rows * c.cols));
    std::vector<float> row(size_t(c.cols));
    for (int64_t r = 0; r < c.rows; ++r) {
      dequantize_row(w, r, row.data());
      ASSERT_EQ(std::memcmp(row.data(), want.data() + r * c.cols, row.size() * 4), 0) << c.name << " row " << r;
    }
    // The scalar reference kernel: f64 sums rounded once, so within one f32
    // ulp of numpy's f64 sum rounded once (the two f64 sums differ only in
    // order, ~1e-16 relative, far below half an f32 ulp except at a tie).
    const int64_t n = 5;
    const std::vector<float> x = read_f32(std::string(c.name) + "_x.f32", size_t(n * c.cols));
    const std::vector<float> y_want = read_f32(std::string(c.name) + "_y.f32", size_t(n * c.rows));
    std::vector<float> y(size_t(n * c.rows));
    linear_ref(w, x.data(), n, y.data(), nullptr);
    for (size_t i = 0; i < y.size(); ++i)
      EXPECT_LE(std::fabs(y[i] - y_want[i]), std::nextafter(std::fabs(y_want[i]), INFINITY) - std::fabs(y_want[i]))
          << c.name << " output " << i;
  }
  EXPECT_EQ(find(det, "head").format, Format::bf16);
}

TEST(Int4, ContradictingShapesAndNanScalesAreRefusedNamingTheTensor) {
  auto bad = Checkpoint::open(kDir + "bad_shape");
  try {
    detect_formats(*bad);
    ADD_FAILURE() << "a weight_shape that contradicts weight_packed was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("a.weight_shape says [37, 100] but a.weight_packed [37, 12] holds [37, 96]"),
              std::string::npos)
        << e.what();
  }
  // Metadata that contradicts the tensors' group size loses to them, with a
  // warning naming both (as for every format).
  {
    test::TempDir dir;
    std::filesystem::copy(kDir + "ckpt", dir.str(), std::filesystem::copy_options::recursive);
    std::string cfg = test::read_file(dir.str("config.json"));
    const size_t at = cfg.find("\"group_size\": 32");
    ASSERT_NE(at, std::string::npos);
    cfg.replace(at, std::string("\"group_size\": 32").size(), "\"group_size\": 64");
    test::write_file(dir.str("config.json"), cfg);
    auto edited = Checkpoint::open(dir.str());
    const Detection det = detect_formats(*edited);
    EXPECT_EQ(find(det, "a").format, Format::int4);
    EXPECT_EQ(weight_view(find(det, "a")).group, 32);
    EXPECT_NE(find(det, "a").provenance.find("(overrides config.json quantization_config"), std::string::npos)
        << find(det, "a").provenance;
    ASSERT_FALSE(det.warnings.empty());
    EXPECT_NE(det.warnings[0].find("metadata says group_size 64"), std::string::npos) << det.warnings[0];
    EXPECT_NE(det.warnings[0].find("the tensors have groups of 32"), std::string::npos) << det.warnings[0];
  }
  // A NaN and an infinite BF16 scale in a copy of "a"'s scales.
  auto ck = Checkpoint::open(kDir + "ckpt");
  const Detection det = detect_formats(*ck);
  WeightView w = weight_view(find(det, "a"));
  std::vector<uint16_t> scales(size_t(37 * 3));
  std::memcpy(scales.data(), w.scales, scales.size() * 2);
  w.scales = reinterpret_cast<const uint8_t*>(scales.data());
  check_weight_codes(w, false);  // the published scales pass
  for (auto [code, what] : {std::pair<uint16_t, const char*>{0x7FC0, "NaN"}, {0xFF80, "infinity"}}) {
    scales[size_t(4 * 3 + 2)] = code;
    try {
      check_weight_codes(w, false);
      ADD_FAILURE() << "scale " << code << " passed";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("tensor a: INT4 scale [4, 2] is a BF16 ") + what),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Int4, QuantizeThenDequantizeIsWithinHalfAStep) {
  // The reference quantizer (random test weights): every element within
  // half a quantization step of its input, the group's largest at +-7.
  std::vector<float> x(96);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i) * 0.7f) * float(1 + i % 5);
  std::vector<uint8_t> packed(48);
  std::vector<uint16_t> scales(3);
  int4_quantize_row(x.data(), 96, 32, packed.data(), scales.data());
  std::vector<float> y(96);
  int4_dequantize_row(packed.data(), scales.data(), 96, 32, y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t bits = uint32_t(scales[i / 32]) << 16;
    float s;
    std::memcpy(&s, &bits, 4);
    EXPECT_LE(std::fabs(y[i] - x[i]), 0.5f * std::fabs(s) * 1.0001f + 1e-7f) << i;
  }
  EXPECT_THROW(int4_dequantize_row(packed.data(), scales.data(), 96, 12, y.data()), std::exception);
}

}  // namespace
}  // namespace nibble
