// config.cc: GGUF metadata -> Config.
#include "model/config.h"

#include <cmath>

namespace model {

const char* supported_architectures() { return "llama (Llama 2/3/3.1/3.2, Mistral, SmolLM2, TinyLlama), qwen2, qwen3, qwen3moe, gemma3, gpt-oss"; }

namespace {

// Gemma 3's keys and constants, as llama.cpp's llama_model_gemma3 reads them.
util::Status load_gemma3(const gguf::File& f, const std::string& p, Config* c) {
  const std::string window = p + "attention.sliding_window";
  const auto n_swa = f.get_int(window);
  if (!n_swa || *n_swa <= 0 || *n_swa > (1 << 30))
    return util::Status::error("gemma3 model metadata lacks " + window +
                               " (the window of its local attention layers); re-convert the model "
                               "with a current convert_hf_to_gguf.py");
  c->n_swa = static_cast<int>(*n_swa);
  const std::string pattern = p + "attention.sliding_window_pattern";
  if (const gguf::Value* v = f.find(pattern); v && !f.get_int(pattern))
    return util::Status::error(pattern + " given per layer is not supported (only a period)");
  c->swa_pattern = static_cast<int>(f.get_int(pattern).value_or(6));
  if (c->swa_pattern < 1) return util::Status::error(pattern + " must be positive");
  c->rope_base_swa = static_cast<float>(f.get_float(p + "rope.freq_base_swa").value_or(10000.0));
  c->logit_softcap = static_cast<float>(f.get_float(p + "final_logit_softcapping").value_or(0.0));
  c->act = Activation::kGelu;
  c->post_norms = true;
  c->embed_scale = std::sqrt(static_cast<float>(c->dim));
  // Gemma 3 27B (62 layers) scales queries by 1/sqrt(dim / heads), the others by 1/sqrt(head_dim).
  c->q_scale = 1.0f / std::sqrt(static_cast<float>(c->n_layers == 62 ? c->dim / c->n_heads : c->head_dim));
  return util::ok_status();
}

// Qwen3-MoE's keys, as llama.cpp's llama_model_qwen3moe reads them: the router's softmax
// weights of the picked experts are normalised to sum 1 (llama.cpp hard-codes this for
// qwen3moe; an expert_weights_norm key, when a file has one, is followed) and not scaled
// unless expert_weights_scale says so.
util::Status load_moe(const gguf::File& f, const std::string& p, Config* c) {
  const auto n_expert = f.get_int(p + "expert_count");
  const auto n_used = f.get_int(p + "expert_used_count");
  if (!n_expert || *n_expert <= 0 || *n_expert > kMaxExperts)
    return util::Status::error("model metadata lacks " + p + "expert_count (1 to " + std::to_string(kMaxExperts) +
                               " experts per layer)");
  if (!n_used || *n_used <= 0 || *n_used > *n_expert)
    return util::Status::error(p + "expert_used_count must be 1 to " + p + "expert_count (" +
                               std::to_string(*n_expert) + "), not " +
                               (n_used ? std::to_string(*n_used) : std::string("missing")));
  c->n_expert = static_cast<int>(*n_expert);
  c->n_expert_used = static_cast<int>(*n_used);
  // An expert's hidden size; llama.cpp falls back to feed_forward_length / expert_used_count.
  const auto n_ff_exp = f.get_int(p + "expert_feed_forward_length");
  if (n_ff_exp && (*n_ff_exp <= 0 || *n_ff_exp > (1 << 30)))
    return util::Status::error(p + "expert_feed_forward_length must be positive");
  c->n_ff = n_ff_exp ? static_cast<int>(*n_ff_exp) : c->n_ff / c->n_expert_used;
  if (c->n_ff <= 0) return util::Status::error("model metadata lacks " + p + "expert_feed_forward_length");
  c->expert_norm = f.get_bool(p + "expert_weights_norm").value_or(true);
  c->expert_scale = static_cast<float>(f.get_float(p + "expert_weights_scale").value_or(0.0));
  return util::ok_status();
}

// gpt-oss's keys, as llama.cpp's llama_model_openai_moe reads them: experts as qwen3moe's
// (but the top k picked on the biased router logits and only their softmax taken, so never
// normalised again), a sliding window of attention.sliding_window positions on every other
// layer (sliding_window_pattern, default 2: even layers windowed), the windowed layers' rope
// base rope.freq_base_swa (default: rope.freq_base).
util::Status load_gpt_oss(const gguf::File& f, const std::string& p, Config* c) {
  RETURN_IF_ERROR(load_moe(f, p, c));
  c->expert_norm = false;
  c->gpt_oss = true;
  c->qkv_bias = true;
  const std::string window = p + "attention.sliding_window";
  const auto n_swa = f.get_int(window);
  if (!n_swa || *n_swa <= 0 || *n_swa > (1 << 30))
    return util::Status::error("gpt-oss model metadata lacks " + window + " (the window of its sliding-window layers)");
  if (*n_swa > c->ctx_train)
    return util::Status::error(window + " (" + std::to_string(*n_swa) + ") is larger than the context (" + p +
                               "context_length " + std::to_string(c->ctx_train) + "): the file is corrupt");
  c->n_swa = static_cast<int>(*n_swa);
  const std::string pattern = p + "attention.sliding_window_pattern";
  if (const gguf::Value* v = f.find(pattern); v && !f.get_int(pattern))
    return util::Status::error(pattern + " given per layer is not supported (only a period)");
  c->swa_pattern = static_cast<int>(f.get_int(pattern).value_or(2));
  if (c->swa_pattern < 1) return util::Status::error(pattern + " must be positive");
  c->rope_base_swa = static_cast<float>(f.get_float(p + "rope.freq_base_swa").value_or(c->rope_base));
  return util::ok_status();
}

// rope.scaling.type = yarn as llama.cpp's context sets it up from the file (no overrides):
// ext_factor 1, beta fast 32 and slow 1 (its defaults: llama.cpp reads no beta keys for
// these architectures), the original context from rope.scaling.original_context_length
// (else context_length), and attn_factor = mscale(factor) / (1 + 0.1 ln factor) times
// rope.scaling.attn_factor, in float as llama_context computes it.
util::Status load_yarn(const gguf::File& f, const std::string& p, Config* c) {
  const double factor = f.get_float(p + "rope.scaling.factor").value_or(0.0);
  if (!(factor > 0)) return util::Status::error(p + "rope.scaling.factor must be positive for yarn rope scaling");
  c->rope_freq_scale = 1.0f / static_cast<float>(factor);
  const auto orig = f.get_int(p + "rope.scaling.original_context_length");
  if (orig && (*orig <= 0 || *orig > (1 << 30)))
    return util::Status::error(p + "rope.scaling.original_context_length must be positive");
  kernels::Yarn& y = c->yarn;
  y.n_ctx_orig = orig ? static_cast<int>(*orig) : c->ctx_train;
  y.ext_factor = 1.0f;
  const float fac = 1.0f / c->rope_freq_scale;
  y.attn_factor = fac <= 1.0f ? 1.0f : (0.1f * 1.0f * std::log(fac) + 1.0f);
  y.attn_factor *= 1.0f / (1.0f + 0.1f * std::log(fac));
  y.attn_factor *= static_cast<float>(f.get_float(p + "rope.scaling.attn_factor").value_or(1.0));
  return util::ok_status();
}

}  // namespace

util::Expected<Config> load_config(const gguf::File& f) {
  Config c;
  auto arch = f.get_string("general.architecture");
  if (!arch) return util::Status::error("missing 'general.architecture': not a model file?");
  c.arch_name = *arch;
  if (*arch == "llama") {
    c.arch = Arch::kLlama;
  } else if (*arch == "qwen2") {
    c.arch = Arch::kQwen2;
  } else if (*arch == "qwen3") {
    c.arch = Arch::kQwen3;
  } else if (*arch == "gemma3") {
    c.arch = Arch::kGemma3;
  } else if (*arch == "qwen3moe") {
    c.arch = Arch::kQwen3Moe;
  } else if (*arch == "gpt-oss") {
    c.arch = Arch::kGptOss;
  } else {
    return util::Status::error("unsupported architecture '" + *arch +
                               "'; supported: " + supported_architectures());
  }
  c.name = f.get_string("general.name").value_or(*arch);
  const std::string p = *arch + ".";
  std::string missing;
  auto need_int = [&](const std::string& key, int* out) {
    auto v = f.get_int(p + key);
    if (!v || *v <= 0 || *v > (1 << 30)) {
      if (!missing.empty()) missing += ", ";
      missing += p + key;
      return;
    }
    *out = static_cast<int>(*v);
  };
  need_int("embedding_length", &c.dim);
  need_int("block_count", &c.n_layers);
  need_int("feed_forward_length", &c.n_ff);
  need_int("attention.head_count", &c.n_heads);
  if (!missing.empty()) return util::Status::error("model metadata lacks " + missing);
  c.n_kv_heads = static_cast<int>(f.get_int(p + "attention.head_count_kv").value_or(c.n_heads));
  c.head_dim = static_cast<int>(f.get_int(p + "attention.key_length").value_or(c.dim / c.n_heads));
  c.n_rot = static_cast<int>(f.get_int(p + "rope.dimension_count").value_or(c.head_dim));
  c.ctx_train = static_cast<int>(f.get_int(p + "context_length").value_or(4096));
  c.rms_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  c.rope_base = static_cast<float>(f.get_float(p + "rope.freq_base").value_or(10000.0));
  const auto scaling = f.get_string(p + "rope.scaling.type").value_or("none");
  if (scaling == "linear") {
    const double factor = f.get_float(p + "rope.scaling.factor").value_or(1.0);
    if (factor > 0) c.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling == "yarn") {
    RETURN_IF_ERROR(load_yarn(f, p, &c));
  } else if (scaling != "none" && !scaling.empty()) {
    return util::Status::error("rope scaling '" + scaling + "' is not supported (only none, linear, yarn, and llama3 rope_freqs)");
  }
  auto vocab = f.get_int(p + "vocab_size");
  if (!vocab) {
    const gguf::Value* toks = f.find("tokenizer.ggml.tokens");
    if (toks) vocab = static_cast<int64_t>(toks->count());
  }
  if (!vocab || *vocab <= 0) return util::Status::error("cannot tell the vocabulary size (no " + p + "vocab_size or tokenizer.ggml.tokens)");
  c.n_vocab = static_cast<int>(*vocab);
  if (c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0)
    return util::Status::error("head_count " + std::to_string(c.n_heads) +
                               " is not a multiple of head_count_kv " + std::to_string(c.n_kv_heads));
  if (c.n_rot > c.head_dim || c.n_rot % 2 != 0)
    return util::Status::error("rope.dimension_count " + std::to_string(c.n_rot) + " does not fit head dim " + std::to_string(c.head_dim));
  c.rope_neox = c.arch != Arch::kLlama;
  c.qkv_bias = c.arch == Arch::kQwen2;
  c.qk_norm = c.arch == Arch::kQwen3 || c.arch == Arch::kQwen3Moe || c.arch == Arch::kGemma3;
  if (c.arch == Arch::kGemma3) RETURN_IF_ERROR(load_gemma3(f, p, &c));
  if (c.arch == Arch::kQwen3Moe) RETURN_IF_ERROR(load_moe(f, p, &c));
  if (c.arch == Arch::kGptOss) RETURN_IF_ERROR(load_gpt_oss(f, p, &c));
  return c;
}

}  // namespace model
