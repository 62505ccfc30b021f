#!/usr/bin/env python3
"""test_gemma_cluster.py: Gemma 3 270M Q4_K_M (`make gemma3`) on more nodes than it has
query heads (4, over one KV head), on loopback.

  * `shardlm plan` on 5 nodes gives one node no query head (and no KV head), and says so;
  * greedy `generate --sync-type exact` on 2, 3 and 5 nodes prints one node's text on three
    prompts (5 nodes: node 4 computes no attention, only its Wo / down output rows from the
    gathered inputs, its MLP rows and vocabulary rows);
  * 5 nodes with shares 2,1,2,1,2 (node 3 without a head, between nodes with one) prints one
    node's text;
  * F32 partial sums on 5 nodes (the headless node adds a zero attention partial) print one
    node's text on a confident prompt.
Every process runs with -t 1 and `--flash-attn off` (llama.cpp's path). Skipped when the
model file is absent. Tens of seconds.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
MODEL = os.environ.get("SHARDLM_GEMMA3_MODEL", ".deps/pip/gemma3/gemma-3-270m-q4_k_m.gguf")
PROMPTS = ["The capital of France is", "def fibonacci(n):\n    ", "Les quatre saisons de l'année sont"]
CONFIDENT = "Here are the first prime numbers: 2, 3, 5, 7, 11,"


def generate(prompt, workers=(), extra=(), n="12"):
    cmd = [BIN, "generate", "-m", MODEL, "-p", prompt, "-n", n, "--temp", "0", "-t", "1",
           "--flash-attn", "off"] + list(extra)
    if workers:
        cmd += ["--workers", ",".join(workers)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def why(r):
    """stderr's tail of a run that failed, for the message."""
    return "" if r.returncode == 0 else r.stderr[-300:]


def main():
    if not os.path.exists(MODEL):
        print("SKIP: no model at " + MODEL + " (make gemma3)")
        return
    plan = subprocess.run([BIN, "plan", "-m", MODEL, "--nodes", "5", "--sync-type", "exact"],
                          capture_output=True, text=True, timeout=60)
    rows = [l.split() for l in plan.stdout.splitlines() if l.split()[:1] == ["4"]]
    check(plan.returncode == 0 and rows and rows[0][2] == "[4,4)" and rows[0][3] == "[1,1)",
          "plan: on 5 nodes node 4 has no query head and no KV head (%r %s)" % (rows, plan.stderr[-300:]))
    check("node 4: no query heads" in plan.stdout, "plan notes the node without query heads")

    addrs = [harness.start_worker(BIN)[1] for _ in range(4)]
    exact = ["--sync-type", "exact"]
    ones = {}
    for prompt in PROMPTS:
        one = generate(prompt, extra=exact)
        ones[prompt] = one.stdout
        check(one.returncode == 0 and one.stdout.strip() != "",
              "one node generates for %r %s" % (prompt, why(one)))
        for n in (2, 3, 5):
            r = generate(prompt, addrs[: n - 1], exact)
            check(r.returncode == 0 and r.stdout == one.stdout,
                  "%d nodes (exact sync) print one node's text for %r: %r vs %r %s" %
                  (n, prompt, r.stdout[-80:], one.stdout[-80:], why(r)))
    r = generate(PROMPTS[0], addrs, exact + ["--shares", "2,1,2,1,2"])
    check(r.returncode == 0 and r.stdout == ones[PROMPTS[0]],
          "5 nodes with shares 2,1,2,1,2 (node 3 without a head) print one node's text %s" % why(r))
    f32 = ["--sync-type", "f32"]
    one = generate(CONFIDENT, extra=f32)
    r = generate(CONFIDENT, addrs, f32)
    check(one.returncode == 0 and r.returncode == 0 and r.stdout == one.stdout,
          "5 nodes (f32 partial sums) print one node's text: %r vs %r %s" % (r.stdout[-80:], one.stdout[-80:],
                                                                             why(r) or why(one)))


if __name__ == "__main__":
    harness.run_main(main)
