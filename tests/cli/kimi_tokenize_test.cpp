// `nibble tokenize` on a Kimi-style folder (tiktoken.model and
// tokenizer_config.json, no tokenizer.json, no weights): the ids tiktoken
// gave (tools/gen_kimi_tokenizer.py) for a string with Kimi's markers, as
// special tokens and as text; a broken ranks file fails naming its line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_util.h"

namespace nibble {
namespace {

std::string kimi_dir() { return std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/tokenizer/kimi"; }

std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::stringstream s(line);
  std::string x;
  while (std::getline(s, x, ','))
    if (!x.empty() && x != "\n") ids.push_back(std::stoi(x));
  return ids;
}

TEST(KimiTokenize, IdsMatchTiktoken) {
  std::ifstream in(std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/tokenizer/kimi_cases.json");
  const nlohmann::json data = nlohmann::json::parse(in);
  const nlohmann::json* pick = nullptr;
  for (const auto& c : data["cases"]) {
    const std::string text = c["text"];
    if (c.contains("ids_no_special") && text.size() > 40 && text.size() < 300 && text.find('\0') == std::string::npos &&
        text.find("<|im_") != std::string::npos) {
      pick = &c;
      break;
    }
  }
  ASSERT_NE(pick, nullptr);
  const std::string text = (*pick)["text"];
  const test::RunResult r = test::run_nibble({"tokenize", kimi_dir(), "-p", text, "--ids"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(parse_ids(r.out), (*pick)["ids"].get<std::vector<int32_t>>()) << text;
  const test::RunResult plain = test::run_nibble({"tokenize", kimi_dir(), "-p", text, "--ids", "--no-special"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(parse_ids(plain.out), (*pick)["ids_no_special"].get<std::vector<int32_t>>()) << text;
}

TEST(KimiTokenize, BrokenRanksNameTheLine) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "nibble_kimi_tokenize_broken";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kimi_dir() + "/tokenizer_config.json", dir / "tokenizer_config.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::ifstream in(kimi_dir() + "/tiktoken.model");
  std::ofstream out(dir / "tiktoken.model");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) out << (n == 42 ? std::string("@@@@ 41") : line) << "\n";
  out.close();
  const test::RunResult r = test::run_nibble({"tokenize", dir.string(), "-p", "hi"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("line 42: '@@@@' is not valid base64"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace nibble
