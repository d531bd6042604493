#include "tokenizer/harmony_reply.h"

#include <array>
#include <cctype>

#include <nlohmann/json.hpp>

namespace nibble {
namespace {

constexpr std::array<std::string_view, 7> kMarkers = {"<|start|>",  "<|end|>",       "<|message|>", "<|channel|>",
                                                      "<|return|>", "<|constrain|>", "<|call|>"};

// How many bytes at the end of `s` could begin a marker (a proper prefix of
// one): those wait for the next piece.
size_t held_tail(std::string_view s) {
  const size_t lt = s.rfind('<');
  if (lt == std::string_view::npos) return 0;
  const std::string_view tail = s.substr(lt);
  for (std::string_view m : kMarkers)
    if (tail.size() < m.size() && m.substr(0, tail.size()) == tail) return tail.size();
  return 0;
}

// The first marker in `s` at or after `from`: its position and which, or npos.
std::pair<size_t, std::string_view> next_marker(std::string_view s, size_t from = 0) {
  size_t best = std::string_view::npos;
  std::string_view which;
  for (size_t at = s.find("<|", from); at != std::string_view::npos; at = s.find("<|", at + 1)) {
    for (std::string_view m : kMarkers)
      if (s.compare(at, m.size(), m) == 0) {
        best = at;
        which = m;
        break;
      }
    if (best != std::string_view::npos) break;
  }
  return {best, which};
}

}  // namespace

HarmonyDelta HarmonyReplyParser::push(std::string_view text) {
  HarmonyDelta out;
  if (state_ == State::Ended) return out;
  buf_ += text;
  run(out, false);
  return out;
}

HarmonyDelta HarmonyReplyParser::finish() {
  HarmonyDelta out;
  if (state_ != State::Ended) run(out, true);
  if (state_ == State::Body) close_body(out, false);
  state_ = State::Ended;
  buf_.clear();
  return out;
}

void HarmonyReplyParser::emit(HarmonyDelta& out, std::string_view text) {
  switch (sink_) {
    case Sink::Reasoning: out.reasoning += text; break;
    case Sink::Content: out.content += text; break;
    case Sink::ToolCall: call_args_ += text; break;
  }
}

// A header: "[assistant][ to=R]<|channel|>C[ <|constrain|>json| json]" in any
// order harmony allows (to= may come before or after the channel).
void HarmonyReplyParser::open_body(const std::string& header) {
  std::string channel, recipient;
  std::string rest;
  const size_t ch = header.find("<|channel|>");
  if (ch != std::string::npos) {
    size_t end = ch + 11;
    while (end < header.size() && header[end] != '<' && !std::isspace(static_cast<unsigned char>(header[end]))) ++end;
    channel = header.substr(ch + 11, end - ch - 11);
    rest = header.substr(0, ch) + " " + header.substr(end);
  } else {
    rest = header;
  }
  // Words of what is left: a role, "to=R", a content type.
  size_t i = 0;
  while (i < rest.size()) {
    while (i < rest.size() && std::isspace(static_cast<unsigned char>(rest[i]))) ++i;
    size_t j = i;
    while (j < rest.size() && !std::isspace(static_cast<unsigned char>(rest[j]))) ++j;
    const std::string word = rest.substr(i, j - i);
    if (word.rfind("to=", 0) == 0) recipient = word.substr(3);
    i = j;
  }
  call_name_.clear();
  call_args_.clear();
  if (!recipient.empty() && recipient != "all") {
    sink_ = Sink::ToolCall;
    call_name_ = recipient.rfind("functions.", 0) == 0 ? recipient.substr(10) : recipient;
  } else {
    sink_ = channel == "analysis" ? Sink::Reasoning : Sink::Content;
  }
}

void HarmonyReplyParser::close_body(HarmonyDelta& out, bool complete) {
  if (sink_ == Sink::ToolCall) {
    // Cut off before <|call|>: keep the call only when its JSON is whole
    // (the stop token itself is often left out of the text).
    const bool whole = complete || nlohmann::json::accept(call_args_);
    if (whole && !call_name_.empty()) out.tool_calls.push_back({"", call_name_, call_args_});
    call_name_.clear();
    call_args_.clear();
  }
  sink_ = Sink::Content;
}

void HarmonyReplyParser::run(HarmonyDelta& out, bool at_end) {
  while (state_ != State::Ended) {
    const auto [at, marker] = next_marker(buf_);
    if (at == std::string::npos) {
      // No whole marker: release all but a possible marker's beginning.
      const size_t keep = at_end ? 0 : held_tail(buf_);
      const std::string_view ready = std::string_view(buf_).substr(0, buf_.size() - keep);
      if (state_ == State::Body) emit(out, ready);
      else if (state_ == State::Header) header_ += ready;
      // Between messages only markers matter; stray text is dropped.
      buf_.erase(0, buf_.size() - keep);
      return;
    }
    const std::string_view before = std::string_view(buf_).substr(0, at);
    if (state_ == State::Body) emit(out, before);
    else if (state_ == State::Header) header_ += before;

    if (marker == "<|return|>" || marker == "<|call|>") {
      if (state_ == State::Body) close_body(out, true);
      returned_ = marker == "<|return|>";
      state_ = State::Ended;
      buf_.clear();
      return;
    }
    if (state_ == State::Header) {
      if (marker == "<|message|>") {
        open_body(header_);
        header_.clear();
        state_ = State::Body;
      } else if (marker == "<|end|>") {
        header_.clear();  // a message with no body
        state_ = State::BetweenMessages;
      } else if (marker == "<|start|>") {
        header_.clear();
      } else {
        header_ += marker;  // <|channel|>, <|constrain|>: part of the header
      }
    } else if (state_ == State::Body) {
      if (marker == "<|end|>") {
        close_body(out, true);
        state_ = State::BetweenMessages;
      } else if (marker == "<|start|>" || marker == "<|channel|>") {
        // A new header without <|end|>: the model skipped it.
        close_body(out, true);
        header_ = marker == "<|channel|>" ? std::string(marker) : std::string();
        state_ = State::Header;
      }
      // <|message|> and <|constrain|> inside a body are dropped.
    } else if (marker == "<|start|>") {  // BetweenMessages
      header_.clear();
      state_ = State::Header;
    }
    buf_.erase(0, at + marker.size());
  }
}

ParsedCompletion parse_harmony_completion(std::string_view text) {
  HarmonyReplyParser p;
  ParsedCompletion pc;
  auto take = [&](HarmonyDelta d) {
    pc.reasoning_content += d.reasoning;
    pc.content += d.content;
    for (ToolCall& c : d.tool_calls) pc.tool_calls.push_back(std::move(c));
  };
  take(p.push(text));
  take(p.finish());
  pc.finished = p.finished_with_return() || !pc.tool_calls.empty();
  for (size_t i = 0; i < pc.tool_calls.size(); ++i) pc.tool_calls[i].id = "call_" + std::to_string(i);
  return pc;
}

}  // namespace nibble
