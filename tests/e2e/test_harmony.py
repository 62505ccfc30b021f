#!/usr/bin/env python3
"""test_harmony.py: a gpt-oss reply in the harmony format split as llama-server does (issue 31
step 4, serve/harmony.h), on the toy gpt-oss model under --chat-template gpt-oss (the prompt
ends with <|start|>assistant). Its random weights write no channel markup on their own, so a
GBNF grammar makes the reply an analysis message then a final one:

  * chat: the analysis text is reasoning_content, the final text the content, streamed
    (reasoning_content and content deltas) and not; reasoning_tokens > 0 and < completion_tokens;
  * reasoning_format none gives the raw reply, markup and all, and no reasoning tokens;
  * an analysis message cut off by max_tokens is all reasoning (all reasoning tokens);
  * a reply without channels (no grammar) is all content, in chat, Anthropic, Responses and
    Ollama (the split itself is shared by all APIs: generation.cc).
The unit tests (serve_api_test: Harmony.*) cut crafted replies at every byte.
"""
import os
import subprocess
import sys
import tempfile

import anthropic
import ollama
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, start  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
MSGS = [{"role": "user", "content": "hi"}]
GRAMMAR = ('root ::= "<|channel|>analysis<|message|>" [a-z ]{4,12} '
           '"<|end|><|start|>assistant<|channel|>final<|message|>" [a-z ]{2,8}')
N = 120


def main():
    tmp = tempfile.mkdtemp(prefix="shardlm-harmony-")
    model = os.path.join(tmp, "toy-gpt-oss.gguf")
    subprocess.run([BIN, "make-model", "--shape", "toy-gpt-oss", "--type", "Q8_0", "--seed", "3", model],
                   check=True, capture_output=True)
    _, url = start([BIN, "serve", "-m", model, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", "512",
                    "--chat-template", "gpt-oss"])
    c = openai.OpenAI(base_url=url + "/v1", api_key="x")

    def chat(**kw):
        body = dict(model="m", messages=MSGS, max_tokens=N, temperature=0)
        body.update(kw)
        extra = {k: body.pop(k) for k in ("grammar", "reasoning_format") if k in body}
        return c.chat.completions.create(extra_body=extra, **body)

    raw_r = chat(grammar=GRAMMAR, reasoning_format="none")
    raw = raw_r.choices[0].message.content
    head, _, rest = raw.partition("<|channel|>analysis<|message|>")
    thought, _, rest = rest.partition("<|end|><|start|>assistant<|channel|>final<|message|>")
    check(head == "" and thought and rest, "reasoning_format none: the raw harmony reply %r" % raw)
    check(getattr(raw_r.choices[0].message, "reasoning_content", None) is None
          and raw_r.usage.completion_tokens_details.reasoning_tokens == 0,
          "reasoning_format none: no reasoning_content, no reasoning tokens")
    full = chat(grammar=GRAMMAR)
    m, u = full.choices[0].message, full.usage
    rt = u.completion_tokens_details.reasoning_tokens
    check(m.reasoning_content == thought and m.content == rest,
          "the analysis channel is reasoning_content %r, the final channel the content %r" % (m.reasoning_content, m.content))
    check(0 < rt < u.completion_tokens, "reasoning_tokens %d of completion_tokens %d" % (rt, u.completion_tokens))
    parts = {"reasoning_content": "", "content": ""}
    for chunk in chat(grammar=GRAMMAR, stream=True, stream_options={"include_usage": True}):
        if chunk.usage:
            check(chunk.usage.completion_tokens_details.reasoning_tokens == rt, "streamed usage: the same reasoning_tokens")
        d = chunk.choices[0].delta if chunk.choices else None
        for k in parts:
            parts[k] += (getattr(d, k, None) or "") if d else ""
    check(parts["reasoning_content"] == thought and parts["content"] == rest,
          "streamed: reasoning_content and content deltas add up to the same %r" % parts)
    cut = chat(grammar=GRAMMAR, max_tokens=30)
    check(cut.choices[0].message.content in (None, "") and cut.choices[0].message.reasoning_content
          and cut.usage.completion_tokens_details.reasoning_tokens == cut.usage.completion_tokens == 30,
          "an analysis message cut off is all reasoning %r %r" % (cut.choices[0].message, cut.usage))

    plain = chat(max_tokens=12)
    check(getattr(plain.choices[0].message, "reasoning_content", None) is None
          and plain.usage.completion_tokens_details.reasoning_tokens == 0,
          "chat: a reply without channels is all content")
    a = anthropic.Anthropic(base_url=url, api_key="x").messages.create(
        model="m", max_tokens=12, messages=MSGS, extra_body={"temperature": 0})
    check([b.type for b in a.content] == ["text"] and a.content[0].text == plain.choices[0].message.content,
          "Anthropic: a reply without channels is one text block %r" % a.content)
    r = c.responses.create(model="m", input=MSGS, max_output_tokens=12, temperature=0)
    check([i.type for i in r.output] == ["message"] and r.output_text == plain.choices[0].message.content,
          "Responses: a reply without channels is a message, no reasoning item")
    o = ollama.Client(host=url).chat(model="m", messages=MSGS, options={"num_predict": 12, "temperature": 0})
    check(not o.message.thinking and o.message.content == plain.choices[0].message.content,
          "Ollama: a reply without channels has no thinking")


if __name__ == "__main__":
    harness.run_main(main)
