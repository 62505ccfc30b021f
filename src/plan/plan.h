// plan.h: how a model's tensors and KV cache are cut over N nodes with capacities
// (DESIGN §3). Pure functions of the model's shape and the cluster's shares: no I/O, no
// weights, no sockets. The runtime asks the plan which rows and columns each node holds;
// cost.h turns a plan into bytes and milliseconds per token; format_plan prints it.
//
// Rules implemented here:
//  * Query heads are dealt as contiguous ranges sized by capacity (largest remainder).
//    Heads are dealt in units of u heads, u the smallest count whose columns fill whole
//    blocks of Wo's type (u = 4 for Q4_K at head_dim 64), when H is a multiple of u and
//    H/u >= N; otherwise one head at a time and a misaligned Wo slice is re-encoded. With
//    more nodes than heads (N > H) the smallest shares get no head: such a node computes no
//    attention (no Wq/Wk/Wv rows, no KV cache, an empty Wo column slice whose partial is
//    zero; in exact mode its Wo output rows from the gathered attention output).
//  * A node computes every KV head its query heads read (kv head of h = h / (H/G)); a KV
//    head shared by two nodes' ranges is computed (and cached) by both.
//  * Wq, Wk, Wv, gate, up and output are split by rows (never re-encoded). Wo is split by
//    input columns [h0*d, h1*d), down by input columns [f0, f1): a slice whose column range
//    does not fall on its type's block boundaries is re-encoded to Q8_0 (or F16 when not
//    even 32-aligned); see slice_type().
//  * F is split by capacity in units of the down matrix's block size where F/unit >= N,
//    else in units of 32, else of 1; in exact mode (down cut by rows) a unit is also
//    skipped when it would put more than 10% of F off the shares (F = 768 on 2 nodes).
//    The vocabulary (output rows) is split by capacity.
//  * The token embedding stays whole on node 0 (the root). Norms are replicated.
//
// Deliberately not here: which bytes go on which socket (net/), executing a slice
// (runtime/), reading GGUF (the CLI builds a ModelShape from a file).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/types.h"
#include "util/status.h"

namespace plan {

// Types of one layer's matrices (rows x cols in brackets, ggml ne = [cols, rows]).
struct MatrixTypes {
  tensor::Type wq = tensor::Type::F32;    // [H*d rows][D]
  tensor::Type wk = tensor::Type::F32;    // [G*d rows][D]
  tensor::Type wv = tensor::Type::F32;    // [G*d rows][D]
  tensor::Type wo = tensor::Type::F32;    // [D rows][H*d]
  tensor::Type gate = tensor::Type::F32;  // [F rows][D]
  tensor::Type up = tensor::Type::F32;    // [F rows][D]
  tensor::Type down = tensor::Type::F32;  // [D rows][F]
};

struct ModelShape {
  int dim = 0;         // D
  int n_layers = 0;    // L
  int n_heads = 0;     // H query heads
  int n_kv_heads = 0;  // G KV heads
  int head_dim = 0;    // d
  int n_ff = 0;        // F
  int n_vocab = 0;     // V
  MatrixTypes layer;                // every layer's matrix types...
  std::vector<MatrixTypes> layers;  // ...unless given per layer (size L; mixed files like Q4_K_M)
  tensor::Type output = tensor::Type::F32;      // [V rows][D]
  tensor::Type token_embd = tensor::Type::F32;  // [V rows][D], root only
  bool qkv_bias = false;  // qwen2: F32 biases [H*d], [G*d], [G*d], sliced with their rows
  bool qk_norm = false;   // qwen3: F32 [d] per-head norms of Q and K, replicated
  int n_swa = 0;          // gemma3: sliding window (positions); 0: none
  int n_swa_layers = 0;   // layers that attend to (and cache) only the window
  // MoE (qwen3moe): every layer's MLP is n_expert experts of n_ff rows (gate, up, down have
  // the experts' types), a node holds its ff share of every expert and reads n_expert_used
  // of them per token; the router [n_expert rows][D] is replicated.
  int n_expert = 0, n_expert_used = 0;
  tensor::Type router = tensor::Type::F32;
  std::string name;       // for printouts

