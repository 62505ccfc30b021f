"""test_mpi.py: shardlm under mpirun (--transport mpi, issue 17) on one machine.
  * `mpirun --oversubscribe -np 2|3|5 shardlm generate --transport mpi --sync-type exact`
    prints one node's greedy text (rank 0 the root; the weights streamed over MPI), and so
    does -np 3 with --model-local (every rank slices its own file);
  * on 2 ranks, --sync-type f32 --allreduce mpi (MPI_Allreduce) gives the text of our own
    f32 all-gather (a sum of two floats is the same in either order);
  * `serve` under mpirun -np 3 answers the openai client with one node's greedy text, and
    when a worker rank is killed the job ends (mpirun exits non-zero, naming the rank);
  * every rank parses the same command line: a worker rank whose -m names no file still
    runs (the file is the root's), and a worker rank honours --device (vulkan:9 fails clearly);
  * bad input: --transport mpi without mpirun, on one rank, ranks with different cluster
    keys (MPMD), --allreduce mpi over TCP: each a clear message, no hang.
OpenMPI refuses root without OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM), which is set here."""
import os
import signal
import subprocess
import time

import openai

import harness
from harness import check

BIN = os.environ["SHARDLM_BIN"]
MODEL = os.environ["SHARDLM_MODEL"]
PROMPT = "1, 2, 3, 4, 5,"
N = "24"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none"]


def gen_args(extra=()):
    return [BIN, "generate", "-m", MODEL, "-p", PROMPT, "-n", N, "--temp", "0", "-t", "1"] + list(extra)


def run(cmd, timeout=180):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV)


def mpi_generate(np, extra=()):
    return run(MPIRUN + ["-np", str(np)] + gen_args(["--transport", "mpi"] + list(extra)))


def tail(r):
    return (r.stderr or "")[-600:]


