#include "tokenizer/tokenizer.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include <filesystem>

#include "tokenizer/byte_level.h"
#include "tokenizer/tiktoken_model.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace nibble {
namespace {

using nlohmann::json;

// The decoder must be ByteLevel, alone or as the only step of a Sequence;
// its options (add_prefix_space, trim_offsets, use_regex) do not change how
// it decodes.
void check_decoder(const json& j, const std::string& where) {
  const std::string at = where + ": decoder";
  if (j.is_null()) fail(at, ": missing; a byte-level tokenizer needs the ByteLevel decoder");
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) fail(at, ".type: missing or not a string");
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return;
  if (type == "Sequence" && j.contains("decoders") && j["decoders"].is_array() && j["decoders"].size() == 1) {
    check_decoder(j["decoders"][0], where);
    return;
  }
  fail(at, ".type: unsupported decoder '", type, "' (only ByteLevel)");
}

void check_normalizer(const json& j, const std::string& where) {
  if (j.is_null()) return;
  // An empty Sequence is a no-op that some exporters write.
  if (j.is_object() && j.value("type", "") == "Sequence" && j.contains("normalizers") &&
      j["normalizers"].is_array() && j["normalizers"].empty()) {
    return;
  }
  const std::string type = j.is_object() && j.contains("type") && j["type"].is_string()
                               ? j["type"].get<std::string>()
                               : std::string("(unknown)");
  fail(where, ": normalizer: unsupported normalizer '", type, "' (byte-level BPE here has none)");
}

}  // namespace

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("tokenizer.json '", path, "': cannot open: ", std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) fail("tokenizer.json '", path, "': read error");
  return from_json_text(buf.str(), path);
}

std::string Tokenizer::file_in(const std::string& dir) {
  namespace fs = std::filesystem;
  for (const char* name : {"tokenizer.json", "tiktoken.model"}) {
    const fs::path p = fs::path(dir) / name;
    if (fs::exists(p)) return p.string();
  }
  return "";
}

Tokenizer Tokenizer::from_model_dir(const std::string& dir) {
  const std::string path = file_in(dir);
  if (path.empty()) fail(dir, ": no tokenizer.json or tiktoken.model");
  if (std::filesystem::path(path).filename() == "tokenizer.json") return from_file(path);
  const std::string config = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  if (!std::filesystem::exists(config))
    fail(dir, ": tiktoken.model needs tokenizer_config.json beside it (its special tokens), and there is none");
  return from_tiktoken(path, config);
}

Tokenizer Tokenizer::from_json_text(std::string_view json_text, const std::string& name) {
  const std::string where = "tokenizer.json '" + name + "'";
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    fail(where, ": malformed JSON: ", e.what());
  }
  if (!root.is_object()) fail(where, ": top level is not a JSON object");

  Tokenizer t;
  t.path_ = name;
  try {
    check_normalizer(root.value("normalizer", json()), where);
    if (!root.contains("model")) fail(where, ": model: missing");
    t.model_ = BpeModel::from_json(root["model"], where);
    t.pre_tokenizer_ = PreTokenizer::from_json(root.value("pre_tokenizer", json()), where + ": pre_tokenizer");
    check_decoder(root.value("decoder", json()), where);
    t.added_ = AddedVocab::from_json(root.value("added_tokens", json()), where, t.model_);
  } catch (const json::exception& e) {
    // A field of an unexpected JSON type that the checks above let through.
    fail(where, ": unexpected JSON structure: ", e.what());
  }

  // The id table: vocabulary entries, then added tokens (which take
  // precedence, as in tokenizers' id_to_token).
  const ByteLevelMap& bytemap = ByteLevelMap::get();
  const size_t limit = std::max(t.model_.id_limit(), size_t(t.added_.max_id() + 1));
  t.entries_.resize(limit);
  auto fill = [&](Entry& e, const std::string& text) {
    e.present = true;
    e.text = text;
    // tokenizers' ByteLevel decoder: map every character back to its byte,
    // or keep the UTF-8 of the whole string if any character is no stand-in.
    if (!bytemap.to_bytes(text, e.bytes)) e.bytes = text;
  };
  for (size_t id = 0; id < t.model_.id_limit(); ++id) {
    if (t.model_.has_id(int32_t(id))) fill(t.entries_[id], t.model_.token(int32_t(id)));
  }
  for (const AddedToken& a : t.added_.tokens()) {
    Entry& e = t.entries_[size_t(a.id)];
    fill(e, a.content);
    e.special = a.special;
  }
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> ids;
  encode(text, allow_special, ids);
  return ids;
}

void Tokenizer::encode(std::string_view text, bool allow_special, std::vector<int32_t>& out) const {
  const size_t bad = utf8_first_invalid(text);
  if (bad != text.size()) fail("tokenizer '", path_, "': encode: input is not valid UTF-8 (byte ", bad, ")");
  out.reserve(out.size() + text.size() / 3);
  if (kimi_cuts_) {
    // Kimi's encode() hands tiktoken each cut apart (specials found within
    // each), so a cut inside a long run changes the ids.
    std::vector<std::string_view> cuts = kimi_encode_cuts(text);
    if (cuts.size() > 1) {
      for (std::string_view cut : cuts) encode_segments(cut, allow_special, out);
      return;
    }
  }
  encode_segments(text, allow_special, out);
}

void Tokenizer::encode_segments(std::string_view text, bool allow_special, std::vector<int32_t>& out) const {
  std::vector<Segment> segments;
  added_.split(text, allow_special, segments);
  PreTokens pieces;
  for (const Segment& s : segments) {
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    pieces.clear();
    pre_tokenizer_.split(text.substr(s.begin, s.end - s.begin), pieces);
    for (std::string_view piece : pieces.pieces) model_.encode_word(piece, out);
  }
}

const Tokenizer::Entry& Tokenizer::entry(int32_t id) const {
  if (!has_id(id)) fail("tokenizer '", path_, "': token id ", id, " is not in the vocabulary (size ", vocab_size(), ")");
  return entries_[size_t(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    const Entry& e = entry(id);
    if (skip_special && e.special) continue;
    bytes += e.bytes;
  }
  std::string text;
  text.reserve(bytes.size());
  utf8_lossy_append(bytes, text, true);
  return text;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  if (auto id = added_.id_of(token)) return id;
  return model_.id_of(token);
}

const std::string& Tokenizer::token_text(int32_t id) const { return entry(id).text; }
const std::string& Tokenizer::token_bytes(int32_t id) const { return entry(id).bytes; }
bool Tokenizer::is_special(int32_t id) const { return entry(id).special; }

}  // namespace nibble
