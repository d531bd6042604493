#!/usr/bin/env python3
"""A Kimi-K2-style tiktoken tokenizer and chat prompts, with tiktoken and the
published chat template (jinja2) as the oracles.

Kimi K2 ships no tokenizer.json: its tokenizer is `tiktoken.model` (one line
per token, "base64(bytes) rank"), the pre-tokenizer regex and 256 special ids
of its tokenization_kimi.py, and tokenizer_config.json (the names of the
special ids, bos/eos, the chat template). The real tiktoken.model is not
downloadable here, so this one holds the lowest N ranks of o200k_base (a real
BPE ranking, whose lowest ranks form a consistent BPE: every token of rank
< N splits into two tokens of lower rank), with Kimi's pattern and Kimi's
special-token layout moved to start at N instead of 163584.

Sources (read, not copied):
  moonshotai/Kimi-K2-Instruct tokenization_kimi.py: pat_str (below), 256
    reserved special ids from len(ranks), named from tokenizer_config.json's
    added_tokens_decoder else "<|reserved_token_{i}|>"; encode() cuts the
    text into 400,000-character chunks and cuts runs of more than 25,000
    whitespace / non-whitespace characters (str.isspace) before tiktoken;
    apply_chat_template deep-sorts the keys of `tools`.
  moonshotai/Kimi-K2-Instruct tokenizer_config.json: the special ids
    163584.. (KIMI_SPECIALS) and the chat template (KIMI_TEMPLATE, as copied
    in llama.cpp's tests).

Writes tests/fixtures/tokenizer/kimi/{tiktoken.model,tokenizer_config.json}
and tests/fixtures/tokenizer/kimi_cases.json (encode and decode cases) and
kimi_chat_cases.json (conversations, the rendered prompt and its ids).

Needs tiktoken and jinja2 (tools/requirements.txt) and o200k_base.tiktoken
from tiktoken's cache (see tools/gen_gptoss_tokenizer.py for the litellm
wheel that ships it):
  TIKTOKEN_CACHE_DIR=<dir> python tools/gen_kimi_tokenizer.py
"""
from __future__ import annotations

import base64
import json
import pathlib
import random
import sys

import jinja2
import jinja2.ext
import tiktoken
from jinja2.sandbox import ImmutableSandboxedEnvironment

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import gen_tokenizer_fixtures as base  # noqa: E402  (text pools)

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "tokenizer"
SEED = 20250711
N_BASE = 20000          # ranks kept from o200k_base
KIMI_BASE = 163584      # Kimi K2's len(ranks): its first special id
N_RESERVED = 256        # tokenization_kimi.py num_reserved_special_tokens

PAT_STR = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

# Kimi K2's added_tokens_decoder (the other ids up to 163839 are reserved).
KIMI_SPECIALS = {
    163584: "[BOS]", 163585: "[EOS]", 163586: "<|im_end|>", 163587: "<|im_user|>", 163588: "<|im_assistant|>",
    163590: "<|start_header_id|>", 163591: "<|end_header_id|>", 163593: "[EOT]", 163594: "<|im_system|>",
    163595: "<|tool_calls_section_begin|>", 163596: "<|tool_calls_section_end|>", 163597: "<|tool_call_begin|>",
    163598: "<|tool_call_argument_begin|>", 163599: "<|tool_call_end|>", 163601: "<|im_middle|>",
    163838: "[UNK]", 163839: "[PAD]",
}

