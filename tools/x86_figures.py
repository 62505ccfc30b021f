#!/usr/bin/env python3
"""x86_figures.py: issue 30's "must show" figures in one run, beside llama.cpp, on whatever x86
CPU this is (written for the first session that lands on Sapphire Rapids; it runs anywhere).

What it measures, each shardlm / llama.cpp pair alternating round by round, medians of
--rounds, wall-clock tokens/s (so run it on a quiet machine and read the load it prints):
  1. the CPU (model, family/model, the AVX-512 / AMX flags) and `shardlm devices` (the kernel
     table chosen, the 512/256-bit choice, AMX granted or why not);
  2. pp512 and tg32 for each --types x 1B shape at each --threads: `shardlm bench` against
     `llama-bench`; decode also as GB/s of weights and % of `bench --bandwidth` (same threads);
     on a CPU with AMX, shardlm's pp512 again with SHARDLM_ISA=avx512 (what AMX adds);
  3. tg32 for the 8B shape (--shapes; each file 4.6-8.5 GB, made on the fly and deleted);
  4. 1 and 8 sequences decoding (`bench --parallel`, default = exact mode) against
     `llama-batched-bench -npp 16 -ntg 32 -npl 1,8` on the 1B Q4_0 and Q4_K shapes (--batched-types);
  5. kernel int8 throughput: kernels_bench Matmul per type and batch, AMX against AVX-512,
     as TOPS and as a share of one core's AMX peak (1024 int8 multiply-adds per cycle).
llama.cpp: --llama-bin DIR with llama-bench and llama-batched-bench, else built once into
.deps/llama.cpp-x86 from the llama-cpp-python sdist that `make vocab` downloads (GGML_NATIVE,
AMX code switched off: ggml's AMX kernels die with SIGILL on these VMs; ~10 CPU-minutes).

Usage: python3 tools/x86_figures.py [--rounds 5] [--threads 1,2] [--types Q4_0,Q4_K,Q6_K,Q8_0]
         [--shapes llama3.2-1b,llama3-8b] [--models DIR] [--llama-bin DIR] [--quick] > report.md
--quick: by default 2 rounds, 1 thread, Q4_0 and Q4_K, 1B only (a check that everything runs,
~5 minutes once llama.cpp is built).
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build/release/shardlm")
KBENCH = os.path.join(ROOT, "build/release/kernels_bench")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, env=None, check=True):
    e = dict(os.environ, **(env or {}))
    r = subprocess.run(cmd, capture_output=True, text=True, env=e)
    if check and r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r.stdout


def cpu_info():
    text = open("/proc/cpuinfo").read()
    field = lambda k: (re.search(rf"^{k}\s*:\s*(.*)$", text, re.M) or [None, "?"])[1]
    flags = set(field("flags").split())
    want = ["avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16"]
    return {"model": field("model name"), "family": field("cpu family"), "cpu_model": field("model"),
            "mhz": field("cpu MHz"), "flags": [f for f in want if f in flags], "amx": "amx_int8" in flags}


def ensure_llama(arg):
    if arg:
        return arg
    out = os.path.join(ROOT, ".deps/llama.cpp-x86")
    bindir = os.path.join(out, "build/bin")
    if all(os.path.exists(os.path.join(bindir, t)) for t in ("llama-bench", "llama-batched-bench")):
        return bindir
    tarballs = sorted(glob.glob(os.path.join(ROOT, ".deps/sdist/llama_cpp_python-*.tar.gz")))
    if not tarballs:
        raise SystemExit("no llama-cpp-python sdist in .deps/sdist: run `make vocab` first, or pass --llama-bin")
    log(f"building llama.cpp from {tarballs[-1]} into {out} (once)")
    os.makedirs(out, exist_ok=True)
    run(["tar", "-xzf", tarballs[-1], "-C", out, "--strip-components=3", "--wildcards", "*/vendor/llama.cpp/*"])
    src = os.path.join(out, "llama.cpp") if os.path.isdir(os.path.join(out, "llama.cpp")) else out
    no_amx = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    run(["cmake", "-S", src, "-B", os.path.join(out, "build"), "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
         "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF", "-DLLAMA_CURL=OFF",
         "-DBUILD_SHARED_LIBS=OFF", f"-DCMAKE_C_FLAGS={no_amx}", f"-DCMAKE_CXX_FLAGS={no_amx}"])
    run(["cmake", "--build", os.path.join(out, "build"), "-j", str(os.cpu_count()), "--target", "llama-bench",
         "llama-batched-bench"])
    return bindir


def model_path(models, shape, qtype):
    path = os.path.join(models, f"{shape}-{qtype}.gguf")
    if not os.path.exists(path):
        log(f"making {path}")
        run([BIN, "make-model", "--shape", shape, "--type", qtype, path])
    return path


def shardlm_bench(model, t, p, n, parallel=1, env=None):
    out = run([BIN, "bench", "-m", model, "-t", str(t), "-p", str(p), "-n", str(n), "-r", "1", "--json",
               "--parallel", str(parallel)], env=env)
    return json.loads(out)


def llama_bench(lbin, model, t, p, n):
    out = json.loads(run([os.path.join(lbin, "llama-bench"), "-m", model, "-t", str(t), "-p", str(p), "-n",
                          str(n), "-r", "1", "-o", "json"]))
    return out[0]["avg_ts"]


def batched_bench(lbin, model, t):
    """llama-batched-bench's decode tokens/s (S_TG) at 1 and 8 sequences."""
    out = run([os.path.join(lbin, "llama-batched-bench"), "-m", model, "-t", str(t), "-c", "2048",
               "-npp", "16", "-ntg", "32", "-npl", "1,8"])
    tg = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and cells[2].isdigit():
            tg[int(cells[2])] = float(cells[7])
    return tg


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def fmt(xs):
    return f"{med(xs):.2f} ({', '.join(f'{x:.1f}' for x in xs)})"


