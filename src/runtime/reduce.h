// reduce.h: the model's two reduce points per layer (model::Collective) in both sync
// modes, over two primitives a transport provides (an all-reduce of floats and an
// all-gather of row segments):
//  * partial sums (`--sync-type q8_0|f16|f32`): Wo and down are cut by input columns;
//    each node multiplies its columns and the partial outputs are all-reduced.
//  * exact (`--sync-type exact`): Wo and down are cut by output rows -- every node holds
//    rows [row_begin, row_begin + n_rows) with all their columns (ExactRows). The inputs
//    (attention output, MLP hidden) are all-gathered -- as the very bytes one node would
//    quantize them to when every node's range falls on whole blocks (q8_*), else as F32 --
//    and the output rows are all-gathered as F32. Every output element is then computed
//    by the same per-row dot product as on one node, so N nodes give bit-identical logits
//    to one node, at the price of four gathers per layer instead of two all-reduces.
//  An MoE layer's down (LocalLinear::out_rows() < rows()): the inputs are every (token,
//  picked expert) row, the output one row per token (the local product weights and sums
//  the experts), so the same two reduce points carry the same bytes as a dense layer's,
//  plus the k-fold hidden rows in exact mode's input gather.
// Deliberately no transport here: AutoCollective (the cluster's) and the tests' in-process
// NetCollective supply the primitives.
#pragma once
#include <cstdint>
#include <vector>

#include "model/parallel.h"
#include "plan/plan.h"

namespace runtime {

struct ExactRows {
  bool on = false;
  int row_begin = 0, n_rows = 0;   // Wo and down rows held here
  bool q8_att = false, q8_ff = false;  // gather the quantized inputs of Wo / down
  static ExactRows of(const plan::NodeSlice& s) {
    return {s.exact, s.rows.begin, s.rows.size(), s.gather_q8_att, s.gather_q8_ff};
  }
};

class ReduceCollective : public model::Collective {
 public:
  // dim: values per row of a reduce point's output (the model's dim).
  ReduceCollective(const ExactRows& e, int dim) : e_(e), dim_(dim) {}
  util::Status reduce(model::ReducePoint at, const model::Matrix& w, const float* x, int col0, int cols, float* y,
                      model::LocalLinear& local) override;

  // The primitives: sum x[0..n) over all nodes in place (bit-identical on every node);
  // buf is n_rows rows of row_bytes, this node filled [offset, offset + len) of each, and
  // afterwards every row is whole on every node.
  virtual util::Status all_reduce(float* x, size_t n) = 0;
  virtual util::Status all_gather_rows(uint8_t* buf, int n_rows, size_t row_bytes, size_t offset, size_t len) = 0;

 private:
  ExactRows e_;
  int dim_;
  std::vector<uint8_t> gather_;  // exact: the gathered input rows (quantized or F32)
};

}  // namespace runtime
