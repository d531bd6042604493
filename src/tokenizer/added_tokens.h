// Added tokens: the strings a tokenizer matches verbatim before any
// pre-tokenization (BOS/EOS, chat role markers, <think>, ...).
//
// Input text is cut at added tokens first, exactly as Hugging Face's
// AddedVocabulary does: tokens with normalized=false are found in the whole
// text, then tokens with normalized=true in the gaps between (there is no
// normalizer here, so both passes see the same text). Each pass takes the
// leftmost match, longest on ties, and resumes after it. A special token is
// skipped when specials are not allowed (tokenizers' encode_special_tokens),
// and the text it covers is then plain text. single_word, lstrip and rstrip
// follow the same rules as Hugging Face (Unicode \w and White_Space).
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

class BpeModel;
class Regex;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // skipped by decode(skip_special); not matched when specials are off
  bool single_word = false;  // only matches with no word character on either side
  bool lstrip = false;       // absorbs the whitespace before it
  bool rstrip = false;       // absorbs the whitespace after it
  bool normalized = true;    // matched in the second pass
};

// A cut of the input text: an added token (id >= 0) or plain text (id < 0)
// covering bytes [begin, end).
struct Segment {
  size_t begin;
  size_t end;
  int32_t id;
};

class AddedVocab {
 public:
  // `j` is tokenizer.json's "added_tokens" array (null means none).
  //
  // Ids are assigned the way tokenizers does when it loads a file, not read
  // from the "id" fields: a token whose content is in the model vocabulary
  // takes that id; any other takes the model's entry count for the first
  // such token and one more than the largest added id after that. For a
  // consistent file (DeepSeek's, anything tokenizers saved) this is the
  // file's own numbering. A repeated content keeps its first id and takes
  // the later flags.
  static AddedVocab from_json(const nlohmann::json& j, const std::string& where, const BpeModel& model);
  // Tokens with their ids already assigned (a tiktoken model's specials);
  // contents and ids must be unique and non-empty.
  static AddedVocab from_tokens(std::vector<AddedToken> tokens, const std::string& where);

  AddedVocab();
  ~AddedVocab();
  AddedVocab(AddedVocab&&) noexcept;
  AddedVocab& operator=(AddedVocab&&) noexcept;

  // Cuts `text` (valid UTF-8) into segments, appended to out in order. They
  // cover the text without gaps except where lstrip/rstrip absorbed spaces
  // (those spaces belong to the token's segment).
  void split(std::string_view text, bool allow_special, std::vector<Segment>& out) const;

  const AddedToken* by_id(int32_t id) const;
  std::optional<int32_t> id_of(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  int32_t max_id() const { return max_id_; }

 private:
  // A byte trie over token contents; one per matching pass.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
      int32_t token = -1;                                 // index into tokens_ ending here
    };
    std::vector<Node> nodes{Node{}};
    std::array<bool, 256> first_byte{};  // bytes some token starts with
    void insert(std::string_view s, int32_t token);
    // Longest token starting at text[pos], as (token index, length); -1 if none.
    std::pair<int32_t, size_t> longest_at(std::string_view text, size_t pos) const;
  };

  void build_tries();
  void split_pass(std::string_view text, size_t begin, size_t end, const Trie& trie, bool allow_special,
                  std::vector<Segment>& out) const;
  bool is_word_char_before(std::string_view text, size_t begin, size_t pos) const;
  bool is_word_char_at(std::string_view text, size_t pos, size_t end) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string, int32_t> by_content_;  // content -> index into tokens_
  std::unordered_map<int32_t, int32_t> by_id_;           // id -> index into tokens_
  Trie raw_trie_;                                        // normalized = false
  Trie normalized_trie_;                                 // normalized = true
  std::unique_ptr<Regex> word_char_;                     // one Unicode \w character
  int32_t max_id_ = -1;
};

}  // namespace nibble
