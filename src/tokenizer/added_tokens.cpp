#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <tuple>

#include <nlohmann/json.hpp>

#include "tokenizer/bpe.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace nibble {
namespace {

using nlohmann::json;

// Rust's \s: the Unicode White_Space property.
bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

// Start of the character that ends just before `pos` (text valid UTF-8).
size_t char_start_before(std::string_view text, size_t pos) {
  size_t i = pos - 1;
  while (i > 0 && (static_cast<uint8_t>(text[i]) & 0xC0) == 0x80) --i;
  return i;
}

uint32_t code_point_at(std::string_view text, size_t i, size_t* len) {
  const size_t n = utf8_sequence_length(text, i);
  *len = n ? n : 1;
  return n ? utf8_decode_at(text, i, n) : 0xFFFD;
}

bool get_flag(const json& t, const char* key, bool fallback, const std::string& at) {
  const auto it = t.find(key);
  if (it == t.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail(at, ".", key, ": expected true or false");
  return it->get<bool>();
}

}  // namespace

void AddedVocab::Trie::insert(std::string_view s, int32_t token) {
  int32_t node = 0;
  for (char ch : s) {
    const auto byte = static_cast<uint8_t>(ch);
    auto& kids = nodes[size_t(node)].children;
    const auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(byte, INT32_MIN));
    if (it != kids.end() && it->first == byte) {
      node = it->second;
    } else {
      const auto child = static_cast<int32_t>(nodes.size());
      kids.insert(it, {byte, child});
      nodes.emplace_back();  // may reallocate: `kids` is not used after this
      node = child;
    }
  }
  nodes[size_t(node)].token = token;
  first_byte[static_cast<uint8_t>(s[0])] = true;
}

std::pair<int32_t, size_t> AddedVocab::Trie::longest_at(std::string_view text, size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<uint8_t>(text[i]);
    const auto& kids = nodes[size_t(node)].children;
    const auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(byte, INT32_MIN));
    if (it == kids.end() || it->first != byte) break;
    node = it->second;
    if (nodes[size_t(node)].token >= 0) best = {nodes[size_t(node)].token, i + 1 - pos};
  }
  return best;
}

AddedVocab::AddedVocab()
    : word_char_(std::make_unique<Regex>(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])", false,
                                         "added-token word-character class")) {}
AddedVocab::~AddedVocab() = default;
AddedVocab::AddedVocab(AddedVocab&&) noexcept = default;
AddedVocab& AddedVocab::operator=(AddedVocab&&) noexcept = default;

AddedVocab AddedVocab::from_json(const json& j, const std::string& where, const BpeModel& model) {
  AddedVocab v;
  if (j.is_null()) return v;
  if (!j.is_array()) fail(where, ": added_tokens: expected an array");
  const auto model_count = static_cast<int64_t>(model.vocab_count());
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string at = where + ": added_tokens[" + std::to_string(i) + "]";
    const json& t = j[i];
    if (!t.is_object()) fail(at, ": expected an object");
    AddedToken tok;
    if (!t.contains("id") || !t["id"].is_number_integer()) fail(at, ".id: missing or not an integer");
    if (!t.contains("content") || !t["content"].is_string()) fail(at, ".content: missing or not a string");
    tok.content = t["content"].get<std::string>();
    if (utf8_first_invalid(tok.content) != tok.content.size()) fail(at, ".content: not valid UTF-8");
    tok.special = get_flag(t, "special", false, at);
    tok.single_word = get_flag(t, "single_word", false, at);
    tok.lstrip = get_flag(t, "lstrip", false, at);
    tok.rstrip = get_flag(t, "rstrip", false, at);
    tok.normalized = get_flag(t, "normalized", !tok.special, at);
    if (tok.content.empty()) continue;  // tokenizers ignores empty added tokens

    if (const auto it = v.by_content_.find(tok.content); it != v.by_content_.end()) {
      tok.id = v.tokens_[size_t(it->second)].id;  // repeated: same id, later flags
      v.tokens_[size_t(it->second)] = std::move(tok);
      continue;
    }
    if (const auto in_model = model.id_of(tok.content)) {
      tok.id = *in_model;
    } else {
      const int64_t next = v.max_id_ < 0 || v.max_id_ < model_count ? model_count : int64_t(v.max_id_) + 1;
      if (next >= (int64_t(1) << 30)) fail(at, ": id ", next, " out of range");
      tok.id = static_cast<int32_t>(next);
    }
    v.max_id_ = std::max(v.max_id_, tok.id);
    v.by_content_[tok.content] = static_cast<int32_t>(v.tokens_.size());
    v.tokens_.push_back(std::move(tok));
  }
  v.build_tries();
  return v;
}

