// scoring.h: the log-likelihood of target tokens when each node holds only a range of the
// vocabulary's logits (perplexity across nodes without gathering logits). Each node
// reduces a row to its local (max, sum of exp(logit - max)) and, if it owns the target,
// the target's logit; the root combines the pieces exactly as llama.cpp's perplexity
// computes -log p on whole rows: float max, double sum of expf, log(sum) - (logit - max).
// Deliberately no I/O: protocol.* carries RowScore, stepping.cc and worker.cc call these.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "util/status.h"

namespace runtime {

struct RowScore {
  float max = 0;          // largest local logit
  double sum = 0;         // sum over the local range of exp(logit - max)
  float target = 0;       // the target's logit, when owned
  bool owns = false;      // the target is in this node's range
};

// Row of n_vocab logits for ids [vocab_begin, vocab_begin + n_vocab).
RowScore local_row_score(const float* logits, int vocab_begin, int n_vocab, int32_t target);

// -log p(target) from every node's piece of one row (exactly one must own the target).
util::Expected<double> combine_row_scores(std::span<const RowScore> parts);

}  // namespace runtime
