#!/usr/bin/env python3
"""netns_testbed.py: a realistic network for a shardlm cluster on one machine.

Places the root and every worker in its own network namespace. Each node's namespace has
one veth (eth0, 10.77.0.<i+1>/24) whose peer sits in a hub namespace, enslaved to a bridge
(a star through one switch). Both ends of every veth are rate-limited with `tc tbf`
(the node's upload and download, default 1 Gbit/s). One-way latency is added by
delay_relay (tools/delay_relay.cc; `tc netem` is not available here): each worker listens on
127.0.0.1 inside its namespace and a relay in the same namespace accepts on its eth0
address and forwards with the given delay in both directions. The root is given the relay
addresses, and workers connect to each other through the addresses the root hands out, so
every connection, root-worker and worker-worker, crosses two rate-limited veths and one
relay: every message is delayed by the latency once. The latency is the one-way latency a
message sees: for each N the script first probes the cluster with the relay's delay at 0
(the stack and the relay's wake-ups already cost tens of microseconds) and has the relay
add only the rest (--no-calibrate: add it all).

For each model, N and latency it runs `shardlm bench --json` in the root's namespace
(decode, and optionally a prompt for time to first token) and prints, per configuration,
ms per token split into compute and sync (the root's, and the largest over nodes), the
all-reduce algorithm the cluster chose, and the sync the latency/bandwidth model predicts
for that algorithm (`shardlm plan --link-latency-us L --link-gbps B`), with their ratio;
also the token time beyond the compute floor (the slowest node's compute, or with more
nodes than cores the sum of all nodes' compute / cores) against the model's sync + step
message and reply.

With --cluster-key-file the root and every worker are keyed, so every frame is sealed with
AES-256-GCM (issue 18); add --link-encryption off for a keyed handshake with frames in
clear. The weight streaming of each N (the first bench after the workers start) is
reported as MB/s per worker, from the root's "weights to ..." lines.

MPI (mpirun, --transport mpi) on the same kind of network: tools/netns_mpi.py (a user-space
switch instead of the relays, since MPI opens ports of its own).

Every namespace is deleted on exit (atexit and SIGINT/SIGTERM), also after a failure.
Needs root (ip netns, tc). Example:
  tools/netns_testbed.py -m MODEL --nodes 1,2,4 --latency-us 100,1000 --gbps 1
  tools/netns_testbed.py -m MODEL --nodes 1,2 --latency-us 100 --n-prompt 512 --n-gen 0
"""
import argparse
import atexit
import json
import os
import re
import signal
import subprocess
import sys
import time

PREFIX = "shl"
HUB = PREFIX + "-hub"
SUBNET = "10.77.0."
WORKER_PORT = 9000  # the worker, on 127.0.0.1 in its namespace
RELAY_PORT = 9100   # the relay, on the namespace's eth0 address

namespaces = []
procs = []


def sh(*cmd, check=True):
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(cmd), r.stderr.strip()))
    return r


RT = []        # ["chrt", "-f", "10"] with --rt: root and workers
RT_RELAY = []  # ["chrt", "-f", "20"] with --rt: the relays stand for the network, which
               # does not wait for a node's CPU, so they preempt the nodes


def ns_exec(ns, *cmd, rt=None):
    return ["ip", "netns", "exec", ns] + (RT if rt is None else rt) + list(cmd)


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    procs.clear()
    for ns in reversed(namespaces):
        sh("ip", "netns", "del", ns, check=False)
    namespaces.clear()


def on_signal(signum, _frame):
    cleanup()
    sys.exit(128 + signum)


def node_ns(i):
    return "%s-n%d" % (PREFIX, i)


def build_network(n_nodes, gbps, burst):
    """The hub with its bridge, and one namespace per node joined to it."""
    for ns in [HUB] + [node_ns(i) for i in range(n_nodes)]:
        sh("ip", "netns", "del", ns, check=False)  # leftovers of a killed run
        sh("ip", "netns", "add", ns)
        namespaces.append(ns)
        sh(*ns_exec(ns, "ip", "link", "set", "lo", "up"))
    sh(*ns_exec(HUB, "ip", "link", "add", "br0", "type", "bridge"))
    sh(*ns_exec(HUB, "ip", "link", "set", "br0", "up"))
    rate = "%gmbit" % (gbps * 1000)
    for i in range(n_nodes):
        ns, hub_end = node_ns(i), "v%d" % i
        sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", hub_end, "netns", HUB)
        sh(*ns_exec(ns, "ip", "addr", "add", SUBNET + "%d/24" % (i + 1), "dev", "eth0"))
        sh(*ns_exec(ns, "ip", "link", "set", "eth0", "up"))
        sh(*ns_exec(HUB, "ip", "link", "set", hub_end, "master", "br0"))
        sh(*ns_exec(HUB, "ip", "link", "set", hub_end, "up"))
        for where, dev in ((ns, "eth0"), (HUB, hub_end)):  # upload, download
            sh(*ns_exec(where, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", str(burst),
                        "latency", "100ms"))


