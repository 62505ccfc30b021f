"""harness.py: what the end-to-end drivers share: pass/fail bookkeeping and child
processes (started, their announced address read, killed at exit)."""
import socket
import subprocess
import sys

failures = []
procs = []


def check(cond, what):
    """Prints ok/FAIL for one assertion and records a failure."""
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def start(cmd, prefix="listening on "):
    """Starts cmd and returns (process, address) from its first stdout line '<prefix><address>'."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(p)
    line = p.stdout.readline().strip()
    if not line.startswith(prefix):
        p.kill()
        raise RuntimeError("%s did not report its address: %r %s" % (" ".join(cmd[:2]), line, p.stderr.read()[-500:]))
    return p, line[len(prefix):]


def listen_loopback(backlog=8):
    """A listening socket on a free loopback port: (socket, "127.0.0.1:port"), for fake peers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(backlog)
    return s, "127.0.0.1:%d" % s.getsockname()[1]


def start_worker(binary, key=None, threads=1):
    """A `shardlm worker` on a free loopback port: (process, "127.0.0.1:port")."""
    cmd = [binary, "worker", "--port", "0", "--host", "127.0.0.1", "-t", str(threads)]
    if key:
        cmd += ["--cluster-key", key]
    return start(cmd)


def run_main(main):
    """Runs main(), kills every child left, prints the failures and exits non-zero on any."""
    try:
        main()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if failures:
        print("%d FAILED:\n  %s" % (len(failures), "\n  ".join(failures)), flush=True)
        sys.exit(1)
    print("all passed", flush=True)
