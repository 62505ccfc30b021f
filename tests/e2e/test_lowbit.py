#!/usr/bin/env python3
"""test_lowbit.py: the low-bit GGUF types of issue 28 across nodes on loopback (seconds).

  * Q2_K, Q3_K, IQ4_XS (256-element blocks), IQ4_NL, MXFP4 (32): a random-weight toy model
    (`make-model --shape toy`, dim 256, F 512) on 2 and 3 nodes and on uneven shares
    (3,1,2: F cut at 32-element steps, off the 256-blocks) prints one node's greedy text
    with --sync-type exact (Wo and down cut by output rows, their inputs gathered);
  * partial sums (--sync-type q8_0) on the same uneven shares cut Wo's and down's blocks by
    columns: `plan` says the root re-encodes those slices, and the cluster generates;
  * mixed files as published (toy-qwen3moe-e8 through `shardlm quantize`): Q3_K or IQ4_XS
    attention and embeddings beside Q8_0 experts, and gpt-oss's MXFP4 experts beside Q8_0:
    `inspect` shows the mix, `plan -m` costs each type, 2 and 3 nodes print one node's text.
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
TYPES = ("Q2_K", "Q3_K", "IQ4_XS", "IQ4_NL", "MXFP4")


def run(args, timeout=120):
    return subprocess.run([BIN] + args, capture_output=True, text=True, timeout=timeout)


def generate(model, workers=(), extra=(), temp="0"):
    cmd = ["generate", "-m", model, "-p", PROMPT, "-n", "10", "--temp", temp, "--seed", "7", "-t", "1",
           "--flash-attn", "off"]
    if workers:
        cmd += ["--workers", ",".join(workers)]
    return run(cmd + list(extra))


def same_as_one(model, addrs, what):
    """Greedy, and sampled with a fixed seed (a random-weight model's greedy text soon repeats
    one token; sampled text differs at the first differing logit)."""
    exact = ["--sync-type", "exact"]
    for temp in ("0", "1"):
        one = generate(model, extra=exact, temp=temp)
        check(one.returncode == 0 and one.stdout.strip() != "", "%s: one node generates (%s)" % (what, one.stderr[-300:]))
        for n, shares in ((2, None), (3, None), (3, "3,1,2")):
            extra = exact + (["--shares", shares] if shares else [])
            r = generate(model, addrs[: n - 1], extra, temp)
            check(r.returncode == 0 and r.stdout == one.stdout,
                  "%s: %d nodes %s, temp %s print one node's text: %r vs %r %s" %
                  (what, n, " ".join(extra), temp, r.stdout[-60:], one.stdout[-60:], r.stderr[-300:]))


def main():
    tmp = tempfile.mkdtemp(prefix="shardlm-lowbit-")
    addrs = [harness.start_worker(BIN)[1] for _ in range(2)]
    for t in TYPES:
        path = os.path.join(tmp, "toy-%s.gguf" % t)
        r = run(["make-model", "--shape", "toy", "--type", t, "--seed", "5", path])
        check(r.returncode == 0, "make-model --type %s: %s" % (t, r.stderr[-300:]))
        same_as_one(path, addrs, "toy " + t)
        if t in ("Q2_K", "IQ4_NL"):  # block sizes 256 and 32: partial sums, Wo and down cut by columns
            p = run(["plan", "-m", path, "--shares", "3,1,2", "--sync-type", "q8_0"])
            check(p.returncode == 0, "plan on uneven shares (%s)" % p.stderr[-300:])
            if t == "Q2_K":
                check("cut Q2_K blocks of 256" in p.stdout and "re-encodes" in p.stdout,
                      "plan says the cut Q2_K slices are re-encoded: %r" % p.stdout[-800:])
            r = generate(path, addrs, ["--shares", "3,1,2", "--sync-type", "q8_0"])
            check(r.returncode == 0 and r.stdout.strip() != "" and "sync q8_0" in r.stderr,
                  "toy %s: 3 nodes on shares 3,1,2 with q8_0 partial sums generate (%s)" % (t, r.stderr[-300:]))

    # Mixed files: `quantize` rewrites the 2-D matrices and keeps the 3-D expert stacks, so a
    # Q8_0 toy-qwen3moe-e8 requantized to Q3_K / IQ4_XS keeps Q8_0 experts, and an MXFP4 one
    # requantized to Q8_0 is gpt-oss's published mix (MXFP4 experts beside Q8_0).
    for src_type, t, mix in (("Q8_0", "Q3_K", ("Q3_K", "Q8_0")), ("Q8_0", "IQ4_XS", ("IQ4_XS", "Q8_0")),
                             ("MXFP4", "Q8_0", ("MXFP4", "Q8_0"))):
        src = os.path.join(tmp, "e8-%s.gguf" % src_type)
        if not os.path.exists(src):
            r = run(["make-model", "--shape", "toy-qwen3moe-e8", "--type", src_type, "--seed", "3", src])
            check(r.returncode == 0, "make-model toy-qwen3moe-e8 %s: %s" % (src_type, r.stderr[-300:]))
        path = os.path.join(tmp, "e8-%s-%s.gguf" % (src_type, t))
        r = run(["quantize", src, path, t, "-t", "1"])
        check(r.returncode == 0, "quantize %s to %s: %s" % (src_type, t, r.stderr[-300:]))
        r = run(["inspect", path])
        shown = all((" %s x" % m) in r.stdout for m in mix + ("F32",))
        check(r.returncode == 0 and shown, "inspect shows the %s mix: %r" % (" / ".join(mix), r.stdout[:300]))
        p = run(["plan", "-m", path, "--nodes", "3"])
        costed = ("wq %s," % t) in p.stdout and ("gate %s," % src_type) in p.stdout  # experts keep src_type
        check(p.returncode == 0 and "Held per node" in p.stdout and costed,
              "plan costs the mixed file per type: %r %s" % (p.stdout[:600], p.stderr[-300:]))
        same_as_one(path, addrs, "mixed %s (from %s)" % (t, src_type))

if __name__ == "__main__":
    harness.run_main(main)
