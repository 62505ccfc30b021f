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
};

// Named shapes: toy, toy-qwen2, toy-qwen3, toy-gemma3, toy-llama31, smollm2-135m, llama3.2-1b, llama3-8b, llama3-70b.
std::optional<Shape> shape_by_name(const std::string& name);

// Llama 3.1's per-pair rope frequency factors for n_rot dims (as convert_hf_to_gguf computes
// them: factor 8, low 1, high 4, original context 8192).
std::vector<float> llama31_rope_factors(int n_rot, float freq_base);
const char* shape_names();

// Writes a model of `shape` whose matrices are `type` (norms F32), seeded.
util::Status write_synthetic_model(const std::string& path, const Shape& shape, tensor::Type type,
                                   uint64_t seed);

}  // namespace model
