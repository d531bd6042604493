// The chat page `nibble serve` answers at `/`: one self-contained HTML
// document (its CSS and script inline, no external resource, so it works on
// a machine without network) that talks to this server's own
// /v1/chat/completions with streaming. What it does (docs/server.md):
// multi-turn conversation, the reply streamed as it comes, the model's
// reasoning in a collapsible block apart from the answer, a stop button
// (aborts the fetch: the server notices the closed connection and cancels
// the job), a thinking switch, sampling settings, and the API key when the
// server wants one (kept in the browser's localStorage, sent as Bearer).
//
// Element ids and data- attributes the headless-browser test drives
// (tests/server/chat_page_test.py): #input, #send, #stop, #thinking,
// #apikey, #temperature, #max-tokens, #messages, #status; each reply is a
// .msg.assistant with .reasoning (a <details>) and .content, and
// data-state ("streaming", "done", "stopped", "error") and data-events (SSE
// events received).
#pragma once

#include <string_view>

namespace nibble::server {

std::string_view chat_page_html();

}  // namespace nibble::server
