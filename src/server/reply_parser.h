// A chat reply's text, as it streams, split into what OpenAI's API returns
// apart: reasoning_content, content and tool_calls (DeepSeek-V4's layout,
// docs/text.md):
//
//   [reasoning "</think>"] content ["\n\n" DSML tool-call block]
//
//   <｜DSML｜tool_calls>
//   <｜DSML｜invoke name="NAME">
//   <｜DSML｜parameter name="K" string="true">raw text</｜DSML｜parameter>
//   <｜DSML｜parameter name="K2" string="false">{"json": 1}</｜DSML｜parameter>
//   </｜DSML｜invoke>
//   </｜DSML｜tool_calls>
//
// Text arrives in pieces cut anywhere (token boundaries, UTF-8 holds), so
// any tail that could be the start of "</think>" or of DSML markup is held
// back until the next piece says what it is. Markup never reaches content
// or reasoning: once "｜DSML｜" appears, everything from its "<" on is parsed
// as a tool-call block; a block that does not parse ends the reply's text
// there (it is dropped, with the calls completed before it kept). A call is
// reported whole when its </｜DSML｜invoke> arrives, its arguments a JSON
// object: string="true" values as JSON strings, string="false" values as
// their JSON (or, when that is not valid JSON, as a string).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/reparsed_reply.h"
#include "tokenizer/harmony_reply.h"

namespace nibble::server {

struct ParsedToolCall {
  size_t index = 0;        // 0, 1, ... in the order the model wrote them
  std::string name;
  std::string arguments;   // a JSON object's text
};

// What one push() or finish() released.
struct ReplyDelta {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class ReplyParser {
 public:
  // Where the generated text starts: a thinking prompt ends "<think>" (the
  // text opens with reasoning); a forced tool call's prompt already holds
  // "<｜DSML｜tool_calls>\n" (tool_choice "required") or also
  // "<｜DSML｜invoke name="NAME">\n" (a named tool_choice). Harmony: a
  // gpt-oss reply (tokenizer/harmony_reply.h) instead of DeepSeek's layout;
  // with a forced_name its prompt holds harmony_forced_call_header(NAME).
  // Reparsed: a format with a whole-text parser only (Kimi K2, DeepSeek-V3
  // / R1), given as `whole` (server/reparsed_reply.h).
  enum class Start { Content, Reasoning, InToolCalls, InInvoke, Harmony, Reparsed };
  explicit ReplyParser(Start start = Start::Content, std::string forced_name = "", WholeReplyParse whole = {});

  ReplyDelta push(std::string_view text);
  // The end of generation: held-back text is released; an unfinished
  // tool-call block is dropped.
  ReplyDelta finish();

  size_t tool_calls() const { return calls_; }
  bool broken() const { return reparsed_ ? reparsed_->broken() : state_ == State::Broken; }  // a block did not parse
  // Nothing more can be shown: the tool-call block closed (only the end of
  // the turn may follow) or broke. Generating on is wasted work.
  bool ended() const {
    if (harmony_) return harmony_->ended();
    if (reparsed_) return reparsed_->ended();
    return state_ == State::AfterBlock || state_ == State::Broken;
  }

 private:
  enum class State { Reasoning, Content, BlockOpen, InCalls, InInvoke, AfterBlock, Broken };
  void run(ReplyDelta& out, bool at_end);
  bool step_markup(ReplyDelta& out, bool at_end);  // false: needs more text
  void end_invoke(ReplyDelta& out);

  State state_;
  std::string buf_;                          // text not yet released or parsed
  std::string name_;                         // the open invoke's function
  std::vector<std::pair<std::string, std::string>> args_;  // its (key, JSON value) so far
  size_t calls_ = 0;
  std::unique_ptr<HarmonyReplyParser> harmony_;  // Start::Harmony
  ReplyDelta from_harmony(HarmonyDelta d);
  std::unique_ptr<ReparsedReply> reparsed_;      // Start::Reparsed
  ReplyDelta from_parsed(ParsedCompletion d);
};

}  // namespace nibble::server
