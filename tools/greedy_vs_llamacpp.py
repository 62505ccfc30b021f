#!/usr/bin/env python3
"""greedy_vs_llamacpp.py: greedy text of shardlm's exact path beside llama.cpp's one-token
path on the golden prompts (tools/make_golden.py), for any GGUF files (issue 28: the low-bit
types as llama-quantize writes them). Per file and prompt it runs

    shardlm generate -m M -p P -n N --temp 0 --exact-batches --flash-attn off -t T
    llama-completion -m M -p P -n N --temp 0 --no-repack -b 1 -ub 1 -fa off -t T -no-cnv --no-warmup

and prints whether the continuations are equal, else the characters they share and where
they part. Exit status 0 when every pair is equal.

    python3 tools/greedy_vs_llamacpp.py FILE... [--shardlm build/release/shardlm]
        [--llama-completion /work/llama.cpp/build/bin/llama-completion] [-n 32] [-t 2] [--prompts 4]
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import PROMPTS  # noqa: E402


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("failed (%d): %s" % (r.returncode, " ".join(cmd)))
    return r.stdout.decode("utf-8", errors="replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--shardlm", default="build/release/shardlm")
    ap.add_argument("--llama-completion", default="/work/llama.cpp/build/bin/llama-completion")
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=4, help="the first N golden prompts")
    a = ap.parse_args()
    equal = total = 0
    for path in a.files:
        for prompt in PROMPTS[: a.prompts]:
            ours = run([a.shardlm, "generate", "-m", path, "-p", prompt, "-n", str(a.n), "--temp", "0",
                        "--exact-batches", "--flash-attn", "off", "-t", str(a.t)]).rstrip("\n")
            full = run([a.llama_completion, "-m", path, "-p", prompt, "-n", str(a.n), "--temp", "0", "--no-repack",
                        "-b", "1", "-ub", "1", "-fa", "off", "-t", str(a.t), "-no-cnv", "--no-warmup"])
            theirs = (full[len(prompt):] if full.startswith(prompt) else full).rstrip("\n")
            if theirs.endswith(" [end of text]"):  # llama-completion's mark of an end-of-generation token
                theirs = theirs[: -len(" [end of text]")]
            total += 1
            name = os.path.basename(path)
            short = prompt.splitlines()[0][:32]
            if ours == theirs:
                equal += 1
                print("%-24s %-34r equal" % (name, short))
                continue
            k = 0
            while k < min(len(ours), len(theirs)) and ours[k] == theirs[k]:
                k += 1
            print("%-24s %-34r part after %d chars: ours %r / llama.cpp %r" % (
                name, short, k, ours[max(0, k - 20):k + 30], theirs[max(0, k - 20):k + 30]))
    print("%d of %d equal" % (equal, total))
    return 0 if equal == total else 1


if __name__ == "__main__":
    sys.exit(main())
