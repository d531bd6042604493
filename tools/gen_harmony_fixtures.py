#!/usr/bin/env python3
"""Harmony chat-format fixtures: conversations in OpenAI's message shape and
the tokens openai-harmony renders for them (render_conversation_for_completion
with the default config, next role assistant) — the oracle for
src/tokenizer/chat_harmony.cpp.

Writes tests/fixtures/tokenizer/harmony_cases.json:
  cases: name, messages (role, content, reasoning_content, tool_calls
         [{id, name, arguments}], tool_call_id, tools: an OpenAI "tools"
         array on a system/developer message), effort (low/medium/high),
         date (or null), ids, text (the ids decoded)

The OpenAI-to-harmony mapping is nibble's (docs/chat_formats.md), written
here with openai-harmony's own objects:
  - a system message always: harmony's default SystemContent with the
    effort and date;
  - one developer message when there are instructions or tools: the
    contents of the system and developer messages (joined by a blank line)
    as "# Instructions", their tools as the functions namespace;
  - assistant: reasoning_content -> analysis; content -> final, or a
    commentary preamble when the turn makes tool calls; each call ->
    commentary to=functions.NAME <|constrain|>json;
  - tool: from functions.NAME (the call its tool_call_id answers) to
    assistant, commentary channel.

Needs openai-harmony (tools/requirements.txt) and o200k_base.tiktoken in a
folder named by TIKTOKEN_ENCODINGS_BASE (see tools/gen_gptoss_tokenizer.py for
where the file comes from: the same bytes under the name o200k_base.tiktoken).
"""
from __future__ import annotations

import json
import pathlib

import openai_harmony as h

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "tokenizer" / "harmony_cases.json"

EFFORT = {"low": h.ReasoningEffort.LOW, "medium": h.ReasoningEffort.MEDIUM, "high": h.ReasoningEffort.HIGH}


def to_harmony(messages: list[dict], effort: str, date: str | None) -> list[h.Message]:
    sys = h.SystemContent.new().with_reasoning_effort(EFFORT[effort])
    if date:
        sys = sys.with_conversation_start_date(date)
    out = [h.Message.from_role_and_content(h.Role.SYSTEM, sys)]
    instructions = [m["content"] for m in messages if m["role"] in ("system", "developer") and m.get("content")]
    tools = [t for m in messages if m["role"] in ("system", "developer") for t in m.get("tools", [])]
    if instructions or tools:
        dev = h.DeveloperContent.new()
        if instructions:
            dev = dev.with_instructions("\n\n".join(instructions))
        if tools:
            dev = dev.with_function_tools([
                h.ToolDescription.new(t["function"]["name"], t["function"].get("description", ""),
                                      parameters=t["function"].get("parameters"))
                for t in tools])
        out.append(h.Message.from_role_and_content(h.Role.DEVELOPER, dev))
    names: dict[str, str] = {}
    for m in messages:
        role = m["role"]
        if role == "user":
            out.append(h.Message.from_role_and_content(h.Role.USER, m["content"]))
        elif role == "assistant":
            if m.get("reasoning_content"):
                out.append(h.Message.from_role_and_content(h.Role.ASSISTANT, m["reasoning_content"])
                           .with_channel("analysis"))
            calls = m.get("tool_calls", [])
            if calls:
                if m.get("content"):
                    out.append(h.Message.from_role_and_content(h.Role.ASSISTANT, m["content"])
                               .with_channel("commentary"))
                for c in calls:
                    names[c["id"]] = c["name"]
                    out.append(h.Message.from_role_and_content(h.Role.ASSISTANT, c["arguments"])
                               .with_channel("commentary").with_recipient("functions." + c["name"])
                               .with_content_type("<|constrain|>json"))
            else:
                out.append(h.Message.from_role_and_content(h.Role.ASSISTANT, m.get("content", ""))
                           .with_channel("final"))
        elif role == "tool":
            author = h.Author.new(h.Role.TOOL, "functions." + names[m["tool_call_id"]])
            out.append(h.Message.from_author_and_content(author, m["content"]).with_recipient("assistant")
                       .with_channel("commentary"))
    return out


WEATHER = {"type": "function", "function": {
    "name": "get_current_weather", "description": "Gets the current weather in the provided location.",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
        "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}},
        "required": ["location"]}}}
