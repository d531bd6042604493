#include "server/reparsed_reply.h"

#include "util/error.h"

namespace nibble::server {
namespace {

// Where a possible marker at the end of `s` starts (s.size() when none).
size_t held_from(std::string_view s) {
  const size_t lo = s.size() > ReparsedReply::kMaxMarker ? s.size() - ReparsedReply::kMaxMarker : 0;
  for (size_t i = s.size(); i > lo; --i) {
    const char c = s[i - 1];
    if (c == '>' || c == ']') return s.size();  // the last marker closed
    if (c == '<' || c == '[') return i - 1;
  }
  return s.size();
}

// The part of `now` past the `sent` bytes already released (nothing when a
// parse gave less than before, which a monotone parser does not).
std::string past(const std::string& now, size_t& sent) {
  if (now.size() <= sent) return {};
  std::string d = now.substr(sent);
  sent = now.size();
  return d;
}

}  // namespace

ParsedCompletion ReparsedReply::push(std::string_view text) {
  if (ended()) return {};
  text_ += text;
  return release(held_from(text_));
}

ParsedCompletion ReparsedReply::finish() {
  if (ended()) return {};
  return release(text_.size());
}

ParsedCompletion ReparsedReply::release(size_t upto) {
  ParsedCompletion out;
  ParsedCompletion now;
  bool parsed = false;
  try {
    now = parse_(std::string_view(text_).substr(0, upto));
    parsed = true;
  } catch (const Error&) {
    // The markup broke somewhere in this piece: the text before the last
    // marker start that still parses is released, the rest dropped. Tried
    // once per reply, from the end back (a parse per '<' or '[').
    broken_ = true;
    for (size_t i = upto; i-- > 0 && !parsed;) {
      if (text_[i] != '<' && text_[i] != '[') continue;
      try {
        now = parse_(std::string_view(text_).substr(0, i));
        parsed = true;
      } catch (const Error&) {
      }
    }
    if (!parsed) return out;
  }
  out.reasoning_content = past(now.reasoning_content, reasoning_sent_);
  out.content = past(now.content, content_sent_);
  for (size_t i = calls_sent_; i < now.tool_calls.size(); ++i) out.tool_calls.push_back(std::move(now.tool_calls[i]));
  calls_sent_ = std::max(calls_sent_, now.tool_calls.size());
  finished_ = now.finished && !broken_;
  out.finished = finished_;
  return out;
}

}  // namespace nibble::server
