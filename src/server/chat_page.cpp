// The chat page's document. Model text is only ever set through
// textContent, never parsed as HTML, so a reply cannot inject markup or
// script. The stream is read with fetch() and a ReadableStream reader (no
// EventSource: it cannot POST or send an Authorization header); SSE frames
// are split on blank lines, as the server writes them ("data: <json>\n\n",
// ": keep-alive" comments, "data: [DONE]").
#include "server/chat_page.h"

namespace nibble::server {
namespace {

constexpr std::string_view kPage = R"page(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>nibble chat</title>
<style>
  :root { --bg: #f6f6f4; --fg: #1d1d1f; --dim: #6b6b70; --line: #d9d9d6; --me: #e4ecfb; --accent: #2f5bd3; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.45 system-ui, sans-serif; background: var(--bg); color: var(--fg);
         display: flex; flex-direction: column; height: 100vh; }
  header { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; padding: 8px 14px;
           border-bottom: 1px solid var(--line); background: #fff; }
  header b { margin-right: auto; }
  header label { color: var(--dim); font-size: 13px; display: flex; gap: 4px; align-items: center; }
  header input[type=number] { width: 64px; }
  header input[type=password] { width: 140px; }
  #messages { flex: 1; overflow-y: auto; padding: 14px; display: flex; flex-direction: column; gap: 10px; }
  .msg { max-width: 52rem; padding: 8px 12px; border-radius: 8px; white-space: pre-wrap; word-wrap: break-word; }
  .msg.user { align-self: flex-end; background: var(--me); }
  .msg.assistant { align-self: flex-start; background: #fff; border: 1px solid var(--line); }
  .msg.assistant[data-state=streaming] .content::after { content: "\258D"; color: var(--accent); }
  .msg .note { color: var(--dim); font-size: 12px; margin-top: 4px; }
  .msg.error, .msg .err { color: #a11; }
  details.reasoning { color: var(--dim); font-size: 13px; border-left: 3px solid var(--line);
                      padding-left: 8px; margin-bottom: 6px; }
  details.reasoning summary { cursor: pointer; }
  footer { display: flex; gap: 8px; padding: 10px 14px; border-top: 1px solid var(--line); background: #fff; }
  #input { flex: 1; resize: vertical; min-height: 44px; font: inherit; padding: 8px; }
  button { font: inherit; padding: 0 16px; }
  #status { color: var(--dim); font-size: 12px; padding: 0 14px 6px; background: #fff; }
</style>
</head>
<body>
<header>
  <b id="model">nibble</b>
  <label><input type="checkbox" id="thinking"> thinking</label>
  <label>temperature <input type="number" id="temperature" min="0" max="2" step="0.1" placeholder="model"></label>
  <label>max tokens <input type="number" id="max-tokens" min="1" value="512"></label>
  <label>API key <input type="password" id="apikey" autocomplete="off" placeholder="if the server has one"></label>
  <button id="clear" type="button">New chat</button>
</header>
<div id="messages" aria-live="polite"></div>
<div id="status"></div>
<footer>
  <textarea id="input" rows="2" placeholder="Message (Enter sends, Shift+Enter adds a line)"></textarea>
  <button id="send" type="button">Send</button>
  <button id="stop" type="button" disabled>Stop</button>
</footer>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const conversation = [];     // sent with each request: {role, content}
let controller = null;       // the running request's AbortController

const keyInput = $("apikey");
keyInput.value = localStorage.getItem("nibble.apikey") || "";
keyInput.addEventListener("change", () => {
  localStorage.setItem("nibble.apikey", keyInput.value);
  status("");
  loadModel();
});

function headers() {
  const h = { "Content-Type": "application/json" };
  if (keyInput.value) h["Authorization"] = "Bearer " + keyInput.value;
  return h;
}
function status(text) { $("status").textContent = text; }

function bubble(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  if (role === "assistant") {
    const details = document.createElement("details");
    details.className = "reasoning";
    details.hidden = true;
    const summary = document.createElement("summary");
    summary.textContent = "Reasoning";
    const body = document.createElement("div");
    body.className = "reasoning-text";
    details.append(summary, body);
    const content = document.createElement("div");
    content.className = "content";
    const note = document.createElement("div");
    note.className = "note";
    div.append(details, content, note);
    div.dataset.state = "streaming";
    div.dataset.events = "0";
  } else {
    div.textContent = text;
  }
  $("messages").append(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

async function errorText(res) {
  try {
    const j = await res.json();
    if (j.error && j.error.message) return res.status + ": " + j.error.message;
  } catch (e) {}
  return "HTTP " + res.status;
}

async function loadModel() {
  try {
    const res = await fetch("/v1/models", { headers: headers() });
    if (res.ok) {
      const j = await res.json();
      if (j.data && j.data[0]) $("model").textContent = "nibble: " + j.data[0].id;
    } else if (res.status === 401) {
      status("This server needs an API key: enter it above.");
    }
  } catch (e) {}
}

async function send() {
  const text = $("input").value;
  if (!text.trim() || controller) return;
  $("input").value = "";
  conversation.push({ role: "user", content: text });
  bubble("user", text);
  const msg = bubble("assistant");
  const reasoningBox = msg.querySelector(".reasoning");
  const reasoningText = msg.querySelector(".reasoning-text");
  const content = msg.querySelector(".content");
  const note = msg.querySelector(".note");
  const body = { messages: conversation.slice(), stream: true, stream_options: { include_usage: true },
                 chat_template_kwargs: { thinking: $("thinking").checked } };
  const temperature = $("temperature").value;
  if (temperature !== "") body.temperature = Number(temperature);
  const maxTokens = $("max-tokens").value;
  if (maxTokens !== "") body.max_tokens = Number(maxTokens);

  controller = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  status("generating...");
  let reply = "", reasoning = "", usage = null, finish = null, events = 0;
  const started = performance.now();
  try {
    const res = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(body),
                                                      signal: controller.signal });
    if (!res.ok) throw new Error(await errorText(res));
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        if (!frame.startsWith("data: ")) continue;  // ": keep-alive"
        const data = frame.slice(6);
        if (data === "[DONE]") continue;
        const j = JSON.parse(data);
        msg.dataset.events = String(++events);
        if (j.error) throw new Error(j.error.message);
        if (j.usage) usage = j.usage;
        for (const c of j.choices || []) {
          const d = c.delta || {};
          if (d.reasoning_content) {
            // Open while the model thinks; folded once the answer starts.
            if (!reasoning) reasoningBox.open = true;
            reasoning += d.reasoning_content;
            reasoningBox.hidden = false;
            reasoningText.textContent = reasoning;
          }
          if (d.content) {
            if (!reply && reasoning) reasoningBox.open = false;
            reply += d.content;
            content.textContent = reply;
          }
          if (c.finish_reason) finish = c.finish_reason;
        }
        msg.scrollIntoView({ block: "end" });
      }
    }
    msg.dataset.state = "done";
    const secs = (performance.now() - started) / 1000;
    let info = finish ? "finish: " + finish : "";
    if (usage) info += (info ? ", " : "") + usage.completion_tokens + " tokens in " + secs.toFixed(2) + " s";
    note.textContent = info;
    status("");
  } catch (e) {
    if (e.name === "AbortError") {
      msg.dataset.state = "stopped";
      note.textContent = "stopped";
      status("stopped");
    } else {
      msg.dataset.state = "error";
      const err = document.createElement("div");
      err.className = "err";
      err.textContent = String(e.message || e);
      msg.append(err);
      status(String(e.message || e));
    }
  }
  // What was said stays in the conversation (a stopped reply as far as it got).
  if (reply || reasoning) conversation.push({ role: "assistant", content: reply });
  else conversation.pop();
  controller = null;
  $("send").disabled = false;
  $("stop").disabled = true;
}

$("send").addEventListener("click", send);
$("stop").addEventListener("click", () => { if (controller) controller.abort(); });
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(); }
});
$("clear").addEventListener("click", () => {
  if (controller) controller.abort();
  conversation.length = 0;
  $("messages").textContent = "";
  status("");
});
loadModel();
</script>
</body>
</html>
)page";

}  // namespace

std::string_view chat_page_html() { return kPage; }

}  // namespace nibble::server
