#!/usr/bin/env python3
"""bench_serve.py: what `shardlm serve` costs and saves, measured in one run beside
`shardlm generate` (alternating, medians of R rounds).

  * decode tokens/s of a streamed greedy /v1/completions (client side, first to last chunk)
    vs `shardlm generate`'s own generation tokens/s for the same prompt and length;
  * time to first token of a conversation's next turn with its prefix in the KV cache vs
    the same request after an unrelated one (cache cold).

usage: tools/bench_serve.py MODEL [-t THREADS] [-n TOKENS] [-r ROUNDS] [--bin build/release/shardlm]
"""
import argparse
import json
import re
import statistics
import subprocess
import time
import urllib.request


def post_stream(url, body):
    """(seconds to first chunk, seconds first->last chunk, chunks)"""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    t0 = time.time()
    first = last = None
    n = 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if line.startswith(b"data: {") and b'"text":""' not in line and b'"delta":{}' not in line \
                    and b'"choices":[]' not in line:
                now = time.time()
                first = first or now
                last = now
                n += 1
    return first - t0, last - first, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("-t", "--threads", default="1")
    ap.add_argument("-n", "--tokens", type=int, default=64)
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("--bin", default="build/release/shardlm")
    a = ap.parse_args()
    prompt = "1, 2, 3, 4, 5,"
    srv = subprocess.Popen([a.bin, "serve", "-m", a.model, "--port", "0", "-t", a.threads], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    url = srv.stdout.readline().split()[-1]
    gen_tps, srv_tps, warm, cold = [], [], [], []
    long_turn = [{"role": "user", "content": "Tell me about the Moon. " * 20}]
    try:
        for _ in range(a.rounds):
            r = subprocess.run([a.bin, "generate", "-m", a.model, "-p", prompt, "-n", str(a.tokens), "--temp", "0",
                                "-t", a.threads], capture_output=True, text=True)
            gen_tps.append(float(re.search(r"generation: \d+ tokens in [\d.]+ ms \(([\d.]+) tokens/s", r.stderr).group(1)))
            _, dt, n = post_stream(url + "/v1/completions", {"prompt": prompt, "max_tokens": a.tokens, "temperature": 0,
                                                             "stream": True})
            srv_tps.append((n - 1) / dt)
            body = {"messages": long_turn, "max_tokens": 2, "temperature": 0, "stream": True}
            post_stream(url + "/v1/chat/completions", body)
            turn2 = dict(body, messages=long_turn + [{"role": "assistant", "content": "It is big."},
                                                     {"role": "user", "content": "And the Sun?"}])
            warm.append(post_stream(url + "/v1/chat/completions", turn2)[0])
            post_stream(url + "/v1/completions", {"prompt": "unrelated", "max_tokens": 1, "stream": True})
            cold.append(post_stream(url + "/v1/chat/completions", turn2)[0])
    finally:
        srv.kill()
    med = statistics.median
    print("| threads | generate tg%d tok/s | serve tg%d tok/s (streamed) | ratio | next turn TTFT, prefix cached | "
          "same, cache cold | ratio |" % (a.tokens, a.tokens))
    print("|---|---|---|---|---|---|---|")
    print("| %s | %.1f | %.1f | %.2f | %.0f ms | %.0f ms | %.2f |" % (
        a.threads, med(gen_tps), med(srv_tps), med(srv_tps) / med(gen_tps), med(warm) * 1e3, med(cold) * 1e3,
        med(cold) / med(warm)))


if __name__ == "__main__":
    main()
