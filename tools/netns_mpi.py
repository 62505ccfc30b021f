#!/usr/bin/env python3
"""netns_mpi.py: MPI against our TCP mesh on the network-namespace testbed (issue 17).

Every rank runs in its own network namespace (shl-n<i>, address 10.77.0.<i+1>/24 on eth0),
and mpirun in this (the root) namespace, on shl-host (10.77.0.254). The namespaces are
joined by build/release/netem_switch, a user-space Ethernet switch that adds the one-way
latency and limits each port's upload and download to the rate (this kernel has no
`tc netem`, and delay_relay, netns_testbed.py's TCP proxy, cannot carry MPI's own ports).
Both transports cross the same switch, so they see the same network. The switch runs
SCHED_FIFO (--no-rt: not), so that ranks busy-polling MPI do not starve the "network" on a
machine with few cores.

mpirun starts its daemons with the rsh launcher and tools/netns_agent.sh as "ssh" (the
agent runs the daemon inside the node's namespace), and every rank's traffic goes over
the testbed subnet:
  mpirun -np N --host 10.77.0.1,...,10.77.0.N --mca plm_rsh_agent tools/netns_agent.sh \\
    --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 CMD
Rank 0 (the root) runs in shl-n0; over TCP the root runs there too, and workers listen on
their namespace's address.

Runs TCP and MPI alternately, --runs times, per configuration, and prints medians:
  allreduce: build/release/allreduce_bench (per message size: us per all-reduce)
  decode:    shardlm bench -p 0 -n 32 (tokens/s) on -m MODEL
Needs root (ip netns, /dev/net/tun). Every namespace is deleted on exit. Example:
  tools/netns_mpi.py allreduce --nodes 2 --latency-us 100,1000 --runs 3
  tools/netns_mpi.py decode -m /tmp/l1b-q4_0.gguf --nodes 2,4 --latency-us 100,1000 --runs 3
"""
import argparse
import atexit
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

SUBNET = "10.77.0."
HOST_IF = "shl-host"
HERE = os.path.dirname(os.path.abspath(__file__))
namespaces, procs = [], []


def sh(*cmd):
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(cmd), r.stderr.strip()))
    return r


def ns_name(i):
    return "shl-n%d" % i


def addr(i):
    return SUBNET + str(i + 1)


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    procs.clear()
    for ns in namespaces:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    namespaces.clear()


