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
            if line.startswith(("shardlm_grammar", "shardlm_completion_tokens_total", "shardlm_generation_seconds_total",
                                "shardlm_requests_total")):
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
    # decode ms per token from the server's counters: generation seconds (first token to
    # last) over the tokens after the first, summed over each kind's requests
    decode = {"constrained": [0.0, 0], "unconstrained": [0.0, 0]}
    lengths = []
    for r in range(a.rounds):
        for i, (prompt, schema) in enumerate(CASES):
            msgs = [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": prompt}]
            for kind in ("constrained", "unconstrained"):
                body = {"messages": msgs, "max_tokens": 300, "temperature": 0}
                if kind == "constrained":
                    body["response_format"] = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
                else:
                    body["max_tokens"] = lengths[-1]  # as long as the constrained reply
                m0 = metrics(url)
                out, _ = post(url, body)
                m1 = metrics(url)
                n = out["usage"]["completion_tokens"]
                if kind == "constrained":
                    lengths.append(n)
                d = decode[kind]
                d[0] += m1["shardlm_generation_seconds_total"] - m0["shardlm_generation_seconds_total"]
                d[1] += n - 1
    m = metrics(url)
    c, f = (1000 * decode[k][0] / decode[k][1] for k in ("constrained", "unconstrained"))
    print(f"decode ms per token: constrained {c:.2f} ({decode['constrained'][1]} tokens), unconstrained {f:.2f} "
          f"({decode['unconstrained'][1]} tokens), ratio {c / f:.3f}")
    masks, cached, secs = (m.get("shardlm_grammar_masks_total", 0), m.get("shardlm_grammar_masks_cached_total", 0),
                           m.get("shardlm_grammar_mask_seconds_total", 0))
    print(f"masks {masks:.0f}, from the cache {cached:.0f} ({100 * cached / max(masks, 1):.0f} %), mask time "
          f"{1000 * secs / max(masks, 1):.3f} ms per token on average ({1000 * secs / max(masks - cached, 1):.2f} ms "
          f"per mask computed)")


if __name__ == "__main__":
    harness.run_main(main)