LOCATION = {"type": "function", "function": {"name": "get_location", "description": "Gets the location of the user."}}
RICH = {"type": "function", "function": {
    "name": "search_docs", "description": "Searches the docs.\nReturns the best matches.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "title": "Query", "description": "What to look for",
                  "examples": ["rope scaling", "mxfp4"]},
        "limit": {"type": "integer", "default": 5},
        "exact": {"type": "boolean", "default": False},
        "ratio": {"type": "number", "nullable": True},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
        "any_list": {"type": "array"},
        "either": {"type": ["number", "string"]},
        "mode": {"description": "How to match", "oneOf": [
            {"type": "string", "enum": ["fuzzy", "strict"], "description": "By name"},
            {"type": "integer", "description": "By score", "default": 3}], "default": "fuzzy"},
        "filter": {"type": "object", "description": "Restrictions", "properties": {
            "since": {"type": "string", "default": "2024"},
            "nested": {"type": "object", "properties": {"deep": {"type": "boolean"}}, "required": ["deep"]}},
            "required": ["since"]},
        "unknown": {},
        "thing": {"type": "null"}},
        "required": ["query", "mode"]}}}

SYS = {"role": "system", "content": "You are a terse assistant."}
U1 = {"role": "user", "content": "What is the weather in Tokyo?"}


def cases() -> list[dict]:
    c = []
    add = lambda name, messages, effort="medium", date=None: c.append(
        {"name": name, "messages": messages, "effort": effort, "date": date})
    add("user_only", [{"role": "user", "content": "Hi"}])
    add("empty_user", [{"role": "user", "content": ""}])
    add("system_and_user", [SYS, U1], "high", "2025-06-28")
    add("effort_low", [SYS, U1], "low")
    add("developer_and_system", [SYS, {"role": "developer", "content": "Answer in French."}, U1])
    add("multi_turn_drops_earlier_analysis", [
        SYS, {"role": "user", "content": "2+2?"},
        {"role": "assistant", "reasoning_content": "Simple sum.", "content": "4"},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "reasoning_content": "Another sum.", "content": "6"},
        {"role": "user", "content": "Thanks!"}])
    add("assistant_without_reasoning", [
        {"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "Hi!"},
        {"role": "user", "content": "Again"}])
    add("tools_one_call", [
        {"role": "system", "content": "Use the tools.", "tools": [LOCATION, WEATHER]}, U1,
        {"role": "assistant", "reasoning_content": "Need the weather tool.",
         "tool_calls": [{"id": "call_1", "name": "get_current_weather", "arguments": "{\"location\":\"Tokyo\"}"}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 20, \"sunny\": true}"}], "high")
    add("tools_parallel_calls_with_preamble", [
        {"role": "developer", "content": "", "tools": [WEATHER]}, U1,
        {"role": "assistant", "content": "Checking two cities.", "tool_calls": [
            {"id": "a", "name": "get_current_weather", "arguments": "{\"location\": \"Tokyo\"}"},
            {"id": "b", "name": "get_current_weather", "arguments": "{\"location\": \"Osaka\", \"format\": \"celsius\"}"}]},
        {"role": "tool", "tool_call_id": "a", "content": "20C"},
        {"role": "tool", "tool_call_id": "b", "content": "22C"},
        {"role": "assistant", "reasoning_content": "Both known.", "content": "Tokyo 20C, Osaka 22C."},
        {"role": "user", "content": "Which is warmer?"}])
    add("tool_schema_rich", [{"role": "system", "content": "Docs helper.", "tools": [RICH, LOCATION]},
                             {"role": "user", "content": "find mxfp4"}])
    add("tools_without_instructions", [{"role": "system", "content": "", "tools": [LOCATION]},
                                       {"role": "user", "content": "where am I"}])
    add("unicode_and_lookalike_markers", [
        {"role": "system", "content": "Réponds en français. 日本語も。"},
        {"role": "user", "content": "Text with <|start|> and <|end|> typed by a user, emoji 👨‍👩‍👧 and\ttabs\n\nlines"},
        {"role": "assistant", "reasoning_content": "Marker-like text: <|channel|>final", "content": "Ça va ✓"},
        {"role": "user", "content": "  leading spaces and trailing   "}], "low", "2026-12-01")
    add("reasoning_only_turn", [
        U1, {"role": "assistant", "reasoning_content": "Still thinking", "content": ""},
        {"role": "user", "content": "go on"}])
    return c


def main() -> None:
    enc = h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)
    out = []
    for case in cases():
        convo = h.Conversation.from_messages(to_harmony(case["messages"], case["effort"], case["date"]))
        ids = enc.render_conversation_for_completion(convo, h.Role.ASSISTANT)
        out.append({**case, "ids": ids, "text": enc.decode_utf8(ids)})
    OUT.write_text(json.dumps({"harmony": "openai-harmony render_conversation_for_completion(next=assistant)",
                               "stop_tokens": sorted(enc.stop_tokens_for_assistant_actions()),
                               "cases": out}, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{OUT}: {len(out)} cases")


if __name__ == "__main__":
    main()
