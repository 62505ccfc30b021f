// scoring.cc: per-node row reductions and their exact combination (see scoring.h).
#include "runtime/scoring.h"

#include <algorithm>
#include <cmath>

namespace runtime {

RowScore local_row_score(const float* logits, int vocab_begin, int n_vocab, int32_t target) {
  RowScore r;
  r.max = *std::max_element(logits, logits + n_vocab);
  for (int i = 0; i < n_vocab; ++i) r.sum += std::exp(logits[i] - r.max);
  r.owns = target >= vocab_begin && target < vocab_begin + n_vocab;
  if (r.owns) r.target = logits[target - vocab_begin];
  return r;
}

util::Expected<double> combine_row_scores(std::span<const RowScore> parts) {
  if (parts.empty()) return util::Status::error("no node scored the row");
  float mx = parts[0].max;
  for (const RowScore& p : parts) mx = std::max(mx, p.max);
  double sum = 0;
  int owners = 0;
  float target = 0;
  for (const RowScore& p : parts) {
    // exp(0) == 1 exactly, so one node's sum is used as is (llama.cpp's arithmetic).
    sum += p.max == mx ? p.sum : p.sum * std::exp(double(p.max) - double(mx));
    if (p.owns) ++owners, target = p.target;
  }
  if (owners != 1)
    return util::Status::error(std::to_string(owners) + " nodes claim the target token (expected exactly one)");
  return std::log(sum) - double(target - mx);
}

}  // namespace runtime
