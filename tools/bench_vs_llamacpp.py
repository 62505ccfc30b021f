#!/usr/bin/env python3
"""Decode and prompt speed of shardlm beside llama.cpp (llama-cpp-python) on the same files,
in the same run, alternating the two so machine noise hits both alike.

llama.cpp's numbers are wall-clock times around llama-cpp-python's eval() (one llama_decode
per call; logits are not copied out), so a few tens of microseconds of Python per token are
counted against it. shardlm's come from
`shardlm bench --json`. Prints a Markdown table for docs/BENCHMARKS.md.

The decode figure is measured right after the prompt, so `-p 4096 -n 16` is decode at
context ~4096 and `-p 128 -n 16` at ~128 (flash decoding should keep the drop small).
`--shardlm-args "--flash-attn off --kv-type q8_0"` passes options to `shardlm bench`;
`--llama-flash` turns on llama.cpp's flash attention. -b is shardlm's prompt batch (default:
the whole prompt in one step, as llama.cpp gets it here); -n 0 measures prompt speed only.

Usage: python3 tools/bench_vs_llamacpp.py MODEL [MODEL...] [--threads 1,2] [-p 64] [-n 32] [-r 3] [-b N]
           [--shardlm-args "..."] [--llama-flash] [--no-bandwidth]
"""
import shlex
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time


def llama_cpp_run(path, threads, n_prompt, n_gen, flash=False):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, n_ctx=max(512, n_prompt + n_gen + 8), n_batch=max(32, n_prompt),
                          n_threads=threads, n_threads_batch=threads, verbose=False, flash_attn=flash)
    rng = random.Random(42)
    n_vocab = llm.n_vocab()
    prompt = [rng.randrange(n_vocab) for _ in range(n_prompt)]
    llm.reset()
    llm.eval(prompt[:1])  # warm-up
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    t1 = time.perf_counter()
    for i in range(n_gen):
        llm.eval([prompt[i % n_prompt]])
    t2 = time.perf_counter()
    pp = n_prompt / (t1 - t0)
    tg = n_gen / (t2 - t1) if n_gen else 0.0
    del llm
    return pp, tg


def shardlm_run(binary, path, threads, n_prompt, n_gen, batch, bandwidth=False, extra=()):
    cmd = [binary, "bench", "-m", path, "-t", str(threads), "-p", str(n_prompt), "-n", str(n_gen), "-r", "1",
           "-b", str(batch), "--json"] + list(extra)
    if bandwidth:
        cmd.append("--bandwidth")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--binary", default="build/release/shardlm")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("-p", type=int, default=64)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--shardlm-args", default="", help="extra options for shardlm bench")
    ap.add_argument("--llama-flash", action="store_true", help="llama.cpp with flash attention")
    ap.add_argument("--no-bandwidth", action="store_true", help="skip the read-bandwidth measurement")
    ap.add_argument("-b", type=int, default=0, help="shardlm prompt batch (default: -p)")
    args = ap.parse_args()
    extra = shlex.split(args.shardlm_args)
    rows = []
    for path in args.models:
        for t in [int(x) for x in args.threads.split(",")]:
            ours_pp, ours_tg, ref_pp, ref_tg = [], [], [], []
            bw = 0.0
            weight_gb = 0.0
            for r in range(args.r):
                j = shardlm_run(args.binary, path, t, args.p, args.n, args.b or args.p,
                                bandwidth=(r == 0 and not args.no_bandwidth), extra=extra)
                bw = max(bw, j["read_bw_gbps"])
                weight_gb = j["weight_gb"]
                ours_pp.append(j["pp_tps"])
                ours_tg.append(j["tg_tps"])
                pp, tg = llama_cpp_run(path, t, args.p, args.n, args.llama_flash)
                ref_pp.append(pp)
                ref_tg.append(tg)
                print(f"  {os.path.basename(path)} t={t} rep {r}: shardlm pp {j['pp_tps']:.1f} tg {j['tg_tps']:.1f}"
                      f" | llama.cpp pp {pp:.1f} tg {tg:.1f}", file=sys.stderr)
            med = statistics.median
            rows.append((os.path.basename(path), t, med(ours_pp), med(ref_pp), med(ours_tg), med(ref_tg),
                         med(ours_tg) * weight_gb, bw))
    print(f"| model | threads | pp{args.p} shardlm | pp{args.p} llama.cpp | ratio | tg{args.n} shardlm | "
          f"tg{args.n} llama.cpp | ratio | shardlm GB/s | read BW GB/s | % of BW |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, t, opp, rpp, otg, rtg, gbs, bw in rows:
        tg_ratio = f"{otg / rtg:.2f}" if rtg else "-"
        print(f"| {name} | {t} | {opp:.1f} | {rpp:.1f} | {opp / rpp:.2f} | {otg:.2f} | {rtg:.2f} | {tg_ratio} |"
              f" {gbs:.2f} | {bw:.2f} | {100 * gbs / bw if bw else 0:.0f}% |")


if __name__ == "__main__":
    main()