  const MatrixTypes& types(int l) const { return layers.empty() ? layer : layers[l]; }
  int group() const { return n_heads / n_kv_heads; }  // query heads per KV head
};

// Sets every matrix type (all layers, output and embedding) to t.
void set_all_types(ModelShape& s, tensor::Type t);

// Checks the shape is positive, H a multiple of G, and every matrix's row length a
// multiple of its type's block size; the message names the offending field.
util::Status validate(const ModelShape& s);

struct Range {
  int begin = 0, end = 0;  // [begin, end)
  int size() const { return end - begin; }
  bool contains(int i) const { return i >= begin && i < end; }
  bool operator==(const Range&) const = default;
};

// One node's share of every tensor. Node 0 is the root.
struct NodeSlice {
  double share = 0;     // capacity / sum of capacities
  Range heads;          // query heads [h0, h1): Wq rows [h0*d, h1*d), Wo cols [h0*d, h1*d); empty when N > H
  Range kv_heads;       // KV heads computed here: Wk/Wv rows [g0*d, g1*d), KV cache heads
  int n_kv_shared = 0;  // of kv_heads, how many another node also computes (duplicated)
  bool kv_first_shared = false, kv_last_shared = false;  // which ends are duplicated
  Range ff;             // gate/up rows and down cols [f0, f1)
  double ff_share = 0;  // the share ff is dealt by: `share`, unless some node has no query
                        // heads (then larger where attention's weights are fewer; make_plan)
  Range vocab;          // output rows [v0, v1): this node's logits range
  int n_wo_reencoded = 0;    // layers whose Wo slice is re-encoded (see slice_type)
  int n_down_reencoded = 0;  // layers whose down slice is re-encoded
  bool holds_embedding = false;  // root: token_embd whole
  // Exact mode (model::Partition): Wo and down cut by output rows [r0, r1) instead of
  // columns; their inputs are gathered quantized when every node's column range falls on
  // whole blocks of the activation type, else as F32.
  bool exact = false;
  Range rows;
  bool gather_q8_att = false, gather_q8_ff = false;
};

struct Plan {
  ModelShape shape;
  std::vector<NodeSlice> nodes;
  int head_unit = 1;  // heads dealt in multiples of this
  int ff_unit = 1;    // F dealt in multiples of this
  std::vector<std::string> notes;  // human-readable remarks (re-encodes, duplication)
  int n_nodes() const { return static_cast<int>(nodes.size()); }
};

// Plans N = capacities.size() nodes (empty: one node). Capacities must be finite and > 0;
// only their ratios matter. Errors: invalid shape, N > min(F, V, D) (each node needs an
// MLP row, a vocabulary row and an output row; query heads do not limit N).
// exact: Wo and down are cut by rows (NodeSlice::exact), nothing is re-encoded.
util::Expected<Plan> make_plan(const ModelShape& shape, std::vector<double> capacities, bool exact = false);

// The type a node stores for a column slice [c0, c1) of a matrix of type t: t itself when
// both ends fall on t's block boundaries, else Q8_0 when both are multiples of 32, else
// F16. (Float types are never re-encoded.)
tensor::Type slice_type(tensor::Type t, int64_t c0, int64_t c1);

// Largest-remainder apportionment of `total` units over capacities, each node getting at
// least min_each (CHECKed feasible). Ties go to the lower index. Sum == total.
std::vector<int> apportion(int total, const std::vector<double>& capacities, int min_each = 1);

// Contiguous ranges covering [0, total) in multiples of `unit` (total % unit == 0), sized
// by apportion(total / unit, capacities, min_each).
std::vector<Range> split_ranges(int total, int unit, const std::vector<double>& capacities,
                                int min_each = 1);

// KV heads read by query heads r under group size g: [r.begin/g, (r.end-1)/g + 1); empty
// (at r.begin/g) when r is.
Range kv_range(Range heads, int group);

// Exact bytes of the weights a node reads per token (its slices of every layer incl.
// re-encoded ones; of an MoE layer the router and n_expert_used experts;
// re-encoded ones, its output rows, replicated F32 norms and biases). Excludes the
// token embedding (see embedding_bytes).
uint64_t weight_bytes(const Plan& p, int node);
// Bytes of the weights a node holds: weight_bytes, with every expert of an MoE layer
// counted (n_expert, not n_expert_used).
uint64_t resident_bytes(const Plan& p, int node);
// Bytes of the whole token embedding (held by the root only; one row is read per token).
uint64_t embedding_bytes(const ModelShape& s);
// KV cache bytes of one request's 1000 tokens: 2 (K and V) * kv heads * d * bytes(kv_type) *
// rows, rows = 1000 per full-attention layer and, per sliding-window layer, its ring
// (util::swa_ring_rows for steps of max_batch rows, at most 1000), as model::KvCache holds them.
uint64_t kv_bytes_per_1k(const Plan& p, int node, tensor::Type kv_type = tensor::Type::F16, int max_batch = 1);

// Text of the plan alone ("node 0: heads [0,16) ..."), used by format_plan and tests.
std::string describe_slices(const Plan& p);

}  // namespace plan