def start(cmd, ns, rt=None):
    p = subprocess.Popen(ns_exec(ns, *cmd, rt=rt), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(p)
    return p


def key_args(args):
    """The security options root and workers share."""
    a = ["--cluster-key-file", args.cluster_key_file] if args.cluster_key_file else []
    if args.link_encryption == "off":
        a += ["--insecure", "--link-encryption", "off"]
    return a


def start_workers(args, n_nodes):
    workers = []
    for i in range(1, n_nodes):
        p = start([args.bin, "worker", "--host", "127.0.0.1", "--port", str(WORKER_PORT), "-t", str(args.threads)]
                  + key_args(args), node_ns(i))
        line = p.stdout.readline()
        if not line.startswith("listening on"):
            raise RuntimeError("worker %d did not start: %s %s" % (i, line, p.stderr.read()[-500:]))
        workers.append(p)
    return workers


def start_relays(args, n_nodes, latency_us):
    relays = []
    for i in range(1, n_nodes):
        relays.append(start([args.relay, SUBNET + "%d:%d" % (i + 1, RELAY_PORT), "127.0.0.1:%d" % WORKER_PORT,
                             str(latency_us)], node_ns(i), rt=RT_RELAY))
    time.sleep(0.2)
    for r in relays:
        if r.poll() is not None:
            raise RuntimeError("delay_relay exited: " + r.stderr.read())
    return relays


def stop(ps):
    for p in ps:
        p.kill()
        p.wait()
        procs.remove(p)


def model_sync_ms(args, model, n_nodes, latency_us, algo):
    """Predicted ms per token of `algo`'s all-reduces (`shardlm plan`'s all-reduce table),
    and of the step message + sampling reply (its "step" term)."""
    r = sh(args.bin, "plan", "-m", model, "--nodes", str(n_nodes), "--link-latency-us", str(latency_us),
           "--link-gbps", str(args.gbps))
    m = re.search(r"^\s+%s\s.*?([\d.]+) ms/tok" % re.escape(algo), r.stdout, re.M)
    st = re.search(r"\+ step ([\d.]+) ms", r.stdout)
    return (float(m.group(1)) if m else float("nan")), (float(st.group(1)) if st else 0.0)


def bench(args, model, n_nodes, n_prompt=None, n_gen=None, reps=None):
    n_prompt = args.n_prompt if n_prompt is None else n_prompt
    n_gen = args.n_gen if n_gen is None else n_gen
    reps = args.reps if reps is None else reps
    cmd = [args.bin, "bench", "-m", model, "-t", str(args.threads), "-p", str(n_prompt), "-n", str(n_gen),
           "-r", str(reps), "--json", "--parallel", str(args.parallel)]
    if args.sync_type:
        cmd += ["--sync-type", args.sync_type]
    if n_nodes > 1:
        cmd += ["--workers", ",".join(SUBNET + "%d:%d" % (i + 1, RELAY_PORT) for i in range(1, n_nodes))]
        cmd += key_args(args)
    r = subprocess.run(ns_exec(node_ns(0), *cmd), capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError("bench failed: " + r.stderr.strip()[-800:])
    b = json.loads(r.stdout.strip().splitlines()[-1])
    # "weights to worker HOST:PORT: 347.8 / 347.8 MB, 117.2 MB/s, took 3.0 s", per worker streamed to
    b["stream_mbs"] = [float(x) for x in re.findall(r"^weights to .*?: [\d.]+ / [\d.]+ MB, ([\d.]+) MB/s, took",
                                                     r.stderr, re.M)]
    return b


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", required=True, help="GGUF model (repeatable)")
    ap.add_argument("--nodes", default="1,2,4")
    ap.add_argument("--latency-us", default="100,1000", help="one-way latency added per message")
    ap.add_argument("--gbps", type=float, default=1.0, help="rate of every node's upload and download")
    ap.add_argument("--burst", type=int, default=16384,
                    help="tbf bucket bytes (>= MTU; 16 KiB = 131 us at 1 Gbit/s: smaller buckets lose rate to timer wake-ups)")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-p", "--n-prompt", type=int, default=0)
    ap.add_argument("-n", "--n-gen", type=int, default=32)
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=1, help="sequences decoding together (bench --parallel)")
    ap.add_argument("--sync-type", help="passed to bench (default: bench's, auto)")
    ap.add_argument("--bin", default="build/release/shardlm")
    ap.add_argument("--relay", default="build/release/delay_relay")
    ap.add_argument("--no-calibrate", action="store_true",
                    help="add the whole latency in the relay (default: only what the stack does not already cost)")
    ap.add_argument("--json-out", help="also write every result to this file")
    ap.add_argument("--cluster-key-file", help="key root and workers with this file (`shardlm keygen --out FILE`): "
                                               "sealed frames")
    ap.add_argument("--link-encryption", choices=["on", "off"], default="on",
                    help="off: keyed handshake, frames in clear (with --cluster-key-file)")
    ap.add_argument("--rt", action="store_true",
                    help="run root and workers SCHED_FIFO (relays at a higher priority), so that other users' load "
                         "on a shared machine does not land in the measured times (the kernel keeps 5%% for others)")
    args = ap.parse_args()
    if args.rt:
        RT.extend(["chrt", "-f", "10"])
        RT_RELAY.extend(["chrt", "-f", "20"])
    if args.link_encryption == "off" and not args.cluster_key_file:
        sys.exit("--link-encryption off needs --cluster-key-file (a keyed link in clear); without a key links are "
                 "in clear anyway")
    if args.cluster_key_file:
        args.cluster_key_file = os.path.abspath(args.cluster_key_file)
    if os.geteuid() != 0:
        sys.exit("netns_testbed.py needs root (ip netns, tc)")
    for f in (args.bin, args.relay):
        if not os.access(f, os.X_OK):
            sys.exit("%s not found: build it first (cmake --build build/release --target shardlm delay_relay)" % f)
    args.bin, args.relay = os.path.abspath(args.bin), os.path.abspath(args.relay)
    atexit.register(cleanup)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    node_counts = [int(x) for x in args.nodes.split(",")]
    latencies = [float(x) for x in args.latency_us.split(",")]
    build_network(max(node_counts), args.gbps, args.burst)

    results = []
    print("| model | N | latency | algorithm | ms/token | compute ms (root / max) | sync ms (root / max) | model sync "
          "ms | root sync / model | token - compute floor | / (model sync + step) | TTFT ms | probed alpha, beta |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model in args.model:
        for n in node_counts:
            workers = start_workers(args, n)
            base_us = 0.0
            if n > 1 and not args.no_calibrate:
                # The stack and the relay's own wake-ups cost some latency already: probe it
                # with the relay's delay at 0 and add only the rest, so that the one-way
                # latency a message sees (what the cluster's probe reports as alpha) is the
                # target. This also streams the slices once.
                relays = start_relays(args, n, 0)
                try:
                    b = bench(args, model, n, n_prompt=0, n_gen=1, reps=1)
                finally:
                    stop(relays)
                m = re.search(r"alpha (\d+) us", b.get("cluster", ""))
                base_us = float(m.group(1)) if m else 0.0
                print("<!-- %s N=%d: alpha with the relay at 0 delay: %.0f us; weights streamed at %s MB/s -->" % (
                    os.path.basename(model), n, base_us, ", ".join("%.1f" % x for x in b["stream_mbs"]) or "-"),
                    flush=True)
                results.append(dict(model=os.path.basename(model), nodes=n, stream_mbs=b["stream_mbs"]))
            for lat in latencies if n > 1 else [0]:
                relays = start_relays(args, n, max(0.0, lat - base_us))
                try:
                    b = bench(args, model, n)
                finally:
                    stop(relays)
                nodes = b.get("nodes", [])
                comp = [x["tg_compute_ms"] for x in nodes] or [0]
                sync = [x["tg_sync_ms"] for x in nodes] or [0]
                m = re.search(r"alpha (\d+) us, beta ([\d.]+) Gbit/s: decode ([\w-]+)", b.get("cluster", ""))
                algo = m.group(3) if m else ("exact" if "sync exact" in b.get("cluster", "") else "-")
                pred, step = model_sync_ms(args, model, n, lat, algo) if m else (0.0, 0.0)
                ratio = sync[0] / pred if pred else float("nan")
                token_ms = 1e3 / b["tg_tps"] if b["tg_tps"] else float("nan")
                # Wall time per token not explained by the slowest node's compute, against
                # the model's all-reduces + step message and reply.
                # With more nodes than cores the nodes cannot all compute at once: the
                # compute floor is then the sum over nodes / cores.
                rest = token_ms - max(max(comp), sum(comp) / (os.cpu_count() or 1))
                ratio2 = rest / (pred + step) if pred else float("nan")
                ttft = 1e3 * args.n_prompt / b["pp_tps"] if args.n_prompt and b["pp_tps"] else float("nan")
                row = dict(model=os.path.basename(model), nodes=n, latency_us=lat, algo=algo, compute_ms=comp[0],
                           compute_max_ms=max(comp), sync_ms=sync[0], sync_max_ms=max(sync), model_sync_ms=pred,
                           ratio=ratio, token_ms=token_ms, rest_ms=rest, model_step_ms=step, ratio_rest=ratio2,
                           ttft_ms=ttft, tg_tps=b["tg_tps"], pp_tps=b["pp_tps"],
                           probe=("%s us, %s Gbit/s" % (m.group(1), m.group(2))) if m else "-",
                           stream_mbs=b["stream_mbs"])
                results.append(row)
                dash = lambda fmt, v: fmt % v if n > 1 and args.n_gen else "-"
                print("| %s | %d | %s | %s | %s | %.2f / %.2f | %.2f / %.2f | %s | %s | %s | %s | %s | %s |" % (
                    row["model"], n, "%g ms" % (lat / 1000) if n > 1 else "-", algo,
                    "%.2f" % token_ms if args.n_gen else "-", comp[0], max(comp), sync[0], max(sync),
                    dash("%.2f", pred), dash("%.2f", ratio), dash("%.2f", rest), dash("%.2f", ratio2),
                    "%.0f" % ttft if args.n_prompt else "-", row["probe"]), flush=True)
            stop(workers)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
