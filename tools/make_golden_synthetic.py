#!/usr/bin/env python3
"""Makes tests/data/golden_synthetic.json: llama.cpp's logits for architectures we have no
real model of (qwen2: QKV bias + NEOX rope; qwen3: per-head Q/K norm; gemma3 with a window of 8
positions; llama with Llama 3.1
rope_freqs; qwen3moe with 8 of 32 and 2 of 8 experts and an F32 router; qwen3 with YaRN rope scaling;
gpt-oss with sinks, biases, a window of 8 on alternate layers, 4 of 16 MXFP4 experts and YaRN), on random-weight models written by `shardlm make-model` (so llama.cpp loading
them also checks our writer). Teacher-forced: 16 fixed token ids, one per llama_decode,
weight repacking off, every position's full logits recorded.

Usage: python3 tools/make_golden_synthetic.py [--build build/release]
(llama-cpp-python from its sdist works too: PYTHONPATH=<sdist> LLAMA_CPP_LIB_PATH=<its vendor/llama.cpp/build/bin>)
"""
import argparse
import hashlib
import json
import os
import subprocess

import numpy as np

MODELS = [("toy-qwen2", "Q8_0"), ("toy-qwen3", "Q4_K"), ("toy-llama31", "Q4_0"), ("toy-gemma3", "Q8_0"),
          ("toy-qwen3moe", "Q8_0"), ("toy-qwen3moe-e8", "Q4_0"), ("toy-qwen3-yarn", "Q8_0"), ("toy-gpt-oss", "Q8_0")]
TOKENS = [5, 100, 37, 200, 300, 7, 8, 9, 400, 11, 12, 13, 14, 15, 16, 17]
SEED = 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--out", default="tests/data/golden_synthetic.json")
    ap.add_argument("--workdir", default="build/golden-models")
    args = ap.parse_args()
    import llama_cpp
    import llama_cpp.llama_cpp as low
    orig = low.llama_model_default_params

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p
    low.llama_model_default_params = params
    os.makedirs(args.workdir, exist_ok=True)
    out = {"generator": "tools/make_golden_synthetic.py", "llama_cpp_python": llama_cpp.__version__,
           "tokens": TOKENS, "seed": SEED, "models": []}
    for shape, qtype in MODELS:
        path = os.path.join(args.workdir, f"{shape}-{qtype.lower()}.gguf")
        subprocess.run([os.path.join(args.build, "shardlm"), "make-model", "--shape", shape, "--type", qtype,
                        "--seed", str(SEED), path], check=True)
        sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
        llm = llama_cpp.Llama(model_path=path, n_ctx=64, n_batch=1, n_ubatch=1, n_threads=1, logits_all=True,
                              verbose=False, flash_attn=False)
        llm.eval(TOKENS)
        logits = np.array(llm.scores[:len(TOKENS)], dtype=np.float32)
        out["models"].append({"shape": shape, "type": qtype, "sha256": sha,
                              "logits": [[float(x) for x in row] for row in logits]})
        del llm
    with open(args.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
