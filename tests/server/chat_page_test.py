#!/usr/bin/env python3
"""The chat page at `/` of `nibble serve`, driven in headless Chromium.

Run by ctest (tests/CMakeLists.txt) as

    python3 tests/server/chat_page_test.py --binary NIBBLE --model DIR --out DIR

Chromium is Debian's `chromium` (deps/debian-packages.txt). Without it the
test exits 77, which ctest reports as skipped, with the fix in the message.

The browser is driven over the DevTools protocol on a pipe
(--remote-debugging-pipe: NUL-terminated JSON on file descriptors 3 and 4),
so the test needs nothing beyond Python's standard library. It types into
the page and clicks its buttons as a user would, and reads the DOM.

What it checks, each against the same server spoken to directly over HTTP
(urllib, not the page):
  - the page is served open (no key) and has no external resources;
  - without the API key the page shows the server's 401 message;
  - with the key: a greedy reply streamed into the DOM (several SSE events)
    is the text of the same non-streamed request;
  - a second turn sends the conversation: its reply equals the API's reply
    to the three messages;
  - thinking on: the reasoning block holds the API's reasoning_content;
  - stop: the fetch is aborted, the page says "stopped", and the server
    counts a cancelled request (nibble:requests_cancelled_total).
A screenshot of the page (PNG) is written to --out after each phase.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from nibble_server import NibbleServer

KEY = "page-test-key"


class Server(NibbleServer):
    """nibble serve (nibble_server.py), with this test's requests."""

    def get(self, path: str, key: str | None = KEY) -> tuple[int, str, dict]:
        req = urllib.request.Request(self.base() + path)
        if key:
            req.add_header("Authorization", "Bearer " + key)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read().decode(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), dict(e.headers)

    def chat(self, body: dict) -> dict:
        req = urllib.request.Request(self.base() + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())

    def metric(self, name: str) -> float:
        _, text, _ = self.get("/metrics")
        m = re.search(r"^nibble:" + re.escape(name) + r" (\S+)$", text, re.M)
        return float(m.group(1)) if m else float("nan")


