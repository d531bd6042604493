// Incremental decoding for generation: feed ids one at a time, get back only
// complete UTF-8 text.
//
// A byte-level token can end in the middle of a character (one CJK
// character or emoji is often two or three tokens). The decoder keeps such
// an incomplete tail (at most 3 bytes) until the next token completes it, so
// every string it returns is valid UTF-8 and the concatenation of all
// push() results plus finish() equals Tokenizer::decode() of the same ids.
// Bytes that can never complete a character become U+FFFD as soon as that
// is certain.
#pragma once

#include <cstdint>
#include <string>

namespace nibble {

class Tokenizer;

class StreamDecoder {
 public:
  // The tokenizer must outlive the decoder.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);

  // Text completed by this id; empty while a character is still partial.
  // Throws nibble::Error for an id outside the vocabulary (state unchanged).
  std::string push(int32_t id);

  // Ends the stream: held-back bytes come out as U+FFFD. The decoder is
  // then empty and can start a new stream.
  std::string finish();

  // Number of bytes held back waiting for the rest of a character.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;  // incomplete UTF-8 tail, < 4 bytes between calls
};

}  // namespace nibble
