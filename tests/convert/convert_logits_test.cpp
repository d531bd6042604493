// The end-to-end promise of the lossless cast: a DeepSeek-V4 model converted
// from MXFP4 to NVFP4 computes the same logits as the source. The converted
// experts hold identical values, so the scalar reference kernels (f64
// accumulation) give the same logits bit for bit; the SIMD kernels nibble
// picks accumulate in f32 in an order that depends on the block size (32 vs
// 16), so they agree to f32 rounding: within 1e-5 of the largest logit, ten
// times tighter than the model issue's tolerance (1e-4).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "convert_test_util.h"

namespace nibble {
namespace {

using namespace convert_test;

TEST(ConvertLogits, Mxfp4ToNvfp4KeepsTheLogitsOfTheTinyFlashModel) {
  TempDir dir;
  const std::string src = fixture("dsv4/flash_tiny_stock");
  RunResult r = run_nibble({"convert", src, dir.str("nv"), "--to", "nvfp4", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto report = nlohmann::json::parse(r.out);
  ASSERT_GT(report["experts_converted"].get<int>(), 0);
  ASSERT_EQ(report["total"]["blocks_exact"], report["total"]["blocks"]);

  const std::string tokens = "0,5,17,42,3,99,7,1,250";
  for (const std::string backend : {"auto", "cpu_ref"}) {
    RunResult a = run_nibble({"logits", src, "--tokens", tokens, "--out", dir.str("stock.bin"), "--moe-backend", backend});
    ASSERT_EQ(a.exit_code, 0) << a.err;
    RunResult b =
        run_nibble({"logits", dir.str("nv"), "--tokens", tokens, "--out", dir.str("nv.bin"), "--moe-backend", backend});
    ASSERT_EQ(b.exit_code, 0) << b.err;
    const std::string la = read_file(dir.str("stock.bin")), lb = read_file(dir.str("nv.bin"));
    ASSERT_EQ(la.size(), 9u * 4u * (la.size() / 36u));
    ASSERT_GT(la.size(), 0u);
    ASSERT_EQ(la.size(), lb.size());
    if (backend == "cpu_ref") {
      EXPECT_EQ(la, lb) << "logits differ with --moe-backend cpu_ref";
      continue;
    }
    std::vector<float> fa(la.size() / 4), fb(lb.size() / 4);
    std::memcpy(fa.data(), la.data(), la.size());
    std::memcpy(fb.data(), lb.data(), lb.size());
    double max_abs = 0, max_err = 0;
    for (size_t i = 0; i < fa.size(); ++i) {
      max_abs = std::max(max_abs, double(std::fabs(fa[i])));
      max_err = std::max(max_err, double(std::fabs(fa[i] - fb[i])));
    }
    EXPECT_LE(max_err, 1e-5 * max_abs) << "logits differ with --moe-backend " << backend;
  }
}

}  // namespace
}  // namespace nibble