def net_up(args, n, latency_us):
    """n namespaces on a fresh switch; returns the switch process."""
    for i in range(n):
        if ns_name(i) not in namespaces:
            subprocess.run(["ip", "netns", "del", ns_name(i)], capture_output=True)  # a killed run's
            sh("ip", "netns", "add", ns_name(i))
            namespaces.append(ns_name(i))
            sh("ip", "netns", "exec", ns_name(i), "ip", "link", "set", "lo", "up")
    ports = [ns_name(i) for i in range(n)] + ["-:" + HOST_IF]
    rt = [] if args.no_rt else ["chrt", "-f", "20"]
    sw = subprocess.Popen(rt + [args.switch, str(latency_us), str(args.gbps * 1000)] + ports, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    procs.append(sw)
    if sw.stdout.readline().strip() != "ready":
        raise RuntimeError("netem_switch: " + sw.stderr.read())
    for i in range(n):
        sh("ip", "netns", "exec", ns_name(i), "ip", "addr", "add", addr(i) + "/24", "dev", "eth0")
        sh("ip", "netns", "exec", ns_name(i), "ip", "link", "set", "eth0", "up")
    sh("ip", "addr", "add", SUBNET + "254/24", "dev", HOST_IF)
    sh("ip", "link", "set", HOST_IF, "up")
    time.sleep(0.3)
    return sw


def net_down(sw):
    sw.kill()  # its tap devices (and their addresses) go with it
    sw.wait()
    procs.remove(sw)


def mpirun(args, n, cmd):
    return ["mpirun", "-np", str(n), "--host", ",".join(addr(i) for i in range(n)), "--bind-to", "none",
            "--mca", "plm_rsh_agent", os.path.join(HERE, "netns_agent.sh"), "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", SUBNET + "0/24", "--mca", "oob_tcp_if_include", SUBNET + "0/24"] + cmd


def in_ns(i, cmd):
    return ["ip", "netns", "exec", ns_name(i)] + cmd


def run_tcp(n, worker_cmd, root_cmd, timeout, announces=False):
    """worker_cmd(i) in namespaces 1..n-1 (with announces, each prints "listening on ..."
    first: waited for), then root_cmd in 0."""
    ws = []
    try:
        for i in range(1, n):
            p = subprocess.Popen(in_ns(i, worker_cmd(i)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append(p)
            ws.append(p)
            if announces and not p.stdout.readline().startswith("listening on"):
                raise RuntimeError("worker %d did not start: %s" % (i, p.stderr.read()[-500:]))
        time.sleep(0.5)
        r = subprocess.run(in_ns(0, root_cmd), capture_output=True, text=True, timeout=timeout)
    finally:
        for p in ws:
            if p.poll() is None:
                p.kill()
            p.wait()
            procs.remove(p)
    return r


def parse_allreduce(out):
    """{(values, algo): us} from allreduce_bench's table."""
    res = {}
    for m in re.finditer(r"^\s*(\d+)\s+([\w-]+)\s+([\d.]+)\s+([\d.]+)\s*$", out, re.M):
        res[(int(m.group(1)), m.group(2))] = float(m.group(3))
    return res


def allreduce(args, n, lat):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    runs = {"tcp": [], "mpi": []}
    for k in range(args.runs):
        for tr in ("tcp", "mpi"):
            if tr == "tcp":
                r = run_tcp(n, lambda i: [args.allreduce_bench, "--listen", "%s:%d" % (addr(i), 9600)],
                            [args.allreduce_bench, "--workers", ",".join("%s:9600" % addr(i) for i in range(1, n)),
                             "--sync", args.sync], 1800)
            else:
                r = subprocess.run(mpirun(args, n, [args.allreduce_bench, "--mpi", "--sync", args.sync]),
                                   capture_output=True, text=True, timeout=1800, env=env)
            if r.returncode != 0:
                raise RuntimeError("%s all-reduce failed: %s" % (tr, (r.stdout + r.stderr)[-1500:]))
            runs[tr].append(parse_allreduce(r.stdout))
            print("<!-- run %d %s done, load %s -->" % (k, tr, os.getloadavg()[0]), flush=True)
    med = {tr: {key: statistics.median(x[key] for x in rs if key in x) for key in rs[0]} for tr, rs in runs.items()}
    sizes = sorted({v for v, _ in med["tcp"]})
    print("\n%d ranks, one-way latency %g ms, %g Gbit/s, %s, median of %d runs (us per all-reduce; "
          "MB/s = bytes per rank / time)\n" % (n, lat / 1000, args.gbps, args.sync, args.runs))
    print("| values (%s bytes) | TCP mesh, ours | MPI tcp, ours | MPI tcp, MPI_Allreduce |" % args.sync)
    print("|---|---|---|---|")
    esz = {"f32": 4, "f16": 2}.get(args.sync, 1)

    def cell(tr, v, algos):
        got = [(med[tr][(v, a)], a) for a in algos if (v, a) in med[tr]]
        if not got:
            return "-"
        us, a = min(got)
        mbs = v * esz / us if v * esz >= 65536 else None
        return "%.0f µs%s" % (us, " (%s%s)" % (a, ", %.0f MB/s" % mbs if mbs else "") if len(algos) > 1 else
                              (" (%.0f MB/s)" % mbs if mbs else ""))
    ours = ["all-gather", "star", "ring"]
    for v in sizes:
        print("| %d (%s) | %s | %s | %s |" % (v, human(v * esz), cell("tcp", v, ours), cell("mpi", v, ours),
                                               cell("mpi", v, ["mpi"])), flush=True)
    return dict(nodes=n, latency_us=lat, runs={tr: [{"%d %s" % k: u for k, u in x.items()} for x in rs]
                                               for tr, rs in runs.items()})


def human(b):
    return "%d B" % b if b < 1024 else "%d KiB" % (b // 1024) if b < 1 << 20 else "%d MiB" % (b >> 20)


def decode(args, n, lat):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    bench = [args.bin, "bench", "-m", os.path.abspath(args.model), "-t", str(args.threads), "-p", "0", "-n",
             str(args.n_gen), "-r", str(args.reps), "--json", "--sync-type", args.sync]
    tps = {"tcp": [], "mpi": []}
    for k in range(args.runs):
        for tr in ("tcp", "mpi"):
            if tr == "tcp":
                r = run_tcp(n, lambda i: [args.bin, "worker", "--host", addr(i), "--port", "9000", "-t",
                                          str(args.threads), "--sessions", "1", "--insecure"],
                            bench + ["--workers", ",".join("%s:9000" % addr(i) for i in range(1, n))], 1800,
                            announces=True)
            else:
                r = subprocess.run(mpirun(args, n, bench + ["--transport", "mpi"]), capture_output=True, text=True,
                                   timeout=1800, env=env)
            js = [l for l in r.stdout.splitlines() if l.startswith("{")]
            if r.returncode != 0 or not js:
                raise RuntimeError("%s bench failed: %s" % (tr, (r.stdout + r.stderr)[-1500:]))
            b = json.loads(js[-1])
            tps[tr].append(b["tg_tps"])
            print("<!-- N=%d %g ms run %d %s: %.2f tokens/s (%s), load %.1f -->" % (
                n, lat / 1000, k, tr, b["tg_tps"], b.get("cluster", ""), os.getloadavg()[0]), flush=True)
    print("| %d | %g ms | %s | %.2f (%s) | %.2f (%s) |" % (
        n, lat / 1000, args.sync, statistics.median(tps["tcp"]), ", ".join("%.2f" % x for x in tps["tcp"]),
        statistics.median(tps["mpi"]), ", ".join("%.2f" % x for x in tps["mpi"])), flush=True)
    return dict(nodes=n, latency_us=lat, sync=args.sync, tps=tps)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["allreduce", "decode"])
    ap.add_argument("-m", "--model", help="GGUF model (decode)")
    ap.add_argument("--nodes", default="2")
    ap.add_argument("--latency-us", default="100,1000", help="one-way latency the switch adds")
    ap.add_argument("--gbps", type=float, default=1.0, help="every port's upload and download rate")
    ap.add_argument("--runs", type=int, default=3, help="TCP, MPI alternately, this many times each")
    ap.add_argument("--sync", default=None, help="allreduce_bench --sync (f32) / bench --sync-type (exact)")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-n", "--n-gen", type=int, default=32)
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--bin", default="build/release/shardlm")
    ap.add_argument("--allreduce-bench", default="build/release/allreduce_bench")
    ap.add_argument("--switch", default="build/release/netem_switch")
    ap.add_argument("--no-rt", action="store_true",
                    help="run the switch at normal priority (default SCHED_FIFO 20: the network does not wait for "
                         "the nodes' CPUs, and MPI ranks that busy-poll would otherwise starve it on a small machine)")
    ap.add_argument("--json-out", help="also write every run's numbers here")
    args = ap.parse_args()
    args.sync = args.sync or ("f32" if args.what == "allreduce" else "exact")
    if os.geteuid() != 0:
        sys.exit("netns_mpi.py needs root (ip netns, /dev/net/tun)")
    if args.what == "decode" and not args.model:
        sys.exit("decode needs -m MODEL")
    for a in ("bin", "allreduce_bench", "switch"):
        setattr(args, a, os.path.abspath(getattr(args, a)))
        if not os.access(getattr(args, a), os.X_OK):
            sys.exit("%s not found: cmake --build build/release --target shardlm allreduce_bench netem_switch"
                     % getattr(args, a))
    atexit.register(cleanup)
    signal.signal(signal.SIGINT, lambda s, f: sys.exit(130))
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(143))
    print("<!-- %s; %s -->" % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()))
    if args.what == "decode":
        print("| N | latency | sync | TCP mesh tokens/s (runs) | MPI tokens/s (runs) |\n|---|---|---|---|---|")
    results = []
    for n in [int(x) for x in args.nodes.split(",")]:
        for lat in [float(x) for x in args.latency_us.split(",")]:
            sw = net_up(args, n, lat)
            try:
                results.append((allreduce if args.what == "allreduce" else decode)(args, n, lat))
            finally:
                net_down(sw)
    print("<!-- done %s; %s -->" % (time.strftime("%H:%M UTC", time.gmtime()),
                                    subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
