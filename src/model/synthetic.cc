// synthetic.cc: random-weight model writer.
#include "model/synthetic.h"

#include <cmath>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "model/schema.h"
#include "tensor/quants.h"

namespace model {

const char* shape_names() {
  return "toy, toy-qwen2, toy-qwen2-coder, toy-qwen3, toy-gemma3, toy-llama31, toy-qwen3moe, toy-qwen3moe-e8, toy-qwen3-yarn, toy-gpt-oss, "
         "smollm2-135m, llama3.2-1b, llama3-8b, llama3-70b, qwen3-30b-a3b, gpt-oss-20b, gpt-oss-120b";
}

std::optional<Shape> shape_by_name(const std::string& name) {
  Shape s;
  if (name == "toy") return s;
  if (name == "toy-qwen2") { s.arch = "qwen2"; return s; }
  if (name == "toy-qwen2-coder") { s.arch = "qwen2"; s.fim_tokens = true; return s; }
  if (name == "toy-qwen3") { s.arch = "qwen3"; return s; }
  // 6 layers so the pattern has its global layer (5); a window of 8 positions so a test of
  // 16 positions crosses it; 2 query heads of 128 (gemma's head_dim is 256 at 270M).
  if (name == "toy-gemma3") {
    s.arch = "gemma3", s.n_layers = 6, s.n_heads = 2, s.n_kv_heads = 1, s.tied = true, s.rope_base = 1000000.0f;
    s.sliding_window = 8;
    return s;
  }
  // 8 of 32 experts of 128 rows; head_dim 64 (key_length given, as Qwen3's files do).
  if (name == "toy-qwen3moe") {
    s.arch = "qwen3moe", s.n_ff = 384, s.rope_base = 1000000.0f, s.head_dim = 64;
    s.n_expert = 32, s.n_expert_used = 8, s.n_ff_exp = 128;
    return s;
  }
  // 2 of 8 experts of 96 rows (3 blocks of 32: split unevenly over 2 nodes and cut in 3),
  // 3 layers, 8 query heads of 32 over 2 KV heads, tied embeddings.
  if (name == "toy-qwen3moe-e8") {
    s.arch = "qwen3moe", s.n_layers = 3, s.n_heads = 8, s.n_ff = 192, s.tied = true, s.rope_base = 1000000.0f;
    s.n_expert = 8, s.n_expert_used = 2, s.n_ff_exp = 96;
    return s;
  }
  // Qwen3-30B-A3B (its config.json): 48 layers, 32 query heads of 128 over 4 KV heads, 8 of
  // 128 experts of 768 rows.
  if (name == "qwen3-30b-a3b") {
    s.arch = "qwen3moe", s.dim = 2048, s.n_layers = 48, s.n_heads = 32, s.n_kv_heads = 4, s.head_dim = 128;
    s.n_ff = 6144, s.n_vocab = 151936, s.ctx_train = 40960, s.rope_base = 1000000.0f;
    s.n_expert = 128, s.n_expert_used = 8, s.n_ff_exp = 768;
    return s;
  }
  // Qwen3 with YaRN (factor 4 over an original context of 4096: the ramp spans pairs 10 to 23
  // of 32 at head_dim 64).
  if (name == "toy-qwen3-yarn") {
    s.arch = "qwen3", s.yarn_factor = 4.0f, s.yarn_orig_ctx = 4096, s.ctx_train = 16384;
    return s;
  }
  // gpt-oss in small: 4 layers (windowed, full, windowed, full) with a window of 8 positions,
  // 8 query heads of 64 over 2 KV heads (q_dim 512 != dim 256, as 4096 != 2880), 4 of 16
  // experts of 128 rows in MXFP4, YaRN factor 32 over 4096 positions (gpt-oss's).
  if (name == "toy-gpt-oss") {
    s.arch = "gpt-oss", s.n_layers = 4, s.n_heads = 8, s.n_kv_heads = 2, s.head_dim = 64, s.rope_base = 150000.0f;
    s.ctx_train = 131072, s.sliding_window = 8, s.yarn_factor = 32.0f, s.yarn_orig_ctx = 4096;
    s.n_ff = 128, s.n_expert = 16, s.n_expert_used = 4, s.n_ff_exp = 128, s.expert_type = tensor::Type::MXFP4;
    return s;
  }
  // gpt-oss-20b and -120b (their config.json): dim 2880, 64 query heads of 64 over 8 KV heads,
  // a window of 128 on every other layer, 4 of 32 / 128 experts of 2880 rows (MXFP4),
  // vocabulary 201088, YaRN factor 32 over 4096 positions, context 131072.
  if (name == "gpt-oss-20b" || name == "gpt-oss-120b") {
    s.arch = "gpt-oss", s.dim = 2880, s.n_layers = name == "gpt-oss-20b" ? 24 : 36, s.n_heads = 64, s.n_kv_heads = 8;
    s.head_dim = 64, s.n_vocab = 201088, s.ctx_train = 131072, s.rope_base = 150000.0f, s.sliding_window = 128;
    s.yarn_factor = 32.0f, s.yarn_orig_ctx = 4096;
    s.n_ff = 2880, s.n_expert = name == "gpt-oss-20b" ? 32 : 128, s.n_expert_used = 4, s.n_ff_exp = 2880;
    s.expert_type = tensor::Type::MXFP4;
    return s;
  }
  if (name == "toy-llama31") { s.rope_base = 500000.0f; s.llama3_rope_freqs = true; return s; }
  if (name == "smollm2-135m") {
    s.dim = 576; s.n_layers = 30; s.n_heads = 9; s.n_kv_heads = 3; s.n_ff = 1536; s.n_vocab = 49152;
    s.rope_base = 100000.0f; s.tied = true; s.ctx_train = 8192;
    return s;
  }
  if (name == "llama3.2-1b") {
    s.dim = 2048; s.n_layers = 16; s.n_heads = 32; s.n_kv_heads = 8; s.n_ff = 8192; s.n_vocab = 128256;
    s.rope_base = 500000.0f; s.tied = true; s.ctx_train = 131072;
    return s;
  }
  if (name == "llama3-8b") {
    s.dim = 4096; s.n_layers = 32; s.n_heads = 32; s.n_kv_heads = 8; s.n_ff = 14336; s.n_vocab = 128256;
    s.rope_base = 500000.0f; s.ctx_train = 8192;
    return s;
  }
  if (name == "llama3-70b") {
    s.dim = 8192; s.n_layers = 80; s.n_heads = 64; s.n_kv_heads = 8; s.n_ff = 28672; s.n_vocab = 128256;
    s.rope_base = 500000.0f; s.ctx_train = 8192;
    return s;
  }
  return std::nullopt;
}

std::vector<float> llama31_rope_factors(int n_rot, float freq_base) {
  const double factor = 8.0, low = 1.0, high = 4.0, old_ctx = 8192.0;
  const double low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
  std::vector<float> f;
  for (int i = 0; i < n_rot; i += 2) {
    const double freq = 1.0 / std::pow(double(freq_base), double(i) / n_rot);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) {
      f.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      f.push_back(static_cast<float>(factor));
    } else {
      const double smooth = (old_ctx / wavelen - low) / (high - low);
      f.push_back(static_cast<float>(1.0 / ((1 - smooth) / factor + smooth)));
    }
  }
  return f;
}

