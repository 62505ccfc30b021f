#!/usr/bin/env python3
"""bench_streams.py: aggregate decode throughput of `shardlm serve` (continuous batching)
with C concurrent streaming clients, and what a running batch costs a new request's time
to first token.

  * for each C in --streams: C clients start at once, each a streamed greedy /v1/completions
    with its own short prompt and max_tokens -n; aggregate tokens/s = all completion tokens /
    (last chunk - first request start); per-stream tokens/s = a client's tokens after its
    first / (its last chunk - its first chunk); medians over -r rounds;
  * latency: the time to first token of a 128-token prompt (max_tokens 8) while 7 streams
    are generating, against the same request alone (each measured prompt starts with a
    different letter, so no prefix cache helps either);
  * --system-tokens S: every stream's prompt starts with one system prompt of about S tokens
    (--distinct-system: a different one per stream, the same length: nothing to share); the
    table then also gives the median and slowest time to first token of the streams, the
    peak of the KV blocks in use during the round (/metrics, polled every 20 ms) and the
    prefix hits and positions taken from shared blocks (issue 32).

The server is started here (`shardlm serve --parallel P`, on one node, on --workers given,
or on --local-workers K started here on loopback), or --server-url benchmarks one already
running (e.g. llama.cpp's `llama-server -m MODEL -np 8 -c 8192`) with the same clients.

usage: tools/bench_streams.py [MODEL] [--bin build/release/shardlm] [-t THREADS] [--parallel 8]
         [--ctx 1024] [--kv-memory SIZE] [--workers H:P,...|--local-workers K] [--server-url URL]
         [--streams 1,2,4,8] [-n 64] [-r 3] [--system-tokens S [--distinct-system]] [--json]
"""
import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
import http.client

LATENCY_STREAMS = 7
LATENCY_PROMPT_TOKENS = 128
LATENCY_MAX_TOKENS = 8
class Client:
    """One streamed /v1/completions request: times of its start, first and last text chunks,
    and its completion tokens (from the usage chunk, else the text chunks counted)."""

    def __init__(self, url, prompt, max_tokens):
        self.url, self.prompt, self.max_tokens = url, prompt, max_tokens
        self.start = self.first = self.last = None
        self.chunks = 0
        self.tokens = None
        self.prompt_tokens = None
        self.error = None
        self.stop = threading.Event()  # set: close the connection at the next chunk
        self.started = threading.Event()  # set at the first text chunk (or on failure)
        self.conn = None

    def run(self, barrier=None):
        try:
            u = urllib.parse.urlparse(self.url)
            body = {"prompt": self.prompt, "max_tokens": self.max_tokens, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}}
            self.conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=600)
            self.conn.connect()
            if barrier is not None:
                barrier.wait()
            self.start = time.time()
            self.conn.request("POST", (u.path.rstrip("/") or "") + "/v1/completions", json.dumps(body),
                              {"Content-Type": "application/json"})
            r = self.conn.getresponse()
            if r.status != 200:
                raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:300]))
            for line in r:
                if not line.startswith(b"data: "):
                    continue
                data = line[6:].strip()
                if data == b"[DONE]":
                    break
                j = json.loads(data)
                if j.get("usage"):
                    self.tokens = j["usage"].get("completion_tokens", self.tokens)
                    self.prompt_tokens = j["usage"].get("prompt_tokens", self.prompt_tokens)
                if j.get("choices") and j["choices"][0].get("text"):
                    now = time.time()
                    self.first = self.first or now
                    self.last = now
                    self.chunks += 1
                    self.started.set()
                if self.stop.is_set():
                    self.conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    break
        except Exception as e:  # noqa: BLE001
            self.error = e
        finally:
            self.started.set()
            if self.conn:
                self.conn.close()
        if self.tokens is None:
            self.tokens = self.chunks

    def ttft(self):
        return self.first - self.start

    def stream_tps(self):
        return (self.tokens - 1) / (self.last - self.first) if self.tokens > 1 and self.last > self.first else None