KIMI_TEMPLATE = """{%- if tools -%}
  <|im_system|>tool_declare<|im_middle|>
  # Tools
  {{ tools | tojson }}<|im_end|>
{%- endif -%}
{%- for message in messages -%}
  {%- if loop.first and messages[0]['role'] != 'system' -%}
    <|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>
  {%- endif -%}

  {%- set role_name =  message.get('name') or  message['role'] -%}
  {%- if message['role'] == 'user' -%}
    <|im_user|>{{role_name}}<|im_middle|>
  {%- elif message['role'] == 'assistant' -%}
    <|im_assistant|>{{role_name}}<|im_middle|>
  {%- else -%}
    <|im_system|>{{role_name}}<|im_middle|>
  {% endif %}

  {%- if message['role'] == 'assistant' and message.get('tool_calls') -%}
    {%- if message['content'] -%}{{ message['content'] }}{%- endif -%}
    <|tool_calls_section_begin|>
    {%- for tool_call in message['tool_calls'] -%}
      {%- set formatted_id = tool_call['id'] -%}
      <|tool_call_begin|>{{ formatted_id }}<|tool_call_argument_begin|>{% if tool_call['function']['arguments'] is string %}{{ tool_call['function']['arguments'] }}{% else %}{{ tool_call['function']['arguments'] | tojson }}{% endif %}<|tool_call_end|>
    {%- endfor -%}
    <|tool_calls_section_end|>
  {%- elif message['role'] == 'tool' -%}
    ## Return of {{ message.tool_call_id }}
    {{ message['content'] }}
  {%- elif message['content'] is string -%}
    {{ message['content'] }}
  {%- elif message['content'] is not none -%}
    {% for content in message['content'] -%}
      {% if content['type'] == 'image' or 'image' in content or 'image_url' in content -%}
        <|media_start|>image<|media_content|><|media_pad|><|media_end|>
      {% else -%}
        {{ content['text'] }}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
  <|im_end|>
{%- endfor -%}
{%- if add_generation_prompt -%}
  <|im_assistant|>assistant<|im_middle|>
{%- endif -%}"""


def special_names(n_base: int) -> dict[int, str]:
    """Kimi's special ids moved to start at n_base."""
    out = {}
    for i in range(N_RESERVED):
        kimi_id = KIMI_BASE + i
        out[n_base + i] = KIMI_SPECIALS.get(kimi_id, f"<|reserved_token_{n_base + i}|>")
    return out


def load_ranks() -> dict[bytes, int]:
    o200k = tiktoken.get_encoding("o200k_base")
    ranks = {t: r for t, r in o200k._mergeable_ranks.items() if r < N_BASE}
    if sorted(ranks.values()) != list(range(N_BASE)):
        raise SystemExit("o200k's lowest ranks are not 0..N-1")
    return ranks


def kimi_encoding(ranks: dict[bytes, int]) -> tiktoken.Encoding:
    specials = {s: i for i, s in special_names(N_BASE).items()}
    return tiktoken.Encoding(name="kimi_test", pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens=specials)


def split_runs(s: str, max_len: int):
    """tokenization_kimi.py's _split_whitespaces_or_nonwhitespaces (its logic)."""
    run_len = 0
    run_space = s[0].isspace() if s else False
    start = 0
    for i, ch in enumerate(s):
        space = ch.isspace()
        if run_space ^ space:
            run_len = 1
            run_space = space
        else:
            run_len += 1
            if run_len > max_len:
                yield s[start:i]
                start = i
                run_len = 1
    yield s[start:]


def kimi_encode(enc: tiktoken.Encoding, text: str, allow_special: bool) -> list[int]:
    """TikTokenTokenizer.encode(text, allow_special_tokens=...)."""
    out = []
    for i in range(0, len(text), 400_000):
        for sub in split_runs(text[i:i + 400_000], 25_000):
            if allow_special:
                out += enc.encode(sub, allowed_special="all")
            else:
                out += enc.encode(sub, disallowed_special=())
    return out


# ---------------------------------------------------------------- corpus

# Where Kimi's pattern differs from o200k's and from tokenizers' DeepSeek one:
# Han runs apart (and subtracted from the letter classes), Han next to kana,
# CJK punctuation of Script_Extensions Han, case splits, contractions.
KIMI_FIXED = [
    "中文English混合", "汉字abc", "北京市 Pascal", "你好，世界！", "你好、世界。", "日本語のテキスト", "カタカナ漢字ひらがな",
    "々〆〇", "〡〢〣", "㐀㐁", "𠀀𠀁 text", "⺀⺁", "⼀⼁", "㍻", "Ａｂｃ中", "中'S", "字's", "x中y", "中1234文",
    "camelCaseWords", "HTTPSession", "XMLHttpRequest", "DON'T", "Don'T", "we'Ll", "it'ſ", "x'ſ", "'S alone",
    "ǅemal ǈubljana", "ʰʲʷ modifier", "e\u0301e\u0301E\u0301", "\u0301\u0301", "क्षत्रिय", "ΣΑΣ σας",
    "12345678901", "1 22 333 4444", "٠١٢٣٤٥٦", "ⅦⅧ", "3,141,592", "a//b", "!!/\n/\r\n", " ?\r\n", "\r\nabc",
    "\rA", "  \r\n  \n", "foo  \n  bar", "end   ", "\t\n\t\n", "a\u00a0b\u3000c", "\u2028\u2029", "\x85x",
    "😀👍🏽👨‍👩‍👧‍👦🇺🇸", "<|im_user|>user<|im_middle|>hi<|im_end|>", "[BOS]x[EOS]", "<|im_end", "|im_end|>",
    "<|reserved_token_%d|>" % (N_BASE + 5), "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}",
]


