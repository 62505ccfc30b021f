// logit_rows.h: which rows of a batch's segment get logits, the one rule every backend
// (which rows it normalizes and multiplies by the output matrix) and the runtime's
// executor (how many rows of logits it makes room for) follow.
#pragma once
#include "model/transformer.h"

namespace model {

// count rows from row first of the segment: every row (kAll), the last (kLast), none
// (kNone; first is then the last row, count 0).
struct LogitRows {
  int first = 0, count = 0;
};
inline LogitRows logit_rows(const Segment& g) {
  const int first = g.logits == Logits::kAll ? 0 : g.n - 1;
  return {first, g.logits == Logits::kNone ? 0 : g.n - first};
}

}  // namespace model
