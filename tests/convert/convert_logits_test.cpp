// The end-to-end promise of the lossless cast: a DeepSeek-V4 model converted
// from MXFP4 to NVFP4 computes the same logits as the source, bit for bit,
// with the kernels nibble picks and with the scalar reference kernels.
// (The converted experts hold identical values, so only a kernel that rounds
// NVFP4 differently from MXFP4 could break this.)
#include <gtest/gtest.h>

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
    EXPECT_EQ(la, lb) << "logits differ with --moe-backend " << backend;
  }
}

}  // namespace
}  // namespace nibble
