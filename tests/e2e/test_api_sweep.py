#!/usr/bin/env python3
"""test_api_sweep.py: every field of every fuzz_api seed body (tests/data/api_seeds: the
entry point's number, then the body), removed and replaced by a value of each JSON type, posted
to a live `shardlm serve` at the route that entry point parses (serve_api_test's
ApiBodies.AnyFieldOfAnyTypeOrMissingGetsA4xx does the same to the parsers alone; this one
reaches the code after them: prompt rendering, tool and format grammars, the scheduler's
prefix reuse, generation, streaming). Each seed whole goes to every other route too, and the
Responses bodies again continuing real stored responses. Four requests at a time on
--parallel 4, so bodies that share a prefix meet in the KV pool. Each answer must be a success
or a 4xx with a message, never a 5xx or a server_error in a stream; after the sweep the server
still answers. (Every body to every route, 60900 a model, passed once by hand on 2026-12-07:
about a minute a model, too long for CI.)

Three toy models (`make-model`), a few seconds each: toy-qwen2-coder under chatml (generic
tool format, fill-in-the-middle tokens for /infill), toy-gpt-oss under its harmony template
(sliding-window rings, experts) and toy-gemma3 under Gemma 3's template (its sliding window).
"""
import copy
import glob
import http.client
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, start  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
SEEDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "api_seeds")
ROUTES = ["/v1/chat/completions", "/v1/completions", "/api/chat", "/api/generate", "/api/generate",
          "/v1/messages", "/v1/messages/count_tokens", "/v1/responses", "/infill", "/tokenize", "/detokenize"]
VALUES = [None, True, False, 0, -1, 1.5, 1e300, 18446744073709551615, -9223372036854775808, "", "x",
          [], [1], ["x"], {}, {"a": 1}, {"type": "text", "text": "x"}]
SERVERS = [("toy-qwen2-coder", "chatml"), ("toy-gpt-oss", "gpt-oss"), ("toy-gemma3", "gemma3")]


def places(j, at, out):
    """Every value's path in j (the root excepted), depth first."""
    if at:
        out.append(at)
    items = j.items() if isinstance(j, dict) else enumerate(j) if isinstance(j, list) else ()
    for k, v in items:
        places(v, at + [k], out)


def bodies():
    """(seed, route, what, body) for every seed whole and every field removed or replaced."""
    out = []
    for f in sorted(glob.glob(os.path.join(SEEDS, "*"))):
        data = open(f, "rb").read()
        route, body, seed = ROUTES[data[0] % len(ROUTES)], json.loads(data[1:]), os.path.basename(f)
        out.append((seed, route, "whole", body))
        at = []
        places(body, [], at)
        for path in at:
            for v in [KeyError] + VALUES:
                b = copy.deepcopy(body)
                parent = b
                for k in path[:-1]:
                    parent = parent[k]
                if v is KeyError:
                    del parent[path[-1]]
                else:
                    parent[path[-1]] = v
                out.append((seed, route, "%s %s" % (path, "removed" if v is KeyError else "= " + json.dumps(v)), b))
    return out


def cross(jobs):
    """Each seed whole, posted to every other route too."""
    return [(seed, r, "whole, at " + r, body) for seed, route, what, body in jobs if what == "whole"
            for r in sorted(set(ROUTES) - {route})]


def chained(jobs, ids):
    """The Responses bodies again, continuing a real stored response (the seeds' own
    previous_response_id never exists on the server), except where the mutation is that field."""
    out = []
    for i, (seed, route, what, body) in enumerate(jobs):
        if route == "/v1/responses" and isinstance(body, dict) and "previous_response_id" not in what:
            out.append((seed, route, what + ", continuing a stored response",
                        dict(body, previous_response_id=ids[i % len(ids)])))
    return out


def store(addr):
    """The ids of three stored responses: plain, with instructions, with a forced tool call."""
    tool = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}
    ids = []
    for body in [{"input": "hi"}, {"input": "hello there", "instructions": "be terse"},
                 {"input": "call f", "tools": [tool], "tool_choice": "required"}]:
        status, data = post(addr, "/v1/responses", dict(body, store=True))
        check(status == 200, "a response stored (%d %r)" % (status, data[-200:]))
        ids.append(json.loads(data)["id"])
    return ids


def post(addr, route, body):
    """(status, body) of one POST; the body read whole (a stream to its end)."""
    c = http.client.HTTPConnection(addr, timeout=120)
    try:
        c.request("POST", route, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def sweep(shape, template, jobs, tmp):
    model = os.path.join(tmp, shape + ".gguf")
    subprocess.run([BIN, "make-model", "--shape", shape, "--type", "Q8_0", "--seed", "3", model],
                   check=True, capture_output=True)
    proc, url = start([BIN, "serve", "-m", model, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", "2048",
                       "--parallel", "4", "--max-tokens", "8", "--chat-template", template])
    addr = url.replace("http://", "")
    jobs = jobs + cross(jobs) + chained(jobs, store(addr))

    def one(job):
        seed, route, what, body = job
        try:
            status, data = post(addr, route, body)
        except Exception as e:  # noqa: BLE001 (a dropped connection is a failure like a 500)
            return "%s %s: %r" % (seed, what, e), None
        bad = status >= 500 or (status >= 400 and not data) or b"server_error" in data or b"internal error" in data
        return ("%s %s: %d %r" % (seed, what, status, data[-200:]) if bad else None), (route, status, what)

    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(one, jobs))
    failures = [f for f, _ in results if f]
    ok = {rs[0] for _, rs in results if rs and rs[1] == 200}
    continued = sum(1 for _, rs in results if rs and rs[1] == 200 and rs[2].endswith("stored response"))
    check(continued > 50, "%s: %d bodies continued a stored response with 200" % (shape, continued))
    check(not failures, "%s: %d bodies, each a success or a 4xx with a message%s" %
          (shape, len(jobs), "" if not failures else "; %d not, e.g. %s" % (len(failures), failures[:5])))
    # Past the parsers: each route answered some of them (infill needs the coder's FIM tokens).
    want = set(ROUTES) - ({"/infill"} if shape != "toy-qwen2-coder" else set())
    check(want <= ok, "%s: every route answered some bodies with 200 (none: %s)" % (shape, sorted(want - ok)))
    status, data = post(addr, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    check(status == 200 and proc.poll() is None, "%s: the server answers after the sweep (%d)" % (shape, status))
    proc.kill()
    proc.wait()


def main():
    tmp = tempfile.mkdtemp(prefix="shardlm-sweep-")
    jobs = bodies()
    check(len(jobs) > 3000, "%d bodies from %s" % (len(jobs), SEEDS))
    for shape, template in SERVERS:
        sweep(shape, template, jobs, tmp)


if __name__ == "__main__":
    harness.run_main(main)
