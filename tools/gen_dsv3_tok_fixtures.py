#!/usr/bin/env python3
"""DeepSeek-V3's tokenizer pipeline and chat template, with `tokenizers` and
jinja2 as the oracles.

DeepSeek-V3's tokenizer.json (docs/text.md): no normalizer, three Split
(Isolated) regexes then ByteLevel(add_prefix_space=false, use_regex=false),
BPE, ByteLevel decoder; BOS/EOS/pad at ids 0..2 and the chat and tool
markers as added tokens (128800.. in the real file). The real file is not
downloadable here: this trains a 4,096-token vocabulary with the same
pipeline (tools/dsv4_tokenizer.py, whose patterns are V3's) and V3's added
tokens on top.

The chat template is the one of deepseek-ai/DeepSeek-V3's
tokenizer_config.json (the December 2024 release; read in a third-party
copy, not downloaded), rendered with jinja2 under transformers' settings.

Writes tests/fixtures/tokenizer/dsv3_tokenizer.json, dsv3_cases.json
(encode/decode cases, checked by tokenizers) and dsv3_chat_cases.json.
  python tools/gen_dsv3_tok_fixtures.py      (needs tokenizers, jinja2)
"""
from __future__ import annotations

import json
import pathlib
import sys

import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import dsv4_tokenizer  # noqa: E402
import gen_tokenizer_fixtures as base  # noqa: E402

OUT = base.OUT
SEED = 20241226

# DeepSeek-V3's added tokens after the learned vocabulary (its
# tokenizer_config.json: <｜fim▁hole｜> 128800 .. <｜tool▁sep｜> 128814; the
# chat and tool markers are not special there).
DSV3_ADDED = [("<｜fim▁hole｜>", False), ("<｜fim▁begin｜>", False), ("<｜fim▁end｜>", False),
              ("<｜User｜>", False), ("<｜Assistant｜>", False), ("<|EOT|>", True),
              ("<｜tool▁calls▁begin｜>", False), ("<｜tool▁calls▁end｜>", False), ("<｜tool▁call▁begin｜>", False),
              ("<｜tool▁call▁end｜>", False), ("<｜tool▁outputs▁begin｜>", False), ("<｜tool▁outputs▁end｜>", False),
              ("<｜tool▁output▁begin｜>", False), ("<｜tool▁output▁end｜>", False), ("<｜tool▁sep｜>", False)]

DSV3_TEMPLATE = (
    r"""{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"""
    r"""{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='', is_first_sp=true) %}"""
    r"""{%- for message in messages %}{%- if message['role'] == 'system' %}{%- if ns.is_first_sp %}"""
    r"""{% set ns.system_prompt = ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}"""
    r"""{%- else %}{% set ns.system_prompt = ns.system_prompt + '\n\n' + message['content'] %}{%- endif %}"""
    r"""{%- endif %}{%- endfor %}{{bos_token}}{{ns.system_prompt}}{%- for message in messages %}"""
    r"""{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}"""
    r"""{%- if message['role'] == 'assistant' and message['content'] is none %}{%- set ns.is_tool = false -%}"""
    r"""{%- for tool in message['tool_calls']%}{%- if not ns.is_first %}"""
    r"""{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '```json' + '\n' + tool['function']['arguments'] + '\n' + '```' + '<｜tool▁call▁end｜>'}}"""
    r"""{%- set ns.is_first = true -%}{%- else %}"""
    r"""{{'\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '```json' + '\n' + tool['function']['arguments'] + '\n' + '```' + '<｜tool▁call▁end｜>'}}"""
    r"""{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}"""
    r"""{%- if message['role'] == 'assistant' and message['content'] is not none %}{%- if ns.is_tool %}"""
    r"""{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}"""
    r"""{%- else %}{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}"""
    r"""{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}"""
    r"""{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}"""
    r"""{%- set ns.is_output_first = false %}{%- else %}"""
    r"""{{'\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}"""
    r"""{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}"""
    r"""{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %}""")


def render(messages: list[dict]) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    return env.from_string(DSV3_TEMPLATE).render(messages=messages, bos_token=dsv4_tokenizer.BOS,
                                                  eos_token=dsv4_tokenizer.EOS, add_generation_prompt=True)


def call(name: str, args: str) -> dict:
    return {"id": "call_" + name, "type": "function", "function": {"name": name, "arguments": args}}


def conversations() -> list[dict]:
    u = lambda s: {"role": "user", "content": s}
    a = lambda s: {"role": "assistant", "content": s}
    s = lambda x: {"role": "system", "content": x}
    t = lambda x, i: {"role": "tool", "tool_call_id": i, "content": x}
    calls = lambda *c: {"role": "assistant", "content": None, "tool_calls": list(c)}
    return [
        {"name": "user_only", "messages": [u("Hello")]},
        {"name": "system_user", "messages": [s("You are terse."), u("Hi 你好")]},
        {"name": "two_systems", "messages": [s("S1"), u("U1"), s("S2"), u("U2")]},
        {"name": "multi_turn", "messages": [s("S"), u("U1"), a("A1"), u("U2")]},
        {"name": "one_call_then_result", "messages": [
            u("Weather in Paris?"), calls(call("get_weather", '{"city": "Paris"}')),
            t('{"t": 21}', "call_get_weather")]},
        {"name": "two_calls_two_results_answer", "messages": [
            u("Paris and Tokyo?"), calls(call("get_weather", '{"city": "Paris"}'), call("get_time", '{"tz": "JST"}')),
            t("21C", "call_get_weather"), t("09:00", "call_get_time"), a("Sunny, 9am."), u("thanks")]},
        {"name": "second_call_turn", "messages": [
            u("a"), calls(call("f", "{}")), t("r1", "call_f"), a("ok"), u("b"), calls(call("g", '{"x": 1}')),
            t("r2", "call_g")]},
        {"name": "markers_and_whitespace", "messages": [s("  lead\n"), u("x <｜User｜> y\n\n z  ")]},
    ]


def main() -> None:
    base.ENGLISH_WORDS.extend(base.english_words(base.stdlib_texts()))
    texts = base.training_corpus()
    path = OUT / "dsv3_tokenizer.json"
    tok = dsv4_tokenizer.train_dsv4_tokenizer(texts, vocab_size=4096, out_path=str(path), added_tokens=DSV3_ADDED)
    specials = dsv4_tokenizer.DSV4_LEADING_SPECIALS + [c for c, _ in DSV3_ADDED]
    strings = base.test_strings(specials, SEED)
    base.write_json(OUT / "dsv3_cases.json", {"tokenizer": path.name, "cases": base.encode_cases(tok, strings),
                                              "decodes": base.random_decodes(tok, SEED + 1)})
    chats = []
    for conv in conversations():
        prompt = render(conv["messages"])
        chats.append({**conv, "prompt": prompt, "ids": tok.encode(prompt, add_special_tokens=False).ids})
    base.write_json(OUT / "dsv3_chat_cases.json", {"template": "DeepSeek-V3", "conversations": chats})
    print(f"dsv3 fixtures: {len(strings)} strings, {len(chats)} conversations, vocab {tok.get_vocab_size()}")


if __name__ == "__main__":
    main()
