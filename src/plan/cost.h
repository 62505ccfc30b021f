// cost.h: the cost model of a plan (DESIGN §4): bytes each node sends and receives per
// step for each all-reduce algorithm, the root's step message and the sampling reply, and
// predicted milliseconds (compute = weight bytes / memory bandwidth; sync = 2L all-reduces
// under a latency-bandwidth link model). choose_allreduce is what the runtime calls with
// the α and β it measured when the cluster formed.
//
// Deliberately not here: measuring anything (net/ probes links, bench/ measures memory),
// message headers (payload bytes only), attention's read of the KV cache (grows with the
// context; the model is the decode cost at short context).
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "plan/plan.h"

namespace plan {

enum class AllReduce { kAllGather = 0, kStar = 1, kRing = 2 };
constexpr std::array<AllReduce, 3> kAllReduces = {AllReduce::kAllGather, AllReduce::kStar,
                                                  AllReduce::kRing};
const char* allreduce_name(AllReduce a);  // "all-gather", "star", "ring"

// A link: one-way latency α, bandwidth β per node (full duplex, switched), or one shared
// medium (hub, Wi-Fi) whose β all nodes' sends share.
struct Link {
  double alpha_us = 50;     // α, microseconds per message
  double beta_gbps = 1;     // β, Gbit/s
  bool shared_medium = false;
};

// Time of one all-reduce of a message of `bytes` (each node's partial) on n nodes:
//   all-gather: α + (N−1)·S/β            (shared medium: α + N(N−1)·S/β)
//   star:       2α + 2(N−1)·S/β at root  (reduce in, then broadcast out; same on shared)
//   ring:       2(N−1)·α + 2(N−1)/N·S/β  (shared medium: 2(N−1)·α + 2(N−1)·S/β)
// 0 when n == 1.
double allreduce_us(AllReduce a, int n, double bytes, const Link& link);

// The fastest algorithm for one all-reduce of `bytes` (a batch of B rows: B * row bytes)
// on n nodes under the measured α (µs) and β (Gbit/s). Ties go to all-gather, then star.
// quantized (Q8_0 on the wire): the ring re-encodes each running sum at every hop, which
// costs accuracy (SmolLM2 perplexity at N = 3: +0.79 % from one node against +0.36 % for
// all-gather), so it is chosen only when predicted kQuantizedRingHandicap times faster.
constexpr double kQuantizedRingHandicap = 1.5;
AllReduce choose_allreduce(int n, double bytes, double alpha_us, double beta_gbps,
                           bool shared_medium = false, bool quantized = false);

struct Traffic {
  uint64_t sent = 0, received = 0;
  Traffic& operator+=(const Traffic& o) { sent += o.sent; received += o.received; return *this; }
};

// Bytes node `node` (0 = root) sends and receives in one all-reduce of `values` elements
// encoded as `type` (values a multiple of its block size). The ring cuts the vector into n
// chunks of whole blocks (sizes differing by at most a block); in reduce-scatter node i
// sends every chunk but (i+1) mod n, in all-gather every chunk but (i+2) mod n.
Traffic allreduce_traffic(AllReduce a, int n, int node, int64_t values, tensor::Type type);

struct CostParams {
  tensor::Type sync_type = tensor::Type::Q8_0;  // activations on the wire: Q8_0, F16 or F32
  tensor::Type kv_type = tensor::Type::F16;     // KV cache element type
  Link link;
  std::vector<double> mem_gbps = {10};  // GB/s: one value for every node, or one per node
  int top_k = 40;                       // candidates each node returns for sampling
  int batch = 1;                        // rows per step; an all-reduce carries batch * D values
};

// Costs of one node for one step of `batch` rows (a decode step when batch == 1).
struct NodeCost {
  uint64_t weight_bytes = 0;     // read per step (plan::weight_bytes)
  uint64_t embedding_bytes = 0;  // root: the whole token embedding, resident (not streamed)
  uint64_t kv_bytes_per_1k = 0;
  std::array<Traffic, 3> allreduce;  // the 2L all-reduces of a step, by algorithm (exact
                                     // mode: its 4L gathers, the same in every entry)
  Traffic step;      // root -> workers: per row pos + token id (8 B) + embedded row in sync type
  Traffic sample;    // workers -> root: top_k candidates (id, logit: 8 B each) + log-sum-exp
  Traffic logits;    // the alternative: every worker's F32 logits range gathered at the root
  AllReduce algo = AllReduce::kAllGather;  // chosen for this step's message size
  double compute_ms = 0;  // weight_bytes / memory bandwidth
  double sync_ms = 0;     // 2L * allreduce_us(algo, S)
  Traffic total() const;  // allreduce[algo] + step + sample
};

NodeCost node_cost(const Plan& p, int node, const CostParams& c);

struct ClusterCost {
  AllReduce algo = AllReduce::kAllGather;
  double compute_ms = 0;  // slowest node (lockstep)
  double sync_ms = 0;     // 2L all-reduces
  double step_ms = 0;     // step message broadcast + sampling reply
  double total_ms = 0;
  double tokens_per_s = 0;  // batch rows / total
};
ClusterCost cluster_cost(const Plan& p, const CostParams& c);

// distributed-llama v0.16.4 on the same shape (REFERENCE §6): each node sends and receives
// 2·L·(N−1)·D·34/32 bytes per token; the root also receives (N−1)·⌊V/N⌋·4 bytes of logits.
struct ReferenceTraffic {
  uint64_t per_node_each_way = 0;
  uint64_t root_logits = 0;
};
ReferenceTraffic dllama_traffic(const ModelShape& s, int n);

// The printout of `shardlm plan`: one row per node (heads, KV heads with duplicates marked,
// ff and vocab ranges, weight MB, KV MB per 1k tokens, KiB sent/received per token,
// predicted compute and sync ms), the algorithms compared, distributed-llama's figures for
// the same shape, the predicted time per token and notes on re-encoded slices.
std::string format_plan(const Plan& p, const CostParams& c);

}  // namespace plan
