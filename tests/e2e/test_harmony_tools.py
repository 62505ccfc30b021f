#!/usr/bin/env python3
"""test_harmony_tools.py: gpt-oss tool calls in the harmony format (issue 31), on the toy gpt-oss
model under --chat-template gpt-oss (llama.cpp's template: the tools as a TypeScript namespace in
the developer message, past calls as `<|start|>assistant to=functions.NAME<|channel|>commentary
json<|message|>ARGS<|call|>`, results as `<|start|>functions.NAME to=assistant` messages), with the
official `openai` client:

  * tool_choice naming a function and "required" over test_tools.py's 12 varied requests (strings
    capped at 6 characters, which the random toy would not close otherwise): the
    reply is a message to functions.NAME, decoded under the grammar engine, and comes back as
    OpenAI tool_calls (finish_reason tool_calls) of a listed function (the named one) whose
    arguments validate (`jsonschema`); every third streamed, its deltas shaped as OpenAI's;
  * a round trip: the call and its result sent back as history render and answer; a tool
    without a description (optional in OpenAI's API) is accepted;
  * auto: text or a valid call, never call markup as content (the random toy seldom writes
    the trigger " to=functions." itself: the trigger grammar is unit-tested in serve_api_test);
  * /props names the harmony format; Anthropic's forced tool_use validates, Ollama's auto
    reply is text or a get_weather call;
  * streamed as each API streams calls (issue 33): Anthropic's tool_use block with
    input_json_delta fragments, the Responses function_call item with
    response.function_call_arguments.delta events adding up to the arguments.
Greedy, short max_tokens; seconds.
"""
import copy
import json
import os
import subprocess
import sys
import tempfile
import urllib.request

import anthropic
import ollama
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_tools  # noqa: E402
from harness import check, start  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")


def bounded(schema):
    """The schema with every string at most 6 characters and a parameter-less object empty:
    the random toy writes strings until it happens to close them."""
    s = copy.deepcopy(schema)
    if s.get("type") == "string" and "enum" not in s:
        s["maxLength"] = 6
    if s.get("type") == "object":
        s.setdefault("properties", {})
    for v in s.get("properties", {}).values():
        v.update(bounded(v))
    if "items" in s:
        s["items"] = bounded(s["items"])
    return s


