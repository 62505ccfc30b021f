// node.cc: a node's collective, backend and executor from a session's setup, and the
// memory-fit rule (node.h).
#include "runtime/node.h"

#include "util/memory.h"

namespace runtime {

util::Expected<Node> make_node(const Setup& s, const model::Config& cfg, const NodeModel& slice, net::Transport* t,
                               util::ThreadPool& pool, const model::BackendFactory& backend) {
  Node n;
  if (t)
    n.coll = std::make_unique<AutoCollective>(*t, ExactRows::of(s.slice), s.sync, s.forced_algo, s.alpha_us,
                                              s.beta_gbps, cfg.dim, s.step_timeout_s, s.run.max_batch);
  const model::RunConfig& rc = s.run;  // the same batch order and slots on every node
  std::unique_ptr<model::Backend> b;
  if (backend) {
    auto made = backend(cfg, slice.weights, pool, rc, slice.part);
    if (!made) return made.status();
    b = std::move(*made);
  } else {
    n.placed = place_in_huge_pages(cfg, slice);  // the CPU streams weights: 2 MiB pages
  }
  const NodeModel& m = n.placed ? n.placed->model : slice;
  n.exec = std::make_unique<NodeExecutor>(cfg, m.weights, m.part, pool, rc, n.coll.get(), std::move(b));
  return n;
}

MemoryFit memory_fit(const model::Config& c, int kv_heads, model::KvType kv_type, int ctx, int n_slots, int max_batch,
                     double weight_bytes, double usable, int kv_blocks, int host_blocks) {
  MemoryFit f;
  const std::vector<int> layer_ctx = model::kv_layer_ctx(c, ctx, std::max(1, max_batch));
  f.kv_bytes = double(model::KvCache::bytes_for(kv_heads, c.head_dim, ctx, kv_type, n_slots, layer_ctx, kv_blocks));
  // An entry is one block's rows of every full layer (KvCache::copy): no slot's rings.
  f.host_bytes = double(std::max(0, host_blocks)) *
                 double(model::KvCache::bytes_for(kv_heads, c.head_dim, ctx, kv_type, 0, layer_ctx, 1));
  f.need = f.kv_bytes + f.host_bytes + weight_bytes;
  f.have = double(util::physical_memory_bytes());
  f.fits = f.need <= usable * f.have;
  return f;
}

MemoryFit memory_fit(const model::Config& c, int kv_heads, const model::RunConfig& rc, double weight_bytes,
                     double usable) {
  return memory_fit(c, kv_heads, rc.kv_type, rc.ctx, rc.n_slots, rc.max_batch, weight_bytes, usable, rc.kv_blocks,
                    rc.kv_host_blocks);
}

}  // namespace runtime
