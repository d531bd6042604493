#!/usr/bin/env python3
"""Load generator for `nibble serve` over OpenAI's API (standard library only).

  bench/serve_load.py --binary build/release/nibble [--model models/dsv4-tiny]
                      [--concurrency 1,4,16] [--requests-per-client 4] [--max-tokens 64]
  bench/serve_load.py --port 8080 ...          (a server already running)

Measures what `vllm bench serve` measures, the same way: streamed chat
completions with max_completion_tokens and stream_options.include_usage;
TTFT = request start to the first chunk that carries text (the role chunk
comes with the first token); ITL = the gaps between later text chunks;
TPOT = (end - first token) / (completion_tokens - 1) per request; output
tokens from usage.completion_tokens. At each concurrency level C, C clients
each send --requests-per-client requests back to back; prompts are cut from
the model folder's heldout.txt at mixed lengths (deterministic).

Prints one line per level and, with --out, writes them as JSON lines (with
the machine's load average before and after: numbers from a shared machine
mean little without it).
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time


def percentile(xs: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def one_request(port: int, prompt: str, max_tokens: int) -> dict:
    body = {"messages": [{"role": "user", "content": prompt}], "max_completion_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        return {"error": f"HTTP {resp.status}: {resp.read()[:200]!r}"}
    first = None
    last = None
    gaps: list[float] = []
    tokens = 0
    for raw in resp:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue  # keep-alive comments, blank separators
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        if ev.get("usage"):
            tokens = ev["usage"]["completion_tokens"]
        for c in ev.get("choices", []):
            d = c.get("delta", {})
            if d.get("content") or d.get("reasoning_content"):
                now = time.perf_counter()
                if first is None:
                    first = now
                else:
                    gaps.append(now - last)
                last = now
    end = time.perf_counter()
    conn.close()
    if first is None:
        return {"error": "no text streamed"}
    return {"ttft": first - t0, "e2e": end - t0, "tokens": tokens, "itl": gaps,
            "tpot": (end - first) / (tokens - 1) if tokens > 1 else None}


def prompts_from(model_dir: str, count: int) -> list[str]:
    path = os.path.join(model_dir, "heldout.txt")
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else "Once upon a time there was a king. " * 200
    words = text.split()
    out = []
    for i in range(count):
        n = (8, 32, 96, 200)[i % 4]  # mixed prompt lengths, in words
        start = (i * 131) % max(1, len(words) - n)
        out.append(" ".join(words[start:start + n]))
    return out


def run_level(port: int, concurrency: int, per_client: int, max_tokens: int, prompts: list[str]) -> dict:
    results: list[dict] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        for j in range(per_client):
            r = one_request(port, prompts[(k * per_client + j) % len(prompts)], max_tokens)
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ok = [r for r in results if "error" not in r]
    errors = [r["error"] for r in results if "error" in r]
    ttft = [r["ttft"] * 1e3 for r in ok]
    tpot = [r["tpot"] * 1e3 for r in ok if r["tpot"] is not None]
    itl = [g * 1e3 for r in ok for g in r["itl"]]
    out_tokens = sum(r["tokens"] for r in ok)
    return {"concurrency": concurrency, "requests": len(results), "errors": len(errors),
            "first_error": errors[0] if errors else None, "wall_s": round(wall, 3),
            "output_tokens": out_tokens, "output_tok_per_s": round(out_tokens / wall, 1),
            "ttft_ms_p50": round(percentile(ttft, 50), 2), "ttft_ms_p99": round(percentile(ttft, 99), 2),
            "tpot_ms_p50": round(percentile(tpot, 50), 2), "tpot_ms_p99": round(percentile(tpot, 99), 2),
            "itl_ms_p50": round(percentile(itl, 50), 2), "itl_ms_p99": round(percentile(itl, 99), 2)}


def start_server(binary: str, model: str, parallel: int, threads: int) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([binary, "serve", model, "--port", "0", "-t", str(threads), "--parallel", str(parallel),
                             "--cache-tokens", "0"],  # every request prefills its whole prompt
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = 0
    for line in proc.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "ready" in line:
            break
    if not port:
        sys.exit("nibble serve did not start")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # drain the request log
    return proc, port


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, help="a running server (else --binary starts one)")
    ap.add_argument("--binary", help="the nibble binary to start")
    ap.add_argument("--model", default="models/dsv4-tiny")
    ap.add_argument("--threads", type=int, default=1, help="-t of the started server")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--requests-per-client", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--out", help="append the levels as JSON lines here")
    a = ap.parse_args()
    levels = [int(x) for x in a.concurrency.split(",")]
    proc = None
    port = a.port
    if port is None:
        if not a.binary:
            sys.exit("give --port (a running server) or --binary (to start one)")
        proc, port = start_server(a.binary, a.model, max(levels), a.threads)
    try:
        prompts = prompts_from(a.model, 64)
        run_level(port, 1, 1, 8, prompts)  # warm-up
        load_before = os.getloadavg()
        rows = [run_level(port, c, a.requests_per_client, a.max_tokens, prompts) for c in levels]
        load_after = os.getloadavg()
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=15)
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; "
          f"max_tokens {a.max_tokens}, {a.requests_per_client} requests per client")
    print(f"{'conc':>4} {'reqs':>4} {'err':>3} {'tok/s':>8} {'TTFT p50':>9} {'p99':>8} {'TPOT p50':>9} {'p99':>8}"
          f" {'ITL p50':>8} {'p99':>8}  (ms)")
    for r in rows:
        print(f"{r['concurrency']:>4} {r['requests']:>4} {r['errors']:>3} {r['output_tok_per_s']:>8} "
              f"{r['ttft_ms_p50']:>9} {r['ttft_ms_p99']:>8} {r['tpot_ms_p50']:>9} {r['tpot_ms_p99']:>8} "
              f"{r['itl_ms_p50']:>8} {r['itl_ms_p99']:>8}")
    if a.out:
        with open(a.out, "a") as f:
            for r in rows:
                r.update({"model": a.model, "max_tokens": a.max_tokens, "threads": a.threads,
                          "loadavg_before": round(load_before[0], 2), "loadavg_after": round(load_after[0], 2),
                          "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
                f.write(json.dumps(r) + "\n")
    if any(r["errors"] for r in rows):
        sys.exit("some requests failed: " + str([r["first_error"] for r in rows if r["errors"]]))


if __name__ == "__main__":
    main()