def main():
    ref = run(gen_args())
    check(ref.returncode == 0 and len(ref.stdout) > 10, "one node generates (rc %d)" % ref.returncode)
    want = ref.stdout

    for np in (2, 3, 5):
        t0 = time.time()
        r = mpi_generate(np, ["--sync-type", "exact"])
        check(r.returncode == 0 and r.stdout == want,
              "mpirun -np %d, exact sync: one node's text (rc %d, %.1f s, got %r, want %r) %s" %
              (np, r.returncode, time.time() - t0, r.stdout, want, tail(r) if r.returncode else ""))
        if np == 3:
            check("received slice" in r.stderr and "cluster: 3 nodes" in r.stderr,
                  "mpirun -np 3: the workers received their slices over MPI, the root reports 3 nodes")
    r = mpi_generate(3, ["--sync-type", "exact", "--model-local"])
    check(r.returncode == 0 and r.stdout == want and "received slice" not in r.stderr,
          "mpirun -np 3 --model-local: one node's text, no slice streamed (rc %d) %s" % (r.returncode, tail(r)))
    # Every rank parses the same command line; a root-only file (-m without --model-local) is
    # not looked for on a worker rank, which receives its slice.
    nowhere = [a if a != MODEL else "/nonexistent/model.gguf" for a in gen_args(["--transport", "mpi"])]
    r = run(MPIRUN + ["-np", "1"] + gen_args(["--transport", "mpi", "--sync-type", "exact"]) + [":", "-np", "1"] +
            nowhere + ["--sync-type", "exact"])
    check(r.returncode == 0 and r.stdout == want,
          "a worker rank whose -m names no file still runs (rc %d) %s" % (r.returncode, tail(r)))

    mine = mpi_generate(2, ["--sync-type", "f32", "--allreduce", "all-gather"])
    theirs = mpi_generate(2, ["--sync-type", "f32", "--allreduce", "mpi"])
    check(theirs.returncode == 0 and "all-reduce mpi" in theirs.stderr and theirs.stdout == mine.stdout,
          "mpirun -np 2 f32: MPI_Allreduce gives our all-gather's text (rc %d/%d, %r vs %r) %s" %
          (mine.returncode, theirs.returncode, theirs.stdout, mine.stdout, tail(theirs)))

    # serve under mpirun, the openai client, then a worker rank killed.
    p = subprocess.Popen(MPIRUN + ["-np", "3", BIN, "serve", "-m", MODEL, "--port", "0", "--host", "127.0.0.1", "-t",
                                   "1", "--ctx", "512", "--parallel", "2", "--sync-type", "exact", "--transport", "mpi"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True)
    harness.procs.append(p)
    line = p.stdout.readline().strip()
    check(line.startswith("listening on "), "serve under mpirun -np 3 listens: %r" % line)
    if line.startswith("listening on "):
        url = line[len("listening on "):]
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
        for stream in (False, True):
            if stream:
                got = "".join(c.choices[0].text for c in client.completions.create(
                    model="x", prompt=PROMPT, max_tokens=int(N), temperature=0, stream=True))
            else:
                got = client.completions.create(model="x", prompt=PROMPT, max_tokens=int(N), temperature=0).choices[0].text
            check(got == want[:-1], "serve under mpirun: openai completions (stream=%s) give one node's text: %r" %
                  (stream, got))
        chat = client.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi!"}],
                                              max_tokens=8, temperature=0)
        check(len(chat.choices[0].message.content) > 0, "serve under mpirun: openai chat answers")
        # Kill worker rank 2: the job must end, not hang.
        victim = None
        for pid in os.listdir("/proc"):
            try:
                env = open("/proc/%s/environ" % pid, "rb").read().split(b"\0")
                ppid = [l for l in open("/proc/%s/status" % pid).read().splitlines() if l.startswith("PPid:")]
                if b"OMPI_COMM_WORLD_RANK=2" in env and ppid and int(ppid[0].split()[1]) == p.pid:
                    victim = int(pid)
            except (OSError, ValueError):
                pass
        check(victim is not None, "found worker rank 2's process")
        if victim:
            os.kill(victim, signal.SIGKILL)
            try:
                client.completions.create(model="x", prompt=PROMPT, max_tokens=4, temperature=0)
            except Exception:
                pass
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            err = p.stderr.read() if p.poll() is not None else ""
            check(p.poll() is not None and p.returncode != 0 and "rank 2" in err,
                  "a killed worker rank ends the job, mpirun names it (rc %s): %s" % (p.returncode, err[-400:]))
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()

    # Bad input.
    r = run(gen_args(["--transport", "mpi"]), timeout=30)
    check(r.returncode != 0 and "mpirun" in r.stderr and "error:" in r.stderr,
          "--transport mpi without mpirun: a message saying how to start it: %r" % r.stderr.strip()[-300:])
    r = run(MPIRUN + ["-np", "1"] + gen_args(["--transport", "mpi"]), timeout=60)
    check(r.returncode != 0 and "1 rank" in r.stderr, "mpirun -np 1: refused: %r" % r.stderr.strip()[-300:])
    r = run(MPIRUN + ["-np", "1"] + gen_args(["--transport", "mpi", "--cluster-key", "k" * 20]) + [":", "-np", "1"] +
            gen_args(["--transport", "mpi", "--cluster-key", "j" * 20]), timeout=60)
    check(r.returncode != 0 and "cluster key" in r.stderr and "rank 1" in r.stderr,
          "ranks with different cluster keys: refused naming the rank: %r" % r.stderr.strip()[-400:])
    r = run(MPIRUN + ["-np", "1"] + gen_args(["--transport", "mpi", "--cluster-key", "k" * 20]) + [":", "-np", "1"] +
            gen_args(["--transport", "mpi"]), timeout=60)
    check(r.returncode != 0 and "without a cluster key" in r.stderr,
          "a rank without the key: refused: %r" % r.stderr.strip()[-400:])
    r = run(MPIRUN + ["-np", "1"] + gen_args(["--transport", "mpi"]) + [":", "-np", "1"] +
            gen_args(["--transport", "mpi", "--device", "vulkan:9"]), timeout=60)
    check(r.returncode != 0 and "vulkan" in r.stderr.lower(),
          "a worker rank given --device vulkan:9 honours it and fails clearly: %r" % r.stderr.strip()[-400:])
    r = run(gen_args(["--sync-type", "f32", "--allreduce", "mpi"]), timeout=30)
    check(r.returncode != 0 and "--transport mpi" in r.stderr, "--allreduce mpi over TCP: refused: %r" %
          r.stderr.strip()[-300:])


if __name__ == "__main__":
    harness.run_main(main)
