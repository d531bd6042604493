// A request's generated tokens turned into text that is safe to send: the
// text is only ever appended to (what was sent is never taken back), so
//  - a token that ends inside a UTF-8 character (the decoder shows it as
//    U+FFFD) is held back until the character completes;
//  - text that could be the start of a stop string is held back until it
//    is known not to be one; a matched stop string ends the text before it.
// Decoding is incremental: tokens are decoded again only from the last point
// where the text ended cleanly, so a long reply costs O(length), not O(n^2).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace nibble::server {

class TextStream {
 public:
  using Decode = std::function<std::string(std::span<const int32_t>)>;
  TextStream(Decode decode, std::vector<std::string> stop_strings);

  // Adds one generated token; returns the text now safe to send (often "").
  // After a stop string matched, stopped() is true and push must not be called.
  std::string push(int32_t token);
  // The end of generation: everything held back that was not a stop string.
  std::string flush();

  bool stopped() const { return stopped_; }
  const std::string& sent() const { return sent_; }  // all text returned so far

 private:
  Decode decode_;
  std::vector<std::string> stops_;
  std::vector<int32_t> tokens_;
  size_t clean_tokens_ = 0;  // tokens_[0, clean_tokens_) decode to clean_text_
  std::string clean_text_;
  std::string text_;         // the decoded text of every token
  std::string sent_;         // a prefix of text_
  bool stopped_ = false;
};

}  // namespace nibble::server