def load():
    return open("/proc/loadavg").read().split()[0]


def section_speed(a, lbin, models, info, bw):
    print("\n## pp512 and tg32, shardlm beside llama-bench (tokens/s: median (rounds))\n")
    print("| model | threads | shardlm pp512 | llama.cpp pp512 | ratio | shardlm tg32 | llama.cpp tg32 | ratio |"
          " tg GB/s | % of read bw |" + (" pp512 forced avx512 | amx gain |" if info["amx"] else ""))
    print("|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if info["amx"] else ""))
    for shape in a.shapes:
        big = "8b" in shape
        for qtype in a.types:
            m = model_path(models, shape, qtype)
            for t in a.threads:
                r = {k: [] for k in ("spp", "lpp", "stg", "ltg", "gbps", "avx")}
                for i in range(a.rounds):
                    log(f"{shape} {qtype} t{t} round {i + 1} (load {load()})")
                    if not big:
                        r["spp"].append(shardlm_bench(m, t, 512, 0)["pp_tps"])
                        r["lpp"].append(llama_bench(lbin, m, t, 512, 0))
                        if info["amx"]:
                            r["avx"].append(shardlm_bench(m, t, 512, 0, env={"SHARDLM_ISA": "avx512"})["pp_tps"])
                    j = shardlm_bench(m, t, 0, 32)
                    r["stg"].append(j["tg_tps"])
                    r["gbps"].append(j["tg_gbps"])
                    r["ltg"].append(llama_bench(lbin, m, t, 0, 32))
                pp = (f"{fmt(r['spp'])} | {fmt(r['lpp'])} | {med(r['spp']) / med(r['lpp']):.2f}x" if not big
                      else "– | – | –")
                row = (f"| {shape} {qtype} | {t} | {pp} | {fmt(r['stg'])} | {fmt(r['ltg'])} | "
                       f"{med(r['stg']) / med(r['ltg']):.2f}x | {med(r['gbps']):.1f} | {100 * med(r['gbps']) / bw[t]:.0f}% |")
                if info["amx"]:
                    row += (f" {fmt(r['avx'])} | {med(r['spp']) / med(r['avx']):.2f}x |" if not big else " – | – |")
                print(row, flush=True)
            if big:
                os.remove(m)  # 4.6-8.5 GB each


def section_batched(a, lbin, models):
    print("\n## 1 and 8 sequences decoding (default mode: each sequence's text equals it alone)\n")
    print("| model | threads | shardlm 1 | shardlm 8 | 8 / 1 | llama-batched-bench 1 | llama-batched-bench 8 |"
          " shardlm 8 / llama.cpp 8 |")
    print("|---|---|---|---|---|---|---|---|")
    for qtype in a.batched_types.split(","):
        m = model_path(models, "llama3.2-1b", qtype)
        for t in a.threads:
            s1, s8, l1, l8 = [], [], [], []
            for i in range(a.rounds):
                log(f"batched {qtype} t{t} round {i + 1} (load {load()})")
                s1.append(shardlm_bench(m, t, 0, 32, parallel=1)["tg_tps"])
                s8.append(shardlm_bench(m, t, 0, 32, parallel=8)["tg_tps"])
                tg = batched_bench(lbin, m, t)
                l1.append(tg.get(1, float("nan")))
                l8.append(tg.get(8, float("nan")))
            print(f"| 1B {qtype} | {t} | {fmt(s1)} | {fmt(s8)} | {med(s8) / med(s1):.2f}x | {fmt(l1)} | {fmt(l8)} |"
                  f" {med(s8) / med(l8):.2f}x |", flush=True)


def section_kernels(a, info):
    isas = ["avx512", "amx"] if info["amx"] else ["avx512"]
    print(f"\n## Kernel int8 throughput (kernels_bench Matmul, one thread; {', '.join(isas)})\n")
    ghz = float(info["mhz"]) / 1000 if info["mhz"] != "?" else float("nan")
    print(f"One core's AMX peak at the nominal {ghz:.2f} GHz: 1024 int8 multiply-adds per cycle = "
          f"{2 * 1024 * ghz / 1000:.2f} int8 TOPS.\n")
    print("| case | " + " | ".join(f"{i} ms | {i} TOPS | {i} share of the AMX peak" for i in isas) + " |")
    print("|---|" + "---|---|---|" * len(isas))
    filt = "Matmul/(" + "|".join(a.types) + ")/"
    res = {}
    for isa in isas:
        out = json.loads(run([KBENCH, f"--benchmark_filter={filt}", "--benchmark_format=json",
                              f"--benchmark_repetitions={a.rounds}", "--benchmark_report_aggregates_only=true"],
                             env={"SHARDLM_ISA": isa}))
        for b in out["benchmarks"]:
            if b.get("aggregate_name") == "median":
                res.setdefault(b["run_name"], {})[isa] = b["real_time"] * {"ms": 1e-3, "us": 1e-6}[b["time_unit"]]
    for name, by in sorted(res.items()):
        mm = re.search(r"/(\d+)x(\d+)/batch(\d+)", name)
        if not mm:
            continue
        ops = 2 * int(mm[1]) * int(mm[2]) * int(mm[3])
        cells = []
        for isa in isas:
            s = by.get(isa, float("nan"))
            cells.append(f"{s * 1e3:.2f} | {ops / s / 1e12:.3f} | {100 * ops / s / 1e12 / (2 * 1024 * ghz / 1000):.1f}%")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--threads")
    ap.add_argument("--types")
    ap.add_argument("--shapes")
    ap.add_argument("--models", default="/tmp/x86_figures")
    ap.add_argument("--llama-bin")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip", default="", help="sections to leave out: speed,batched,kernels")
    ap.add_argument("--batched-types", default="Q4_0,Q4_K", help="the 1B types of the batched section")
    a = ap.parse_args()
    full = (5, "1,2", "Q4_0,Q4_K,Q6_K,Q8_0", "llama3.2-1b,llama3-8b")
    quick = (2, "1", "Q4_0,Q4_K", "llama3.2-1b")
    a.rounds, a.threads, a.types, a.shapes = (given if given is not None else dflt for given, dflt in
                                              zip((a.rounds, a.threads, a.types, a.shapes), quick if a.quick else full))
    a.threads = [int(t) for t in a.threads.split(",")]
    a.types, a.shapes = a.types.split(","), a.shapes.split(",")
    for path in (BIN, KBENCH):
        if not os.path.exists(path):
            raise SystemExit(f"{path} missing: build first (cmake --preset release && cmake --build --preset release)")
    os.makedirs(a.models, exist_ok=True)
    info = cpu_info()
    lbin = ensure_llama(a.llama_bin)
    m0 = model_path(a.models, "llama3.2-1b", a.types[0])
    bw = {t: json.loads(run([BIN, "bench", "-m", m0, "-t", str(t), "-p", "0", "-n", "1", "-r", "1", "--json",
                             "--bandwidth"]))["read_bw_gbps"] for t in a.threads}
    print(f"# x86 figures (tools/x86_figures.py), {run(['date', '-u']).strip()}\n")
    print(f"- CPU: {info['model']}, family {info['family']} model {info['cpu_model']}, {os.cpu_count()} CPUs, "
          f"flags: {' '.join(info['flags'])}; load at start {load()}")
    print(f"- `shardlm devices`: {run([BIN, 'devices']).strip().replace(chr(10), ' / ')}")
    print("- read bandwidth (`bench --bandwidth`): " + ", ".join(f"{v:.1f} GB/s at {t} thread(s)" for t, v in bw.items()))
    print(f"- llama.cpp: {lbin}; rounds {a.rounds}, threads {a.threads}")
    skip = set(a.skip.split(","))
    if "speed" not in skip:
        section_speed(a, lbin, a.models, info, bw)
    if "batched" not in skip:
        section_batched(a, lbin, a.models)
    if "kernels" not in skip:
        section_kernels(a, info)
    print(f"\nload at end {load()}")


if __name__ == "__main__":
    main()
