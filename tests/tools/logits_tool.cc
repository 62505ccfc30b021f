// logits_tool.cc: prints the logits of every position for a list of token ids, as raw
// float32 rows to a file, for cross-checks against llama.cpp from Python.
// Usage: logits_tool MODEL OUT.f32 [--kv f32] TOKEN...
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "model/loader.h"
#include "model/transformer.h"
#include "util/thread_pool.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: logits_tool MODEL OUT.f32 [--kv f32] TOKEN...\n");
    return 2;
  }
  auto m = model::load_model(argv[1]);
  if (!m) {
    std::fprintf(stderr, "%s\n", m.error().c_str());
    return 1;
  }
  int i = 3;
  model::KvType kv = model::KvType::kF16;
  if (std::strcmp(argv[i], "--kv") == 0) {
    kv = std::strcmp(argv[i + 1], "f32") == 0 ? model::KvType::kF32 : model::KvType::kF16;
    i += 2;
  }
  std::vector<int32_t> toks;
  for (; i < argc; ++i) toks.push_back(std::atoi(argv[i]));
  util::ThreadPool pool(2);
  const auto& cfg = (*m)->config;
  model::Transformer tf(cfg, (*m)->weights, pool, 512, kv, 1);
  std::vector<float> logits(toks.size() * cfg.n_vocab);
  util::Status st = tf.forward(toks.data(), static_cast<int>(toks.size()), 0, logits.data(), true);
  if (!st.ok()) return 1;
  FILE* f = std::fopen(argv[2], "wb");
  std::fwrite(logits.data(), sizeof(float), logits.size(), f);
  std::fclose(f);
  return 0;
}
