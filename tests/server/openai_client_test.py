#!/usr/bin/env python3
"""`nibble serve` spoken to by the official `openai` Python client.

Run by ctest (tests/CMakeLists.txt) as

    python3 tests/server/openai_client_test.py --venv VENV --binary NIBBLE --model DIR

VENV is the virtual environment `make test` creates from
tests/server/requirements-openai.txt (target `openai-venv`). This script
re-executes itself with that environment's Python; if the environment is
missing or has no `openai`, the test FAILS and says how to make it (a test
that silently skips would pass on a machine that never ran it).

Each check starts from what the client itself parses (its pydantic models
and its exception classes), and compares against a second route through the
server that does not use the feature (the same request streamed and not,
one choice per seed, the raw /tokenize endpoint).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request

from nibble_server import NibbleServer


def reexec_in_venv(venv: str) -> None:
    python = os.path.join(venv, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        return
    if not os.path.exists(python):
        sys.exit(f"FAIL: no virtual environment at {venv}; create it with `make openai-venv` "
                 f"(python3 -m venv {venv} && {venv}/bin/pip install -r tests/server/requirements-openai.txt)")
    os.execv(python, [python] + sys.argv)


class Server(NibbleServer):
    """nibble serve (nibble_server.py), with this test's requests."""

    def url(self) -> str:
        return self.base() + "/v1"


failures: list[str] = []


def check(cond: bool, what: str) -> None:
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def raises(exc_type, fn, what: str):
    try:
        fn()
    except exc_type as e:
        check(True, what)
        return e
    except Exception as e:  # the wrong class: the client mapped the status differently
        check(False, f"{what}: raised {type(e).__name__}: {e}")
        return None
    check(False, f"{what}: no exception")
    return None


