#!/usr/bin/env python3
"""bench_recovery.py: time to resume after a worker's death, on the namespace testbed
(tools/netns_testbed.py: every node in its own network namespace, 1 Gbit/s links, a relay
adding one-way latency).

For each model and mode, `generate` runs on N nodes (exact sync) in the root's namespace;
after --kill-after-s seconds of generated text the last worker is killed (-9), and the
root's recovery line is read: what was re-sent, how many tokens were replayed in how many
steps, and the time from the failed step to the resumed one. Modes:
  stream  workers without --model: the root re-plans over the survivors and streams each
          the new, larger slice over the 1 Gbit/s link;
  local   workers started with --model (the same file in their namespace): they slice the
          new plan locally, nothing is streamed;
  spare   a --spare worker (without --model) takes the dead one's place: the plan is
          unchanged, the survivors keep their slices, only the spare receives one slice.
Each (model, mode) runs --reps times; the table shows medians. Needs root.
  tools/bench_recovery.py -m /tmp/l1b-q4_0.gguf --nodes 3 --modes stream,local,spare
"""
import argparse
import atexit
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_testbed as tb  # noqa: E402

tb.PREFIX, tb.HUB = "shr", "shr-hub"  # namespaces of its own: a netns_testbed.py run may be going on beside it

LINE = re.compile(r"re-formed on (\d+) nodes .*?re-sent ([\d.]+) MB of weights to (\d+) worker\(s\); replayed (\d+) "
                  r"tokens in (\d+) steps; resumed in ([\d.]+) s")


def start_worker(args, i, model=None):
    cmd = [args.bin, "worker", "--host", "127.0.0.1", "--port", str(tb.WORKER_PORT), "-t", str(args.threads)]
    if model:
        cmd += ["--model", model]
    p = tb.start(cmd, tb.node_ns(i))
    line = p.stdout.readline()
    if not line.startswith("listening on"):
        raise RuntimeError("worker %d did not start: %s %s" % (i, line, p.stderr.read()[-500:]))
    threading.Thread(target=p.stderr.read, daemon=True).start()  # never let a full pipe block it
    return p


def one_run(args, model, mode):
    n = args.nodes + (1 if mode == "spare" else 0)  # the spare has a namespace of its own
    workers = [start_worker(args, i, model if mode == "local" else None) for i in range(1, n)]
    relays = tb.start_relays(args, n, args.latency_us)
    addrs = [tb.SUBNET + "%d:%d" % (i + 1, tb.RELAY_PORT) for i in range(1, n)]
    cmd = [args.bin, "generate", "-m", model, "-p", "The history of the printing press begins", "-n",
           str(args.n_gen), "--temp", "0", "-t", str(args.threads), "--ctx", "1024", "--sync-type", "exact",
           "--workers", ",".join(addrs[:args.nodes - 1])]
    if mode == "spare":
        cmd += ["--spare", addrs[-1]]
    root = subprocess.Popen(tb.ns_exec(tb.node_ns(0), *cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = []
    t = threading.Thread(target=lambda: err.append(root.stderr.read().decode(errors="replace")))
    t.start()
    root.stdout.read(1)  # generation has started
    time.sleep(args.kill_after_s)
    workers[args.nodes - 2].kill()  # the last worker of the cluster
    root.stdout.read()
    root.wait(timeout=1800)
    t.join()
    tb.stop(workers + relays)
    m = [LINE.search(l) for l in err[0].splitlines() if l.startswith("recovery:")]
    m = [x for x in m if x]
    if root.returncode != 0 or not m:
        raise RuntimeError("no recovery (rc %d): %s" % (root.returncode, err[0][-800:]))
    g = m[-1].groups()
    return {"nodes": int(g[0]), "mb": float(g[1]), "to": int(g[2]), "tokens": int(g[3]), "steps": int(g[4]),
            "s": float(g[5])}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", required=True)
    ap.add_argument("--nodes", type=int, default=3, help="nodes before the death (the root included)")
    ap.add_argument("--modes", default="stream,local,spare")
    ap.add_argument("--latency-us", type=float, default=100)
    ap.add_argument("--gbps", type=float, default=1.0)
    ap.add_argument("--burst", type=int, default=16384)
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-n", "--n-gen", type=int, default=120)
    ap.add_argument("--kill-after-s", type=float, default=3.0)
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--bin", default="build/release/shardlm")
    ap.add_argument("--relay", default="build/release/delay_relay")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_recovery.py needs root (ip netns, tc)")
    args.bin, args.relay = os.path.abspath(args.bin), os.path.abspath(args.relay)
    atexit.register(tb.cleanup)
    signal.signal(signal.SIGINT, tb.on_signal)
    signal.signal(signal.SIGTERM, tb.on_signal)
    tb.build_network(args.nodes + 1, args.gbps, args.burst)
    print("| model | mode | nodes after | re-sent MB (to workers) | replayed tokens (steps) | time to resume s "
          "(median of %d) | all runs s |" % args.reps)
    print("|---|---|---|---|---|---|---|")
    for model in args.model:
        for mode in args.modes.split(","):
            runs = [one_run(args, model, mode) for _ in range(args.reps)]
            r = runs[len(runs) // 2]
            print("| %s | %s | %d | %.1f (%d) | %d (%d) | %.2f | %s |" %
                  (os.path.basename(model), mode, r["nodes"], r["mb"], r["to"], r["tokens"], r["steps"],
                   statistics.median(x["s"] for x in runs), ", ".join("%.2f" % x["s"] for x in runs)), flush=True)


if __name__ == "__main__":
    main()