namespace {

// GPT-2 byte -> unicode code point map used by byte-level BPE vocabularies.
std::string byte_token(int b) {
  int cp = b;
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  if (!printable) {
    int n = 0;
    for (int i = 0; i < b; ++i)
      if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255))) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::string byte_level(const std::string& raw) {
  std::string s;
  for (unsigned char c : raw) s += byte_token(c);
  return s;
}

// Toy merges (raw bytes, in rank order): common English pairs, pairs that cross the o200k
// pre-tokenizer's boundaries (case changes, digit runs of 3, contractions, punctuation with
// a trailing '/' or newline, letters with combining marks), a few UTF-8 letters, then
// second-level merges. Only boundaries change which of them apply.
std::vector<std::pair<std::string, std::string>> toy_bpe_merges() {
  std::vector<std::pair<std::string, std::string>> m;
  auto pairs = [&](const char* list) {  // space-separated two-byte pairs
    std::string t;
    for (const char* p = list;; ++p) {
      if (*p == ' ' || *p == 0) {
        if (t.size() == 2) m.push_back({t.substr(0, 1), t.substr(1, 1)});
        t.clear();
        if (*p == 0) break;
      } else {
        t += *p;
      }
    }
  };
  pairs("th he in er an re on at en nd ti es or te of ed is it al ar st to nt ng se ha as ou io le ve "
        "co me de hi ri ro ic ne ea ra ce li ch ll be ma si om ur");
  for (const char* sp : {" t", " a", " s", " w", " c", " b", " o", " d", " m", " p", " f", " i", " h", " T",
                         " I", " H", " W", " 1", " 2", " (", " \"", " '", " -", " =", " {", " <", " /",
                         "  ", "\n\n", " \n", "\n ", "\r\n", "\t\t", " \t"})
    m.push_back({std::string(1, sp[0]), std::string(1, sp[1])});
  pairs("oW eW lW dW oH tS eC rT sA nB He Wo Th It Hi In TH HE IT ON ER AT");
  pairs("'s 't 'm 'd 'S 'T t' s' e' n' I' 12 23 34 45 56 00 11 19 20 99 01 10 1s 2n x2 a1");
  pairs(".. ., ,  ). /n // :: -> == () {} !! ?? ;; %) $1 1% <| |> _s s_ __");
  m.push_back({".", " "}), m.push_back({",", " "}), m.push_back({".", "\n"}), m.push_back({"/", "\n"});
  m.push_back({"/", " "}), m.push_back({":", " "}), m.push_back({"!", "\n"}), m.push_back({")", "\n"});
  for (const char* u : {"\xC3\xA9", "\xC3\xBC", "\xC3\x9F", "\xC3\xA4", "\xC3\xB6", "\xCC\x81",
                        "\xD0\xBE", "\xD0\xB0", "\xCE\xB1", "\xE4\xB8", "\xE3\x81"})
    m.push_back({std::string(1, u[0]), std::string(1, u[1])});
  m.push_back({"e", "\xCC\x81"}), m.push_back({"\xC3\xA9", "t"}), m.push_back({"W", "\xC3\xA4"});
  m.push_back({"\xC3\x9F", "e"}), m.push_back({"o", "\xC3\xA9"});
  m.push_back({" t", "he"}), m.push_back({" a", "nd"}), m.push_back({"i", "ng"}), m.push_back({" th", "e"});
  m.push_back({"12", "3"}), m.push_back({"123", "4"}), m.push_back({"o", "W"}), m.push_back({"oW", "or"});
  m.push_back({"He", "l"}), m.push_back({"Hel", "lo"}), m.push_back({"ll", "o"}), m.push_back({"t", "'s"});
  m.push_back({"n", "'t"}), m.push_back({" ", " \n"}), m.push_back({"\n", "\n\n"}), m.push_back({"  ", "  "});
  m.push_back({"...", "."}), m.push_back({"..", "."}), m.push_back({"w", "or"}), m.push_back({"l", "d"});
  m.push_back({"wor", "ld"}), m.push_back({"W", "or"}), m.push_back({"Wor", "ld"});
  return m;
}