def random_codepoints(rng: random.Random) -> str:
    """Characters from long-assigned blocks (so that the Unicode versions of
    tiktoken's regex crate and PCRE2 agree): marks, Lm/Lt/Lo, Han and its
    neighbours, CJK punctuation, symbols, other scripts' digits."""
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x250, 0x2FF), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x52F),
              (0x591, 0x5F4), (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE5B), (0x1E00, 0x1EFF), (0x2000, 0x206F),
              (0x2100, 0x218B), (0x2E80, 0x2FD5), (0x3000, 0x30FF), (0x3190, 0x31FF), (0x3400, 0x34FF),
              (0x4E00, 0x4FFF), (0x9F00, 0x9FFF), (0xF900, 0xFAD9), (0xAC00, 0xAD00), (0xFF00, 0xFFEF),
              (0x1F300, 0x1F64F), (0x20000, 0x200FF)]
    out = []
    for _ in range(rng.randint(1, 20)):
        lo, hi = rng.choice(blocks)
        out.append(chr(rng.randint(lo, hi)))
        if rng.random() < 0.2:
            out.append(rng.choice([" ", "  ", "\n", "'s", "'S", "/", "\r\n", "1", "中"]))
    return "".join(out)


def corpus(specials: list[str]) -> list[str]:
    base.ENGLISH_WORDS.extend(base.english_words(base.stdlib_texts()))
    strings = base.test_strings(specials, SEED) + KIMI_FIXED
    rng = random.Random(SEED + 1)
    strings += [random_codepoints(rng) for _ in range(400)]
    for text in base.stdlib_texts()[:30]:
        strings.append(text[:3000])
    # tokenization_kimi.py's run cut: runs longer than 25,000 characters.
    strings += [" " * 25_001 + "x", "a" * 25_000 + "b" * 3 + " c", "\n" * 30_000, ("ab " * 9000) + "q" * 26_000]
    return strings


def encode_cases(enc: tiktoken.Encoding, strings: list[str]) -> list[dict]:
    cases = []
    for s in strings:
        ids = kimi_encode(enc, s, True)
        plain = kimi_encode(enc, s, False)
        if enc.decode(ids) != s:
            raise SystemExit(f"tiktoken does not round-trip {s[:40]!r}")
        case = {"text": s, "ids": ids}
        if plain != ids:
            case["ids_no_special"] = plain
        cases.append(case)
    return cases


def random_decodes(enc: tiktoken.Encoding, seed: int, count: int = 400) -> list[dict]:
    """Random id runs, many of them cutting UTF-8 sequences apart, and
    tiktoken's decode (errors="replace")."""
    rng = random.Random(seed)
    multibyte = [r for t, r in enc._mergeable_ranks.items() if any(b >= 0x80 for b in t)]
    out = []
    for _ in range(count):
        ids = []
        for _ in range(rng.randint(1, 10)):
            x = rng.random()
            if x < 0.5:
                ids.append(rng.choice(multibyte))
            elif x < 0.9:
                ids.append(rng.randrange(N_BASE))
            else:
                ids.append(N_BASE + rng.randrange(N_RESERVED))
        out.append({"ids": ids, "text": enc.decode(ids)})
    return out


# ---------------------------------------------------------------- chat

