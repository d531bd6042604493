#include "tokenizer/bpe.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <mutex>
#include <queue>

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace nibble {
namespace {

using nlohmann::json;

// Words up to this many bytes merge by rescanning all pairs (cheap for the
// short pieces that make up nearly all text); longer ones use a heap.
constexpr size_t kSmallWord = 48;
// The word cache keeps pieces up to this length, up to this many of them.
constexpr size_t kCacheMaxWordBytes = 256;
constexpr size_t kCacheMaxEntries = 1 << 17;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// A printable form of a byte string for error messages ("Ċ" style is what
// the user sees in the file, so show that).
std::string shown(std::string_view s) { return "'" + std::string(s) + "'"; }

}  // namespace

struct BpeModel::Cache {
  std::mutex mu;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> words;
};

BpeModel::BpeModel() : cache_(std::make_unique<Cache>()) {}
BpeModel::~BpeModel() = default;
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;

BpeModel BpeModel::from_json(const json& j, const std::string& where) {
  const std::string at = where + ": model";
  if (!j.is_object()) fail(at, ": missing or not an object");
  std::string type;
  if (const auto it = j.find("type"); it != j.end() && it->is_string()) {
    type = it->get<std::string>();
  } else if (j.contains("merges")) {
    type = "BPE";  // files from old tokenizers versions omit the tag
  }
  if (type != "BPE") {
    fail(at, ".type: unsupported model type '", type.empty() ? "(none)" : type,
         "'; nibble implements byte-level BPE only");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = j.find(key);
    if (it != j.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty())) {
      fail(at, ".", key, ": not supported by byte-level BPE (must be null)");
    }
  }
  if (const auto it = j.find("byte_fallback"); it != j.end() && it->is_boolean() && it->get<bool>()) {
    fail(at, ".byte_fallback: true is not supported (byte-level BPE needs no fallback)");
  }
  if (const auto it = j.find("dropout"); it != j.end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() != 0.0) fail(at, ".dropout: BPE dropout is not supported at inference");
  }

  BpeModel m;
  if (const auto it = j.find("ignore_merges"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) fail(at, ".ignore_merges: expected true or false");
    m.ignore_merges_ = it->get<bool>();
  }

  // Vocabulary.
  const auto vocab = j.find("vocab");
  if (vocab == j.end() || !vocab->is_object()) fail(at, ".vocab: missing or not an object");
  const ByteLevelMap& bytemap = ByteLevelMap::get();
  int64_t max_id = -1;
  for (const auto& [token, value] : vocab->items()) {
    if (!value.is_number_integer()) fail(at, ".vocab[", shown(token), "]: id is not an integer");
    const int64_t id = value.get<int64_t>();
    if (id < 0 || id >= (int64_t(1) << 30)) fail(at, ".vocab[", shown(token), "]: id ", id, " out of range");
    max_id = std::max(max_id, id);
  }
  m.id_to_token_.resize(size_t(max_id + 1));
  m.has_id_.assign(size_t(max_id + 1), 0);
  m.token_to_id_.reserve(vocab->size());
  m.bytes_to_id_.reserve(vocab->size());
  std::string bytes;
  for (const auto& [token, value] : vocab->items()) {
    const auto id = static_cast<int32_t>(value.get<int64_t>());
    if (m.has_id_[size_t(id)]) {
      fail(at, ".vocab: id ", id, " is used by both ", shown(m.id_to_token_[size_t(id)]), " and ", shown(token));
    }
    if (token.empty()) fail(at, ".vocab: empty token string for id ", id);
    m.has_id_[size_t(id)] = 1;
    m.id_to_token_[size_t(id)] = token;
    m.token_to_id_.emplace(token, id);
    // Entries whose characters are not all byte stand-ins (a model's own
    // "<｜begin▁of▁sentence｜>" at id 0, say) can never come out of merges.
    if (bytemap.to_bytes(token, bytes)) m.bytes_to_id_.emplace(bytes, id);
  }

  // Every byte that can occur in valid UTF-8 must have a token, or some
  // input could not be encoded at all. (C0, C1 and F5..FF never occur.)
  m.byte_id_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    const auto it = m.bytes_to_id_.find(std::string(1, static_cast<char>(b)));
    if (it != m.bytes_to_id_.end()) {
      m.byte_id_[size_t(b)] = it->second;
    } else if (!(b == 0xC0 || b == 0xC1 || b >= 0xF5)) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      fail(at, ".vocab: no token for byte ", hex, " (", shown(bytemap.char_of(uint8_t(b))),
           "); a byte-level vocabulary needs all 256 byte tokens");
    }
  }

  // Merges: "a b" strings (older files) or ["a", "b"] pairs (newer). The
  // rank is the position in the list; a repeated pair keeps its last rank,
  // as in Hugging Face's map.
  const auto merges = j.find("merges");
  if (merges == j.end() || !merges->is_array()) fail(at, ".merges: missing or not an array");
  m.merges_.reserve(merges->size());
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const json& e = (*merges)[rank];
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        fail(at, ".merges[", rank, "]: ", shown(s), " is not two tokens separated by one space");
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      fail(at, ".merges[", rank, "]: expected \"a b\" or [\"a\", \"b\"]");
    }
    const auto ia = m.token_to_id_.find(a), ib = m.token_to_id_.find(b), ir = m.token_to_id_.find(a + b);
    if (ia == m.token_to_id_.end()) fail(at, ".merges[", rank, "]: ", shown(a), " is not in model.vocab");
    if (ib == m.token_to_id_.end()) fail(at, ".merges[", rank, "]: ", shown(b), " is not in model.vocab");
    if (ir == m.token_to_id_.end()) fail(at, ".merges[", rank, "]: merged ", shown(a + b), " is not in model.vocab");
    const uint64_t key = (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second);
    m.merges_[key] = Merge{static_cast<int32_t>(rank), ir->second};
  }
  return m;
}

