#!/usr/bin/env python3
"""test_perplexity_gemma3.py: `shardlm perplexity` on Gemma 3 270M Q4_K_M (`make gemma3`)
against llama.cpp's (tests/data/perplexity_gemma3.json, tools/make_perplexity_ref.py with
--ctx 1024 --chunks 4), on tests/data/perplexity_licenses.txt. At ctx 1024 every scored
position (512 .. 1022) lies past the 512-position window of the sliding-window layers.
Both sides are compared on the chunks the reference holds. Checked, with the exact
attention path (the only one for windows): one node within 0.5% of llama.cpp, and three
nodes (root + 2 `shardlm worker` processes, exact sync) equal to one node after each of the
first two chunks.
Skipped when the model file is absent.
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import harness  # noqa: E402
from harness import check  # noqa: E402

BUILD = os.environ.get("SHARDLM_BUILD_DIR", "build/release")
SRC = os.environ.get("SHARDLM_SOURCE_DIR", ".")
BIN = os.path.join(BUILD, "shardlm")
MODEL = os.path.join(SRC, ".deps/pip/gemma3/gemma-3-270m-q4_k_m.gguf")
TEXT = os.path.join(SRC, "tests/data/perplexity_licenses.txt")
REF = os.path.join(SRC, "tests/data/perplexity_gemma3.json")


def perplexity(chunks, extra):
    """The running estimates after each chunk (as printed: 4 decimals), or None."""
    cmd = [BIN, "perplexity", "-m", MODEL, "-f", TEXT, "--ctx", "1024", "--chunks", str(chunks),
           "--flash-attn", "off"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    running = [float(v) for v in re.findall(r"\[\d+\]([0-9.]+),", r.stdout)]
    if r.returncode != 0 or len(running) != chunks:
        print(r.stdout, r.stderr, file=sys.stderr)
        return None
    return running


def rel(a, b):
    return abs(a / b - 1) if a and b else float("inf")


def main():
    if not os.path.exists(MODEL):
        print("SKIP: no model at " + MODEL + " (make gemma3)")
        return
    ref = json.load(open(REF))
    chunks = ref["n_chunks"]
    want = ref["running_ppl"][chunks - 1]
    print("llama.cpp, first %d chunks of 1024: %.4f" % (chunks, want), flush=True)
    one = perplexity(chunks, ["-t", "2"])
    last = one[-1] if one else None
    check(last is not None and rel(last, want) < 0.005, "1 node: %s vs llama.cpp %.4f (%.3f%%)" %
          (last, want, 100 * rel(last, want)))
    # Three nodes on the first two chunks (half the time of all four): every window layer's
    # positions past 512 are in each chunk.
    workers = ",".join(harness.start_worker(BIN)[1] for _ in range(2))
    three = perplexity(2, ["-t", "1", "--workers", workers, "--sync-type", "exact"])
    check(three is not None and one is not None and three == one[:2],
          "3 nodes, exact sync, 2 chunks: %s vs 1 node %s" % (three, one and one[:2]))


if __name__ == "__main__":
    harness.run_main(main)