def template_env() -> jinja2.Template:
    """transformers' chat-template environment (trim_blocks, lstrip_blocks,
    its tojson: json.dumps with ensure_ascii=False)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    return env.from_string(KIMI_TEMPLATE)


def deep_sort(obj):
    if isinstance(obj, dict):
        return {k: deep_sort(v) for k, v in sorted(obj.items())}
    if isinstance(obj, list):
        return [deep_sort(v) for v in obj]
    return obj


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather for a city. Returns °C.",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "City name, e.g. 北京"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}}}}}
SEARCH = {"type": "function", "function": {
    "name": "web_search", "description": "Search \"the web\"\nand return snippets",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "top_k": {"type": "number",
                                                                                       "default": 0.5}},
                   "required": ["q"], "additionalProperties": False}}}


def call(name: str, idx: int, args: str) -> dict:
    return {"id": f"functions.{name}:{idx}", "type": "function", "function": {"name": name, "arguments": args}}


def conversations() -> list[dict]:
    c = []
    c.append({"name": "user_only", "messages": [{"role": "user", "content": "Hello"}]})
    c.append({"name": "system_user", "messages": [{"role": "system", "content": "You are terse."},
                                                  {"role": "user", "content": "Hi there"}]})
    c.append({"name": "multi_turn", "messages": [
        {"role": "system", "content": "S"}, {"role": "user", "content": "U1"},
        {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2 你好"}]})
    c.append({"name": "tools_offered", "tools": [WEATHER, SEARCH], "messages": [
        {"role": "user", "content": "What's the weather in Beijing?"}]})
    c.append({"name": "tool_call_and_result", "tools": [WEATHER], "messages": [
        {"role": "user", "content": "Weather in Paris and Tokyo?"},
        {"role": "assistant", "content": "", "tool_calls": [call("get_weather", 0, '{"city": "Paris"}'),
                                                            call("get_weather", 1, '{"city":"Tokyo","days":2}')]},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": '{"weather": "Sunny"}'},
        {"role": "tool", "tool_call_id": "functions.get_weather:1", "content": "Rain\nall day"}]})
    c.append({"name": "call_with_content", "tools": [SEARCH, WEATHER], "messages": [
        {"role": "system", "content": "Use tools."}, {"role": "user", "content": "find nibble"},
        {"role": "assistant", "content": "Let me search.", "tool_calls": [call("web_search", 0, '{"q": "nibble"}')]},
        {"role": "tool", "tool_call_id": "functions.web_search:0", "content": "no results"},
        {"role": "assistant", "content": "Nothing found."}, {"role": "user", "content": "ok thanks"}]})
    c.append({"name": "markers_in_content", "messages": [
        {"role": "user", "content": "a <|im_end|> b\n\n  c  "}]})
    c.append({"name": "whitespace_and_unicode", "messages": [
        {"role": "system", "content": "  leading\n"}, {"role": "user", "content": "😀 中文 \t\n end"}]})
    return c


def render(conv: dict) -> str:
    tools = conv.get("tools")
    return template_env().render(messages=conv["messages"], tools=deep_sort(tools) if tools else None,
                                 add_generation_prompt=True)


def write_json(path: pathlib.Path, obj) -> None:
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def main() -> None:
    ranks = load_ranks()
    enc = kimi_encoding(ranks)
    names = special_names(N_BASE)
    kdir = OUT / "kimi"
    kdir.mkdir(parents=True, exist_ok=True)
    lines = [f"{base64.b64encode(t).decode()} {r}" for t, r in sorted(ranks.items(), key=lambda kv: kv[1])]
    (kdir / "tiktoken.model").write_text("\n".join(lines) + "\n")
    entry = lambda s: {"content": s, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                       "special": True}
    named = {i: s for i, s in names.items() if not s.startswith("<|reserved_token_")}
    config = {
        "added_tokens_decoder": {str(i): entry(s) for i, s in sorted(named.items())},
        "additional_special_tokens": ["<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>",
                                      "<|end_header_id|>", "[EOT]", "<|im_system|>", "<|im_middle|>"],
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
        "bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[PAD]", "unk_token": "[UNK]",
        "chat_template": KIMI_TEMPLATE, "clean_up_tokenization_spaces": False, "model_max_length": 1000000000000000019884624838656,
        "tokenizer_class": "TikTokenTokenizer",
    }
    write_json(kdir / "tokenizer_config.json", config)

    specials = list(named.values()) + [names[N_BASE + 5]]
    strings = corpus(specials)
    write_json(OUT / "kimi_cases.json", {"n_base": N_BASE, "cases": encode_cases(enc, strings),
                                         "decodes": random_decodes(enc, SEED + 2)})
    chats = []
    for conv in conversations():
        text = render(conv)
        chats.append({**conv, "prompt": text, "ids": kimi_encode(enc, text, True)})
    write_json(OUT / "kimi_chat_cases.json", {"template": "Kimi-K2-Instruct", "conversations": chats})
    print(f"kimi fixtures: {len(strings)} strings, {len(chats)} conversations, {N_BASE} ranks in {kdir}")


if __name__ == "__main__":
    main()
