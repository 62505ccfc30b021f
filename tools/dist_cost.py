#!/usr/bin/env python3
"""dist_cost.py: what distribution costs on one 2-core machine.

For each model, in interleaved rounds (so machine noise hits every configuration alike):
  prompt (-p 512): 1 node x 1 thread   vs  2 nodes x 1 thread (root + one local worker)
  decode (-n 32):  1 node x 2 threads  vs  2 nodes x 1 thread (the same two cores)
with `shardlm bench --json -r 1`; prints the median tokens/s of each and the ratios, and
for the 2-node decode the root's median compute and sync ms per token. The worker keeps
its slice across rounds (it is streamed once).

  tools/dist_cost.py -m MODEL [-m MODEL2] --rounds 5 [--spin-us 100] [--rt]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def bench(args, model, threads, extra, env):
    cmd = args.prefix + [args.bin, "bench", "-m", model, "-t", str(threads), "-r", "1", "--json"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if r.returncode != 0:
        raise RuntimeError("bench failed: " + r.stderr.strip()[-500:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n-prompt", type=int, default=512)
    ap.add_argument("--n-gen", type=int, default=32)
    ap.add_argument("--spin-us", help="SHARDLM_SPIN_US for root and worker (default: the built-in)")
    ap.add_argument("--rt", action="store_true",
                    help="run every process SCHED_FIFO (chrt), so other users' load does not land in the numbers")
    ap.add_argument("--bin", default="build/release/shardlm")
    args = ap.parse_args()
    args.prefix = ["chrt", "-f", "10"] if args.rt else []
    env = dict(os.environ)
    if args.spin_us is not None:
        env["SHARDLM_SPIN_US"] = args.spin_us
    print("| model | prompt %d: 1x1 / 2x1 tok/s | 2x1 / 1x1 | decode: 1x2 / 2x1 tok/s | 2x1 / 1x2 | "
          "2x1 decode root compute / sync ms |" % args.n_prompt)
    print("|---|---|---|---|---|---|")
    for model in args.model:
        w = subprocess.Popen(args.prefix + [args.bin, "worker", "--port", "0", "--host", "127.0.0.1", "-t", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        try:
            addr = w.stdout.readline().strip().split()[-1]
            pp = ["-p", str(args.n_prompt), "-n", "0"]
            tg = ["-p", "0", "-n", str(args.n_gen)]
            two = ["--workers", addr]
            bench(args, model, 1, tg + two, env)  # streams the slice once
            res = {k: [] for k in ("pp11", "pp21", "tg12", "tg21", "comp", "sync")}
            for _ in range(args.rounds):
                res["pp11"].append(bench(args, model, 1, pp, env)["pp_tps"])
                res["pp21"].append(bench(args, model, 1, pp + two, env)["pp_tps"])
                res["tg12"].append(bench(args, model, 2, tg, env)["tg_tps"])
                b = bench(args, model, 1, tg + two, env)
                res["tg21"].append(b["tg_tps"])
                res["comp"].append(b["nodes"][0]["tg_compute_ms"])
                res["sync"].append(b["nodes"][0]["tg_sync_ms"])
            med = {k: statistics.median(v) for k, v in res.items()}
            print("| %s | %.1f / %.1f | %.2f | %.1f / %.1f | %.2f | %.2f / %.2f |" % (
                os.path.basename(model), med["pp11"], med["pp21"], med["pp21"] / med["pp11"], med["tg12"],
                med["tg21"], med["tg21"] / med["tg12"], med["comp"], med["sync"]), flush=True)
            print("<!-- raw %s: %s -->" % (os.path.basename(model), json.dumps(res)), flush=True)
        finally:
            w.kill()
            w.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
