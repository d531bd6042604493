// `nibble logits`: the CLI writes exactly the Hugging Face logits of a
// fixture sequence, and bad input leaves no file behind.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "fixture_util.h"

namespace nibble {
namespace {

namespace fs = std::filesystem;

int run(const std::string& args) {
  const std::string cmd = std::string(NIBBLE_BINARY) + " " + args + " 2>/dev/null";
  return std::system(cmd.c_str());
}

std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

TEST(CmdLogits, WritesTheOracleLogits) {
  const std::string name = "hf_tiny_fp8experts";
  test::Expected exp = test::load_expected(name);
  const auto& seq = exp.sequences[1];
  const fs::path out = fs::temp_directory_path() / ("nibble_logits_" + std::to_string(::getpid()) + ".bin");
  ASSERT_EQ(run("logits " + test::fixture_dir(name) + " --tokens " + join(seq.tokens) + " --out " + out.string() +
                " --threads 1 --bandwidth 10 --linear-backend cpu_ref --moe-backend cpu_ref"),
            0);
  const int64_t n = int64_t(seq.tokens.size());
  ASSERT_EQ(fs::file_size(out), uint64_t(n * exp.vocab * 4));
  std::vector<float> got(size_t(n * exp.vocab));
  std::ifstream(out, std::ios::binary).read(reinterpret_cast<char*>(got.data()), std::streamsize(got.size() * 4));
  fs::remove(out);
  // The oracle bound of deepseek_v4_hf_test.cpp (f32 rounding).
  test::Comparison c = test::compare_logits(got.data(), seq.logits.data(), n, exp.vocab, 1e-5);
  EXPECT_LE(c.max_err, 1e-5);
  EXPECT_EQ(c.argmax_mismatches, 0);
}

TEST(CmdLogits, BadInputWritesNothing) {
  const std::string dir = test::fixture_dir("hf_tiny_fp8experts") + " --bandwidth 10";
  const fs::path out = fs::temp_directory_path() / ("nibble_logits_bad_" + std::to_string(::getpid()) + ".bin");
  fs::remove(out);
  EXPECT_NE(run("logits " + dir + " --tokens 0,99999 --out " + out.string()), 0);  // outside the vocabulary
  EXPECT_NE(run("logits " + dir + " --tokens 0,,3 --out " + out.string()), 0);
  EXPECT_NE(run("logits " + dir + " --tokens 0,-3 --out " + out.string()), 0);
  EXPECT_NE(run("logits " + dir + " --out " + out.string()), 0);                  // no --tokens
  EXPECT_NE(run("logits /nonexistent --tokens 1 --out " + out.string()), 0);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out.string() + ".tmp-nibble"));
}

}  // namespace
}  // namespace nibble