def post_raw(port: int, path: str, body: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--venv", required=True)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    reexec_in_venv(args.venv)
    try:
        import openai
    except ImportError:
        sys.exit(f"FAIL: {args.venv} has no `openai`; run `make openai-venv`")
    print(f"openai {openai.__version__}", flush=True)

    s = Server(args.binary, args.model, "--parallel", "6")
    try:
        client = openai.OpenAI(base_url=s.url(), api_key="unused", max_retries=0, timeout=60)
        run_checks(openai, client, s)
    finally:
        check(s.stop() == 0, "SIGTERM: exit 0")

    # Authentication and a full queue, each on its own server.
    k = Server(args.binary, args.model, "--api-key", "sekrit", "--ctx-size", "64")
    try:
        bad = openai.OpenAI(base_url=k.url(), api_key="wrong", max_retries=0)
        raises(openai.AuthenticationError, lambda: bad.models.list(), "401 wrong key -> AuthenticationError")
        good = openai.OpenAI(base_url=k.url(), api_key="sekrit", max_retries=0)
        check(good.models.list().data[0].id == "dsv4-tiny", "the right key is accepted")
        e = raises(openai.BadRequestError, lambda: good.completions.create(model="dsv4-tiny", prompt="word " * 100),
                   "400 prompt longer than the context")
        check(e is not None and "64" in str(e) and "tokens" in str(e), "the context error names both lengths")
    finally:
        k.stop()
    q = Server(args.binary, args.model, "--parallel", "1", "--max-queue", "0")
    try:
        c = openai.OpenAI(base_url=q.url(), api_key="x", max_retries=0)
        stream = c.completions.create(model="dsv4-tiny", prompt="Once upon a time", max_tokens=100000,
                                      temperature=0, stream=True)
        next(iter(stream))  # the one slot is taken
        e = raises(openai.InternalServerError,
                   lambda: c.completions.create(model="dsv4-tiny", prompt="x", max_tokens=2),
                   "503 queue full -> InternalServerError (a 5xx the client would retry)")
        check(e is not None and e.status_code == 503 and e.response.headers.get("retry-after") == "1",
              "503 carries Retry-After: 1")
        stream.close()
    finally:
        q.stop()

    if failures:
        print(f"{len(failures)} check(s) failed:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("all checks passed")


def run_checks(openai, client, s: Server) -> None:
    models = client.models.list()
    check([m.id for m in models.data] == ["dsv4-tiny"], "models.list")

    # Chat, non-streamed and streamed (greedy: the same text).
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story."}]
    r = client.chat.completions.create(model="dsv4-tiny", messages=msgs, max_tokens=12, temperature=0)
    check(r.object == "chat.completion" and r.choices[0].message.role == "assistant", "chat: shape")
    check(r.choices[0].finish_reason in ("stop", "length"), "chat: finish_reason")
    check(r.usage.completion_tokens == 12 or r.choices[0].finish_reason == "stop", "chat: usage")
    text = ""
    usage = None
    roles = []
    for chunk in client.chat.completions.create(model="dsv4-tiny", messages=msgs, max_tokens=12, temperature=0,
                                                stream=True, stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            roles.append(c.delta.role)
            text += c.delta.content or ""
    check(text == r.choices[0].message.content, "chat streamed == chat not streamed")
    check(roles[0] == "assistant" and all(x is None for x in roles[1:]), "chat stream: role first only")
    check(usage is not None and usage.completion_tokens == r.usage.completion_tokens, "chat stream: include_usage")

    # Completions, both ways; stop strings; seeds.
    c = client.completions.create(model="dsv4-tiny", prompt="Once upon a time", max_tokens=16, temperature=0)
    streamed = "".join(ch.choices[0].text for ch in client.completions.create(
        model="dsv4-tiny", prompt="Once upon a time", max_tokens=16, temperature=0, stream=True) if ch.choices)
    check(c.choices[0].text == streamed and len(streamed) > 0, "completions streamed == not streamed")
    full = c.choices[0].text
    stop = full[len(full) // 2: len(full) // 2 + 3]
    cs = client.completions.create(model="dsv4-tiny", prompt="Once upon a time", max_tokens=16, temperature=0,
                                   stop=[stop])
    check(cs.choices[0].text == full[:full.index(stop)] and cs.choices[0].finish_reason == "stop", "stop strings")
    a = client.completions.create(model="dsv4-tiny", prompt="Hi", max_tokens=10, temperature=1, seed=5)
    b = client.completions.create(model="dsv4-tiny", prompt="Hi", max_tokens=10, temperature=1, seed=5)
    check(a.choices[0].text == b.choices[0].text, "seed reproducibility")

    # Penalties reach the sampler: the tiny model's greedy text repeats itself.
    pen = client.completions.create(model="dsv4-tiny", prompt="Once upon a time", max_tokens=16, temperature=0,
                                    frequency_penalty=2.0, presence_penalty=1.0)
    check(pen.choices[0].text != full, "frequency / presence penalties change the greedy reply")
    rp = client.completions.create(model="dsv4-tiny", prompt="Once upon a time", max_tokens=16, temperature=0,
                                   extra_body={"repetition_penalty": 1.3})
    check(rp.choices[0].text != full, "repetition_penalty (extra_body) changes the greedy reply")

    # n choices: choice i is the single request with seed + i.
    n = client.completions.create(model="dsv4-tiny", prompt="Hi", max_tokens=10, temperature=1, seed=5, n=2)
    one = client.completions.create(model="dsv4-tiny", prompt="Hi", max_tokens=10, temperature=1, seed=6)
    check(len(n.choices) == 2 and n.choices[0].text == a.choices[0].text and n.choices[1].text == one.choices[0].text,
          "n=2: choices are seeds 5 and 6")

    # Tokenize (not an OpenAI route: plain HTTP) agrees with usage.
    ids = post_raw(s.port, "/tokenize", {"content": "Once upon a time", "add_special": True})["tokens"]
    check(c.usage.prompt_tokens == len(ids), "tokenize count == completions prompt_tokens")
    check(post_raw(s.port, "/detokenize", {"tokens": ids[1:]})["prompt"] == "Once upon a time", "detokenize")

    # Logprobs, as the client's models parse them.
    lp = client.chat.completions.create(model="dsv4-tiny", messages=[{"role": "user", "content": "Hello"}],
                                        max_tokens=5, temperature=0, logprobs=True, top_logprobs=3)
    content = lp.choices[0].logprobs.content
    check(len(content) == 5 and all(len(t.top_logprobs) == 3 for t in content), "chat logprobs: 5 tokens x top 3")
    check(all(t.top_logprobs[0].token == t.token and t.logprob <= 0 for t in content), "greedy token = top logprob")
    check("".join(t.token for t in content) == lp.choices[0].message.content, "logprob tokens spell the content")
    clp = client.completions.create(model="dsv4-tiny", prompt="Hi", max_tokens=4, temperature=0, logprobs=2)
    check(len(clp.choices[0].logprobs.tokens) == 4 and len(clp.choices[0].logprobs.top_logprobs[0]) == 2,
          "completions logprobs")

    # Thinking mode: reasoning_content (DeepSeek's field) on the message and the deltas.
    think = {"chat_template_kwargs": {"thinking": True}}
    t = client.chat.completions.create(model="dsv4-tiny", messages=[{"role": "user", "content": "Why?"}],
                                       max_tokens=10, temperature=0, extra_body=think)
    reasoning = getattr(t.choices[0].message, "reasoning_content", None)
    check(isinstance(reasoning, str) and len(reasoning) > 0, "thinking: message.reasoning_content")
    streamed_reasoning = ""
    for chunk in client.chat.completions.create(model="dsv4-tiny", messages=[{"role": "user", "content": "Why?"}],
                                                max_tokens=10, temperature=0, stream=True, extra_body=think):
        for ch in chunk.choices:
            streamed_reasoning += getattr(ch.delta, "reasoning_content", None) or ""
    check(streamed_reasoning == reasoning, "thinking: streamed reasoning_content == not streamed")
    plain = client.chat.completions.create(model="dsv4-tiny", messages=[{"role": "user", "content": "Why?"}],
                                           max_tokens=4, temperature=0, reasoning_effort="none")
    check(getattr(plain.choices[0].message, "reasoning_content", None) is None, "reasoning_effort none: no reasoning")

    # Tools: the client's typed tools / tool_choice / history with tool calls
    # are accepted; a forced call never leaks markup into content, and any
    # tool_calls parse into the client's models with JSON arguments.
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
    history = [{"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": None,
                "tool_calls": [{"id": "call_1", "type": "function",
                                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    for choice in ("auto", "required", {"type": "function", "function": {"name": "get_weather"}}):
        tr = client.chat.completions.create(model="dsv4-tiny", messages=history, tools=tools, tool_choice=choice,
                                            max_tokens=16, temperature=0)
        m = tr.choices[0].message
        check("DSML" not in (m.content or ""), f"tools ({json.dumps(choice)}): no markup in content")
        for call in m.tool_calls or []:
            check(call.function.name == "get_weather" and isinstance(json.loads(call.function.arguments), dict),
                  f"tools ({json.dumps(choice)}): tool_call parses")
        check(tr.choices[0].finish_reason in ("stop", "length", "tool_calls"), f"tools ({json.dumps(choice)}): finish")

    # Errors as the client raises them.
    raises(openai.BadRequestError, lambda: client.chat.completions.create(
        model="dsv4-tiny", messages=[{"role": "user", "content": "x"}], extra_body={"frobnicate": 1}),
        "400 unknown field -> BadRequestError")
    e = raises(openai.BadRequestError, lambda: client.completions.create(model="dsv4-tiny", prompt="x",
                                                                          max_tokens=-1), "400 impossible value")
    check(e is not None and e.body.get("param") == "max_tokens", "400 names the field (param)")
    raises(openai.NotFoundError, lambda: client.chat.completions.create(
        model="gpt-4", messages=[{"role": "user", "content": "x"}]), "404 unknown model -> NotFoundError")
    big = "a" * (9 << 20)
    e = raises(openai.APIStatusError, lambda: client.completions.create(model="dsv4-tiny", prompt=big, max_tokens=1),
               "413 body too large -> APIStatusError")
    check(e is not None and e.status_code == 413, "413 status")


if __name__ == "__main__":
    main()
