#!/usr/bin/env python3
"""test_gpt_oss.py: gpt-oss (issue 31; random weights from `shardlm make-model`) across nodes on loopback.

  * toy-gpt-oss (4 of 16 MXFP4 experts, sinks, biases, a window of 8 on alternate layers,
    YaRN): `generate` on 2, 3 and 4 nodes prints one node's text with --sync-type exact,
    greedy and sampled with a fixed seed, the prompt past the window (the rings per node),
    and a prompt in batches of 8 on 3 nodes; the weight stream carries the sinks and biases
    with their heads and rows (protocol v10);
  * q8_0 partial sums on 2 nodes run (the down biases added once, on the first node);
  * `plan --shape gpt-oss-120b --nodes 4` prints each node's memory, the bytes per token and
    the predicted tokens/s.
Every process runs with -t 1.
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
PROMPT = "The history of the printing press begins"


def generate(model, workers=(), extra=(), temp="0", sync="exact"):
    cmd = [BIN, "generate", "-m", model, "-p", PROMPT, "-n", "12", "--temp", temp, "--seed", "7", "-t", "1",
           "--flash-attn", "off", "--sync-type", sync] + list(extra)
    if workers:
        cmd += ["--workers", ",".join(workers)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def main():
    tmp = tempfile.mkdtemp(prefix="shardlm-gpt-oss-")
    model = os.path.join(tmp, "toy-gpt-oss.gguf")
    subprocess.run([BIN, "make-model", "--shape", "toy-gpt-oss", "--type", "Q8_0", "--seed", "3", model],
                   check=True, capture_output=True)
    addrs = [harness.start_worker(BIN)[1] for _ in range(3)]
    for temp in ("0", "1"):
        one = generate(model, temp=temp)
        check(one.returncode == 0 and one.stdout.strip() != "", "one node generates (%s)" % one.stderr[-300:])
        for n in (2, 3, 4):
            r = generate(model, addrs[: n - 1], temp=temp)
            check(r.returncode == 0 and r.stdout == one.stdout,
                  "%d nodes, temp %s print one node's text: %r vs %r %s" %
                  (n, temp, r.stdout[-60:], one.stdout[-60:], r.stderr[-300:]))
    one = generate(model, extra=["--batch", "8"], temp="1")
    r = generate(model, addrs[:2], ["--batch", "8"], temp="1")
    check(one.returncode == 0 and r.returncode == 0 and r.stdout == one.stdout,
          "a prompt in batches of 8 on 3 nodes prints one node's text (%s)" % r.stderr[-300:])
    r = generate(model, addrs[:1], sync="q8_0")
    check(r.returncode == 0 and r.stdout.strip() != "" and "sync q8_0" in r.stderr,
          "2 nodes with q8_0 partial sums generate (%s)" % r.stderr[-300:])
    r = subprocess.run([BIN, "plan", "--shape", "gpt-oss-120b", "--type", "Q8_0", "--nodes", "4"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and "gate MXFP4" in r.stdout and "experts: 128 per layer, 4 read per token" in r.stdout
          and "Held per node" in r.stdout and "tokens/s" in r.stdout and "sliding window: 18 of 36 layers" in r.stdout,
          "plan shows gpt-oss-120b on 4 nodes: %r" % r.stdout[-800:])


if __name__ == "__main__":
    harness.run_main(main)
