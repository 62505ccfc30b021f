#!/usr/bin/env python3
"""bench_spec.py: speculative decoding's speed (issue 12): decode tokens/s of `generate`
with and without speculation, and the acceptance, per network, node count and task.

Networks: `netns` (tools/netns_testbed.py: every node in its own network namespace, 1
Gbit/s links, a relay adding --latency-us of one-way latency; needs root) or `loopback`
(workers on 127.0.0.1, no added latency). N = 1 runs the root alone.
Tasks: `copy` (the prompt asks for a paragraph back: prompt lookup finds it) and `free`
(a story: little to look up). Modes: plain, `--lookup 8`, and `--draft-model D` when
--draft is given. Every (task, mode) runs --reps times, interleaved with the other modes
(the machine is noisy), greedy, exact sync; the table shows medians, the speed-up against
plain decoding measured in the same runs, the guesses kept and the tokens per decode step.
  tools/bench_spec.py -m SmolLM2.gguf --draft /tmp/smol-q4_0.gguf --net netns --nodes 2,4 --latency-us 1000
  tools/bench_spec.py -m SmolLM2.gguf --draft /tmp/smol-q4_0.gguf --net loopback --nodes 1,2
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_testbed as tb  # noqa: E402

tb.PREFIX, tb.HUB = "shs", "shs-hub"  # namespaces of its own

PARAGRAPH = ("The committee met on Tuesday to review the budget for the new library. After a long discussion, "
             "the members agreed to move the opening to the spring, to hire two more librarians, and to keep "
             "the reading room open until nine in the evening on weekdays.")
TASKS = {
    "copy": "<|im_start|>user\nRepeat the following text word for word, with nothing else: %s<|im_end|>\n"
            "<|im_start|>assistant\n" % PARAGRAPH,
    "free": "<|im_start|>user\nWrite a short story about a lighthouse keeper and a storm.<|im_end|>\n"
            "<|im_start|>assistant\n",
}
GEN = re.compile(r"^generation: (\d+) tokens in ([\d.]+) ms")
SPEC = re.compile(r"^speculation: (\d+) guesses verified, (\d+) kept \((\d+)%\), ([\d.]+) tokens per decode step")


def run_generate(args, ns, addrs, prompt, extra):
    cmd = [args.bin, "generate", "-m", args.model, "-p", prompt, "-n", str(args.n_gen), "--temp", "0", "-t",
           str(args.threads), "--ctx", "1024", "--stats"] + extra
    if addrs:
        cmd += ["--workers", ",".join(addrs), "--sync-type", "exact"]
    full = tb.ns_exec(ns, *cmd) if ns else cmd
    r = subprocess.run(full, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError("generate failed: " + r.stderr[-800:])
    out = {"tps": 0.0, "kept": None, "per_step": 1.0, "text": r.stdout}
    for line in r.stderr.splitlines():
        m = GEN.match(line)
        if m:
            out["tps"] = int(m.group(1)) / (float(m.group(2)) / 1e3)
        m = SPEC.match(line)
        if m:
            out["kept"] = int(m.group(3)) if int(m.group(1)) else None
            out["per_step"] = float(m.group(4))
    return out


def start_loopback_workers(args, n):
    ps, addrs = [], []
    for _ in range(1, n):
        p = subprocess.Popen([args.bin, "worker", "--host", "127.0.0.1", "--port", "0", "-t", str(args.threads)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = p.stdout.readline().strip()
        threading.Thread(target=p.stderr.read, daemon=True).start()
        ps.append(p)
        addrs.append(line.split("listening on ")[1])
    return ps, addrs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--draft", help="a draft model (same vocabulary) for the --draft-model mode")
    ap.add_argument("--net", choices=["netns", "loopback"], default="netns")
    ap.add_argument("--nodes", default="2,4")
    ap.add_argument("--latency-us", type=float, default=1000)
    ap.add_argument("--gbps", type=float, default=1.0)
    ap.add_argument("--burst", type=int, default=16384)
    ap.add_argument("--tasks", default="copy,free")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-n", "--n-gen", type=int, default=96)
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--bin", default="build/release/shardlm")
    ap.add_argument("--relay", default="build/release/delay_relay")
    args = ap.parse_args()
    args.bin, args.relay = os.path.abspath(args.bin), os.path.abspath(args.relay)
    args.model = os.path.abspath(args.model)
    modes = [("plain", []), ("lookup 8", ["--lookup", "8"])]
    if args.draft:
        modes.append(("draft model", ["--draft-model", os.path.abspath(args.draft)]))
    nodes = [int(x) for x in args.nodes.split(",")]
    if args.net == "netns":
        if os.geteuid() != 0:
            sys.exit("--net netns needs root (ip netns, tc)")
        atexit.register(tb.cleanup)
        signal.signal(signal.SIGINT, tb.on_signal)
        signal.signal(signal.SIGTERM, tb.on_signal)
        tb.build_network(max(nodes), args.gbps, args.burst)
    lat = "%g us one-way" % args.latency_us if args.net == "netns" else "loopback"
    print("| network | nodes | task | mode | tokens/s (median of %d) | speed-up | guesses kept | tokens per step |"
          % args.reps)
    print("|---|---|---|---|---|---|---|---|")
    for n in nodes:
        ns, addrs, ps = None, [], []
        if n > 1 and args.net == "netns":
            args.cluster_key_file, args.link_encryption = None, "on"
            ps = tb.start_workers(args, n) + tb.start_relays(args, n, args.latency_us)
            addrs = [tb.SUBNET + "%d:%d" % (i + 1, tb.RELAY_PORT) for i in range(1, n)]
            ns = tb.node_ns(0)
        elif n > 1:
            ps, addrs = start_loopback_workers(args, n)
        for task in args.tasks.split(","):
            runs = {name: [] for name, _ in modes}
            for _ in range(args.reps):
                for name, extra in modes:
                    runs[name].append(run_generate(args, ns, addrs, TASKS[task], extra))
            base = statistics.median(r["tps"] for r in runs["plain"])
            for name, _ in modes:
                rs = runs[name]
                if any(r["text"] != runs["plain"][0]["text"] for r in rs):
                    raise RuntimeError("%s on %d nodes printed another text than plain decoding" % (name, n))
                tps = statistics.median(r["tps"] for r in rs)
                kept = [r["kept"] for r in rs if r["kept"] is not None]
                print("| %s | %d | %s | %s | %.1f | %.2fx | %s | %.2f |" %
                      (lat, n, task, name, tps, tps / base, "%d%%" % statistics.median(kept) if kept else "-",
                       statistics.median(r["per_step"] for r in rs)), flush=True)
        if args.net == "netns":
            tb.stop(ps)
        else:
            for p in ps:
                p.kill()
                p.wait()


if __name__ == "__main__":
    main()
