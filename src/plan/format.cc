// format.cc: format_plan, the human-readable table `shardlm plan` prints. Pure string
// building from make_plan / node_cost / cluster_cost results; no decisions are made here.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "plan/cost.h"

namespace plan {

namespace {

std::string fmt(const char* f, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), f, args...);
  return buf;
}

double mb(uint64_t b) { return double(b) / 1e6; }
double kib(uint64_t b) { return double(b) / 1024.0; }

std::string kv_cell(const NodeSlice& ns) {
  std::string r = fmt("[%d,%d)", ns.kv_heads.begin, ns.kv_heads.end);
  if (ns.kv_first_shared || ns.kv_last_shared)
    r += fmt(" %d dup", ns.n_kv_shared);
  return r;
}

std::string types_line(const ModelShape& s) {
  const MatrixTypes& m = s.types(0);
  std::string r = fmt("wq %s, wk %s, wv %s, wo %s, gate %s, up %s, down %s, output %s, token_embd %s",
                      tensor::type_name(m.wq), tensor::type_name(m.wk), tensor::type_name(m.wv),
                      tensor::type_name(m.wo), tensor::type_name(m.gate), tensor::type_name(m.up),
                      tensor::type_name(m.down), tensor::type_name(s.output),
                      tensor::type_name(s.token_embd));
  if (!s.layers.empty()) r += " (layer 0; types vary by layer)";
  return r;
}

}  // namespace

