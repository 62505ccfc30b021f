// synthetic.h: writes random-weight GGUF models of any llama-family shape (a toy up to the
// Llama 3 8B and 70B shapes) with the project's own writer, for tests and benchmarks of
// speed and transfer. Rows are drawn from a small pool of random quantized rows, so a 5 GB
// file is written at disk speed. The vocabulary is a synthetic byte-level BPE one (256
// byte tokens + filler + BOS/EOS). Deliberately not a trained model: outputs are noise.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "tensor/types.h"
#include "util/status.h"

namespace model {

struct Shape {
  std::string arch = "llama";
  int dim = 256, n_layers = 2, n_heads = 4, n_kv_heads = 2, n_ff = 512, n_vocab = 512;
  int ctx_train = 4096;
  float rope_base = 10000.0f;
  bool tied = false;
  bool llama3_rope_freqs = false;  // Llama 3.1 frequency factors tensor (rope_freqs.weight)
  int sliding_window = 0;          // gemma3: <arch>.attention.sliding_window
  int head_dim = 0;                // 0: dim / n_heads (else <arch>.attention.key_length)
  // qwen3moe: n_expert experts of n_ff_exp rows per layer, n_expert_used picked per token
  // (the router ffn_gate_inp is F32, as llama.cpp's quantizer keeps it).
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  // Qwen2.5-Coder's FIM tokens (<|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>, <|fim_pad|>,
  // <|repo_name|>, <|file_sep|>) as the first six filler tokens, control type (/infill).
  bool fim_tokens = false;
  // rope.scaling.type = yarn with this factor and original context (0: no scaling keys).
  float yarn_factor = 0.0f;
  int yarn_orig_ctx = 0;
  // gpt-oss: the experts' type (MXFP4, as published) whatever the other matrices' type.
  std::optional<tensor::Type> expert_type;
};

// Named shapes: see shape_names().
std::optional<Shape> shape_by_name(const std::string& name);

// Llama 3.1's per-pair rope frequency factors for n_rot dims (as convert_hf_to_gguf computes
// them: factor 8, low 1, high 4, original context 8192).
std::vector<float> llama31_rope_factors(int n_rot, float freq_base);
const char* shape_names();

// Writes a model of `shape` whose matrices are `type` (norms F32), seeded.
util::Status write_synthetic_model(const std::string& path, const Shape& shape, tensor::Type type,
                                   uint64_t seed);

}  // namespace model
