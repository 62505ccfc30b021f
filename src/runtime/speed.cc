// speed.cc: a node's decode speed on one synthetic layer (see speed.h).
#include "runtime/speed.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <vector>

#include "kernels/kernels.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "model/transformer.h"
#include "util/timer.h"

namespace runtime {

using util::Status;

ProbeShape probe_shape(const model::Config& cfg, const model::Weights& w) {
  ProbeShape s;
  s.dim = cfg.dim;
  s.n_heads = cfg.n_heads;
  s.n_kv_heads = cfg.n_kv_heads;
  s.head_dim = cfg.head_dim;
  // A token reads n_expert_used experts of an MoE layer: as wide as a dense layer of that many.
  s.n_ff = cfg.n_ff * std::max(1, cfg.n_expert_used);
  std::map<tensor::Type, size_t> bytes;
  if (!w.layers.empty()) {
    const model::LayerWeights& l = w.layers[0];
    for (const model::Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.gate_exps,
                                   &l.up_exps, &l.down_exps})
      if (m->data) bytes[m->type] += m->bytes();
  }
  size_t best = 0;
  for (const auto& [t, b] : bytes)
    if (b > best) best = b, s.type = t;
  // A width the type's blocks do not tile (e.g. dim 896 of a Q4_K file, whose 896-wide
  // matrices fall back to another type): time Q8_0, or F16 when even 32 does not divide it.
  const auto tiles = [&](tensor::Type t) {
    const int b = tensor::traits(t).block_size;
    return s.dim % b == 0 && s.n_ff % b == 0 && (s.n_heads * s.head_dim) % b == 0;
  };
  if (!tiles(s.type)) s.type = tiles(tensor::Type::Q8_0) ? tensor::Type::Q8_0 : tensor::Type::F16;
  return s;
}

namespace {

double layer_bytes(const ProbeShape& s, int n_ff) {
  const double q = double(s.n_heads) * s.head_dim, kv = double(s.n_kv_heads) * s.head_dim;
  const double per_value = double(tensor::traits(s.type).block_bytes) / tensor::traits(s.type).block_size;
  return per_value * s.dim * (2 * q + 2 * kv + 3 * double(n_ff));
}

}  // namespace

util::Expected<double> measure_decode_speed(const ProbeShape& s, util::ThreadPool& pool,
                                            const model::BackendFactory& backend) {
  if (s.dim <= 0 || s.n_heads <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0 || s.n_ff <= 0 ||
      s.n_heads % s.n_kv_heads != 0)
    return Status::error("speed probe: inconsistent shape");
  model::Shape shape;
  shape.dim = s.dim;
  shape.n_layers = 1;
  shape.n_heads = s.n_heads;
  shape.n_kv_heads = s.n_kv_heads;
  shape.head_dim = s.head_dim * s.n_heads == s.dim ? 0 : s.head_dim;
  const int step = 256;  // a multiple of every block size
  shape.n_ff = s.n_ff;
  while (shape.n_ff > step && layer_bytes(s, shape.n_ff) > kProbeLayerBytes)
    shape.n_ff = std::max(step, (shape.n_ff / 2 + step - 1) / step * step);
  if (layer_bytes(s, shape.n_ff) > 8.0 * kProbeLayerBytes)  // attention alone: no model is this wide
    return Status::error("speed probe: a layer of width " + std::to_string(s.dim) + " and " +
                         std::to_string(s.n_heads) + " heads of " + std::to_string(s.head_dim) + " is too wide to time");
  shape.n_vocab = 512;

  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/shardlm-probe-XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) return Status::error("speed probe: cannot create a temporary file in " + path.substr(0, path.rfind('/')));
  close(fd);
  Status st = model::write_synthetic_model(path, shape, s.type, 1);
  auto m = st.ok() ? model::load_model(path) : util::Expected<std::unique_ptr<model::LoadedModel>>(st);
  unlink(path.c_str());  // mapped already (or failed): the file goes when the mapping does
  if (!m) return Status::error("speed probe: " + m.error());
  const model::Config& cfg = (*m)->config;
  model::RunConfig rc;
  rc.ctx = 2 + kProbeSteps;
  rc.max_batch = 1;
  rc.attention = model::AttentionMode::kFlash;
  const model::Partition whole = model::Partition::whole(cfg);
  std::unique_ptr<model::Transformer> tf;
  if (backend) {
    auto b = backend(cfg, (*m)->weights, pool, rc, whole);
    if (!b) return Status::error("speed probe: " + b.error());
    tf = std::make_unique<model::Transformer>(cfg, (*m)->weights, std::move(*b), rc, whole, nullptr);
  } else {
    tf = std::make_unique<model::Transformer>(cfg, (*m)->weights, pool, rc, whole, nullptr);
  }
  std::vector<float> logits(size_t(cfg.n_vocab));
  double best = 1e30;
  util::Timer total;
  for (int pos = 0; pos <= kProbeSteps; ++pos) {
    const int32_t token = 3 + pos;
    util::Timer t;
    RETURN_IF_ERROR(tf->forward(&token, 1, pos, logits.data()));
    if (pos > 0) best = std::min(best, t.seconds());  // pos 0 warms up (uploads, caches)
    if (pos > 1 && total.seconds() > kProbeSeconds) break;
  }
  return 1.0 / std::max(best, 1e-9);
}

}  // namespace runtime
