#include "tokenizer/tiktoken_model.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace nibble {
namespace {

using nlohmann::json;

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 with padding, strictly: a file tiktoken wrote never has
// anything else, so anything else is corruption worth reporting.
bool base64_decode(std::string_view s, std::string& out) {
  out.clear();
  if (s.empty() || s.size() % 4 != 0) return false;
  for (size_t i = 0; i < s.size(); i += 4) {
    const bool last = i + 4 == s.size();
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s[i + size_t(k)];
      if (c == '=' && last && k >= 2) {
        v[k] = 0;
        ++pad;
      } else if (pad > 0 || (v[k] = base64_value(c)) < 0) {
        return false;
      }
    }
    const uint32_t n = uint32_t(v[0]) << 18 | uint32_t(v[1]) << 12 | uint32_t(v[2]) << 6 | uint32_t(v[3]);
    out += char(n >> 16);
    if (pad < 2) out += char((n >> 8) & 0xFF);
    if (pad < 1) out += char(n & 0xFF);
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Python's str.isspace(): bidirectional classes WS, B, S and category Zs.
bool python_isspace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

// A tokenizer_config.json token field: "name" or {"content": "name", ...}.
std::string token_name(const json& v, const std::string& at) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  fail(at, ": expected a token name or an object with \"content\"");
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(what, " '", path, "': cannot open: ", std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) fail(what, " '", path, "': read error");
  return buf.str();
}

}  // namespace

std::vector<std::string> read_tiktoken_ranks(std::string_view text, const std::string& name) {
  std::vector<std::string> tokens;
  std::vector<size_t> line_of;  // [rank] the line that gave it, 0 = none yet
  std::unordered_map<std::string, size_t> seen;  // token -> line
  std::vector<std::pair<std::string, size_t>> entries;  // (token, rank) in file order
  std::vector<size_t> entry_line;
  size_t line_no = 0;
  std::string bytes;
  for (size_t pos = 0; pos <= text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = trim(text.substr(pos, end - pos));
    ++line_no;
    pos = end + 1;
    if (line.empty()) continue;
    const std::string at = "tiktoken.model '" + name + "' line " + std::to_string(line_no);
    const size_t sp = line.find_first_of(" \t");
    if (sp == std::string_view::npos) fail(at, ": expected \"base64 rank\", got one field");
    const std::string_view b64 = line.substr(0, sp);
    const std::string_view rank_text = trim(line.substr(sp));
    if (rank_text.find_first_of(" \t") != std::string_view::npos) fail(at, ": expected \"base64 rank\", got more fields");
    size_t rank = 0;
    const auto [ptr, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if (ec != std::errc() || ptr != rank_text.data() + rank_text.size() || rank >= (size_t(1) << 30))
      fail(at, ": rank '", rank_text, "' is not a number in 0..2^30");
    if (!base64_decode(b64, bytes)) fail(at, ": '", b64, "' is not valid base64");
    if (bytes.empty()) fail(at, ": empty token");
    if (const auto it = seen.find(bytes); it != seen.end())
      fail(at, ": the token of line ", it->second, " again");
    seen.emplace(bytes, line_no);
    entries.emplace_back(bytes, rank);
    entry_line.push_back(line_no);
  }
  if (entries.empty()) fail("tiktoken.model '", name, "': no tokens");
  // Kimi numbers its specials from len(ranks), so the ranks must be
  // exactly 0..n-1: a gap would put a special on a token's id.
  const size_t n = entries.size();
  tokens.resize(n);
  line_of.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const auto& [tok, rank] = entries[i];
    const std::string at = "tiktoken.model '" + name + "' line " + std::to_string(entry_line[i]);
    if (rank >= n) fail(at, ": rank ", rank, " but the file has only ", n, " tokens (ranks must be 0..", n - 1, ")");
    if (line_of[rank]) fail(at, ": rank ", rank, " is also on line ", line_of[rank]);
    line_of[rank] = entry_line[i];
    tokens[rank] = tok;
  }
  return tokens;
}

