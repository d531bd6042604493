// `nibble tokenize` on gpt-oss's tokenizer folder (unpacked by CMake into
// <build>/gptoss-tokenizer; no weights needed): the ids tiktoken gave for
// the fixture's strings, markers included, and with --no-special the ids of
// tiktoken's encode_ordinary.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_util.h"

namespace nibble {
namespace {

std::string gptoss_dir() { return (std::filesystem::path(NIBBLE_BINARY).parent_path() / "gptoss-tokenizer").string(); }

std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::stringstream s(line);
  std::string x;
  while (std::getline(s, x, ','))
    if (!x.empty() && x != "\n") ids.push_back(std::stoi(x));
  return ids;
}

TEST(GptOssTokenize, IdsMatchTiktoken) {
  // Two runs (each loads the 27 MB file, ~1 s): one string with markers, as
  // special tokens and as text. The C++ test covers the whole corpus.
  std::ifstream in(std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/tokenizer/gptoss_cases.json");
  const nlohmann::json data = nlohmann::json::parse(in);
  const nlohmann::json* pick = nullptr;
  for (const auto& c : data["cases"]) {
    const std::string text = c["text"];
    if (c.contains("ids_no_special") && text.size() > 40 && text.size() < 300 && text.find('\0') == std::string::npos &&
        text.find("<|start|>") != std::string::npos) {
      pick = &c;
      break;
    }
  }
  ASSERT_NE(pick, nullptr);
  const std::string text = (*pick)["text"];
  const test::RunResult r = test::run_nibble({"tokenize", gptoss_dir(), "-p", text, "--ids"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(parse_ids(r.out), (*pick)["ids"].get<std::vector<int32_t>>()) << text;
  const test::RunResult plain = test::run_nibble({"tokenize", gptoss_dir(), "-p", text, "--ids", "--no-special"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(parse_ids(plain.out), (*pick)["ids_no_special"].get<std::vector<int32_t>>()) << text;
}

}  // namespace
}  // namespace nibble
