// nibble's tokenizer: a byte-level BPE tokenizer read from a Hugging Face
// tokenizer.json, producing the same ids as the `tokenizers` library, or
// from a tiktoken ranking (Kimi K2's tiktoken.model, tiktoken_model.h),
// producing the same ids as its tokenization_kimi.py with `tiktoken`.
//
//   text --(added tokens cut out, added_tokens.h)--> segments
//        --(pre-tokenizer, pre_tokenizer.h)--------> pieces (raw bytes)
//        --(BPE merges, bpe.h)---------------------> ids
//
// Decoding maps each id back to bytes (a vocabulary string through the GPT-2
// byte map, an added token as its content) and turns the bytes into text
// with U+FFFD for ill-formed UTF-8, like tokenizers' ByteLevel decoder.
// StreamDecoder (stream_decoder.h) does the same one id at a time.
//
// Scope: the normalizer must be absent; the pre-tokenizer must end with
// ByteLevel; the model must be BPE; the decoder must be ByteLevel. The
// post-processor is ignored: encode() never adds BOS/EOS by itself (the
// DeepSeek chat encoder writes BOS into the prompt text). Anything else is
// rejected at load with the file and field named.
//
// A Tokenizer is immutable after loading and safe to share between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"

namespace nibble {

class Tokenizer {
 public:
  // Reads and checks a tokenizer.json; throws nibble::Error naming the file
  // and the field at fault.
  static Tokenizer from_file(const std::string& path);
  // The same from JSON text; `name` stands in for the path in messages.
  static Tokenizer from_json_text(std::string_view json_text, const std::string& name);
  // Kimi K2's tiktoken.model and tokenizer_config.json (tiktoken_model.h).
  static Tokenizer from_tiktoken(const std::string& model_path, const std::string& config_path);

  // The tokenizer file of a model folder: tokenizer.json when there is one,
  // else tiktoken.model (read with the folder's tokenizer_config.json);
  // "" when there is neither.
  static std::string file_in(const std::string& dir);
  // Loads file_in(dir); throws naming the folder when there is none.
  static Tokenizer from_model_dir(const std::string& dir);

  // Ids of `text` (valid UTF-8, else nibble::Error). With allow_special
  // false, special added tokens in the text are encoded as plain text (so
  // user content cannot forge a BOS or role marker); non-special added
  // tokens still match, as in tokenizers' encode_special_tokens mode.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  // Appends to out instead.
  void encode(std::string_view text, bool allow_special, std::vector<int32_t>& out) const;

  // Text of a sequence of ids; ill-formed UTF-8 becomes U+FFFD. With
  // skip_special, special added tokens are left out. Unknown ids throw.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Id of a token given in its tokenizer.json form (an added token's
  // content, or a vocabulary string such as "Ġhello").
  std::optional<int32_t> token_id(std::string_view token) const;
  // The tokenizer.json form of an id; throws for an unknown id.
  const std::string& token_text(int32_t id) const;
  // The bytes an id decodes to; throws for an unknown id.
  const std::string& token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;
  bool has_id(int32_t id) const { return id >= 0 && size_t(id) < entries_.size() && entries_[size_t(id)].present; }

  // One past the largest id (vocabulary and added tokens).
  size_t vocab_size() const { return entries_.size(); }
  const std::string& path() const { return path_; }
  const AddedVocab& added_tokens() const { return added_; }
  const PreTokenizer& pre_tokenizer() const { return pre_tokenizer_; }

 private:
  struct Entry {
    std::string text;   // tokenizer.json form
    std::string bytes;  // what decoding produces
    bool present = false;
    bool special = false;
  };
  const Entry& entry(int32_t id) const;
  // encode() after the Kimi cuts: added tokens, pre-tokenizer, BPE.
  void encode_segments(std::string_view text, bool allow_special, std::vector<int32_t>& out) const;

  std::string path_;
  AddedVocab added_;
  PreTokenizer pre_tokenizer_;
  BpeModel model_;
  std::vector<Entry> entries_;  // [vocab_size]
  bool kimi_cuts_ = false;      // encode cuts the text as Kimi's encode() does first
};

}  // namespace nibble
