#!/usr/bin/env python3
"""traffic_table.py: measured bytes per token on each node of a loopback cluster.

For each model, node count N and all-reduce algorithm, starts N-1 local `shardlm worker`
processes (-t 1; with --local-weights each reads its slice from the model file itself
instead of receiving it), runs `shardlm bench --workers ... --json -p 0 -n NGEN` and reads
every node's bytes sent and received per generated token (whole frames: headers, the
step message and the sampling reply included). Beside it: what `shardlm plan` predicts
for the same N and algorithm (payload bytes, all-reduce + step + sampling) and
distributed-llama's figures for the shape (all-reduce each way per node, and the F32
logits gathered into its root; it cannot run beyond N = number of KV heads).
Prints a Markdown table (KiB = 1024 bytes).

  tools/traffic_table.py -m /tmp/llama3-8b.gguf --nodes 2,4,8,16,32 --allreduce auto,ring --local-weights
"""
import argparse
import json
import os
import re
import subprocess
import sys

procs = []


def start_worker(args, model):
    cmd = [args.bin, "worker", "--port", "0", "--host", "127.0.0.1", "-t", "1"]
    if args.local_weights:
        cmd += ["--model", model]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    procs.append(p)
    line = p.stdout.readline().strip()
    if not line.startswith("listening on "):
        raise RuntimeError("worker did not start: %r" % line)
    return line[len("listening on "):]


def plan_numbers(args, model, n, algo):
    """(root sent, root received, worker max sent, worker max received) KiB per token for
    algo, and distributed-llama's (each way per node, root logits) KiB, from `shardlm plan`."""
    out = subprocess.run([args.bin, "plan", "-m", model, "--nodes", str(n)], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"distributed-llama, same shape and N: ([\d.]+) KiB each way per node per token \+ ([\d.]+) KiB",
                  out)
    dllama = (float(m.group(1)), float(m.group(2))) if m else (float("nan"), float("nan"))
    row = re.search(r"^\s+%s\s+([\d.]+) /\s+([\d.]+)\s+([\d.]+) /\s+([\d.]+)" % re.escape(algo), out, re.M)
    ar = tuple(float(x) for x in row.groups()) if row else (float("nan"),) * 4
    step = re.search(r"root sends (\d+) B per token to each worker", out)
    samp = re.search(r"each worker replies (\d+) B", out)
    step_b = int(step.group(1)) if step else 0
    samp_b = int(samp.group(1)) if samp else 0
    # + the step message out of the root and the sampling reply into it.
    pred = (ar[0] + (n - 1) * step_b / 1024, ar[1] + (n - 1) * samp_b / 1024, ar[2] + samp_b / 1024,
            ar[3] + step_b / 1024)
    return pred, dllama


def measure(args, model, workers, algo):
    cmd = [args.bin, "bench", "-m", model, "-t", "1", "-p", "0", "-n", str(args.n_gen), "-r", "1", "--json",
           "--allreduce", algo, "--workers", ",".join(workers)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError("bench failed: " + r.stderr.strip()[-500:])
    b = json.loads(r.stdout.strip().splitlines()[-1])
    m = re.search(r"decode ([\w-]+)\)", b["cluster"])
    chosen = m.group(1) if m else algo
    return b["nodes"], chosen


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", required=True)
    ap.add_argument("--nodes", default="2,4,8,16,32")
    ap.add_argument("--allreduce", default="auto", help="comma list of auto, all-gather, star, ring")
    ap.add_argument("-n", "--n-gen", type=int, default=2)
    ap.add_argument("--local-weights", action="store_true", help="workers slice the model file themselves")
    ap.add_argument("--bin", default="build/release/shardlm")
    args = ap.parse_args()
    print("| model | N | all-reduce | root sent / recv KiB | worker sent / recv KiB (max) | plan: root, worker "
          "| distributed-llama: per node each way + root logits |")
    print("|---|---|---|---|---|---|---|")
    for model in args.model:
        for n in [int(x) for x in args.nodes.split(",")]:
            workers = []
            try:
                workers = [start_worker(args, model) for _ in range(n - 1)]
                for algo in args.allreduce.split(","):
                    nodes, chosen = measure(args, model, workers, algo)
                    kib = lambda x: x / 1024.0
                    root = nodes[0]
                    ws, wr = max(kib(x["tg_bytes_sent"]) for x in nodes[1:]), max(kib(x["tg_bytes_received"])
                                                                                     for x in nodes[1:])
                    pred, dl = plan_numbers(args, model, n, chosen)
                    print("| %s | %d | %s | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f, %.1f / %.1f | %s |" % (
                        os.path.basename(model), n, chosen + (" (auto)" if algo == "auto" else ""),
                        kib(root["tg_bytes_sent"]), kib(root["tg_bytes_received"]), ws, wr, pred[0], pred[1], pred[2],
                        pred[3], "%.0f + %.0f" % dl if n <= args_kv_heads(args, model) else "cannot run (N > KV heads)"),
                        flush=True)
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                procs.clear()
    return 0


def args_kv_heads(args, model):
    out = subprocess.run([args.bin, "plan", "-m", model, "--nodes", "1"], capture_output=True, text=True).stdout
    m = re.search(r"G (\d+),", out)
    return int(m.group(1)) if m else 0


if __name__ == "__main__":
    sys.exit(main())
