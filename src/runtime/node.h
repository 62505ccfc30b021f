// node.h: one node of a session, built the same way on the root (runtime/forming.cc), on a
// worker (runtime/worker.cc) and on an MPI rank (which runs the worker's session): from the
// session's Setup, its collective over the cluster's transport (none on one node), its
// backend (`--device`'s factory, or the CPU on the pool) and the NodeExecutor that runs its
// part of every step. Also the one memory-fit rule (weights + KV slots against this
// machine's memory) that the root, a worker and `serve`/`chat` each apply with their own
// words.
// Deliberately no I/O: the callers move the messages.
#pragma once
#include <memory>
#include <string>

#include "model/backend.h"
#include "model/kv_cache.h"
#include "runtime/auto_collective.h"
#include "runtime/executor.h"
#include "runtime/huge_pages.h"
#include "runtime/protocol.h"
#include "runtime/slicer.h"
#include "util/thread_pool.h"

namespace runtime {

struct Node {
  std::unique_ptr<PlacedWeights> placed;  // a CPU node's weights in huge pages (huge_pages.h), or null: exec's
  std::unique_ptr<AutoCollective> coll;  // null on one node
  std::unique_ptr<NodeExecutor> exec;    // runs on coll: reset first
  void reset() {
    exec.reset();
    coll.reset();
    placed.reset();
  }
};

// s: the session (its slice gives the collective's exact rows); cfg and slice: the model
// the node runs (they must outlive the node); t: the cluster's transport, or null on one
// node; backend: empty for the CPU on pool.
util::Expected<Node> make_node(const Setup& s, const model::Config& cfg, const NodeModel& slice, net::Transport* t,
                               util::ThreadPool& pool, const model::BackendFactory& backend);

// What n_slots KV slots of ctx positions (or, kv_blocks > 0, a pool of kv_blocks blocks)
// over kv_heads KV heads, plus weight_bytes of weights, need, against `usable` of this
// machine's physical memory. Sliding-window layers count their rings (model::kv_layer_ctx
// for steps of max_batch rows), one per slot, as model::KvCache allocates them. host_blocks:
// the host KV cache's entries (--cache-ram, RunConfig::kv_host_blocks) at their full size on
// these KV heads, what the node comes to hold when the root fills it.
struct MemoryFit {
  double kv_bytes = 0, host_bytes = 0, need = 0, have = 0;  // have: physical memory (all of it)
  bool fits = true;
};
MemoryFit memory_fit(const model::Config& c, int kv_heads, model::KvType kv_type, int ctx, int n_slots, int max_batch,
                     double weight_bytes, double usable = 1.0, int kv_blocks = 0, int host_blocks = 0);
// The same for a node that runs rc (its pool, rings and host cache) over kv_heads.
MemoryFit memory_fit(const model::Config& c, int kv_heads, const model::RunConfig& rc, double weight_bytes,
                     double usable = 1.0);

}  // namespace runtime
