#include "server/text_stream.h"

#include <algorithm>

namespace nibble::server {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD, what the decoder writes for broken UTF-8

bool ends_with(std::string_view s, std::string_view end) {
  return s.size() >= end.size() && s.substr(s.size() - end.size()) == end;
}

}  // namespace

TextStream::TextStream(Decode decode, std::vector<std::string> stop_strings)
    : decode_(std::move(decode)), stops_(std::move(stop_strings)) {}

std::string TextStream::push(int32_t token) {
  tokens_.push_back(token);
  const std::string tail = decode_(std::span<const int32_t>(tokens_).subspan(clean_tokens_));
  text_ = clean_text_ + tail;
  size_t safe = text_.size();
  if (ends_with(tail, kReplacement)) {
    // Possibly a character split across tokens: hold the replacement back.
    // The decode restarts from the clean point, so if the next token
    // completes the character the text is right, and if it never does the
    // replacement is sent at flush().
    safe -= kReplacement.size();
  } else {
    clean_tokens_ = tokens_.size();
    clean_text_ = text_;
  }

  // A stop string may start in text already sent (the part of it still held
  // back); search from the earliest position that could hold a new match.
  size_t longest = 0;
  for (const auto& s : stops_) longest = std::max(longest, s.size());
  const size_t from = sent_.size() >= longest ? sent_.size() - longest + 1 : 0;
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = text_.find(s, from);
    if (at != std::string::npos && at + s.size() <= safe) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    cut = std::max(cut, sent_.size());
    std::string out = text_.substr(sent_.size(), cut - sent_.size());
    sent_ += out;
    return out;
  }
  // Hold back the longest end of the safe text that begins some stop string.
  size_t hold_from = safe;
  for (const auto& s : stops_) {
    for (size_t n = std::min(s.size() - 1, safe); n > 0; --n) {
      if (std::string_view(text_).substr(safe - n, n) == std::string_view(s).substr(0, n)) {
        hold_from = std::min(hold_from, safe - n);
        break;
      }
    }
  }
  safe = hold_from;
  if (safe <= sent_.size()) return "";
  std::string out = text_.substr(sent_.size(), safe - sent_.size());
  sent_ += out;
  return out;
}

std::string TextStream::flush() {
  if (stopped_ || text_.size() <= sent_.size()) return "";
  std::string out = text_.substr(sent_.size());
  sent_ += out;
  return out;
}

}  // namespace nibble::server