def toy_cases():
    out = []
    for tools, words, named in test_tools.CASES:
        ts = copy.deepcopy(tools)
        for t in ts:
            t["function"]["parameters"] = bounded(t["function"].get("parameters", {"type": "object"}))
        out.append((ts, words, named))
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="shardlm-harmony-tools-")
    model = os.path.join(tmp, "toy-gpt-oss.gguf")
    subprocess.run([BIN, "make-model", "--shape", "toy-gpt-oss", "--type", "Q8_0", "--seed", "3", model],
                   check=True, capture_output=True)
    _, url = start([BIN, "serve", "-m", model, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", "2048",
                    "--chat-template", "gpt-oss"])
    with urllib.request.urlopen(url + "/props", timeout=30) as r:
        fmt = json.loads(r.read()).get("tool_format", "")
    check(fmt.startswith("harmony"), "/props: tool_format %r" % fmt)

    test_tools.CASES[:] = toy_cases()
    test_tools.check_forced(url, "harmony", max_tokens=500)
    check(not test_tools.BAD_DELTAS, "streamed calls as OpenAI's deltas (%d not: %r)" %
          (len(test_tools.BAD_DELTAS), test_tools.BAD_DELTAS[:2]))

    c = openai.OpenAI(base_url=url + "/v1", api_key="x")
    tools = [test_tools.CASES[0][0][0]]  # get_weather, its city at most 6 characters
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = c.chat.completions.create(model="m", messages=msgs, tools=tools, temperature=0, max_tokens=300,
                                  tool_choice={"type": "function", "function": {"name": "get_weather"}})
    check(r.choices[0].finish_reason == "tool_calls", "named: a whole call %r" % r.choices[0].message)
    call = r.choices[0].message.tool_calls[0]
    history = msgs + [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                      {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"sky": "clear"})}]
    back = c.chat.completions.create(model="m", messages=history, tools=tools, temperature=0, max_tokens=8)
    check(back.choices[0].finish_reason in ("stop", "length", "tool_calls"),
          "a round trip: the call and its result as history answer (%s)" % back.choices[0].finish_reason)

    bare = [{"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}]
    r = c.chat.completions.create(model="m", messages=msgs, tools=bare, temperature=0, max_tokens=4)
    check(r.choices[0].finish_reason in ("stop", "length", "tool_calls"),
          "a tool without a description is accepted (rendered as llama-server does: '// ')")

    good = 0
    for k, (ts, words, _) in enumerate(test_tools.CASES[:4]):
        finish, content, calls = test_tools.ask(c, [{"role": "user", "content": words}], ts, "auto", k % 2 == 0,
                                                max_tokens=24)
        ok = ("to=functions" not in content and "<tool_call>" not in content
              and all(test_tools.valid(x, ts, None) for x in calls)
              and (finish in ("stop", "length") and not calls or finish == "tool_calls" and calls))
        good += ok
        if not ok:
            print("    auto case %d: finish %s content %r calls %r" % (k, finish, content[:200], calls))
    check(good == 4, "auto: %d of 4 replies text or valid calls" % good)

    a = anthropic.Anthropic(base_url=url, api_key="x").messages.create(
        model="m", max_tokens=300, messages=msgs, extra_body={"temperature": 0},
        tools=[{"name": "get_weather", "description": "The current weather in a city",
                "input_schema": tools[0]["function"]["parameters"]}],
        tool_choice={"type": "tool", "name": "get_weather"})
    uses = [b for b in a.content if b.type == "tool_use"]
    check(a.stop_reason == "tool_use" and len(uses) == 1
          and test_tools.valid({"name": uses[0].name, "arguments": uses[0].input}, tools, "get_weather"),
          "Anthropic: a forced call as a valid tool_use block %r" % a.content)
    # Streamed as each API streams calls (issue 33): Anthropic's tool_use block with
    # input_json_delta fragments, the Responses function_call item with arguments deltas.
    events = list(anthropic.Anthropic(base_url=url, api_key="x").messages.create(
        model="m", max_tokens=300, messages=msgs, extra_body={"temperature": 0}, stream=True,
        tools=[{"name": "get_weather", "description": "The current weather in a city",
                "input_schema": tools[0]["function"]["parameters"]}],
        tool_choice={"type": "tool", "name": "get_weather"}))
    starts = [e for e in events if e.type == "content_block_start" and e.content_block.type == "tool_use"]
    parts = [e.delta.partial_json for e in events if e.type == "content_block_delta"
             and e.delta.type == "input_json_delta"]
    check(len(starts) == 1 and starts[0].content_block.input == {} and len(parts) > 1
          and json.loads("".join(parts)) == uses[0].input,
          "Anthropic stream: a tool_use block, its input in %d input_json_delta fragments" % len(parts))
    rs = list(c.responses.create(model="m", input=msgs, max_output_tokens=300, temperature=0, stream=True,
                                 tools=[{"type": "function", "name": "get_weather",
                                         "description": "The current weather in a city",
                                         "parameters": tools[0]["function"]["parameters"]}],
                                 tool_choice="required"))
    added = [e for e in rs if e.type == "response.output_item.added" and e.item.type == "function_call"]
    deltas = [e.delta for e in rs if e.type == "response.function_call_arguments.delta"]
    done = [e for e in rs if e.type == "response.function_call_arguments.done"]
    final = [i for i in rs[-1].response.output if i.type == "function_call"]
    check(len(added) == 1 and len(deltas) > 1 and len(done) == 1 and done[0].arguments == "".join(deltas)
          and len(final) == 1 and json.loads(final[0].arguments) == json.loads("".join(deltas)),
          "Responses stream: a function_call item, its arguments in %d deltas" % len(deltas))
    o = ollama.Client(host=url).chat(model="m", messages=msgs, tools=tools, options={"num_predict": 60, "temperature": 0})
    oc = o.message.tool_calls or []
    check(len(oc) <= 1 and all(x.function.name == "get_weather" for x in oc),
          "Ollama: auto gives text or a get_weather call %r" % oc)


if __name__ == "__main__":
    harness.run_main(main)
