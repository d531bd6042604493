// The pre-tokenizer of a byte-level tokenizer.json: it cuts text into the
// pieces ("pre-tokens") that BPE then merges independently.
//
// Supported (the forms byte-level BPE tokenizers use):
//   Sequence   - steps applied in order, each to every piece of the last
//   Split      - {"Regex": ..} or {"String": ..} pattern, any behavior
//                (Removed, Isolated, MergedWithPrevious, MergedWithNext,
//                Contiguous), optional invert
//   Digits     - Unicode numbers (\p{N}) isolated, one by one or in runs
//   ByteLevel  - must be the last step: optional prefix space, optional
//                GPT-2 regex split; its byte->char mapping is implicit
//                because nibble's BPE works on raw bytes
// Anything else is rejected at load with the file and field named.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace nibble {

// The pieces of one text. Views point into the input text, or into `owned`
// when a step had to build a new string (ByteLevel's prefix space).
struct PreTokens {
  std::vector<std::string_view> pieces;
  std::deque<std::string> owned;
  void clear() {
    pieces.clear();
    owned.clear();
  }
};

class PreTokenizer {
 public:
  // `j` is the "pre_tokenizer" value of tokenizer.json; `where` names the
  // file and field ("tokenizer.json 'x': pre_tokenizer") for errors. Throws
  // nibble::Error when a step is unsupported or malformed, or when there is
  // no final ByteLevel step (only byte-level BPE is supported).
  static PreTokenizer from_json(const nlohmann::json& j, const std::string& where);

  // tiktoken's split: the matches of `pattern` (Rust regex syntax, class
  // intersections included) are the pieces and the text between matches is
  // dropped, as tiktoken's find_iter does. No byte mapping, no prefix space.
  static PreTokenizer tiktoken(std::string_view pattern, const std::string& where);

  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Splits `text` (valid UTF-8) into non-empty pieces, appended to out. The
  // pieces are raw bytes: what BPE sees, prefix space included.
  void split(std::string_view text, PreTokens& out) const;

  // Convenience for tests and tools: the pieces as strings.
  std::vector<std::string> split(std::string_view text) const;

 private:
  struct Step;
  std::vector<Step> steps_;
  bool add_prefix_space_ = false;  // from the final ByteLevel step
};

}  // namespace nibble
