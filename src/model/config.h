// config.h: a model's hyperparameters read from GGUF metadata ("<arch>.*" keys), for the
// architecture families we support. An unknown architecture or a missing key is a clear
// error that lists what is supported. Deliberately no tensors here (see weights.h).
#pragma once
#include <cstdint>
#include <string>

#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "util/status.h"

namespace model {

enum class Arch { kLlama, kQwen2, kQwen3, kGemma3, kQwen3Moe, kGptOss };
constexpr int kMaxExperts = 512;  // per layer (llama.cpp's LLAMA_MAX_EXPERTS)
enum class Activation : uint8_t { kSilu = 0, kGelu = 1 };  // of the gated MLP: SwiGLU or GeGLU

struct Config {
  Arch arch = Arch::kLlama;
  std::string arch_name;   // GGUF general.architecture
  std::string name;        // general.name, for messages
  int dim = 0;             // embedding length D
  int n_layers = 0;        // L
  int n_heads = 0;         // H query heads
  int n_kv_heads = 0;      // G KV heads
  int head_dim = 0;        // d
  int n_ff = 0;            // F, MLP hidden
  int n_vocab = 0;         // V
  int n_rot = 0;           // rotary dimensions per head (<= head_dim)
  int ctx_train = 0;       // trained context length
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / linear scaling factor
  bool rope_neox = false;        // pairs (i, i + n_rot/2) instead of (2i, 2i+1)
  // rope.scaling.type = yarn: llama.cpp's context defaults (ext_factor 1, attn_factor from
  // the factor, beta fast 32 / slow 1, the original context length); off: ext_factor 0.
  kernels::Yarn yarn;
  bool qkv_bias = false;         // qwen2
  bool qk_norm = false;          // qwen3, gemma3: RMS norm of each Q and K head
  // gemma3 (defaults are the llama family's):
  Activation act = Activation::kSilu;
  bool post_norms = false;       // RMS norms of the attention and MLP outputs before their residual adds
  float embed_scale = 1.0f;      // the embedded rows are multiplied by this (gemma: sqrt(dim))
  float q_scale = 0.0f;          // > 0: q multiplied by it before attention, scores unscaled;
                                 // 0: scores scaled by 1/sqrt(head_dim) (llama.cpp's kq_scale)
  float logit_softcap = 0.0f;    // > 0: logits = cap * tanh(logits / cap)
  int n_swa = 0;                 // > 0: windowed layers attend to the last n_swa positions
  int swa_pattern = 0;           // layer l is windowed iff l % swa_pattern < swa_pattern - 1
  float rope_base_swa = 10000.0f;  // rope base of the windowed layers
  // mixture of experts (qwen3moe): every layer's MLP is n_expert experts of n_ff rows each
  // (n_ff is then an expert's hidden size, <arch>.expert_feed_forward_length), of which the
  // router picks n_expert_used per token.
  int n_expert = 0;              // 0: a dense MLP
  int n_expert_used = 0;
  bool expert_norm = false;      // the picked experts' weights divided by their sum
  float expert_scale = 0.0f;     // != 0 and != 1: the weights then multiplied by it
  // gpt-oss (defaults are qwen3moe's): the router's logits biased, the top k picked on the
  // logits and their softmax taken (llama.cpp's SOFTMAX_WEIGHT gating); experts with biases
  // and the clamped SwiGLU (swiglu_oai, alpha 1.702, limit 7); attention sinks and an
  // output-projection bias; the MLP's norm is the file's post_attention_norm.
  bool gpt_oss = false;
  static constexpr float kOaiAlpha = 1.702f, kOaiLimit = 7.0f;

  bool moe() const { return n_expert > 0; }

  bool is_swa(int layer) const { return n_swa > 0 && (swa_pattern <= 0 || layer % swa_pattern < swa_pattern - 1); }
  float rope_base_of(int layer) const { return is_swa(layer) ? rope_base_swa : rope_base; }

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
};

// Reads the config; errors name the missing key or unsupported architecture.
util::Expected<Config> load_config(const gguf::File& file);
const char* supported_architectures();  // "llama, qwen2, qwen3, gemma3, qwen3moe, gpt-oss"

}  // namespace model
