// A harmony reply (gpt-oss, chat_harmony.h), as it streams, split into
// reasoning, content and tool calls. The text is what the model writes
// after the generation prompt "<|start|>assistant": one or more messages,
//
//   <|channel|>analysis<|message|>thinking<|end|>
//   <|start|>assistant<|channel|>final<|message|>answer<|return|>
//   <|start|>assistant to=functions.f<|channel|>commentary <|constrain|>json<|message|>{"a": 1}<|call|>
//
// (the first header has no role: the prompt wrote it). The analysis channel
// is reasoning; final, a commentary message without a recipient (a preamble
// to tool calls) and a message without a channel are content; a message to
// functions.NAME is a tool call, reported whole when its <|call|> (or
// <|end|>, or the end of the text) arrives. <|return|> and <|call|> end the
// reply. Text arrives in pieces cut anywhere, so a tail that could be the
// start of a marker is held back until the next piece says what it is;
// markers never reach reasoning or content.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_message.h"

namespace nibble {

struct HarmonyDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;  // id empty: the caller numbers them
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class HarmonyReplyParser {
 public:
  HarmonyDelta push(std::string_view text);
  // The end of generation: held-back text is released; an open tool call is
  // reported when its arguments are complete JSON, else dropped.
  HarmonyDelta finish();

  // <|return|> or <|call|> arrived: nothing more belongs to this reply.
  bool ended() const { return state_ == State::Ended; }
  bool finished_with_return() const { return returned_; }

 private:
  enum class State { Header, Body, BetweenMessages, Ended };
  enum class Sink { Reasoning, Content, ToolCall };
  void run(HarmonyDelta& out, bool at_end);
  void open_body(const std::string& header);
  void close_body(HarmonyDelta& out, bool complete);
  void emit(HarmonyDelta& out, std::string_view text);

  State state_ = State::Header;
  Sink sink_ = Sink::Content;
  std::string buf_;       // text not yet released or parsed
  std::string header_;    // the open message's header so far
  std::string call_name_; // Sink::ToolCall: the function
  std::string call_args_; // and its arguments so far
  bool returned_ = false;
};

// A whole reply (the generated text, its stop token kept or not) as an
// assistant message's parts.
ParsedCompletion parse_harmony_completion(std::string_view text);

}  // namespace nibble
