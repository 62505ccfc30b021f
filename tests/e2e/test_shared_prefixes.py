#!/usr/bin/env python3
"""test_shared_prefixes.py: random prompts that share prefixes of two long texts at random cuts,
with random reply lengths, answered by a `serve --parallel 3` under three clients and by a
`serve --parallel 1` in another order: every answer (text and log-probabilities, greedy) the
same on both, none an error. The two servers reuse different cached prefixes (a slot's own,
registered blocks, cut to block and row-order boundaries), so any reuse that changes a row,
or that reaches back past what a sliding-window ring still holds (which stopped the server
before 0407c34), shows. Toy models (`make-model`): toy-gemma3 and toy-gpt-oss (sliding
windows of 8 in rings of 128-192 rows), and toy in Q4_K (lane order) with --lookup 3
(speculation rewinds the slots too). Seconds each.
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, start  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
CASES = [("toy-gemma3", "Q4_0", []), ("toy-gpt-oss", "Q8_0", []),
         ("toy", "Q4_K", ["--lookup", "3"])]


def complete(url, prompt, n):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 2}
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        r = json.load(urllib.request.urlopen(req, timeout=120))
    except urllib.error.HTTPError as e:
        return ("error", e.code, e.read()[:200].decode(errors="replace")), 0
    c = r["choices"][0]
    return (c["text"], c["logprobs"]), r["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)


def main():
    tmp = tempfile.mkdtemp(prefix="shardlm-prefixes-")
    rng = random.Random(4)
    texts = ["".join(rng.choice("abcdefghij ") for _ in range(500)) for _ in range(2)]
    jobs = []  # the toy vocabularies are bytes: a character is a token
    for _ in range(40):
        t = rng.choice(texts)
        tail = "".join(rng.choice("klmnop") for _ in range(rng.randrange(0, 30)))
        jobs.append((t[:rng.randrange(1, 480)] + tail, rng.choice([1, 5, 40, 100])))
    for shape, qtype, extra in CASES:
        model = os.path.join(tmp, shape + ".gguf")
        subprocess.run([BIN, "make-model", "--shape", shape, "--type", qtype, "--seed", "3", model],
                       check=True, capture_output=True)
        urls = {}
        for par in (3, 1):
            _, urls[par] = start([BIN, "serve", "-m", model, "--port", "0", "--host", "127.0.0.1", "-t", "1",
                                  "--ctx", "640", "--parallel", str(par)] + extra)
        with ThreadPoolExecutor(3) as ex:
            together = list(ex.map(lambda j: complete(urls[3], *j), jobs))
        order = list(range(len(jobs)))
        rng.shuffle(order)
        alone = [None] * len(jobs)
        for i in order:
            alone[i] = complete(urls[1], *jobs[i])
        errors = [a for a, _ in together + alone if a[0] == "error"]
        differ = [i for i in range(len(jobs)) if together[i][0] != alone[i][0]]
        cached = (sum(c for _, c in together), sum(c for _, c in alone))
        check(not errors and not differ and min(cached) > 0,
              "%s %s%s: %d answers of --parallel 3 under 3 clients equal --parallel 1's (prompt tokens from "
              "cache %d and %d; %d differ, errors %s)" % (shape, qtype, " " + " ".join(extra) if extra else "", len(jobs),
                                                          cached[0], cached[1], len(differ), errors[:2]))


if __name__ == "__main__":
    harness.run_main(main)
