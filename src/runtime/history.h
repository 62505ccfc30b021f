// history.h: what the root keeps to rebuild its workers' KV slots after a re-forming
// (cluster.h, recovery): every step's segments of each slot (SlotHistory), and the replay
// that evaluates them again, the slots side by side, in steps of at most max_rows rows.
// Deliberately no I/O: replay runs each step through the caller's function
// (Cluster::execute).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "runtime/protocol.h"
#include "util/status.h"

namespace runtime {

// Every step's segments of one KV slot since the cluster started, pruned to those whose
// rows can still be read: the KV rows of a slot are a function of this history alone
// (transformer.h: a row depends only on its own segment and slot), so evaluating the same
// segments again, in order, rebuilds the slot bit for bit on any node count. A segment at
// position p makes every earlier segment starting at >= p dead, so the list stays sorted
// by position; one that starts before p and reaches past it is kept whole.
// A rowwise segment (vec_dot order, model::Segment::rowwise) that reaches past p is cut
// at p instead: its rows do not depend on how many there are (verified drafts, rejected
// in part, leave only the accepted rows so).
class SlotHistory {
 public:
  struct Seg {
    int pos = 0, n = 0;
    size_t offset = 0;  // into tokens()
    bool rowwise = false;
  };
  void add(int pos, std::span<const int32_t> tokens, bool rowwise = false);
  // The log was cut to pos (its rows from pos on are to be written again): segments at >=
  // pos go, a rowwise one reaching past pos is cut, a lane-order one is kept whole (so a
  // replay may write rows up to end() > pos: the slot's block table must reach that far).
  void truncate(int pos);
  int end() const;  // one past the last position a replay writes
  const std::vector<Seg>& segs() const { return segs_; }
  std::span<const int32_t> tokens(const Seg& g) const { return {tokens_.data() + g.offset, size_t(g.n)}; }
  size_t n_tokens() const { return tokens_.size(); }

 private:
  std::vector<Seg> segs_;
  std::vector<int32_t> tokens_;
};

// What a replay did.
struct ReplayCount {
  int tokens = 0, steps = 0;
};

// Every slot's history again, the slots side by side, each step through run (a Step and
// its rows' tokens in order). Consecutive rowwise segments are merged into one (the same
// bits in far fewer steps than the decode steps they came from); lane-order segments run
// as they ran. The first failure of run is returned.
using StepRun = std::function<util::Status(Step& s, std::span<const int32_t> tokens)>;
util::Status replay(const std::vector<SlotHistory>& history, int max_rows, const StepRun& run, ReplayCount* count);

}  // namespace runtime
