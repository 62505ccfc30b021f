#!/usr/bin/env python3
"""test_moe.py: Qwen3-MoE (random weights from `shardlm make-model`) across nodes on loopback.

  * toy-qwen3moe (8 of 32 experts, Q8_0): `generate` on 2, 3 and 4 nodes and on uneven
    shares prints one node's text with --sync-type exact (every expert's rows split over
    the nodes, the inputs and outputs gathered: one node's arithmetic), greedy and sampled
    with a fixed seed (a random-weight model's greedy text soon repeats one token; sampled
    text is a different token almost every step, so it parts at the first differing logit);
  * toy-qwen3moe-e8 (2 of 8 experts, 8 query heads, Q4_0): the same on 2, 3 and 8 nodes
    (96 expert rows over 8 nodes: 12 each, off the 32-blocks, gathered as F32), and a
    prompt in batches of 8 (experts' rows grouped) on 3 nodes;
  * q8_0 partial sums on 2 nodes run and print tokens;
  * `inspect` and `plan` show the experts and what each node holds.
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
PROMPTS = ["The history of the printing press begins", "2, 3, 5, 7, 11,"]


def generate(model, prompt, workers=(), extra=(), n="12", temp="0"):
    cmd = [BIN, "generate", "-m", model, "-p", prompt, "-n", n, "--temp", temp, "--seed", "7", "-t", "1",
           "--flash-attn", "off"] + list(extra)
    if workers:
        cmd += ["--workers", ",".join(workers)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def same_as_one(model, addrs, counts, base=("--sync-type", "exact")):
    for prompt, temp in ((PROMPTS[0], "0"), (PROMPTS[1], "0"), (PROMPTS[0], "1")):
        extra = list(base)
        one = generate(model, prompt, extra=extra, temp=temp)
        check(one.returncode == 0 and one.stdout.strip() != "", "one node generates (%s)" % one.stderr[-300:])
        for n in counts:
            r = generate(model, prompt, addrs[: n - 1], extra, temp=temp)
            check(r.returncode == 0 and r.stdout == one.stdout,
                  "%s: %d nodes %s, temp %s print one node's text for %r: %r vs %r %s" %
                  (os.path.basename(model), n, " ".join(extra), temp, prompt, r.stdout[-60:], one.stdout[-60:],
                   r.stderr[-300:]))


def main():
    tmp = tempfile.mkdtemp(prefix="shardlm-moe-")
    models = {}
    for shape, qtype in (("toy-qwen3moe", "Q8_0"), ("toy-qwen3moe-e8", "Q4_0")):
        path = os.path.join(tmp, shape + ".gguf")
        subprocess.run([BIN, "make-model", "--shape", shape, "--type", qtype, "--seed", "3", path],
                       check=True, capture_output=True)
        models[shape] = path
    addrs = [harness.start_worker(BIN)[1] for _ in range(7)]
    same_as_one(models["toy-qwen3moe"], addrs, (2, 3, 4))
    one = generate(models["toy-qwen3moe"], PROMPTS[0], extra=["--sync-type", "exact"], temp="1")
    r = generate(models["toy-qwen3moe"], PROMPTS[0], addrs[:2], ["--sync-type", "exact", "--shares", "3,1,2"], temp="1")
    check(r.returncode == 0 and r.stdout == one.stdout, "uneven shares 3,1,2 print one node's text (%s)" % r.stderr[-300:])
    same_as_one(models["toy-qwen3moe-e8"], addrs, (2, 3, 8))
    batched = ["--sync-type", "exact", "--batch", "8"]
    one = generate(models["toy-qwen3moe-e8"], PROMPTS[0], extra=batched, temp="1")
    r = generate(models["toy-qwen3moe-e8"], PROMPTS[0], addrs[:2], batched, temp="1")
    check(one.returncode == 0 and r.returncode == 0 and r.stdout == one.stdout,
          "a prompt in batches of 8 on 3 nodes prints one node's text (%s)" % r.stderr[-300:])
    r = generate(models["toy-qwen3moe"], PROMPTS[0], addrs[:1], ["--sync-type", "q8_0"])
    check(r.returncode == 0 and r.stdout.strip() != "" and "sync q8_0" in r.stderr,
          "2 nodes with q8_0 partial sums generate (%s)" % r.stderr[-300:])
    r = subprocess.run([BIN, "inspect", models["toy-qwen3moe"]], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and "experts: 32 per layer of 128 rows, 8 used per token" in r.stdout,
          "inspect shows the experts: %r" % r.stdout[-400:])
    r = subprocess.run([BIN, "plan", "--shape", "qwen3-30b-a3b", "--type", "Q4_0", "--nodes", "4"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and "experts: 128 per layer, 8 read per token" in r.stdout and "Held per node" in r.stdout,
          "plan shows the experts and what each node holds: %r" % r.stdout[-600:])


if __name__ == "__main__":
    harness.run_main(main)
