#!/usr/bin/env python3
"""Makes tests/data/golden_gemma3.json: llama.cpp's greedy continuations of Gemma 3 270M
Q4_K_M (the PyPI file: Q8_0 embedding, Q5_0/Q8_0/Q4_K/Q6_K matrices, sliding-window
layers), as tools/make_golden.py does for SmolLM2: each prompt tokenized by llama.cpp and
continued greedily one token per llama_decode (weight repacking off, flash attention off),
recording every generated id and the top-5 (id, logit) pairs. tests/golden/golden_test.cc
(Gemma3Golden) must produce the same prompt tokens and ids.

Usage: python3 tools/make_golden_gemma3.py [--model .deps/pip/gemma3/gemma-3-270m-q4_k_m.gguf]
"""
import argparse
import json
import sys

import make_golden

PROMPTS = [
    "The history of the printing press begins",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "La tour Eiffel est un monument de Paris qui",
    "Here are the first prime numbers: 2, 3, 5, 7, 11,",
    "I love pizza 🍕 and sunshine ☀️ because",
    "<start_of_turn>user\nWhat is the capital of Japan?<end_of_turn>\n<start_of_turn>model\n",
    "Der schnelle braune Fuchs springt über den faulen Hund. Auf Deutsch bedeutet das",
    "SELECT name, COUNT(*) FROM orders WHERE total > 100 GROUP BY",
    "In 1969, Neil Armstrong said: \"",
    "人工智能是",
    "<start_of_turn>user\nWrite a haiku about the sea.<end_of_turn>\n<start_of_turn>model\n",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=".deps/pip/gemma3/gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--out", default="tests/data/golden_gemma3.json")
    args = ap.parse_args()
    import llama_cpp
    make_golden.no_repack(llama_cpp)
    result = {"generator": "tools/make_golden_gemma3.py", "llama_cpp_python": llama_cpp.__version__,
              "n_predict": make_golden.N_PREDICT, "n_ctx": make_golden.N_CTX, "flash_attn": False, "n_batch": 1,
              "use_extra_bufts": False, "variants": {
                  "Q4_K_M": {"sha256": make_golden.sha256(args.model),
                             "runs": make_golden.run_variant(args.model, llama_cpp, PROMPTS)}}}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=0, ensure_ascii=False)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