std::vector<AddedToken> read_kimi_specials(const json& config, size_t n_base, const std::string& where) {
  if (!config.is_object()) fail(where, ": not a JSON object");
  const auto dec = config.find("added_tokens_decoder");
  if (dec == config.end() || !dec->is_object() || dec->empty())
    fail(where, ": added_tokens_decoder: missing or empty; a tiktoken tokenizer takes its special tokens from it");
  std::vector<std::string> names(kKimiReservedSpecials);
  for (const auto& [key, value] : dec->items()) {
    const std::string at = where + ": added_tokens_decoder[\"" + key + "\"]";
    size_t id = 0;
    const auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || ptr != key.data() + key.size()) fail(at, ": the key is not an id");
    if (id < n_base || id >= n_base + kKimiReservedSpecials)
      fail(at, ": id ", id, " is outside the special ids ", n_base, "..", n_base + kKimiReservedSpecials - 1,
           " that follow tiktoken.model's ", n_base, " ranks");
    const std::string name = token_name(value, at);
    if (name.empty() || utf8_first_invalid(name) != name.size()) fail(at, ": empty or not valid UTF-8");
    names[id - n_base] = name;
  }
  std::vector<AddedToken> out;
  std::unordered_map<std::string, size_t> ids;
  for (size_t i = 0; i < kKimiReservedSpecials; ++i) {
    AddedToken t;
    t.id = int32_t(n_base + i);
    t.content = names[i].empty() ? "<|reserved_token_" + std::to_string(n_base + i) + "|>" : names[i];
    // tiktoken matches specials as they are: no stripping, no normalizer.
    t.special = true;
    t.normalized = false;
    if (const auto [it, fresh] = ids.emplace(t.content, size_t(t.id)); !fresh)
      fail(where, ": added_tokens_decoder: '", t.content, "' names both ", it->second, " and ", t.id);
    out.push_back(std::move(t));
  }
  for (const char* field : {"bos_token", "eos_token"}) {
    const auto it = config.find(field);
    if (it == config.end() || it->is_null()) continue;
    const std::string name = token_name(*it, where + ": " + field);
    if (!ids.count(name)) fail(where, ": ", field, " '", name, "' is not one of the special tokens");
  }
  return out;
}

std::vector<std::string_view> kimi_encode_cuts(std::string_view text) {
  std::vector<std::string_view> out;
  size_t chunk_begin = 0;
  while (chunk_begin < text.size()) {
    // A chunk of up to kKimiChunkChars characters, then its run cuts.
    size_t chunk_end = chunk_begin, chars = 0;
    while (chunk_end < text.size() && chars < kKimiChunkChars) {
      const size_t n = utf8_sequence_length(text, chunk_end);
      chunk_end += n ? n : 1;
      ++chars;
    }
    size_t slice_begin = chunk_begin, run = 0;
    bool run_space = false;
    for (size_t i = chunk_begin; i < chunk_end;) {
      const size_t n = utf8_sequence_length(text, i);
      const bool space = python_isspace(n ? utf8_decode_at(text, i, n) : 0xFFFD);
      if (i == chunk_begin) run_space = space;
      if (run_space != space) {
        run = 1;
        run_space = space;
      } else if (++run > kKimiMaxRunChars) {
        out.push_back(text.substr(slice_begin, i - slice_begin));
        slice_begin = i;
        run = 1;
      }
      i += n ? n : 1;
    }
    out.push_back(text.substr(slice_begin, chunk_end - slice_begin));
    chunk_begin = chunk_end;
  }
  return out;
}

Tokenizer Tokenizer::from_tiktoken(const std::string& model_path, const std::string& config_path) {
  const std::string ranks_text = read_file(model_path, "tiktoken.model");
  const std::vector<std::string> ranks = read_tiktoken_ranks(ranks_text, model_path);
  json config;
  try {
    config = json::parse(read_file(config_path, "tokenizer_config.json"));
  } catch (const json::exception& e) {
    fail("tokenizer_config.json '", config_path, "': malformed JSON: ", e.what());
  }
  Tokenizer t;
  t.path_ = model_path;
  t.model_ = BpeModel::from_ranks(ranks, "tiktoken.model '" + model_path + "'");
  t.added_ = AddedVocab::from_tokens(read_kimi_specials(config, ranks.size(), "tokenizer_config.json '" + config_path + "'"),
                                     "tokenizer_config.json '" + config_path + "'");
  t.pre_tokenizer_ = PreTokenizer::tiktoken(kKimiPattern, "Kimi pre-tokenizer pattern");
  t.kimi_cuts_ = true;
  t.entries_.resize(ranks.size() + kKimiReservedSpecials);
  for (size_t id = 0; id < ranks.size(); ++id) {
    Entry& e = t.entries_[id];
    e.present = true;
    e.text = t.model_.token(int32_t(id));
    e.bytes = ranks[id];
  }
  for (const AddedToken& a : t.added_.tokens()) {
    Entry& e = t.entries_[size_t(a.id)];
    e.present = true;
    e.text = e.bytes = a.content;
    e.special = true;
  }
  return t;
}

}  // namespace nibble