BpeModel BpeModel::from_ranks(const std::vector<std::string>& tokens, const std::string& where) {
  BpeModel m;
  m.ignore_merges_ = true;
  const ByteLevelMap& bytemap = ByteLevelMap::get();
  const size_t n = tokens.size();
  m.id_to_token_.resize(n);
  m.has_id_.assign(n, 1);
  m.token_to_id_.reserve(n);
  m.bytes_to_id_.reserve(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& t = tokens[id];
    if (t.empty()) fail(where, ": rank ", id, " is an empty token");
    const auto [it, fresh] = m.bytes_to_id_.emplace(t, int32_t(id));
    if (!fresh) fail(where, ": ranks ", it->second, " and ", id, " are the same token ", shown(bytemap.to_chars(t)));
    m.id_to_token_[id] = bytemap.to_chars(t);
    m.token_to_id_.emplace(m.id_to_token_[id], int32_t(id));
  }
  m.byte_id_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    const auto it = m.bytes_to_id_.find(std::string(1, static_cast<char>(b)));
    if (it != m.bytes_to_id_.end()) {
      m.byte_id_[size_t(b)] = it->second;
    } else if (!(b == 0xC0 || b == 0xC1 || b >= 0xF5)) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      fail(where, ": no token for the byte ", hex, "; tiktoken needs every byte as a token");
    }
  }
  // Every split of every token into two tokens; the pair can only ever
  // make that one token, so no merge is written twice.
  std::string left;
  for (size_t id = 0; id < n; ++id) {
    const std::string& t = tokens[id];
    for (size_t k = 1; k < t.size(); ++k) {
      left.assign(t, 0, k);
      const auto a = m.bytes_to_id_.find(left);
      if (a == m.bytes_to_id_.end()) continue;
      const auto b = m.bytes_to_id_.find(t.substr(k));
      if (b == m.bytes_to_id_.end()) continue;
      const uint64_t key = (uint64_t(uint32_t(a->second)) << 32) | uint32_t(b->second);
      m.merges_[key] = Merge{int32_t(id), int32_t(id)};
    }
  }
  return m;
}

std::optional<int32_t> BpeModel::id_of(std::string_view token) const {
  const auto it = token_to_id_.find(std::string(token));
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

size_t BpeModel::cache_size() const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  return cache_->words.size();
}

void BpeModel::merge_small(std::vector<int32_t>& ids) const {
  // Rescan every adjacent pair for the lowest rank; O(n^2) but n is small
  // and there is no allocation.
  while (ids.size() > 1) {
    int32_t best_rank = INT32_MAX, best_result = -1;
    size_t best_pos = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const Merge* mg = find_merge(ids[i], ids[i + 1]);
      if (mg && mg->rank < best_rank) {
        best_rank = mg->rank;
        best_result = mg->result;
        best_pos = i;
      }
    }
    if (best_result < 0) break;
    ids[best_pos] = best_result;
    ids.erase(ids.begin() + std::ptrdiff_t(best_pos) + 1);
  }
}

void BpeModel::merge_large(std::vector<int32_t>& ids) const {
  // Symbols in a doubly linked list; a min-heap of candidate merges keyed by
  // (rank, position of the left symbol). Entries go stale when a neighbour
  // merges; they are recognised on pop because the pair at that position no
  // longer produces the same token.
  const auto n = static_cast<int32_t>(ids.size());
  std::vector<int32_t> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  std::vector<uint8_t> alive(static_cast<size_t>(n), 1);
  for (int32_t i = 0; i < n; ++i) {
    prev[size_t(i)] = i - 1;
    next[size_t(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank, pos, result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push_pair = [&](int32_t pos) {
    if (pos < 0) return;
    const int32_t nx = next[size_t(pos)];
    if (nx < 0) return;
    if (const Merge* mg = find_merge(ids[size_t(pos)], ids[size_t(nx)])) heap.push({mg->rank, pos, mg->result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (!alive[size_t(c.pos)]) continue;
    const int32_t nx = next[size_t(c.pos)];
    if (nx < 0) continue;
    const Merge* mg = find_merge(ids[size_t(c.pos)], ids[size_t(nx)]);
    if (!mg || mg->result != c.result) continue;  // stale
    ids[size_t(c.pos)] = c.result;
    alive[size_t(nx)] = 0;
    next[size_t(c.pos)] = next[size_t(nx)];
    if (next[size_t(nx)] >= 0) prev[size_t(next[size_t(nx)])] = c.pos;
    push_pair(prev[size_t(c.pos)]);
    push_pair(c.pos);
  }
  size_t w = 0;
  for (int32_t i = 0; i >= 0 && i < n; i = next[size_t(i)]) ids[w++] = ids[size_t(i)];
  ids.resize(w);
}

void BpeModel::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.size() == 1) {
    out.push_back(byte_id_[static_cast<uint8_t>(bytes[0])]);
    return;
  }
  if (ignore_merges_) {
    if (const auto it = bytes_to_id_.find(std::string(bytes)); it != bytes_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = bytes.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mu);
    const auto it = cache_->words.find(bytes);
    if (it != cache_->words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) ids[i] = byte_id_[static_cast<uint8_t>(bytes[i])];
  if (ids.size() <= kSmallWord) {
    merge_small(ids);
  } else {
    merge_large(ids);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mu);
    if (cache_->words.size() < kCacheMaxEntries) cache_->words.emplace(std::string(bytes), std::move(ids));
  }
}

}  // namespace nibble