def run_clients(clients):
    barrier = threading.Barrier(len(clients))
    threads = [threading.Thread(target=c.run, args=(barrier,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        if c.error:
            raise RuntimeError("a client failed: %s" % c.error)
        if c.first is None:
            raise RuntimeError("a client got no text for %r" % c.prompt)


def stream_prompt(i):
    """Short, distinct, and likely to go on for a while: counting from a different number."""
    k = 7 + 13 * i
    return "%d, %d, %d, %d," % (k, k + 1, k + 2, k + 3)


SYSTEM_WORDS = ("the assistant answers briefly and politely about numbers lists counting and arithmetic for "
                "every user who asks a question in plain words").split()


def system_prompt(tokens, variant):
    """About `tokens` tokens of plain words (one per word on SmolLM2-like vocabularies), the
    first word naming the variant, so two variants share nothing."""
    words = ["System%d:" % variant] + [SYSTEM_WORDS[i % len(SYSTEM_WORDS)] for i in range(max(0, tokens - 3))]
    return " ".join(words) + "\n"


def count_tokens(url, text):
    """Tokens of text by the server's POST /tokenize (llama-server's route); None without it."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=60)
    try:
        conn.request("POST", "/tokenize", json.dumps({"content": text}), {"Content-Type": "application/json"})
        r = conn.getresponse()
        body = r.read().decode()
        return len(json.loads(body)["tokens"]) if r.status == 200 else None
    except (OSError, ValueError, KeyError):
        return None
    finally:
        conn.close()


def system_words(url, tokens):
    """The word count whose system prompt is about `tokens` tokens on this server's vocabulary
    (a random-weight model's may take several tokens per word)."""
    n = tokens
    for _ in range(4):
        got = count_tokens(url, system_prompt(n, 0))
        if not got or abs(got - tokens) <= 2:
            break
        n = max(4, round(n * tokens / got))
    return n


def metrics(url):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=30)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.partition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def cpu_seconds(pids):
    """User + system CPU seconds of these processes so far (all their threads; /proc)."""
    total = 0
    for pid in pids:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / os.sysconf("SC_CLK_TCK")


def throughput(url, c, n, system_tokens=0, distinct=False, pids=()):
    prefix = lambda i: system_prompt(system_tokens, i if distinct else 0) if system_tokens else ""  # noqa: E731
    clients = [Client(url, prefix(i) + stream_prompt(i), n) for i in range(c)]
    m0 = metrics(url) if system_tokens else {}
    cpu0 = cpu_seconds(pids) if pids else None
    peak = [0.0]
    done = threading.Event()

    def poll():
        while not done.is_set():
            try:
                peak[0] = max(peak[0], metrics(url).get("shardlm_kv_blocks_in_use", 0))
            except OSError:
                pass
            done.wait(0.02)
    poller = threading.Thread(target=poll)
    if system_tokens:
        poller.start()
    try:
        run_clients(clients)
    finally:
        done.set()
        if system_tokens:
            poller.join()
    t0 = min(x.start for x in clients)
    t1 = max(x.last for x in clients)
    tokens = sum(x.tokens for x in clients)
    per = [x.stream_tps() for x in clients if x.stream_tps()]
    r = {"tokens": tokens, "wall_s": t1 - t0, "aggregate_tps": tokens / (t1 - t0),
         "per_stream_tps": statistics.median(per) if per else None, "per_stream_min_tps": min(per) if per else None}
    # The servers' CPU time of the round (prompts included): tokens per CPU second does not
    # depend on other load on a shared machine the way wall-clock rates do.
    cpu = cpu_seconds(pids) - cpu0 if pids else None
    r.update({"cpu_s": cpu, "tokens_per_cpu_s": tokens / cpu if cpu else None})
    if system_tokens:
        m1 = metrics(url)
        ttft = sorted(x.ttft() for x in clients)
        r.update({"ttft_median_s": statistics.median(ttft), "ttft_max_s": ttft[-1],
                  "prompt_tokens": statistics.median(x.prompt_tokens or 0 for x in clients),
                  "peak_blocks_in_use": peak[0], "kv_blocks": m1.get("shardlm_kv_blocks_total", 0),
                  "prefix_hits": m1.get("shardlm_kv_prefix_hits_total", 0) - m0.get("shardlm_kv_prefix_hits_total", 0),
                  "prefix_tokens": m1.get("shardlm_kv_prefix_tokens_total", 0) - m0.get("shardlm_kv_prefix_tokens_total", 0),
                  "preemptions": m1.get("shardlm_kv_preemptions_total", 0) - m0.get("shardlm_kv_preemptions_total", 0)})
    return r


def long_prompt(k, words):
    """Single letters, the first two different for each k: the same length in tokens, and no
    prefix shared with another k (so no prefix cache helps)."""
    return " ".join("abcdefghijklmnopqrstuvwxyz"[(k + i * (1 + k // 26)) % 26] for i in range(words))


def calibrate(url):
    """The number of letter words after a first word that makes a LATENCY_PROMPT_TOKENS prompt."""
    words = LATENCY_PROMPT_TOKENS - 1
    got = None
    for i in range(4):
        c = Client(url, long_prompt(600 + i, words), 1)
        c.run()
        got = c.prompt_tokens
        if got is None or got == LATENCY_PROMPT_TOKENS:
            break
        words += LATENCY_PROMPT_TOKENS - got
    return words, got


def latency(url, rnd, words, n):
    """(TTFT alone, TTFT with LATENCY_STREAMS streams generating, prompt tokens)."""
    alone = Client(url, long_prompt(2 * rnd, words), LATENCY_MAX_TOKENS)
    alone.run()
    if alone.error or alone.first is None:
        raise RuntimeError("the latency request failed alone: %s" % alone.error)
    bg = [Client(url, stream_prompt(100 + i), max(4 * n, 256)) for i in range(LATENCY_STREAMS)]
    threads = [threading.Thread(target=c.run) for c in bg]
    for t in threads:
        t.start()
    for c in bg:
        c.started.wait(600)
    probe = Client(url, long_prompt(2 * rnd + 1, words), LATENCY_MAX_TOKENS)
    probe.run()
    for c in bg:
        c.stop.set()
    for t in threads:
        t.join()
    if probe.error or probe.first is None:
        raise RuntimeError("the latency request failed under load: %s" % probe.error)
    # Streams still generating when the probe's first token came (all 7 unless they ran out).
    still = sum(1 for c in bg if c.last is not None and c.last >= probe.first)
    return alone.ttft(), probe.ttft(), alone.prompt_tokens, still


def start_proc(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline().strip()
    if not line.startswith("listening on "):
        p.kill()
        raise RuntimeError("%s did not start: %r" % (" ".join(cmd[:2]), line))
    return p, line[len("listening on "):]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", help="GGUF model (not needed with --server-url)")
    ap.add_argument("--bin", default="build/release/shardlm")
    ap.add_argument("-t", "--threads", default="1", help="threads of the server and of each local worker")
    ap.add_argument("--parallel", default="8", help="serve --parallel: slots")
    ap.add_argument("--ctx", default="1024", help="serve --ctx: each slot's context")
    ap.add_argument("--kv-memory", help="serve --kv-memory: the KV pool's bytes")
    ap.add_argument("--system-tokens", type=int, default=0, help="a system prompt of about S tokens before each stream's")
    ap.add_argument("--distinct-system", action="store_true", help="a different system prompt per stream")
    ap.add_argument("--workers", help="already started workers host:port,... passed to serve")
    ap.add_argument("--local-workers", type=int, default=0, help="start K `shardlm worker`s on loopback")
    ap.add_argument("--server-url", help="benchmark this running OpenAI-compatible server instead")
    ap.add_argument("--streams", default="1,2,4,8", help="concurrent clients, a comma list")
    ap.add_argument("-n", "--tokens", type=int, default=64, help="max_tokens of each stream")
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("--chat-template", help="serve --chat-template (random-weight models carry none)")
    ap.add_argument("--no-latency", action="store_true", help="skip the time-to-first-token check")
    ap.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    a = ap.parse_args()
    streams = [int(s) for s in a.streams.split(",") if s]
    procs = []
    try:
        if a.server_url:
            url = a.server_url.rstrip("/")
            if url.endswith("/v1"):
                url = url[:-3]
            what = url
        else:
            if not a.model:
                ap.error("MODEL is needed unless --server-url is given")
            workers = a.workers.split(",") if a.workers else []
            for _ in range(a.local_workers):
                p, addr = start_proc([a.bin, "worker", "--port", "0", "--host", "127.0.0.1", "-t", a.threads])
                procs.append(p)
                workers.append(addr)
            cmd = [a.bin, "serve", "-m", a.model, "--port", "0", "--host", "127.0.0.1", "-t", a.threads, "--ctx",
                   a.ctx, "--parallel", a.parallel]
            if workers:
                cmd += ["--workers", ",".join(workers)]
            if a.kv_memory:
                cmd += ["--kv-memory", a.kv_memory]
            if a.chat_template:
                cmd += ["--chat-template", a.chat_template]
            p, url = start_proc(cmd)
            procs.append(p)
            what = "shardlm serve --parallel %s --ctx %s%s -t %s, %d node(s)" % (
                a.parallel, a.ctx, " --kv-memory " + a.kv_memory if a.kv_memory else "", a.threads, 1 + len(workers))
            if a.system_tokens:
                what += "; a %s system prompt of ~%d tokens before each stream's prompt" % (
                    "different" if a.distinct_system else "shared", a.system_tokens)
        Client(url, "Hello", 4).run()  # warm-up
        if a.system_tokens:
            words = system_words(url, a.system_tokens)
            print("system prompt: %d words, %s tokens" % (words, count_tokens(url, system_prompt(words, 0))),
                  file=sys.stderr, flush=True)
            a.system_tokens = words
        rows = []
        for c in streams:
            pids = [p.pid for p in procs]
            rounds = [throughput(url, c, a.tokens, a.system_tokens, a.distinct_system, pids) for _ in range(a.rounds)]
            med = lambda k: statistics.median([r[k] for r in rounds if r[k] is not None] or [0])  # noqa: E731
            rows.append({"streams": c, "aggregate_tps": med("aggregate_tps"), "per_stream_tps": med("per_stream_tps"),
                         "per_stream_min_tps": med("per_stream_min_tps"), "tokens": med("tokens"),
                         "wall_s": med("wall_s"), "cpu_s": med("cpu_s"), "tokens_per_cpu_s": med("tokens_per_cpu_s"),
                         "rounds": rounds})
            if a.system_tokens:
                for k in ("ttft_median_s", "ttft_max_s", "prompt_tokens", "peak_blocks_in_use", "kv_blocks",
                          "prefix_hits", "prefix_tokens", "preemptions"):
                    rows[-1][k] = med(k)
            print("streams %d: %.1f tok/s aggregate" % (c, rows[-1]["aggregate_tps"]), file=sys.stderr, flush=True)
        lat = None
        if not a.no_latency:
            words, got = calibrate(url)
            runs = [latency(url, i, words, a.tokens) for i in range(a.rounds)]
            alone = statistics.median(r[0] for r in runs)
            loaded = statistics.median(r[1] for r in runs)
            lat = {"prompt_tokens": runs[0][2] or got, "max_tokens": LATENCY_MAX_TOKENS, "streams": LATENCY_STREAMS,
                   "ttft_alone_s": alone, "ttft_loaded_s": loaded, "ratio": loaded / alone,
                   "streams_generating_at_probe": min(r[3] for r in runs),
                   "runs": [{"alone_s": r[0], "loaded_s": r[1], "streams_generating": r[3]} for r in runs]}
    finally:
        for p in procs:
            p.kill()
            p.wait()
    base = rows[0]["aggregate_tps"] if rows and rows[0]["streams"] == 1 else None
    if a.json:
        print(json.dumps({"server": what, "tokens": a.tokens, "rounds": a.rounds, "throughput": rows,
                          "latency": lat}, indent=1))
        return
    print("%s; max_tokens %d, medians of %d rounds\n" % (what, a.tokens, a.rounds))
    print("| streams | aggregate tok/s | vs 1 stream | per-stream tok/s (median) | slowest stream tok/s | "
          "tokens | wall s | server CPU s | tokens per CPU s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %d | %.1f | %s | %s | %s | %d | %.2f | %s | %s |" % (
            r["streams"], r["aggregate_tps"], "%.2fx" % (r["aggregate_tps"] / base) if base else "-",
            "%.1f" % r["per_stream_tps"] if r["per_stream_tps"] else "-",
            "%.1f" % r["per_stream_min_tps"] if r["per_stream_min_tps"] else "-", r["tokens"], r["wall_s"],
            "%.1f" % r["cpu_s"] if r["cpu_s"] else "-", "%.2f" % r["tokens_per_cpu_s"] if r["tokens_per_cpu_s"] else "-"))
    if a.system_tokens:
        print("\n| streams | prompt tokens | TTFT median s | TTFT slowest s | peak KV blocks in use (of %s) | "
              "prefix hits | positions shared | preemptions |" % (rows[0].get("kv_blocks") or "?"))
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print("| %d | %d | %.2f | %.2f | %d | %d | %d | %d |" % (
                r["streams"], r["prompt_tokens"], r["ttft_median_s"], r["ttft_max_s"], r["peak_blocks_in_use"],
                r["prefix_hits"], r["prefix_tokens"], r["preemptions"]))
    if lat:
        print("\n| TTFT, %s-token prompt, max_tokens %d | alone | with %d streams generating | ratio |" % (
            lat["prompt_tokens"], LATENCY_MAX_TOKENS, LATENCY_STREAMS))
        print("|---|---|---|---|")
        print("| | %.0f ms | %.0f ms | %.2f |" % (lat["ttft_alone_s"] * 1e3, lat["ttft_loaded_s"] * 1e3, lat["ratio"]))
        if lat["streams_generating_at_probe"] < LATENCY_STREAMS:
            print("\n(only %d of the %d streams were still generating when the probe's first token came: the "
                  "server does not run them at once)" % (lat["streams_generating_at_probe"], LATENCY_STREAMS))


if __name__ == "__main__":
    main()
