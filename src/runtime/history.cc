// history.cc: a KV slot's history and its replay (history.h).
#include "runtime/history.h"

namespace runtime {

void SlotHistory::truncate(int pos) {
  while (!segs_.empty() && segs_.back().pos >= pos) {
    tokens_.resize(segs_.back().offset);
    segs_.pop_back();
  }
  if (!segs_.empty() && segs_.back().rowwise && segs_.back().pos + segs_.back().n > pos) {
    segs_.back().n = pos - segs_.back().pos;
    tokens_.resize(segs_.back().offset + size_t(segs_.back().n));
  }
}

int SlotHistory::end() const { return segs_.empty() ? 0 : segs_.back().pos + segs_.back().n; }

void SlotHistory::add(int pos, std::span<const int32_t> tokens, bool rowwise) {
  truncate(pos);
  segs_.push_back({pos, int(tokens.size()), tokens_.size(), rowwise});
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
}

// Segments that ran in vec_dot order (transformer.h's model::lane_ordered is false: fewer
// than kLaneMinRows rows, or every segment without lane order) and follow each other are
// merged into one rowwise segment.
util::Status replay(const std::vector<SlotHistory>& history, int max_rows, const StepRun& run, ReplayCount* count) {
  const auto rowwise = [](const SlotHistory::Seg& g) { return g.rowwise; };
  std::vector<size_t> next(history.size(), 0);
  std::vector<int32_t> tokens;  // of one replay step
  for (;;) {
    Step s;
    tokens.clear();
    for (size_t slot = 0; slot < history.size(); ++slot) {
      const SlotHistory& h = history[slot];
      const auto& segs = h.segs();
      if (next[slot] >= segs.size()) continue;
      const int room = max_rows - int(tokens.size());
      if (segs[next[slot]].n > room) continue;  // next step (every segment fits an empty one)
      StepSegment seg;
      seg.slot = int(slot);
      seg.pos = segs[next[slot]].pos;
      seg.rowwise = rowwise(segs[next[slot]]);
      do {
        const auto t = h.tokens(segs[next[slot]]);
        tokens.insert(tokens.end(), t.begin(), t.end());
        seg.n += int(t.size());
        ++next[slot];
      } while (seg.rowwise && next[slot] < segs.size() && rowwise(segs[next[slot]]) &&
               segs[next[slot]].pos == seg.pos + seg.n && seg.n + segs[next[slot]].n <= room);
      s.segs.push_back(std::move(seg));
    }
    if (s.segs.empty()) return util::ok_status();
    RETURN_IF_ERROR(run(s, tokens));
    ++count->steps;
    count->tokens += int(tokens.size());
  }
}

}  // namespace runtime
