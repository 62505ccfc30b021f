// cost.cc: traffic per node and the latency-bandwidth time model of cost.h.
#include "plan/cost.h"

#include <algorithm>

#include "util/check.h"

namespace plan {

namespace {

// Microseconds to move `bytes` at `gbps` Gbit/s.
double wire_us(double bytes, double gbps) { return bytes * 8.0 / (gbps * 1e3); }

double mem_gbps_of(const CostParams& c, int node, int n) {
  CHECK_MSG(c.mem_gbps.size() == 1 || static_cast<int>(c.mem_gbps.size()) == n,
            "mem_gbps needs one value or one per node");
  const double g = c.mem_gbps.size() == 1 ? c.mem_gbps[0] : c.mem_gbps[node];
  CHECK(g > 0);
  return g;
}

}  // namespace

const char* allreduce_name(AllReduce a) {
  switch (a) {
    case AllReduce::kAllGather: return "all-gather";
    case AllReduce::kStar: return "star";
    case AllReduce::kRing: return "ring";
  }
  return "?";
}

double allreduce_us(AllReduce a, int n, double bytes, const Link& link) {
  CHECK(n >= 1 && link.beta_gbps > 0 && link.alpha_us >= 0);
  if (n == 1) return 0;
  const double alpha = link.alpha_us, s = bytes, m = n - 1;
  switch (a) {
    case AllReduce::kAllGather:
      return alpha + wire_us((link.shared_medium ? n : 1) * m * s, link.beta_gbps);
    case AllReduce::kStar:
      return 2 * alpha + wire_us(2 * m * s, link.beta_gbps);
    case AllReduce::kRing:
      return 2 * m * alpha + wire_us(2 * m * s / (link.shared_medium ? 1 : n), link.beta_gbps);
  }
  return 0;
}

AllReduce choose_allreduce(int n, double bytes, double alpha_us, double beta_gbps, bool shared_medium,
                           bool quantized) {
  const Link link{alpha_us, beta_gbps, shared_medium};
  AllReduce best = AllReduce::kAllGather;
  double best_us = allreduce_us(best, n, bytes, link);
  for (AllReduce a : kAllReduces) {
    double t = allreduce_us(a, n, bytes, link);
    if (a == AllReduce::kRing && quantized) t *= kQuantizedRingHandicap;
    if (t < best_us * (1 - 1e-12)) {
      best = a;
      best_us = t;
    }
  }
  return best;
}

Traffic allreduce_traffic(AllReduce a, int n, int node, int64_t values, tensor::Type type) {
  CHECK(n >= 1 && node >= 0 && node < n);
  if (n == 1) return {};
  const auto& tr = tensor::traits(type);
  CHECK(values % tr.block_size == 0);
  const uint64_t s = tensor::row_bytes(type, values), m = n - 1;
  switch (a) {
    case AllReduce::kAllGather:
      return {m * s, m * s};
    case AllReduce::kStar:
      return node == 0 ? Traffic{m * s, m * s} : Traffic{s, s};
    case AllReduce::kRing: {
      const int64_t blocks = values / tr.block_size;
      CHECK(blocks <= INT32_MAX);
      const std::vector<int> c = apportion(static_cast<int>(blocks), std::vector<double>(n, 1.0), 0);
      auto chunk = [&](int j) { return uint64_t(c[((j % n) + n) % n]) * tr.block_bytes; };
      return {2 * s - chunk(node + 1) - chunk(node + 2), 2 * s - chunk(node) - chunk(node + 1)};
    }
  }
  return {};
}

Traffic NodeCost::total() const {
  Traffic t = allreduce[static_cast<int>(algo)];
  t += step;
  t += sample;
  return t;
}

NodeCost node_cost(const Plan& p, int node, const CostParams& c) {
  const ModelShape& s = p.shape;
  const int n = p.n_nodes();
  CHECK(node >= 0 && node < n && c.batch >= 1 && c.top_k >= 0);
  NodeCost nc;
  nc.weight_bytes = weight_bytes(p, node);
  nc.embedding_bytes = p.nodes[node].holds_embedding ? embedding_bytes(s) : 0;
  nc.kv_bytes_per_1k = kv_bytes_per_1k(p, node, c.kv_type, c.batch);

  const int64_t values = int64_t(c.batch) * s.dim;  // one all-reduce message: [batch][D]
  const uint64_t n_allreduce = 2 * uint64_t(s.n_layers);
  for (AllReduce a : kAllReduces) {
    Traffic t = allreduce_traffic(a, n, node, values, c.sync_type);
    nc.allreduce[static_cast<int>(a)] = {t.sent * n_allreduce, t.received * n_allreduce};
  }
  if (n > 1) {
    const uint64_t step_msg = uint64_t(c.batch) * (8 + tensor::row_bytes(c.sync_type, s.dim));
    const uint64_t reply = 8 * uint64_t(c.top_k) + 4;
    const uint64_t m = n - 1;
    if (node == 0) {
      nc.step = {m * step_msg, 0};
      nc.sample = {0, m * reply};
      for (int i = 1; i < n; ++i) nc.logits.received += 4 * uint64_t(p.nodes[i].vocab.size());
    } else {
      nc.step = {0, step_msg};
      nc.sample = {reply, 0};
      nc.logits.sent = 4 * uint64_t(p.nodes[node].vocab.size());
    }
  }
  if (p.nodes[node].exact) {
    // Four one-shot gathers per layer: Wo's input (the node's heads), Wo's output rows
    // (F32), down's input (its MLP rows; with experts, those of each of the n_expert_used
    // experts a token reads), down's output rows (F32). Time per gather: one latency plus
    // the largest share any node receives over its link.
    const uint64_t ff_rows_per_token = s.n_expert > 0 ? uint64_t(s.n_expert_used) : 1;
    auto gathered = [&](int i) -> uint64_t {
      const NodeSlice& ns = p.nodes[i];
      const MatrixTypes& m = s.types(0);
      const int64_t att = int64_t(ns.heads.size()) * s.head_dim;
      const uint64_t a = ns.gather_q8_att ? tensor::row_bytes(tensor::traits(m.wo).vec_dot_type, att) : 4 * att;
      const uint64_t f = ns.gather_q8_ff ? tensor::row_bytes(tensor::traits(m.down).vec_dot_type, ns.ff.size())
                                         : 4 * uint64_t(ns.ff.size());
      return (a + ff_rows_per_token * f + 8 * uint64_t(ns.rows.size())) * uint64_t(c.batch);
    };
    Traffic t;
    uint64_t max_in = 0;
    for (int i = 0; i < n; ++i) {
      uint64_t in = 0;
      for (int j = 0; j < n; ++j) in += j == i ? 0 : gathered(j);
      max_in = std::max(max_in, in);
      if (i == node) t = {uint64_t(n - 1) * gathered(i) * s.n_layers, in * s.n_layers};
    }
    nc.allreduce.fill(t);
    nc.algo = AllReduce::kAllGather;
    nc.compute_ms = double(nc.weight_bytes) / (mem_gbps_of(c, node, n) * 1e9) * 1e3;
    nc.sync_ms = n > 1 ? s.n_layers * (4 * c.link.alpha_us + wire_us(double(max_in), c.link.beta_gbps)) / 1e3 : 0;
    return nc;
  }
  const double msg_bytes = double(tensor::row_bytes(c.sync_type, values));
  nc.algo = choose_allreduce(n, msg_bytes, c.link.alpha_us, c.link.beta_gbps, c.link.shared_medium,
                             c.sync_type == tensor::Type::Q8_0);
  nc.compute_ms = double(nc.weight_bytes) / (mem_gbps_of(c, node, n) * 1e9) * 1e3;
  nc.sync_ms = n_allreduce * allreduce_us(nc.algo, n, msg_bytes, c.link) / 1e3;
  return nc;
}

ClusterCost cluster_cost(const Plan& p, const CostParams& c) {
  ClusterCost cc;
  const int n = p.n_nodes();
  for (int i = 0; i < n; ++i) {
    const NodeCost nc = node_cost(p, i, c);
    cc.compute_ms = std::max(cc.compute_ms, nc.compute_ms);
    cc.sync_ms = nc.sync_ms;  // the same on every node
    cc.algo = nc.algo;
  }
  if (n > 1) {
    const ModelShape& s = p.shape;
    const double step_msg = double(c.batch) * (8 + tensor::row_bytes(c.sync_type, s.dim));
    const double reply = 8.0 * c.top_k + 4;
    // The root sends n-1 step messages, then takes n-1 replies (switched: they arrive in parallel).
    cc.step_ms = (2 * c.link.alpha_us + wire_us((n - 1) * step_msg, c.link.beta_gbps) +
                  wire_us((n - 1) * reply, c.link.beta_gbps)) / 1e3;
  }
  cc.total_ms = cc.compute_ms + cc.sync_ms + cc.step_ms;
  cc.tokens_per_s = cc.total_ms > 0 ? c.batch * 1e3 / cc.total_ms : 0;
  return cc;
}

ReferenceTraffic dllama_traffic(const ModelShape& s, int n) {
  ReferenceTraffic r;
  const uint64_t m = n - 1;
  r.per_node_each_way = 2 * uint64_t(s.n_layers) * m * uint64_t(s.dim) * 34 / 32;
  r.root_logits = m * uint64_t(s.n_vocab / n) * 4;
  return r;
}

}  // namespace plan
