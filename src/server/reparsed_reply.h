// A streaming reply splitter for chat formats that have only a whole-text
// parser (ChatFormat::parse with a cut-off reply accepted): Kimi K2's and
// DeepSeek-V3 / R1's. Each piece is appended and the text so far parsed
// again; what the parse adds to reasoning and content since the last piece
// is released, and tool calls as each completes.
//
// That is correct because those parsers are monotone on prefixes: a longer
// prefix's reasoning and content extend the shorter's, and its complete
// calls include the shorter's, provided the prefix does not end inside a
// marker (a marker's first bytes would be read as content). So a tail that
// could still become a marker (from its last '<' or '[' with no closing
// '>' or ']' after it, at most kMaxMarker bytes) waits for the next piece.
// The formats' markers are special tokens, which arrive whole anyway; the
// wait matters for a model that spells one out in pieces.
//
// Parsing the whole text again per piece costs O(reply length) per token:
// a 4,000-token reply is ~16 MB of scanning over its life, small next to a
// forward step. A parse that throws (malformed markup) ends the reply's
// text at the last marker before the fault that still parses, as a broken
// DSML block does in reply_parser.h.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "tokenizer/chat_message.h"

namespace nibble::server {

// The format's parse of a reply's text so far (finished false while cut off).
using WholeReplyParse = std::function<ParsedCompletion(std::string_view text)>;

class ReparsedReply {
 public:
  explicit ReparsedReply(WholeReplyParse parse) : parse_(std::move(parse)) {}

  // What `text` adds: reasoning and content deltas, calls completed since.
  ParsedCompletion push(std::string_view text);
  // The end of generation: nothing is held back any more.
  ParsedCompletion finish();

  // The format's end-of-reply marker was seen, or the markup broke.
  bool ended() const { return finished_ || broken_; }
  bool broken() const { return broken_; }

  static constexpr size_t kMaxMarker = 48;  // bytes; the longest marker is ~30 (<｜tool▁outputs▁begin｜>)

 private:
  ParsedCompletion release(size_t upto);

  WholeReplyParse parse_;
  std::string text_;         // the whole reply so far
  size_t reasoning_sent_ = 0, content_sent_ = 0, calls_sent_ = 0;
  bool finished_ = false, broken_ = false;
};

}  // namespace nibble::server
