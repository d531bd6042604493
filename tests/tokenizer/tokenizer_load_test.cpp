// Loading errors: every bad tokenizer.json is a nibble::Error naming the
// file and the field at fault, never a crash.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fixtures.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace nibble {
namespace {

using nlohmann::json;

json base() { return json::parse(test::read_text(test::fixture_path("gpt2_tokenizer.json"))); }

// The message of the error loading `j`, or "(no error)".
std::string load_error(const json& j) {
  try {
    Tokenizer::from_json_text(j.dump(), "t.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_ERROR_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg)

TEST(TokenizerLoad, BaseFixtureLoads) { EXPECT_EQ(load_error(base()), "(no error)"); }

TEST(TokenizerLoad, MissingFile) {
  try {
    Tokenizer::from_file("/nonexistent/dir/tokenizer.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_ERROR_HAS(std::string(e.what()), "tokenizer.json '/nonexistent/dir/tokenizer.json': cannot open");
  }
}

TEST(TokenizerLoad, MalformedJson) {
  for (const char* text : {"", "{", "{\"model\": [1, 2,]}", "\xFF\xFE", "[]", "42"}) {
    try {
      Tokenizer::from_json_text(text, "bad.json");
      FAIL() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_ERROR_HAS(std::string(e.what()), "tokenizer.json 'bad.json'");
    }
  }
  // A truncated real file.
  const std::string full = test::read_text(test::fixture_path("gpt2_tokenizer.json"));
  try {
    Tokenizer::from_json_text(full.substr(0, full.size() / 2), "half.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_ERROR_HAS(std::string(e.what()), "malformed JSON");
  }
}

TEST(TokenizerLoad, UnsupportedModelTypes) {
  for (const char* type : {"WordPiece", "Unigram", "WordLevel"}) {
    json j = base();
    j["model"]["type"] = type;
    EXPECT_ERROR_HAS(load_error(j), std::string("model.type: unsupported model type '") + type + "'");
  }
  json j = base();
  j.erase("model");
  EXPECT_ERROR_HAS(load_error(j), "model: missing");
}

TEST(TokenizerLoad, UnsupportedModelOptions) {
  json j = base();
  j["model"]["continuing_subword_prefix"] = "##";
  EXPECT_ERROR_HAS(load_error(j), "model.continuing_subword_prefix");
  j = base();
  j["model"]["byte_fallback"] = true;
  EXPECT_ERROR_HAS(load_error(j), "model.byte_fallback");
  j = base();
  j["model"]["dropout"] = 0.1;
  EXPECT_ERROR_HAS(load_error(j), "model.dropout");
}

TEST(TokenizerLoad, UnsupportedPipelineParts) {
  json j = base();
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_ERROR_HAS(load_error(j), "normalizer: unsupported normalizer 'NFKC'");
  j = base();
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  EXPECT_ERROR_HAS(load_error(j), "tokenizer.json 't.json': pre_tokenizer: unsupported pre-tokenizer type");
  j = base();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_ERROR_HAS(load_error(j), "decoder.type: unsupported decoder 'WordPiece'");
  j = base();
  j["decoder"] = nullptr;
  EXPECT_ERROR_HAS(load_error(j), "decoder: missing");
}

TEST(TokenizerLoad, MissingByteToken) {
  json j = base();
  // Drop the token for '\n' ("Ċ") and every merge that uses it.
  j["model"]["vocab"].erase("Ċ");
  json merges = json::array();
  for (const json& m : j["model"]["merges"]) {
    const std::string a = m[0], b = m[1];
    if (a.find("Ċ") == std::string::npos && b.find("Ċ") == std::string::npos) merges.push_back(m);
  }
  j["model"]["merges"] = merges;
  EXPECT_ERROR_HAS(load_error(j), "model.vocab: no token for byte 0x0A");
}

TEST(TokenizerLoad, BadVocabAndMerges) {
  json j = base();
  j["model"]["vocab"]["Ġnew"] = j["model"]["vocab"]["a"];
  EXPECT_ERROR_HAS(load_error(j), "model.vocab: id");
  j = base();
  j["model"]["vocab"]["x"] = "seven";
  EXPECT_ERROR_HAS(load_error(j), "model.vocab['x']: id is not an integer");
  j = base();
  j["model"]["vocab"]["Ġnegative"] = -4;
  EXPECT_ERROR_HAS(load_error(j), "out of range");
  j = base();
  j["model"]["merges"][3] = json::array({"a", "notatoken"});
  EXPECT_ERROR_HAS(load_error(j), "model.merges[3]: 'notatoken' is not in model.vocab");
  j = base();
  j["model"]["merges"][5] = "a b c";
  EXPECT_ERROR_HAS(load_error(j), "model.merges[5]");
  j = base();
  j["model"]["merges"][0] = 17;
  EXPECT_ERROR_HAS(load_error(j), "model.merges[0]: expected");
  j = base();
  j["model"]["merges"].push_back(json::array({"q", "z"}));  // "qz" is not a token
  ASSERT_FALSE(j["model"]["vocab"].contains("qz"));
  EXPECT_ERROR_HAS(load_error(j), "merged 'qz' is not in model.vocab");
  j = base();
  j["model"]["vocab"] = json::array();
  EXPECT_ERROR_HAS(load_error(j), "model.vocab: missing or not an object");
}

TEST(TokenizerLoad, BadAddedTokens) {
  json j = base();
  j["added_tokens"][0].erase("content");
  EXPECT_ERROR_HAS(load_error(j), "added_tokens[0].content");
  j = base();
  j["added_tokens"][1]["id"] = "two";
  EXPECT_ERROR_HAS(load_error(j), "added_tokens[1].id: missing or not an integer");
  j = base();
  j["added_tokens"][0]["special"] = "yes";
  EXPECT_ERROR_HAS(load_error(j), "added_tokens[0].special: expected true or false");
  j = base();
  j["added_tokens"] = "none";
  EXPECT_ERROR_HAS(load_error(j), "added_tokens: expected an array");
}

TEST(TokenizerLoad, WrongJsonTypesAreErrorsNotCrashes) {
  // Replace each top-level field and each model field by values of the
  // wrong type; loading must either succeed or throw nibble::Error.
  const json wrong[] = {json(), json(3), json("s"), json::array(), json::object(), json(true)};
  for (const char* key : {"normalizer", "pre_tokenizer", "model", "decoder", "added_tokens", "post_processor"}) {
    for (const json& w : wrong) {
      json j = base();
      j[key] = w;
      EXPECT_NO_THROW({
        try {
          Tokenizer::from_json_text(j.dump(), "t.json");
        } catch (const Error&) {
        }
      }) << key << " = " << w.dump();
    }
  }
  for (const char* key : {"type", "vocab", "merges", "ignore_merges", "dropout", "byte_fallback"}) {
    for (const json& w : wrong) {
      json j = base();
      j["model"][key] = w;
      EXPECT_NO_THROW({
        try {
          Tokenizer::from_json_text(j.dump(), "t.json");
        } catch (const Error&) {
        }
      }) << "model." << key << " = " << w.dump();
    }
  }
}

}  // namespace
}  // namespace nibble
