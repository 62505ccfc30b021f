#!/usr/bin/env python3
"""test_gemma3.py: Gemma 3 270M Q4_K_M (`make gemma3`) across nodes on loopback.

  * greedy `generate` with N = 2, 3 and 4 nodes (4 query heads, one KV head: every node
    computes and caches the KV head) prints one node's text, with --sync-type exact (the
    attention and MLP outputs gathered, not summed, so every node's arithmetic is one
    node's) on several prompts, and with the default sync on a confident prompt;
  * a prompt longer than the sliding window (512) with a batch of 64 goes through the
    windowed layers' rings and gives one node's text on 3 nodes;
  * with `--flash-attn on` (flash on every layer, the windowed ones masking their window
    since 1e79d9c) 3 nodes give one node's text, with the F16 and with a q8_0 KV cache
    (flash only; refused for windowed models before 1e79d9c). The rest runs with
    `--flash-attn off` (llama.cpp's path).
Every process runs with -t 1. Skipped when the model file is absent.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
MODEL = os.environ.get("SHARDLM_GEMMA3_MODEL", ".deps/pip/gemma3/gemma-3-270m-q4_k_m.gguf")
PROMPTS = ["The history of the printing press begins", "Here are the first prime numbers: 2, 3, 5, 7, 11,",
           "La tour Eiffel est un monument de Paris qui"]
LONG = " ".join("%d," % i for i in range(400))  # ~800 tokens: past the 512-token window


def generate(prompt, workers=(), extra=(), n="16", flash="off"):
    cmd = [BIN, "generate", "-m", MODEL, "-p", prompt, "-n", n, "--temp", "0", "-t", "1",
           "--flash-attn", flash] + list(extra)
    if workers:
        cmd += ["--workers", ",".join(workers)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def main():
    if not os.path.exists(MODEL):
        print("SKIP: no model at " + MODEL + " (make gemma3)")
        return
    addrs = [harness.start_worker(BIN)[1] for _ in range(3)]
    for prompt in PROMPTS:
        one = generate(prompt, extra=["--sync-type", "exact"])
        check(one.returncode == 0 and one.stdout.strip() != "", "one node generates for %r (%s)" % (prompt, one.stderr[-300:]))
        for n in (2, 4):  # 3 and 5 nodes: e2e_gemma_cluster
            r = generate(prompt, addrs[: n - 1], ["--sync-type", "exact"])
            check(r.returncode == 0 and r.stdout == one.stdout,
                  "%d nodes (exact sync) print one node's text for %r: %r vs %r %s" %
                  (n, prompt, r.stdout[-80:], one.stdout[-80:], r.stderr[-300:]))
    one = generate(PROMPTS[1])
    for n in (2, 3):
        r = generate(PROMPTS[1], addrs[: n - 1])
        check(r.returncode == 0 and r.stdout == one.stdout, "%d nodes (default sync) print one node's text" % n)
    one = generate(LONG, extra=["--sync-type", "exact", "--batch", "64"], n="8")
    r = generate(LONG, addrs[:2], ["--sync-type", "exact", "--batch", "64"], n="8")
    check(one.returncode == 0 and r.returncode == 0 and r.stdout == one.stdout,
          "a prompt past the window: 3 nodes print one node's text (%s %s)" % (one.stderr[-200:], r.stderr[-200:]))
    # Flash attention on every layer (the windowed ones mask their window).
    one = generate(PROMPTS[0], flash="on")
    r = generate(PROMPTS[0], addrs[:2], ["--sync-type", "exact"], flash="on")
    check(one.returncode == 0 and r.returncode == 0 and r.stdout == one.stdout,
          "--flash-attn on: 3 nodes print one node's text (%s)" % one.stderr[-200:])
    one = generate(PROMPTS[0], extra=["--kv-type", "q8_0"], flash="on")
    r = generate(PROMPTS[0], addrs[:2], ["--sync-type", "exact", "--kv-type", "q8_0"], flash="on")
    check(one.returncode == 0 and r.returncode == 0 and r.stdout == one.stdout,
          "a q8_0 KV cache: 3 nodes print one node's text (%s %s)" % (one.stderr[-200:], r.stderr[-200:]))


if __name__ == "__main__":
    harness.run_main(main)
