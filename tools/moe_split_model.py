#!/usr/bin/env python3
"""moe_split_model.py: the two ways to spread an MoE layer over N nodes, modelled per decode token.

  * row split (what shardlm does): every node holds its share of every expert's rows, so each
    node reads share x (k experts) per token, whatever experts the router picks;
  * expert parallelism (not implemented): node i holds whole experts [i E/N, (i+1) E/N); the
    token's step waits for the node that holds the most of its k picked experts.
For N = 2..16 it prints the slowest node's expert reads per token in units of one expert
(row split: k/N; expert parallelism: E[max picks on one node], Monte Carlo with uniformly
random routing, which random-weight routers give and trained ones only approach: a skewed
router makes expert parallelism worse), and what row split costs instead: blocks of the
expert's type it cuts (re-encoded down slices) for the given expert hidden size.

Usage: python3 tools/moe_split_model.py [--experts 128] [--used 8] [--ff 768] [--trials 20000]
"""
import argparse
import random


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--used", type=int, default=8)
    ap.add_argument("--ff", type=int, default=768)
    ap.add_argument("--trials", type=int, default=20000)
    a = ap.parse_args()
    rng = random.Random(1)
    print("| N | row split: experts read by each node | expert parallelism: slowest node (mean) | ratio EP / row |"
          " row split cuts Q4_0 (32) / Q4_K (256) blocks? |")
    print("|---|---|---|---|---|")
    for n in range(2, 17):
        per = a.experts / n
        total = 0
        for _ in range(a.trials):
            picks = rng.sample(range(a.experts), a.used)
            load = [0] * n
            for e in picks:
                load[int(e // per)] += 1
            total += max(load)
        ep = total / a.trials
        row = a.used / n
        cuts = []
        for block in (32, 256):
            units = a.ff // block if a.ff % block == 0 else 0
            cuts.append("no" if units >= n else "yes (re-encoded)")
        print("| %d | %.2f | %.2f | %.2fx | %s / %s |" % (n, row, ep, ep / row, cuts[0], cuts[1]))


if __name__ == "__main__":
    main()
