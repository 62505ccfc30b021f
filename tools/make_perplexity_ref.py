#!/usr/bin/env python3
"""make_perplexity_ref.py: llama.cpp's perplexity of a model on a text, computed with
llama-cpp-python by the method of llama.cpp's examples/perplexity (the one `shardlm
perplexity` implements): the whole text tokenized once (BOS only if the model's flags add
it), chunks of n_ctx tokens each evaluated from an empty cache with its first token
replaced by BOS when the model adds BOS, and per chunk only the logits of positions
n_ctx/2 .. n_ctx-2 scored against the next token (-log p with a float max and a double
sum of exp, as llama.cpp's process_logits). Writes the running perplexity after every
chunk, the final value and llama.cpp's +/- estimate to a JSON file.

  python3 tools/make_perplexity_ref.py MODEL.gguf tests/data/perplexity_licenses.txt \\
      tests/data/perplexity_llamacpp.json --ctx 512
"""
import argparse
import json
import math
import os

import numpy as np
import llama_cpp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("text")
    ap.add_argument("out")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunks", type=int, default=-1)
    a = ap.parse_args()
    n_ctx = a.ctx
    # n_batch = n_ctx: a chunk is one batch, as llama.cpp's perplexity with -b >= -c.
    llm = llama_cpp.Llama(a.model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, logits_all=True,
                          n_threads=a.threads, verbose=False)
    text = open(a.text, "rb").read()
    tokens = llm.tokenize(text, add_bos=True, special=False)  # add_bos: as the vocab says
    add_bos = llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(llm.model))
    n_chunk = len(tokens) // n_ctx
    if a.chunks >= 0:
        n_chunk = min(n_chunk, a.chunks)
    first = n_ctx // 2
    nll = nll2 = 0.0
    count = 0
    running = []
    for i in range(n_chunk):
        chunk = tokens[i * n_ctx:(i + 1) * n_ctx]
        if add_bos:
            chunk = [llm.token_bos()] + chunk[1:]
        llm.reset()
        llm.eval(chunk)
        logits = np.asarray(llm.scores[:n_ctx], dtype=np.float32)
        for j in range(first, n_ctx - 1):
            row = logits[j]
            mx = row.max()
            s = np.exp(row - mx).astype(np.float64).sum()
            v = math.log(s) - float(row[tokens[i * n_ctx + j + 1]] - mx)
            nll += v
            nll2 += v * v
            count += 1
        running.append(math.exp(nll / count))
        print(f"[{i + 1}]{running[-1]:.4f}", flush=True)
    mean = nll / count
    var = nll2 / count - mean * mean
    ppl = math.exp(mean)
    err = math.sqrt(var / (count - 1)) * ppl
    print(f"Final estimate: PPL = {ppl:.4f} +/- {err:.5f}")
    out = {
        "model": os.path.basename(a.model),
        "text": os.path.basename(a.text),
        "n_ctx": n_ctx,
        "n_batch": n_ctx,
        "n_tokens": len(tokens),
        "add_bos": bool(add_bos),
        "n_chunks": n_chunk,
        "scored_per_chunk": n_ctx - 1 - first,
        "running_ppl": [round(x, 6) for x in running],
        "ppl": ppl,
        "ppl_err": err,
        "reference": "llama-cpp-python %s (llama.cpp CPU, F16 KV cache, flash attention off)" % llama_cpp.__version__,
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
