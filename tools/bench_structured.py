#!/usr/bin/env python3
"""bench_structured.py: the cost of constrained decoding (docs/BENCHMARKS.md). Starts
`shardlm serve` (one node, or behind --local-workers N), asks the 10 JSON schemas of
tests/e2e/test_structured.py greedily, with response_format and without (the same prompts;
the unconstrained reply is cut to the same number of tokens with max_tokens), R rounds, and
prints per request the completion tokens and ms per token (server timings) of both, then
the totals and the root's mask time per token from /metrics."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
import harness  # noqa: E402
from test_structured import CASES  # noqa: E402


def post(url, body):
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=300) as r:
        out = json.loads(r.read())
    return out, time.perf_counter() - t0


def metrics(url):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        m = {}
        for line in r.read().decode().splitlines():
            if line.startswith("shardlm_grammar") or line.startswith("shardlm_completion_tokens_total"):
                k, v = line.split()[0], float(line.split()[-1])
                m[k] = v
        return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--bin", default="build/release/shardlm")
    ap.add_argument("-t", "--threads", default="1")
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("--local-workers", type=int, default=0)
    a = ap.parse_args()
    extra = []
    if a.local_workers:
        ws = [harness.start_worker(a.bin, threads=int(a.threads))[1] for _ in range(a.local_workers)]
        extra = ["--workers", ",".join(ws), "--sync-type", "exact"]
    _, url = harness.start([a.bin, "serve", "-m", a.model, "--port", "0", "--host", "127.0.0.1", "-t", a.threads,
                            "--ctx", "1024"] + extra)
    con, free = [], []  # (tokens, seconds) per request
    for r in range(a.rounds):
        for prompt, schema in CASES:
            msgs = [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": prompt}]
            out, s = post(url, {"messages": msgs, "max_tokens": 300, "temperature": 0, "response_format":
                                {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}})
            n = out["usage"]["completion_tokens"]
            con.append((n, s))
            out2, s2 = post(url, {"messages": msgs, "max_tokens": n, "temperature": 0})
            free.append((out2["usage"]["completion_tokens"], s2))
    m = metrics(url)
    ms = lambda xs: 1000 * sum(s for _, s in xs) / sum(n for n, _ in xs)
    per_c = [1000 * s / n for n, s in con]
    per_f = [1000 * s / n for n, s in free]
    print(f"requests: {len(con)} constrained, {len(free)} unconstrained; tokens {sum(n for n, _ in con)} / "
          f"{sum(n for n, _ in free)}")
    print(f"ms per completion token (request wall time, prompt included): constrained {ms(con):.2f}, "
          f"unconstrained {ms(free):.2f}, ratio {ms(con) / ms(free):.3f}; medians per request "
          f"{statistics.median(per_c):.2f} / {statistics.median(per_f):.2f}")
    masks, cached, secs = (m.get("shardlm_grammar_masks_total", 0), m.get("shardlm_grammar_masks_cached_total", 0),
                           m.get("shardlm_grammar_mask_seconds_total", 0))
    print(f"masks {masks:.0f}, from the cache {cached:.0f} ({100 * cached / max(masks, 1):.0f} %), mask time "
          f"{1000 * secs / max(masks, 1):.3f} ms per token on average ({1000 * secs / max(masks - cached, 1):.2f} ms "
          f"per mask computed)")


if __name__ == "__main__":
    harness.run_main(main)
