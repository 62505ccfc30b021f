// executor.cc: a node's step (see executor.h).
#include "runtime/executor.h"

#include "model/cpu_backend.h"
#include "model/logit_rows.h"
#include "runtime/scoring.h"
#include "sampler/distributed.h"
#include "util/timer.h"

namespace runtime {

NodeExecutor::NodeExecutor(const model::Config& cfg, const model::Weights& w, const model::Partition& part,
                           util::ThreadPool& pool, const model::RunConfig& rc, AutoCollective* coll,
                           std::unique_ptr<model::Backend> backend)
    : part_(part),
      coll_(coll),
      tf_(cfg, w, backend ? std::move(backend) : std::make_unique<model::CpuBackend>(cfg, w, pool, rc, part), rc,
          part, coll) {}

util::Expected<StepReply> NodeExecutor::run(const Step& s, const float* x) {
  util::Timer timer;
  const double sync0 = coll_ ? coll_->seconds() : 0;
  segs_.clear();
  size_t out_rows = 0;
  for (const StepSegment& g : s.segs) {
    if (!g.allowed.empty() && g.allowed.size() * 64 < size_t(part_.vocab_begin) + size_t(part_.n_vocab))
      return util::Status::error("a step's token mask is shorter than the vocabulary");
    const model::Logits l = g.want == Want::kCandidates ? (g.every_row ? model::Logits::kAll : model::Logits::kLast)
                            : g.want == Want::kScores   ? model::Logits::kAll
                                                        : model::Logits::kNone;
    segs_.push_back({g.slot, g.pos, g.n, l, g.rowwise, g.blocks_from, g.blocks});
    out_rows += size_t(model::logit_rows(segs_.back()).count);
  }
  const size_t nv = size_t(part_.n_vocab);
  if (logits_.size() < out_rows * nv) logits_.resize(out_rows * nv);
  RETURN_IF_ERROR(tf_.kv_copies(s.kv_copies));
  RETURN_IF_ERROR(tf_.forward_batch(segs_.data(), int(segs_.size()), x, out_rows ? logits_.data() : nullptr));
  StepReply rep;
  float* l = logits_.data();
  for (const StepSegment& g : s.segs) {
    if (g.want == Want::kCandidates) {
      sampler::Params sp;
      sp.repeat_penalty = g.repeat_penalty;
      sp.presence_penalty = g.presence_penalty;
      sp.frequency_penalty = g.frequency_penalty;
      for (const sampler::PenaltyCounts& counts : g.penalties) {  // one per sampled row
        sampler::apply_penalty_counts(sp, counts, l, part_.vocab_begin, part_.n_vocab);
        sampler::apply_logit_bias(g.logit_bias, l, part_.vocab_begin, part_.n_vocab);
        auto lc = sampler::local_candidates(l, part_.vocab_begin, part_.n_vocab, g.k,
                                            g.allowed.empty() ? nullptr : &g.allowed);
        rep.sampled.push_back({std::move(lc.cand), lc.lse});
        l += nv;
      }
    } else if (g.want == Want::kScores) {
      for (int b = 0; b < g.n; ++b, l += nv)
        if (g.targets[b] >= 0) rep.scores.push_back(local_row_score(l, part_.vocab_begin, part_.n_vocab, g.targets[b]));
    }
  }
  const double sync = coll_ ? coll_->seconds() - sync0 : 0;
  counters_.sync_s += sync;
  counters_.compute_s += timer.seconds() - sync;
  counters_.steps++;
  counters_.rows += uint64_t(s.rows_total());
  rep.counters = counters_;
  return rep;
}

}  // namespace runtime