// A pool of random rows of one (type, cols), quantized once and reused.
class RowPool {
 public:
  RowPool(tensor::Type type, int64_t cols, float sigma, std::mt19937_64& rng, int n_rows = 64)
      : row_bytes_(tensor::row_bytes(type, cols)), n_rows_(n_rows), data_(row_bytes_ * n_rows) {
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> row(cols);
    for (int r = 0; r < n_rows; ++r) {
      for (auto& x : row) x = dist(rng);
      tensor::quantize_row(type, row.data(), data_.data() + r * row_bytes_, cols);
    }
  }
  void fill(std::vector<uint8_t>& out, int64_t rows, uint64_t salt) const {
    out.resize(row_bytes_ * rows);
    for (int64_t r = 0; r < rows; ++r) {
      const size_t src = (r * 7 + salt * 13 + r / n_rows_) % n_rows_;
      std::copy_n(data_.data() + src * row_bytes_, row_bytes_, out.data() + r * row_bytes_);
    }
  }

 private:
  size_t row_bytes_;
  int n_rows_;
  std::vector<uint8_t> data_;
};

}  // namespace

util::Status write_synthetic_model(const std::string& path, const Shape& s, tensor::Type type,
                                   uint64_t seed) {
  const auto& tr = tensor::traits(type);
  const int head_dim = s.head_dim > 0 ? s.head_dim : s.dim / s.n_heads;
  const bool moe = s.n_expert > 0;
  const int n_ff = moe ? s.n_ff_exp : s.n_ff;  // the MLP rows the matrices have
  if (s.dim % tr.block_size || n_ff % tr.block_size || head_dim * s.n_heads % tr.block_size)
    return util::Status::error(std::string("shape does not fit ") + tr.name + " blocks of " +
                               std::to_string(tr.block_size));
  const tensor::Type exp_type = s.expert_type.value_or(type);
  const auto& etr = tensor::traits(exp_type);
  if (moe && (s.dim % etr.block_size || n_ff % etr.block_size))
    return util::Status::error(std::string("shape's experts do not fit ") + etr.name + " blocks");
  const bool gpt_oss = s.arch == "gpt-oss";
  std::mt19937_64 rng(seed);
  const int kv_dim = head_dim * s.n_kv_heads;
  gguf::Writer w;
  const std::string a = s.arch;
  w.set("general.architecture", gguf::Value::string(a));
  w.set("general.name", gguf::Value::string("synthetic " + a));
  w.set(a + ".block_count", gguf::Value::u32(s.n_layers));
  w.set(a + ".context_length", gguf::Value::u32(s.ctx_train));
  w.set(a + ".embedding_length", gguf::Value::u32(s.dim));
  w.set(a + ".feed_forward_length", gguf::Value::u32(s.n_ff));
  w.set(a + ".attention.head_count", gguf::Value::u32(s.n_heads));
  w.set(a + ".attention.head_count_kv", gguf::Value::u32(s.n_kv_heads));
  w.set(a + ".rope.freq_base", gguf::Value::f32(s.rope_base));
  w.set(a + ".attention.layer_norm_rms_epsilon", gguf::Value::f32(1e-5f));
  w.set(a + ".rope.dimension_count", gguf::Value::u32(head_dim));
  if (s.head_dim > 0) {
    w.set(a + ".attention.key_length", gguf::Value::u32(head_dim));
    w.set(a + ".attention.value_length", gguf::Value::u32(head_dim));
  }
  if (moe) {
    w.set(a + ".expert_count", gguf::Value::u32(s.n_expert));
    w.set(a + ".expert_used_count", gguf::Value::u32(s.n_expert_used));
    w.set(a + ".expert_feed_forward_length", gguf::Value::u32(s.n_ff_exp));
  }
  w.set(a + ".vocab_size", gguf::Value::u32(s.n_vocab));
  if (s.sliding_window > 0) w.set(a + ".attention.sliding_window", gguf::Value::u32(s.sliding_window));
  if (s.yarn_factor > 0) {
    w.set(a + ".rope.scaling.type", gguf::Value::string("yarn"));
    w.set(a + ".rope.scaling.factor", gguf::Value::f32(s.yarn_factor));
    w.set(a + ".rope.scaling.original_context_length", gguf::Value::u32(s.yarn_orig_ctx));
  }
  // Synthetic byte-level vocabulary: 256 byte tokens, filler, then BOS and EOS.
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) { tokens.push_back(byte_token(b)); types.push_back(1); }
  const char* fim[] = {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|repo_name|>",
                       "<|file_sep|>"};
  // gpt-oss's toy: merges (byte-level BPE) fill the first slots, so that a tokenization
  // shows where the o200k ("gpt-4o") pre-tokenizer put its word boundaries.
  std::vector<std::string> merges;
  if (gpt_oss) {
    std::set<std::string> seen;
    for (const auto& [l, r] : toy_bpe_merges()) {
      if (static_cast<int>(tokens.size()) >= s.n_vocab - 2) break;
      if (!seen.insert(l + r).second) continue;
      tokens.push_back(byte_level(l + r));
      types.push_back(1);
      merges.push_back(byte_level(l) + " " + byte_level(r));
    }
  }
  for (int i = static_cast<int>(tokens.size()); i < s.n_vocab - 2; ++i) {
    const bool named = s.fim_tokens && i - 256 < 6;
    tokens.push_back(named ? fim[i - 256] : "<filler_" + std::to_string(i) + ">");
    types.push_back(named ? 3 : 4);
  }
  tokens.push_back("<|begin_of_text|>"); types.push_back(3);
  tokens.push_back("<|end_of_text|>"); types.push_back(3);
  w.set("tokenizer.ggml.model", gguf::Value::string("gpt2"));
  w.set("tokenizer.ggml.pre", gguf::Value::string(gpt_oss ? "gpt-4o" : "gpt-2"));
  w.set("tokenizer.ggml.tokens", gguf::Value::string_array(std::move(tokens)));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(std::move(types)));
  w.set("tokenizer.ggml.merges", gguf::Value::string_array(std::move(merges)));
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(s.n_vocab - 2));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(s.n_vocab - 1));
  w.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(true));

  // Pools (shared by all layers) per input width.
  auto pool_dim = std::make_shared<RowPool>(type, s.dim, 1.0f / std::sqrt(float(s.dim)), rng);
  auto pool_ff = std::make_shared<RowPool>(type, n_ff, 1.0f / std::sqrt(float(n_ff)), rng);
  // gpt-oss's experts in their own type (the pools above serve when it is the same).
  auto pool_exp_dim = exp_type == type ? pool_dim : std::make_shared<RowPool>(exp_type, s.dim, 1.0f / std::sqrt(float(s.dim)), rng);
  auto pool_exp_ff = exp_type == type ? pool_ff : std::make_shared<RowPool>(exp_type, n_ff, 1.0f / std::sqrt(float(n_ff)), rng);
  auto pool_embd = std::make_shared<RowPool>(type, s.dim, 1.0f, rng);
  // Wo's rows when q_dim != dim (Qwen3-30B-A3B: 32 heads of 128 over dim 2048).
  const int q_dim = head_dim * s.n_heads;
  auto pool_q = q_dim == s.dim ? pool_dim : std::make_shared<RowPool>(type, q_dim, 1.0f / std::sqrt(float(q_dim)), rng);
  auto ones = std::make_shared<std::vector<float>>(std::max(s.dim, head_dim), 1.0f);
  uint64_t salt = 0;
  // n_stack > 0: that many stacked matrices (an MoE layer's experts, ne = [cols, rows, n]).
  auto matrix = [&](const std::string& name, int64_t cols, int64_t rows, std::shared_ptr<RowPool> pool,
                    int64_t n_stack = 0) {
    const uint64_t my_salt = salt++;
    std::vector<int64_t> ne = {cols, rows};
    if (n_stack > 0) ne.push_back(n_stack), rows *= n_stack;
    w.add_tensor(name, ne, n_stack > 0 ? exp_type : type, [pool, rows, my_salt](std::vector<uint8_t>& out) {
      pool->fill(out, rows, my_salt);
    });
  };
  // F32 rows drawn one by one (the router: pooled rows would tie experts' probabilities).
  std::vector<std::shared_ptr<std::vector<float>>> keep;
  auto random_f32 = [&](const std::string& name, int64_t cols, int64_t rows) {
    auto v = std::make_shared<std::vector<float>>(size_t(cols * rows));
    std::normal_distribution<float> dist(0.0f, 1.0f / std::sqrt(float(cols)));
    for (float& x : *v) x = dist(rng);
    w.add_tensor(name, {cols, rows}, tensor::Type::F32, v->data());
    keep.push_back(std::move(v));
  };
  // gpt-oss's biases and sinks: drawn value by value (ne: [n] or [n, n_expert]).
  auto random_vec = [&](const std::string& name, std::vector<int64_t> ne, float sigma) {
    auto v = std::make_shared<std::vector<float>>(size_t(ne[0] * (ne.size() > 1 ? ne[1] : 1)));
    std::normal_distribution<float> dist(0.0f, sigma);
    for (float& x : *v) x = dist(rng);
    w.add_tensor(name, ne, tensor::Type::F32, v->data());
    keep.push_back(std::move(v));
  };
  auto vec = [&](const std::string& name, int64_t n) {
    w.add_tensor(name, {n}, tensor::Type::F32, ones->data());
  };
  auto bias = std::make_shared<std::vector<float>>(std::max(s.dim, kv_dim), 0.01f);
  matrix(kTokenEmbdName, s.dim, s.n_vocab, pool_embd);
  auto freqs = std::make_shared<std::vector<float>>(llama31_rope_factors(head_dim, s.rope_base));
  if (s.llama3_rope_freqs) w.add_tensor(kRopeFreqsName, {head_dim / 2}, tensor::Type::F32, freqs->data());
  vec(kOutputNormName, s.dim);
  if (!s.tied) matrix(kOutputName, s.dim, s.n_vocab, pool_dim);
  // The layer tensors the architecture needs (model/schema.h), in the schema's order.
  Config c;
  c.dim = s.dim, c.n_heads = s.n_heads, c.n_kv_heads = s.n_kv_heads, c.head_dim = head_dim, c.n_ff = n_ff;
  c.gpt_oss = gpt_oss;
  c.qkv_bias = a == "qwen2" || gpt_oss, c.qk_norm = a == "qwen3" || a == "qwen3moe" || a == "gemma3", c.post_norms = a == "gemma3";
  c.n_expert = s.n_expert, c.n_expert_used = s.n_expert_used;
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = layer_prefix(l);
    for (const LayerTensor& t : layer_schema()) {
      if (!t.needed(c)) continue;
      const int64_t rows = dim_of(t.rows, c);
      if (t.matrix && t.rows == Dim::kExperts)  // the router
        random_f32(p + t.name, dim_of(t.cols, c), rows);
      else if (t.matrix && t.experts)
        matrix(p + t.name, dim_of(t.cols, c), rows, t.cols == Dim::kFf ? pool_exp_ff : pool_exp_dim, s.n_expert);
      else if (t.matrix)
        matrix(p + t.name, dim_of(t.cols, c), rows, t.cols == Dim::kFf ? pool_ff : t.cols == Dim::kQ ? pool_q : pool_dim);
      else if (gpt_oss && (t.cut == Cut::kHeadVals || std::string(t.name).find(".bias") != std::string::npos))
        random_vec(p + t.name, t.experts ? std::vector<int64_t>{rows, s.n_expert} : std::vector<int64_t>{rows},
                   t.cut == Cut::kHeadVals ? 1.0f : 0.1f);  // sinks ~ N(0, 1), biases ~ N(0, 0.1)
      else if (t.cut == Cut::kWhole)  // norms
        vec(p + t.name, rows);
      else  // qwen2's biases
        w.add_tensor(p + t.name, {rows}, tensor::Type::F32, bias->data());
    }
  }
  return w.write(path);
}

}  // namespace model
