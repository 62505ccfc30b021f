#!/usr/bin/env python3
"""make_chat_template_golden.py: renders every chat template x case listed in
tests/data/chat_template_cases.json with Python's jinja2, in the environment Hugging Face
transformers and llama-cpp-python use (ImmutableSandboxedEnvironment, trim_blocks=True,
lstrip_blocks=True, loopcontrols, a pass-through {% generation %} tag, tojson =
json.dumps(ensure_ascii=False)), and writes the expected outputs (or expected errors) to
tests/data/chat_template_golden.json for tests/unit/chat_template_test.cc.

Variables passed: messages, add_generation_prompt, bos_token, eos_token, raise_exception,
strftime_now (at a fixed date, 2026-01-01),
plus the case's "extra" object (as transformers does; tools etc. are absent unless given).

Usage: python3 tools/make_chat_template_golden.py [--check]
"""
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")


class IgnoreGenerationTags(jinja2.ext.Extension):
    tags = {"generation"}

    def parse(self, parser):
        parser.stream.skip(1)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def make_env():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[IgnoreGenerationTags, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    return env


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


# strftime_now (gpt-oss's "Current date:") at a fixed instant, so the golden is stable;
# tests/unit/chat_template_test.cc puts the same date in place of today's.
FIXED_DATE = (2026, 1, 1)


def strftime_now(fmt):
    import datetime
    return datetime.datetime(*FIXED_DATE).strftime(fmt)


def main():
    with open(os.path.join(DATA, "chat_template_cases.json"), encoding="utf-8") as f:
        spec = json.load(f)
    env = make_env()
    results = []
    for tname, tinfo in spec["templates"].items():
        path = os.path.join(DATA, "chat_templates", tinfo["file"])
        with open(path, encoding="utf-8", newline="") as f:
            source = f.read()
        template = env.from_string(source)
        for case in spec["cases"]:
            for agp in (False, True):
                variables = dict(messages=case["messages"], add_generation_prompt=agp,
                                 bos_token=tinfo["bos_token"], eos_token=tinfo["eos_token"],
                                 raise_exception=raise_exception, strftime_now=strftime_now)
                variables.update(case.get("extra", {}))
                entry = {"template": tname, "case": case["name"], "add_generation_prompt": agp}
                try:
                    entry["output"] = template.render(**variables)
                except Exception as e:  # the expected error, as the C++ side must report one too
                    entry["error"] = f"{type(e).__name__}: {e}"
                results.append(entry)
    out = json.dumps({"generator": "tools/make_chat_template_golden.py", "jinja2_version": jinja2.__version__,
                      "results": results}, ensure_ascii=False, indent=1) + "\n"
    golden = os.path.join(DATA, "chat_template_golden.json")
    if "--check" in sys.argv:
        with open(golden, encoding="utf-8") as f:
            if f.read() != out:
                print("golden file is stale; rerun tools/make_chat_template_golden.py")
                return 1
        return 0
    with open(golden, "w", encoding="utf-8") as f:
        f.write(out)
    n_err = sum("error" in r for r in results)
    print(f"wrote {len(results)} results ({n_err} expected errors) to {golden}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