AddedVocab AddedVocab::from_tokens(std::vector<AddedToken> tokens, const std::string& where) {
  AddedVocab v;
  for (AddedToken& tok : tokens) {
    if (tok.content.empty()) fail(where, ": special token ", tok.id, " has no text");
    if (tok.id < 0) fail(where, ": special token '", tok.content, "' has a negative id");
    if (v.by_content_.count(tok.content)) fail(where, ": special token '", tok.content, "' is named twice");
    v.max_id_ = std::max(v.max_id_, tok.id);
    v.by_content_[tok.content] = static_cast<int32_t>(v.tokens_.size());
    v.tokens_.push_back(std::move(tok));
  }
  v.build_tries();
  if (v.by_id_.size() != v.tokens_.size()) fail(where, ": two special tokens share an id");
  return v;
}

void AddedVocab::build_tries() {
  for (size_t index = 0; index < tokens_.size(); ++index) {
    const AddedToken& tok = tokens_[index];
    by_id_[tok.id] = static_cast<int32_t>(index);
    (tok.normalized ? normalized_trie_ : raw_trie_).insert(tok.content, static_cast<int32_t>(index));
  }
}

const AddedToken* AddedVocab::by_id(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[size_t(it->second)];
}

std::optional<int32_t> AddedVocab::id_of(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[size_t(it->second)].id;
}

bool AddedVocab::is_word_char_before(std::string_view text, size_t begin, size_t pos) const {
  if (pos <= begin) return false;
  const size_t s = char_start_before(text, pos);
  Span m{};
  return word_char_->search(text.substr(s, pos - s), 0, m);
}

bool AddedVocab::is_word_char_at(std::string_view text, size_t pos, size_t end) const {
  if (pos >= end) return false;
  size_t n = 0;
  code_point_at(text, pos, &n);
  Span m{};
  return word_char_->search(text.substr(pos, n), 0, m);
}

void AddedVocab::split_pass(std::string_view text, size_t begin, size_t end, const Trie& trie, bool allow_special,
                            std::vector<Segment>& out) const {
  const std::string_view sentence = text.substr(0, end);  // matches must not run past `end`
  size_t start_offset = begin;  // first byte not yet emitted
  size_t pos = begin;           // where the next search starts
  while (pos < end) {
    // Leftmost position where some token starts, longest token there.
    int32_t index = -1;
    size_t mstart = pos, mlen = 0;
    for (; mstart < end; ++mstart) {
      if (!trie.first_byte[static_cast<uint8_t>(sentence[mstart])]) continue;
      std::tie(index, mlen) = trie.longest_at(sentence, mstart);
      if (index >= 0) break;
    }
    if (index < 0) break;
    const AddedToken& tok = tokens_[size_t(index)];
    const size_t mend = mstart + mlen;
    pos = mend;  // the search resumes after this match even if it is discarded
    if (tok.special && !allow_special) continue;
    if (tok.single_word && (is_word_char_before(text, begin, mstart) || is_word_char_at(text, mend, end))) continue;
    size_t start = mstart, stop = mend;
    if (tok.lstrip) {
      size_t s = mstart;
      while (s > begin) {
        const size_t c = char_start_before(text, s);
        size_t n = 0;
        if (!is_white_space(code_point_at(text, c, &n))) break;
        s = c;
      }
      start = std::max(s, start_offset);  // never reclaim text already emitted
    }
    if (tok.rstrip) {
      while (stop < end) {
        size_t n = 0;
        if (!is_white_space(code_point_at(text, stop, &n))) break;
        stop += n;
      }
      pos = stop;  // Hugging Face resumes at the match end; only a token that starts with whitespace could differ
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, tok.id});
    start_offset = stop;
  }
  if (start_offset < end) out.push_back({start_offset, end, -1});
}

void AddedVocab::split(std::string_view text, bool allow_special, std::vector<Segment>& out) const {
  if (text.empty()) return;
  const size_t first = out.size();
  split_pass(text, 0, text.size(), raw_trie_, allow_special, out);
  if (normalized_trie_.nodes.size() == 1) return;
  // Second pass over the plain-text segments of the first.
  std::vector<Segment> pass1(out.begin() + std::ptrdiff_t(first), out.end());
  out.resize(first);
  for (const Segment& s : pass1) {
    if (s.id >= 0) {
      out.push_back(s);
    } else {
      split_pass(text, s.begin, s.end, normalized_trie_, allow_special, out);
    }
  }
}

}  // namespace nibble
