// Pre-tokenizer configurations against tokenizers' pre_tokenize_str: Split
// behaviours with and without invert, Digits, ByteLevel options, empty
// regex matches, DeepSeek's sequence and a Llama-3 style pattern.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fixtures.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "util/error.h"

namespace nibble {
namespace {

using nlohmann::json;

TEST(PreTokenizer, MatchesTokenizersLibraryForEveryConfiguration) {
  const json data = test::read_fixture("pre_tokenizer_cases.json");
  ASSERT_GE(data.size(), 25u);
  const ByteLevelMap& bytemap = ByteLevelMap::get();
  for (const json& config : data) {
    const PreTokenizer pt = PreTokenizer::from_json(config["config"], "fixture");
    SCOPED_TRACE(config["config"].dump());
    size_t failures = 0;
    for (const json& c : config["cases"]) {
      const std::string text = c["text"];
      // tokenizers reports pieces after the byte map ("Ġx"); nibble keeps raw bytes.
      std::vector<std::string> got;
      for (const std::string& piece : pt.split(text)) got.push_back(bytemap.to_chars(piece));
      const auto expect = c["pieces"].get<std::vector<std::string>>();
      EXPECT_EQ(got, expect) << "text " << test::shown(text);
      if (got != expect && ++failures > 5) break;
    }
  }
}

TEST(PreTokenizer, DeepSeekExample) {
  // text.md's first vector: "Hello! 毕老师！1 + 1 = 2" is cut as
  // Hello | ! | ' ' | 毕老师 | ！ | 1 | ' +' | ' ' | 1 | ' =' | ' ' | 2 (the
  // ids 19923 3 223 5464 5008 1175 19 940 223 19 438 223 20 fit this).
  const json data = test::read_fixture("pre_tokenizer_cases.json");
  const json* dsv4 = nullptr;
  for (const json& config : data) {
    if (config["config"]["type"] == "Sequence" && config["config"]["pretokenizers"].size() == 4) dsv4 = &config;
  }
  ASSERT_NE(dsv4, nullptr);
  const PreTokenizer pt = PreTokenizer::from_json((*dsv4)["config"], "fixture");
  const std::vector<std::string> expect = {"Hello", "!", " ", "毕老师", "！", "1", " +", " ", "1", " =", " ", "2"};
  EXPECT_EQ(pt.split("Hello! 毕老师！1 + 1 = 2"), expect);
}

json byte_level() { return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}; }

std::string error_of(const json& config) {
  try {
    PreTokenizer::from_json(config, "file 'x.json': pre_tokenizer");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PreTokenizer, RejectsUnsupportedConfigurations) {
  EXPECT_NE(error_of(json()).find("only byte-level BPE"), std::string::npos);
  EXPECT_NE(error_of({{"type", "Whitespace"}}).find("unsupported pre-tokenizer type 'Whitespace'"), std::string::npos);
  EXPECT_NE(error_of({{"type", "Metaspace"}}).find("'Metaspace'"), std::string::npos);
  // Splitting alone is not byte-level.
  const json split = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Isolated"}};
  EXPECT_NE(error_of(split).find("no ByteLevel step"), std::string::npos);
  // Anything after ByteLevel would see mapped characters.
  const json after = {{"type", "Sequence"}, {"pretokenizers", {byte_level(), split}}};
  EXPECT_NE(error_of(after).find("after ByteLevel"), std::string::npos);
  const json bad_behavior = {{"type", "Sequence"},
                             {"pretokenizers",
                              {{{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}},
                               byte_level()}}};
  EXPECT_NE(error_of(bad_behavior).find("pretokenizers[0].behavior: unsupported value 'Sideways'"), std::string::npos);
  const json bad_regex = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}},
                            byte_level()}}};
  const std::string msg = error_of(bad_regex);
  EXPECT_NE(msg.find("file 'x.json': pre_tokenizer.pretokenizers[0].pattern.Regex: cannot compile regex"),
            std::string::npos)
      << msg;
  const json no_pattern = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Split"}, {"behavior", "Isolated"}}}}};
  EXPECT_NE(error_of(no_pattern).find(".pattern: missing"), std::string::npos);
}

TEST(PreTokenizer, LongWhitespaceRunDoesNotExhaustRegexStack) {
  // DeepSeek's third pattern backtracks over whitespace runs; a megabyte of
  // spaces must still split (into one piece) rather than fail.
  const json dsv4 = test::read_fixture("dsv4_tokenizer.json")["pre_tokenizer"];
  const PreTokenizer pt = PreTokenizer::from_json(dsv4, "fixture");
  const std::string spaces(1 << 20, ' ');
  const auto pieces = pt.split(spaces + "x");
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].size(), spaces.size() - 1);
  EXPECT_EQ(pieces[1], " x");
}

TEST(OnigToPcre2, RewritesOnlyTheEscapesThatDiffer) {
  EXPECT_EQ(onig_to_pcre2(R"(\s+(?!\S))"), R"(\p{White_Space}+(?!\P{White_Space}))");
  EXPECT_EQ(onig_to_pcre2(R"([^\s\p{L}])"), R"([^\p{White_Space}\p{L}])");
  EXPECT_EQ(onig_to_pcre2(R"(\w)"), R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE}])");
  EXPECT_EQ(onig_to_pcre2(R"([\w])"), R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}])");
  EXPECT_EQ(onig_to_pcre2(R"(\h+)"), R"([0-9a-fA-F]+)");
  // Escaped backslashes, a literal ']' first in a class and POSIX classes
  // do not confuse the class tracking.
  EXPECT_EQ(onig_to_pcre2(R"(\\s)"), R"(\\s)");
  EXPECT_EQ(onig_to_pcre2(R"([]\s]\s)"), R"([]\p{White_Space}]\p{White_Space})");
  EXPECT_EQ(onig_to_pcre2(R"([[:alpha:]\w]\w)"),
            R"([[:alpha:]\p{Alphabetic}\p{M}\p{Nd}\p{Pc}][\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE}])");
  EXPECT_EQ(onig_to_pcre2(R"(\p{N}{1,3}|'s|\d)"), R"(\p{N}{1,3}|'s|\d)");
}

TEST(Regex, EmptyMatchesFollowFindIterRules) {
  const Regex re("x*", false, "test");
  std::vector<Span> m;
  re.find_all("abxxc", m);
  // Empty at 0 and 1, "xx" at 2..4, nothing empty at 4 (it touches the
  // previous match), empty at 5.
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].begin, 0u);
  EXPECT_EQ(m[1].begin, 1u);
  EXPECT_EQ(m[2].begin, 2u);
  EXPECT_EQ(m[2].end, 4u);
  EXPECT_EQ(m[3].begin, 5u);
  EXPECT_EQ(m[3].end, 5u);
}

}  // namespace
}  // namespace nibble