class Browser:
    """Headless Chromium with one page, spoken to over --remote-debugging-pipe."""

    def __init__(self, chromium: str, profile: str):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def child_fds() -> None:
            # The protocol's fixed descriptors: 3 reads commands, 4 writes
            # replies. The pipes may already sit on 3 / 4, and dup2 onto the
            # same number would keep their close-on-exec flag: copy them
            # away first, then onto 3 and 4 (dup2 to another fd is inheritable).
            r, w = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--disable-dev-shm-usage",
             "--window-size=1000,760",
             "--user-data-dir=" + profile, "--remote-debugging-pipe", "about:blank"],
            preexec_fn=child_fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.next_id = 0
        self.buffer = b""
        self.session = None
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")

    def call(self, method: str, timeout: float = 30, **params) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self.next_id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply.get("result", {})
            chunk = os.read(self.from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self.buffer += chunk
        raise RuntimeError(f"{method}: no reply within {timeout} s")

    def js(self, expression: str):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page script failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && !!document.getElementById('send')", 20)

    def wait_for(self, expression: str, timeout: float):
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = self.js(expression)
            if v:
                return v
            time.sleep(0.05)
        raise RuntimeError(f"timed out waiting for: {expression}")

    def screenshot(self, path: str) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


failures: list[str] = []


def check(cond: bool, what: str) -> None:
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def set_value(b: Browser, element_id: str, value) -> None:
    b.js(f"(() => {{ const e = document.getElementById({json.dumps(element_id)}); "
         f"if (e.type === 'checkbox') e.checked = {json.dumps(bool(value))}; else e.value = {json.dumps(str(value))}; "
         f"e.dispatchEvent(new Event('change')); }})()")


def say(b: Browser, text: str) -> None:
    set_value(b, "input", text)
    b.js("document.getElementById('send').click()")


LAST_REPLY = "[...document.querySelectorAll('.msg.assistant')].pop()"


def reply_state(b: Browser) -> dict:
    return b.js(f"(() => {{ const m = {LAST_REPLY}; if (!m) return null; return {{"
                "state: m.dataset.state, events: Number(m.dataset.events), "
                "content: m.querySelector('.content').textContent, "
                "reasoning: m.querySelector('.reasoning-text').textContent, "
                "reasoningShown: !m.querySelector('.reasoning').hidden, "
                "error: (m.querySelector('.err') || {textContent: ''}).textContent, "
                "note: m.querySelector('.note').textContent }; })()")


def wait_reply(b: Browser, timeout: float = 60) -> dict:
    b.wait_for(f"(() => {{ const m = {LAST_REPLY}; return m && m.dataset.state !== 'streaming'; }})()", timeout)
    return reply_state(b)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True, help="folder for the screenshots")
    args = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("SKIP: no chromium on PATH; install Debian's `chromium` (scripts/install-deps.sh, "
              "deps/debian-packages.txt) to run the chat-page test")
        return 77
    os.makedirs(args.out, exist_ok=True)

    server = Server(args.binary, args.model, "--api-key", KEY)
    profile = tempfile.mkdtemp(prefix="nibble-chat-page-")
    browser = None
    try:
        status, page, headers = server.get("/", key=None)
        check(status == 200 and headers.get("Content-Type", "").startswith("text/html"),
              f"GET / without the key: 200 text/html (got {status} {headers.get('Content-Type')})")
        external = re.findall(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page, re.I)
        check(not external and "@import" not in page, f"the page loads no external resource ({external})")

        browser = Browser(chromium, profile)
        browser.navigate(server.base() + "/")
        browser.js("localStorage.clear()")

        # No key: the server's 401 message shows in the reply.
        set_value(browser, "temperature", 0)
        set_value(browser, "max-tokens", 24)
        say(browser, "Hello")
        r = wait_reply(browser)
        check(r["state"] == "error" and "401" in r["error"] and "API key" in r["error"],
              f"without the key the page shows the 401 ({r['error']!r})")
        browser.screenshot(os.path.join(args.out, "chat_page_401.png"))

        # With the key: a fresh conversation, greedy.
        browser.js("document.getElementById('clear').click()")
        set_value(browser, "apikey", KEY)
        say(browser, "Hello, who are you?")
        r = wait_reply(browser)
        want = server.chat({"messages": [{"role": "user", "content": "Hello, who are you?"}], "temperature": 0,
                            "max_tokens": 24})["choices"][0]["message"]
        check(r["state"] == "done", f"first reply done ({r['state']}, {r['error']!r})")
        check(r["content"] == (want["content"] or ""),
              f"first reply in the DOM equals the API's: {r['content']!r} vs {want['content']!r}")
        check(len(r["content"]) > 0, "the first reply is not empty")
        # Role chunk + at least one content chunk + finish + usage: a stream, not one blob.
        check(r["events"] >= 4, f"the reply came as a stream ({r['events']} SSE events)")
        check(not r["reasoningShown"], "thinking off: no reasoning block")
        check("24 tokens" in r["note"] or "finish" in r["note"], f"the reply's note ({r['note']!r})")
        browser.screenshot(os.path.join(args.out, "chat_page_reply.png"))

        # Second turn: the conversation goes along.
        say(browser, "Tell me more.")
        r2 = wait_reply(browser)
        want2 = server.chat({"messages": [{"role": "user", "content": "Hello, who are you?"},
                                          {"role": "assistant", "content": r["content"]},
                                          {"role": "user", "content": "Tell me more."}],
                             "temperature": 0, "max_tokens": 24})["choices"][0]["message"]
        n_msgs = browser.js("document.querySelectorAll('.msg').length")
        check(n_msgs == 4, f"two turns show four messages ({n_msgs})")
        check(r2["content"] == (want2["content"] or ""),
              f"second turn equals the API's reply to the whole conversation: {r2['content']!r} vs "
              f"{want2['content']!r}")
        browser.screenshot(os.path.join(args.out, "chat_page_two_turns.png"))

        # Thinking on: the reasoning goes to its own block.
        browser.js("document.getElementById('clear').click()")
        set_value(browser, "thinking", True)
        say(browser, "Why is the sky blue?")
        r3 = wait_reply(browser)
        want3 = server.chat({"messages": [{"role": "user", "content": "Why is the sky blue?"}], "temperature": 0,
                             "max_tokens": 24, "chat_template_kwargs": {"thinking": True}})["choices"][0]["message"]
        check(r3["reasoning"] == (want3.get("reasoning_content") or ""),
              f"thinking: the reasoning block equals reasoning_content: {r3['reasoning']!r} vs "
              f"{want3.get('reasoning_content')!r}")
        check(r3["content"] == (want3["content"] or ""), "thinking: the answer equals content")
        check(r3["reasoningShown"] == bool(want3.get("reasoning_content")), "the reasoning block shows when there is some")
        browser.screenshot(os.path.join(args.out, "chat_page_thinking.png"))

        # Stop: a long reply aborted once text has come; the server cancels it.
        # Greedy, so the reply is deterministic: the API shows it runs past
        # 200 tokens without an end, so the stop always comes mid-reply.
        story = [{"role": "user", "content": "Write a very long story."}]
        long_reply = server.chat({"messages": story, "temperature": 0, "max_tokens": 200})["choices"][0]
        check(long_reply["finish_reason"] == "length", "the stop test's greedy reply runs past 200 tokens")
        browser.js("document.getElementById('clear').click()")
        set_value(browser, "thinking", False)
        set_value(browser, "temperature", 0)
        set_value(browser, "max-tokens", 100000)
        cancelled_before = server.metric("requests_cancelled_total")
        say(browser, "Write a very long story.")
        browser.wait_for(f"(() => {{ const m = {LAST_REPLY}; return m && Number(m.dataset.events) >= 3; }})()", 60)
        browser.js("document.getElementById('stop').click()")
        r4 = wait_reply(browser, 10)
        check(r4["state"] == "stopped" and r4["note"] == "stopped", f"stop: the page says stopped ({r4['state']})")
        deadline = time.time() + 10
        while time.time() < deadline and server.metric("requests_cancelled_total") <= cancelled_before:
            time.sleep(0.1)
        check(server.metric("requests_cancelled_total") == cancelled_before + 1,
              "stop: the server cancelled the request (requests_cancelled_total + 1)")
        deadline = time.time() + 10
        while time.time() < deadline and server.metric("requests_running") != 0:
            time.sleep(0.1)
        check(server.metric("requests_running") == 0, "stop: no request left running")
        check(browser.js("!document.getElementById('send').disabled && document.getElementById('stop').disabled"),
              "stop: the page is ready for the next message")
        browser.screenshot(os.path.join(args.out, "chat_page_stopped.png"))
        print(f"screenshots in {args.out}")
    finally:
        if browser:
            browser.close()
        shutil.rmtree(profile, ignore_errors=True)
        code = server.stop()
    check(code == 0, f"nibble serve exited 0 on SIGTERM (got {code})")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
