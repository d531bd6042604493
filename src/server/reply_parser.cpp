// The reply splitter: a small state machine over a buffer that only ever
// holds what is not decided yet (a possible marker's start, or the open
// piece of a tool-call block).
#include "server/reply_parser.h"

#include <nlohmann/json.hpp>

#include "tokenizer/chat_harmony.h"

#include "tokenizer/dsv4_markup.h"
#include "util/error.h"

namespace nibble::server {
namespace {

using nlohmann::json;

using dsv4::kCallsClose;
using dsv4::kCallsOpen;
using dsv4::kDsml;
using dsv4::kInvokeClose;
using dsv4::kInvokeOpen;
using dsv4::kParamClose;
using dsv4::kParamOpen;
using dsv4::kStringFlag;
using dsv4::kThinkEnd;
// A tag's header (a name, a flag) longer than this is not DSML the model
// meant; waiting for its end would hold the reply forever.
constexpr size_t kMaxHeader = 512;

// The longest tail of `s` that is a proper prefix of one of `markers`: text
// that must wait for the next piece.
size_t held_tail(std::string_view s, std::initializer_list<std::string_view> markers) {
  size_t best = 0;
  for (std::string_view m : markers) {
    for (size_t n = std::min(s.size(), m.size() - 1); n > best; --n) {
      if (s.substr(s.size() - n) == m.substr(0, n)) {
        best = n;
        break;
      }
    }
  }
  return best;
}

// Where markup starting at the DSML token at `p` begins: its "<" or "</".
size_t markup_start(std::string_view s, size_t p) {
  if (p >= 2 && s.substr(p - 2, 2) == "</") return p - 2;
  if (p >= 1 && s[p - 1] == '<') return p - 1;
  return p;
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// s starts with `tag` (1), could still become it (0), or cannot (-1).
int match(std::string_view s, std::string_view tag) {
  if (s.starts_with(tag)) return 1;
  return tag.starts_with(s) ? 0 : -1;
}

}  // namespace

ReplyParser::ReplyParser(Start start, std::string forced_name, WholeReplyParse whole) {
  switch (start) {
    case Start::Content: state_ = State::Content; break;
    case Start::Reasoning: state_ = State::Reasoning; break;
    case Start::InToolCalls: state_ = State::InCalls; break;
    case Start::InInvoke:
      state_ = State::InInvoke;
      name_ = std::move(forced_name);
      break;
    case Start::Harmony:
      state_ = State::Content;
      harmony_ = std::make_unique<HarmonyReplyParser>(forced_name.empty() ? std::string()
                                                                          : harmony_forced_call_header(forced_name));
      break;
    case Start::Reparsed:
      if (!whole) throw Error("ReplyParser: Start::Reparsed needs the format's parser");
      state_ = State::Content;
      reparsed_ = std::make_unique<ReparsedReply>(std::move(whole));
      break;
  }
}

ReplyDelta ReplyParser::from_harmony(HarmonyDelta d) {
  ReplyDelta out;
  out.reasoning = std::move(d.reasoning);
  out.content = std::move(d.content);
  for (ToolCall& c : d.tool_calls) out.tool_calls.push_back({calls_++, std::move(c.name), std::move(c.arguments)});
  return out;
}

ReplyDelta ReplyParser::from_parsed(ParsedCompletion d) {
  ReplyDelta out;
  out.reasoning = std::move(d.reasoning_content);
  out.content = std::move(d.content);
  for (ToolCall& c : d.tool_calls) out.tool_calls.push_back({calls_++, std::move(c.name), std::move(c.arguments)});
  return out;
}

ReplyDelta ReplyParser::push(std::string_view text) {
  if (harmony_) return from_harmony(harmony_->push(text));
  if (reparsed_) return from_parsed(reparsed_->push(text));
  ReplyDelta out;
  buf_ += text;
  run(out, false);
  return out;
}

ReplyDelta ReplyParser::finish() {
  if (harmony_) return from_harmony(harmony_->finish());
  if (reparsed_) return from_parsed(reparsed_->finish());
  ReplyDelta out;
  run(out, true);
  buf_.clear();  // an unfinished block (or text after one) is dropped
  return out;
}

void ReplyParser::run(ReplyDelta& out, bool at_end) {
  for (;;) {
    if (state_ == State::Reasoning) {
      const size_t end = buf_.find(kThinkEnd), dsml = buf_.find(kDsml);
      if (end != std::string::npos && (dsml == std::string::npos || end < dsml)) {
        out.reasoning += buf_.substr(0, end);
        buf_.erase(0, end + kThinkEnd.size());
        state_ = State::Content;
        continue;
      }
      if (dsml != std::string::npos) {
        // Calls without a "</think>" first: the reasoning ends at the markup.
        const size_t at = markup_start(buf_, dsml);
        out.reasoning += buf_.substr(0, at);
        buf_.erase(0, at);
        state_ = State::BlockOpen;
        continue;
      }
      const size_t keep = at_end ? 0 : held_tail(buf_, {kThinkEnd, "<｜DSML｜", "</｜DSML｜", kDsml});
      out.reasoning += buf_.substr(0, buf_.size() - keep);
      buf_.erase(0, buf_.size() - keep);
      return;
    }
    if (state_ == State::Content) {
      const size_t dsml = buf_.find(kDsml);
      if (dsml != std::string::npos) {
        const size_t at = markup_start(buf_, dsml);
        std::string before = buf_.substr(0, at);
        // DeepSeek writes "\n\n" between content and the block: part of the markup.
        if (std::string_view(before).ends_with("\n\n")) before.resize(before.size() - 2);
        out.content += before;
        buf_.erase(0, at);
        state_ = State::BlockOpen;
        continue;
      }
      const size_t keep =
          at_end ? 0 : held_tail(buf_, {"\n\n<｜DSML｜", "\n\n</｜DSML｜", "<｜DSML｜", "</｜DSML｜", kDsml});
      out.content += buf_.substr(0, buf_.size() - keep);
      buf_.erase(0, buf_.size() - keep);
      return;
    }
    if (state_ == State::AfterBlock || state_ == State::Broken) {
      // DeepSeek's format allows only the end of the turn after the block;
      // whatever else follows (or follows a broken block) is not content.
      buf_.clear();
      return;
    }
    if (!step_markup(out, at_end)) return;
  }
}

// One element of a tool-call block; false when the buffer ends inside it.
bool ReplyParser::step_markup(ReplyDelta& out, bool at_end) {
  size_t ws = 0;
  while (ws < buf_.size() && is_space(buf_[ws])) ++ws;
  buf_.erase(0, ws);
  const std::string_view b = buf_;
  auto need_more = [&] {
    if (at_end) state_ = State::Broken;  // the text ended inside the block
    return at_end;                       // at the end: loop once more to drop it
  };
  auto broken = [&] {
    state_ = State::Broken;
    return true;
  };
  if (b.empty()) return need_more();

  if (state_ == State::BlockOpen) {
    const int m = match(b, kCallsOpen);
    if (m < 0) return broken();
    if (m == 0) return need_more();
    buf_.erase(0, kCallsOpen.size());
    state_ = State::InCalls;
    return true;
  }

  if (state_ == State::InCalls) {
    const int close = match(b, kCallsClose), open = match(b, kInvokeOpen);
    if (close == 1) {
      buf_.erase(0, kCallsClose.size());
      state_ = State::AfterBlock;
      return true;
    }
    if (open == 1) {
      const size_t q = b.find("\">", kInvokeOpen.size());
      std::string_view name =
          b.substr(kInvokeOpen.size(), q == std::string_view::npos ? std::string_view::npos : q - kInvokeOpen.size());
      if (q == std::string_view::npos && name.ends_with('"')) name.remove_suffix(1);  // its '">' may come next
      if (name.find_first_of("\"<\n") != std::string_view::npos || name.size() > kMaxHeader) return broken();
      if (q == std::string_view::npos) return need_more();
      if (name.empty()) return broken();
      name_ = std::string(name);
      args_.clear();
      buf_.erase(0, q + 2);
      state_ = State::InInvoke;
      return true;
    }
    if (close == 0 || open == 0) return need_more();
    return broken();
  }

  // InInvoke: a parameter or the invoke's end.
  const int close = match(b, kInvokeClose), open = match(b, kParamOpen);
  if (close == 1) {
    buf_.erase(0, kInvokeClose.size());
    end_invoke(out);
    state_ = State::InCalls;
    return true;
  }
  if (open == 1) {
    const size_t h = b.find("\">", kParamOpen.size());
    const std::string_view header =
        b.substr(kParamOpen.size(), h == std::string_view::npos ? std::string_view::npos : h - kParamOpen.size());
    if (header.find_first_of("<\n") != std::string_view::npos || header.size() > kMaxHeader) return broken();
    if (h == std::string_view::npos) return need_more();
    // header = KEY" string="true|false
    const size_t f = header.find(kStringFlag);
    if (f == std::string_view::npos || f == 0) return broken();
    const std::string_view key = header.substr(0, f), flag = header.substr(f + kStringFlag.size());
    if (key.find('"') != std::string_view::npos || (flag != "true" && flag != "false")) return broken();
    const size_t v = h + 2, end = b.find(kParamClose, v);
    if (end == std::string_view::npos) {
      // Other markup inside a value is broken; the start of the closing tag is not.
      const size_t d = b.find(kDsml, v);
      if (d != std::string_view::npos && !(d >= v + 2 && match(b.substr(d - 2), kParamClose) == 0)) return broken();
      return need_more();
    }
    const std::string value(b.substr(v, end - v));
    if (value.find(kDsml) != std::string::npos) return broken();
    std::string json_value;
    if (flag == "false") {
      const json parsed = json::parse(value, nullptr, /*allow_exceptions=*/false);
      // Not JSON after all: kept as the string the model wrote.
      json_value = parsed.is_discarded() ? json(value).dump(-1, ' ', false, json::error_handler_t::replace)
                                         : parsed.dump(-1, ' ', false, json::error_handler_t::replace);
    } else {
      json_value = json(value).dump(-1, ' ', false, json::error_handler_t::replace);
    }
    args_.push_back({std::string(key), std::move(json_value)});
    buf_.erase(0, end + kParamClose.size());
    return true;
  }
  if (close == 0 || open == 0) return need_more();
  return broken();
}

void ReplyParser::end_invoke(ReplyDelta& out) {
  ParsedToolCall call;
  call.index = calls_++;
  call.name = std::move(name_);
  call.arguments = "{";
  for (size_t i = 0; i < args_.size(); ++i) {
    if (i) call.arguments += ", ";
    call.arguments += json(args_[i].first).dump(-1, ' ', false, json::error_handler_t::replace) + ": " + args_[i].second;
  }
  call.arguments += "}";
  args_.clear();
  name_.clear();
  out.tool_calls.push_back(std::move(call));
}

}  // namespace nibble::server