std::string format_plan(const Plan& p, const CostParams& c) {
  const ModelShape& s = p.shape;
  const int n = p.n_nodes();
  const uint64_t row_s = tensor::row_bytes(c.sync_type, s.dim);
  const double per = 1.0 / c.batch;  // per token
  std::string out;
  out += fmt("plan: %s (D %d, L %d, H %d, G %d, d %d, F %d, V %d) on %d node%s\n",
             s.name.empty() ? "model" : s.name.c_str(), s.dim, s.n_layers, s.n_heads, s.n_kv_heads,
             s.head_dim, s.n_ff, s.n_vocab, n, n == 1 ? "" : "s");
  out += "types: " + types_line(s) + "\n";
  out += fmt("link: alpha %.0f us, beta %.2f Gbit/s%s; sync %s (%llu B per D-vector); memory ",
             c.link.alpha_us, c.link.beta_gbps, c.link.shared_medium ? " shared medium" : " switched",
             tensor::type_name(c.sync_type), (unsigned long long)row_s);
  if (c.mem_gbps.size() == 1) {
    out += fmt("%.1f GB/s per node", c.mem_gbps[0]);
  } else {
    for (size_t i = 0; i < c.mem_gbps.size(); ++i) out += fmt("%s%.1f", i ? "," : "", c.mem_gbps[i]);
    out += " GB/s";
  }
  out += fmt("; KV cache %s%s\n\n", tensor::type_name(c.kv_type),
             c.batch > 1 ? fmt("; steps of %d rows, figures per token", c.batch).c_str() : "");

  out += fmt("%4s %5s %9s %12s %13s %15s %9s %8s %9s %9s %8s %7s\n", "node", "share", "heads",
             "kv heads", "ff rows", "vocab rows", "weight MB", "KV MB/1k", "sent KiB", "recv KiB",
             "compute", "sync");
  std::vector<NodeCost> costs;
  uint64_t total_weights = 0;
  for (int i = 0; i < n; ++i) {
    const NodeSlice& ns = p.nodes[i];
    costs.push_back(node_cost(p, i, c));
    const NodeCost& nc = costs.back();
    total_weights += nc.weight_bytes;
    const Traffic t = nc.total();
    std::string wmb = fmt("%.1f", mb(nc.weight_bytes));
    if (ns.n_wo_reencoded || ns.n_down_reencoded) wmb += "*";
    out += fmt("%4d %5.3f %9s %12s %13s %15s %9s %8.1f %9.1f %9.1f %5.1f ms %4.1f ms\n", i, ns.share,
               fmt("[%d,%d)", ns.heads.begin, ns.heads.end).c_str(), kv_cell(ns).c_str(),
               fmt("[%d,%d)", ns.ff.begin, ns.ff.end).c_str(),
               fmt("[%d,%d)", ns.vocab.begin, ns.vocab.end).c_str(), wmb.c_str(),
               mb(nc.kv_bytes_per_1k), kib(t.sent) * per, kib(t.received) * per, nc.compute_ms,
               nc.sync_ms);
  }
  if (costs[0].embedding_bytes)
    out += fmt("root also holds token_embd whole: %.1f MB (%s), one row read per token\n",
               mb(costs[0].embedding_bytes), tensor::type_name(s.token_embd));
  out += fmt("weights in all: %.1f MB (sum of slices incl. duplicated KV rows and replicated norms)\n",
             mb(total_weights));
  if (s.n_expert > 0) {
    out += fmt("experts: %d per layer, %d read per token (the weight MB above); each node holds its ff rows of "
               "every expert and the whole router (%s). Held per node, MB:", s.n_expert, s.n_expert_used,
               tensor::type_name(s.router));
    for (int i = 0; i < n; ++i) out += fmt(" %d: %.1f", i, mb(resident_bytes(p, i)));
    out += "\n";
  }

  const ClusterCost cc = cluster_cost(p, c);
  if (n > 1 && p.nodes[0].exact) {
    uint64_t snd = 0, rcv = 0;
    for (int i = 1; i < n; ++i) {
      snd = std::max(snd, costs[i].allreduce[0].sent);
      rcv = std::max(rcv, costs[i].allreduce[0].received);
    }
    out += fmt("\ngathers (exact sync): 4 x %d per step; KiB per token sent / received: root %.1f / %.1f, "
               "each worker (max) %.1f / %.1f, %.2f ms/tok\n", s.n_layers, kib(costs[0].allreduce[0].sent) * per,
               kib(costs[0].allreduce[0].received) * per, kib(snd) * per, kib(rcv) * per, cc.sync_ms * per);
  } else if (n > 1) {
    const uint64_t msg = tensor::row_bytes(c.sync_type, int64_t(c.batch) * s.dim);
    out += fmt("\nall-reduces: 2 x %d per step, %llu B each; KiB per token sent / received:\n",
               s.n_layers, (unsigned long long)msg);
    out += fmt("  %-10s %21s %21s %14s\n", "algorithm", "root", "each worker (max)", "time");
    for (AllReduce a : kAllReduces) {
      uint64_t snd = 0, rcv = 0;
      for (int i = 1; i < n; ++i) {
        snd = std::max(snd, costs[i].allreduce[int(a)].sent);
        rcv = std::max(rcv, costs[i].allreduce[int(a)].received);
      }
      const Traffic root = costs[0].allreduce[int(a)];
      const double ms = 2.0 * s.n_layers * allreduce_us(a, n, double(msg), c.link) / 1e3 * per;
      out += fmt("  %-10s %9.1f / %9.1f %9.1f / %9.1f %8.2f ms/tok%s\n", allreduce_name(a),
                 kib(root.sent) * per, kib(root.received) * per, kib(snd) * per, kib(rcv) * per, ms,
                 a == cc.algo ? "  <- chosen" : "");
    }
    const uint64_t step_msg = 8 + row_s;
    const uint64_t reply = 8 * uint64_t(c.top_k) + 4;
    out += fmt("step: root sends %llu B per token to each worker (pos, token id, embedded row in %s)\n",
               (unsigned long long)step_msg, tensor::type_name(c.sync_type));
    out += fmt("sampling: each worker replies %llu B (top-%d candidates + log-sum-exp); gathering "
               "F32 logits whole would bring the root %.1f KiB\n", (unsigned long long)reply, c.top_k,
               kib(costs[0].logits.received));
    const ReferenceTraffic ref = dllama_traffic(s, n);
    bool even = true;
    for (const NodeSlice& ns : p.nodes) even = even && std::abs(ns.share - p.nodes[0].share) < 1e-9;
    out += fmt("distributed-llama, same shape and N: %.1f KiB each way per node per token + %.1f KiB "
               "of F32 logits at the root%s\n", kib(ref.per_node_each_way), kib(ref.root_logits),
               n > s.n_kv_heads ? fmt(" (it cannot run N=%d > %d KV heads)", n, s.n_kv_heads).c_str()
               : (n & (n - 1)) || !even ? " (it runs only N = 1, 2, 4, 8 with equal shares)" : "");
  }
  out += fmt("\npredicted: compute %.1f ms (slowest node, memory-bound) + sync %.2f ms + step %.2f ms "
             "= %.1f ms/token (%.2f tokens/s)\n", cc.compute_ms * per, cc.sync_ms * per,
             cc.step_ms * per, cc.total_ms * per, cc.tokens_per_s);
  if (!p.notes.empty()) {
    out += "notes:\n";
    for (const std::string& note : p.notes) out += "  - " + note + "\n";
  }
  bool reenc = false;
  for (const NodeSlice& ns : p.nodes) reenc = reenc || ns.n_wo_reencoded || ns.n_down_reencoded;
  if (reenc) out += "  * weight MB includes slices re-encoded by the root (see notes)\n";
  return out;
}

}  // namespace plan
