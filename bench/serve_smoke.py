#!/usr/bin/env python3
"""A small load check for `nibble serve` (standard library only).

  bench/serve_smoke.py --port 8080 [--clients 16] [--tokens 100]

Prints single-stream decode tokens/s through the server (non-streamed
greedy completion, usage.completion_tokens / wall time), then runs
--clients concurrent streaming completions while probing /health every
20 ms, and prints aggregate output tokens/s and /health latency p50/p99/max.
"""
import argparse, http.client, json, threading, time


def post(port, path, body, stream=False):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if not stream:
        return r.status, json.loads(r.read())
    tokens = 0
    for line in r:
        line = line.strip()
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            ev = json.loads(line[6:])
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
    return r.status, tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=100)
    a = ap.parse_args()
    body = {"prompt": "Once upon a time", "max_tokens": a.tokens, "temperature": 0}
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        _, j = post(a.port, "/v1/completions", body)
        dt = time.perf_counter() - t0
        best = max(best, j["usage"]["completion_tokens"] / dt)
    print(f"single stream: {best:.1f} tok/s (best of 3, {a.tokens} tokens, prefill included)")

    done = []
    def client(i):
        b = {"prompt": f"Story {i}:", "max_tokens": a.tokens, "temperature": 1.0, "seed": i,
             "stream": True, "stream_options": {"include_usage": True}}
        done.append(post(a.port, "/v1/completions", b, stream=True)[1])
    threads = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    lat = []
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=10)
        s = time.perf_counter()
        c.request("GET", "/health")
        c.getresponse().read()
        lat.append((time.perf_counter() - s) * 1000)
        c.close()
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    for t in threads:
        t.join()
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
    print(f"{a.clients} streams: {sum(done)} tokens in {wall:.2f} s = {sum(done) / wall:.1f} tok/s aggregate; "
          f"/health p50 {q(0.5):.2f} ms, p99 {q(0.99):.2f} ms, max {lat[-1]:.2f} ms ({len(lat)} probes)")


if __name__ == "__main__":
    main()
