// One choice of a completion response, built from its job's updates in
// OpenAI's shapes: streamed as chunk choices (role first, then deltas of
// reasoning_content / content / tool_calls, then the finish), or whole as
// the choice of a non-streamed response. Chat replies go through a
// ReplyParser (reasoning, content and DSML tool calls apart); completions
// are plain text.
//
// finish_reason: "tool_calls" when the reply made calls and tool_choice was
// auto or required; "stop" for a named tool_choice (as OpenAI reports it);
// otherwise the job's own ("stop" / "length"). With tool_choice "none" the
// tools were not offered and any calls the model writes anyway are dropped
// (never shown as content); with parallel_tool_calls false only the first
// call is kept.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/reply_parser.h"
#include "server/request.h"
#include "server/scheduler.h"

namespace nibble::server {

struct ChoiceOptions {
  bool chat = true;
  bool thinking = false;                    // the reply opens with reasoning
  ReplyParser::Start start = ReplyParser::Start::Content;
  std::string forced_name;                  // ReplyParser::Start::InInvoke
  WholeReplyParse whole;                    // ReplyParser::Start::Reparsed: the chat format's parser
  std::vector<int32_t> stop_tokens;         // the chat format's end-of-reply ids (Kimi's <|im_end|>)
  ToolChoice tool_choice = ToolChoice::Auto;
  bool parallel_tool_calls = true;
  bool logprobs = false;                    // render the updates' log-probabilities
  std::string call_id_prefix = "call_";     // tool_call ids are this + the call's index
};

// The text of one token id (for log-probabilities), or its raw bytes.
using TokenText = std::function<std::string(int32_t)>;

class ChoiceBuilder {
 public:
  // `token_bytes`: a token's raw bytes for the logprobs' `bytes` (a token
  // ending inside a UTF-8 character has bytes its text cannot show); empty:
  // the bytes of its text.
  ChoiceBuilder(size_t index, ChoiceOptions options, TokenText token_text, TokenText token_bytes = {});

  // Streaming: the chunk choices ({"index", "delta" | "text", "logprobs",
  // "finish_reason"}) this update produces; the finish chunk when u.done
  // (unless the job failed: finish_reason() then says "cancelled" / "error").
  std::vector<nlohmann::json> stream(const JobUpdate& u);
  // Non-streamed: take every update, then whole() once done.
  void add(const JobUpdate& u);
  nlohmann::json whole() const;

  const std::string& finish_reason() const { return finish_; }
  bool done() const { return done_; }
  // The reply can show nothing more (its tool-call block closed or broke):
  // the job may be stopped (Job::stop) instead of generating on.
  bool wants_stop() const { return opt_.chat && !done_ && parser_.ended(); }

 private:
  struct Piece {
    ReplyDelta reply;              // chat
    std::string text;              // completions
    nlohmann::json logprobs;       // null, or this update's entries
  };
  Piece absorb(const JobUpdate& u);
  nlohmann::json logprob_entries(const std::vector<TokenLogprob>& lps);
  nlohmann::json tool_call_json(const ParsedToolCall& c) const;
  void keep_calls(std::vector<ParsedToolCall>& calls) const;

  size_t index_;
  ChoiceOptions opt_;
  TokenText token_text_, token_bytes_;
  ReplyParser parser_;
  bool role_sent_ = false, done_ = false;
  std::string finish_;
  size_t calls_ = 0;                       // tool calls reported
  int64_t text_offset_ = 0;                // completions logprobs: where the next token's text starts
  // Non-streamed accumulation.
  std::string reasoning_, content_;
  std::vector<ParsedToolCall> tool_calls_;
  nlohmann::json all_logprobs_;            // chat: array of entries; completions: the four arrays
};

}  // namespace nibble::server
