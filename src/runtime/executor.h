// executor.h: one node's part of a step, the same code on the root and on every worker:
// the forward pass of the step's segments (embedded rows in), then per segment what the
// root asked for: penalties applied to its last row and the local top-k candidates with
// the range's log-sum-exp, or per scored row its (max, sum of exp, target logit). It
// counts compute and sync time. Deliberately no I/O: the root (stepping.cc) and the worker
// loop (worker.cc) move the messages and add the byte counters of their transport.
#pragma once
#include <vector>

#include "model/backend.h"
#include "model/transformer.h"
#include "runtime/auto_collective.h"
#include "runtime/protocol.h"
#include "util/status.h"

namespace runtime {

class NodeExecutor {
 public:
  // backend: what runs the forward pass (null: the CPU on pool).
  NodeExecutor(const model::Config& cfg, const model::Weights& w, const model::Partition& part,
               util::ThreadPool& pool, const model::RunConfig& rc, AutoCollective* coll,
               std::unique_ptr<model::Backend> backend = nullptr);

  // x: [rows][dim] the embedded rows of s's segments (checked by check_step_fits).
  util::Expected<StepReply> run(const Step& s, const float* x);

  const model::Transformer& model() const { return tf_; }
  void embed(int32_t token, float* x) const { tf_.embed(token, x); }
  const NodeCounters& counters() const { return counters_; }

 private:
  const model::Partition part_;
  AutoCollective* coll_;  // null on one node
  model::Transformer tf_;
  std::vector<model::Segment> segs_;
  std::vector<float> logits_;  // [rows asked for][n_vocab local]
  NodeCounters counters_;
};

}  // namespace runtime
