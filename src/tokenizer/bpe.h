// The BPE model of a byte-level tokenizer.json: vocabulary and merge ranks,
// and the merge loop that turns one pre-token into ids.
//
// Tokens are handled as raw bytes: each vocabulary string is mapped back
// through the GPT-2 byte map (byte_level.h) at load, so encoding never builds
// the "Ġhello" form. A pre-token starts as one symbol per byte; the adjacent
// pair with the lowest merge rank (leftmost on ties) is merged until no pair
// has a rank. That is Hugging Face's order exactly: its priority queue pops
// (rank, position) minima, which is what both paths below compute.
//
// Thread safety: encode_word() is const and may run on many threads; the
// word cache it fills is guarded by a mutex.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace nibble {

class BpeModel {
 public:
  // `j` is tokenizer.json's "model"; `where` names the file for errors.
  // Throws nibble::Error for a non-BPE model (WordPiece, Unigram, ...),
  // options nibble does not implement (subword prefixes, byte fallback,
  // dropout), malformed vocab or merges, a merge whose parts or result are
  // not in the vocabulary, or a vocabulary missing one of the 256 byte tokens.
  static BpeModel from_json(const nlohmann::json& j, const std::string& where);

  // A tiktoken ranking: tokens[r] holds the bytes of rank (= id) r. tiktoken
  // merges the adjacent pair whose concatenation has the lowest rank, and
  // emits a piece that is a token whole; that is this BPE with one merge
  // (a, b) -> a+b, ranked by a+b, for every split of a token into two
  // tokens, and ignore_merges (transformers' TikTokenConverter builds the
  // same). Vocabulary strings are the GPT-2 byte-map form. Throws (naming
  // `where`) for an empty or repeated token or a missing byte token.
  static BpeModel from_ranks(const std::vector<std::string>& tokens, const std::string& where);

  BpeModel();
  ~BpeModel();
  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;

  // Appends the ids of one pre-token (raw bytes, non-empty) to out.
  void encode_word(std::string_view bytes, std::vector<int32_t>& out) const;

  // Number of vocabulary entries (tokenizers' get_vocab_size() of the model).
  size_t vocab_count() const { return token_to_id_.size(); }
  // One past the largest vocabulary id.
  size_t id_limit() const { return id_to_token_.size(); }
  // Whether id names a vocabulary entry (ids may have gaps).
  bool has_id(int32_t id) const { return id >= 0 && size_t(id) < id_to_token_.size() && has_id_[size_t(id)]; }
  // The vocabulary string of id ("Ġhello"); id must satisfy has_id().
  const std::string& token(int32_t id) const { return id_to_token_[size_t(id)]; }
  std::optional<int32_t> id_of(std::string_view token) const;

  size_t cache_size() const;

 private:
  // Merges the byte symbols of one word; ids in, ids out (in place).
  void merge_small(std::vector<int32_t>& ids) const;
  void merge_large(std::vector<int32_t>& ids) const;
  // Rank and result of merging the pair (a, b), or nullptr.
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  const Merge* find_merge(int32_t a, int32_t b) const {
    const auto it = merges_.find((uint64_t(uint32_t(a)) << 32) | uint32_t(b));
    return it == merges_.end() ? nullptr : &it->second;
  }

  std::vector<std::string> id_to_token_;                  // [id_limit] vocabulary strings
  std::vector<uint8_t> has_id_;                           // [id_limit] 1 where an entry exists
  std::unordered_map<std::string, int32_t> token_to_id_;  // vocabulary string -> id
  std::unordered_map<std::string, int32_t> bytes_to_id_;  // raw bytes -> id (byte-mappable entries)
  std::array<int32_t, 256> byte_id_{};                    // single byte -> id
  std::unordered_map<uint64_t, Merge> merges_;            // (a << 32 | b) -> rank, result
  bool ignore_merges_ = false;  // a word that is itself a token skips merging

  struct Cache;
  std::unique_ptr<Cache> cache_;
};

}  // namespace nibble
