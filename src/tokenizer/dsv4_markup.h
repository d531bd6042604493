// The markup of DeepSeek-V4's replies (docs/text.md): the thinking markers
// and the DSML tool-call tags. One definition for the chat encoder that
// writes them (chat_dsv4.cpp) and the server's streaming parser that splits
// a reply on them (server/reply_parser.cpp): the model was trained on these
// bytes, so both must agree on every one.
#pragma once

#include <string_view>

namespace nibble::dsv4 {

inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";
inline constexpr std::string_view kCallsOpen = "<｜DSML｜tool_calls>";
inline constexpr std::string_view kCallsClose = "</｜DSML｜tool_calls>";
inline constexpr std::string_view kInvokeOpen = "<｜DSML｜invoke name=\"";
inline constexpr std::string_view kInvokeClose = "</｜DSML｜invoke>";
inline constexpr std::string_view kParamOpen = "<｜DSML｜parameter name=\"";
inline constexpr std::string_view kParamClose = "</｜DSML｜parameter>";
inline constexpr std::string_view kStringFlag = "\" string=\"";

}  // namespace nibble::dsv4
