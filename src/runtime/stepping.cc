// stepping.cc: building, moving and merging the root's step (stepping.h, Cluster::execute).
#include "runtime/stepping.h"

#include <algorithm>
#include <cstring>

namespace runtime {

using util::Expected;
using util::Status;

Status step_failed(const Status& st, bool workers) {
  if (!workers) return st.wrap("", " (the model cannot go on; start it again)");
  return st.wrap("", " (the cluster cannot go on; check that worker process and its network, "
                     "then start the root again)");
}

namespace {

// One sequence's segment: what to return, and for a draw the sampler's penalties per
// sampled row, its logit bias and the token mask.
Status segment_of(const Cluster::SeqStep& q, const model::Config& cfg, StepSegment* g) {
  g->slot = q.seq->slot();
  g->pos = q.seq->n_past();
  g->n = int(q.tokens.size());
  g->want = q.want;
  g->rowwise = q.rowwise;
  if (q.want == Want::kScores) {
    g->targets.assign(q.targets.begin(), q.targets.end());
    if (std::none_of(g->targets.begin(), g->targets.end(), [](int32_t t) { return t >= 0; })) g->want = Want::kNothing;
  }
  if (q.want != Want::kCandidates) return util::ok_status();
  sampler::DistributedSampler& smp = q.seq->sampler();
  g->k = smp.k_asked();
  g->every_row = q.drafts > 0;
  g->rowwise = q.rowwise || q.drafts > 0;
  for (size_t r = g->every_row ? 1 : q.tokens.size(); r <= q.tokens.size(); ++r)
    g->penalties.push_back(sampler::penalty_counts(smp.params(), q.seq->tokens(), q.tokens.first(r)));
  g->repeat_penalty = smp.params().repeat_penalty;
  g->presence_penalty = smp.params().presence_penalty;
  g->frequency_penalty = smp.params().frequency_penalty;
  g->logit_bias = smp.params().logit_bias;
  if (q.allowed) {
    if (q.allowed->size() * 64 < size_t(cfg.n_vocab) ||
        std::all_of(q.allowed->begin(), q.allowed->end(), [](uint64_t w) { return w == 0; }))
      return Status::error("internal: a token mask that allows nothing");
    g->allowed = *q.allowed;
  }
  return util::ok_status();
}

// What a sequence asks for that no step may carry.
Status check_seq(const Cluster::SeqStep& q, const model::Config& cfg) {
  CHECK(q.seq != nullptr && !q.tokens.empty());
  CHECK(q.want != Want::kScores || q.targets.size() == q.tokens.size());
  CHECK(q.drafts == 0 || (q.want == Want::kCandidates && q.tokens.size() == size_t(q.drafts) + 1));
  CHECK(!q.allowed || (q.want == Want::kCandidates && q.drafts == 0));
  for (int32_t t : q.tokens)
    if (t < 0 || t >= cfg.n_vocab) return Status::error("token id " + std::to_string(t) + " is outside the vocabulary");
  for (int32_t t : q.targets)
    if (t >= cfg.n_vocab) return Status::error("target id " + std::to_string(t) + " is outside the vocabulary");
  return util::ok_status();
}

}  // namespace

Expected<Step> build_step(const std::vector<Cluster::SeqStep>& batch, const model::Config& cfg, int ctx, int n_slots,
                          int max_rows, std::vector<int32_t>* tokens) {
  Step s;
  tokens->clear();
  for (const Cluster::SeqStep& q : batch) {
    RETURN_IF_ERROR(check_seq(q, cfg));
    tokens->insert(tokens->end(), q.tokens.begin(), q.tokens.end());
    StepSegment g;
    RETURN_IF_ERROR(segment_of(q, cfg, &g));
    s.segs.push_back(std::move(g));
  }
  const size_t rows = tokens->size();
  // The checks a worker makes of the step it receives (protocol.h), in the root's words.
  switch (rows == 0 ? StepFit::kRows : step_fit(s.segs, int(rows), ctx, n_slots, max_rows)) {
    case StepFit::kFits: return s;
    case StepFit::kRows:
      return Status::error("internal: a step of " + std::to_string(rows) + " rows (1.." + std::to_string(max_rows) +
                           ")");
    case StepFit::kSlotOrContext:
      for (const StepSegment& g : s.segs)
        if (g.slot < 0 || g.slot >= n_slots) return Status::error("internal: no such KV slot");
      return Status::error("the sequence would pass the context of " + std::to_string(ctx) + " tokens");
    case StepFit::kSlotTwice: return Status::error("internal: a KV slot appears twice in a step");
  }
  return s;
}

Expected<std::vector<Cluster::SeqResult>> merge_step(const std::vector<Cluster::SeqStep>& batch, const Step& s,
                                                     StepReply& mine, std::vector<StepReply>& replies) {
  std::vector<Cluster::SeqResult> out(batch.size());
  size_t si = 0, ri = 0;  // sampled segment, scored row
  std::vector<std::vector<sampler::Candidate>> parts;
  std::vector<float> lses;
  std::vector<RowScore> pieces;
  for (size_t i = 0; i < batch.size(); ++i) {
    const StepSegment& g = s.segs[i];
    if (g.want == Want::kCandidates) {
      const Cluster::SeqStep& q = batch[i];
      const sampler::DistributedSampler& smp = q.seq->sampler();
      bool drawing = true;  // until a guess differs from the token drawn before it
      for (int row = g.every_row ? 0 : g.n - 1; row < g.n; ++row, ++si) {
        if (!drawing) continue;
        parts.assign(1, std::move(mine.sampled[si].cand));
        lses.assign(1, mine.sampled[si].lse);
        for (auto& rep : replies) {
          parts.push_back(std::move(rep.sampled[si].cand));
          lses.push_back(rep.sampled[si].lse);
        }
        const int32_t t = smp.sample(parts, int64_t(g.pos) + row + 1);  // the position t takes
        out[i].tokens.push_back(t);
        if (smp.params().top_logprobs >= 0)
          out[i].logprobs.push_back(sampler::logprobs(parts, sampler::merge_lse(lses), t, smp.params().top_logprobs));
        drawing = row + 1 < g.n && q.tokens[size_t(row + 1)] == t;
      }
    } else if (g.want == Want::kScores) {
      for (int32_t t : g.targets) {
        if (t < 0) continue;
        pieces.assign(1, mine.scores[ri]);
        for (auto& rep : replies) pieces.push_back(rep.scores[ri]);
        auto v = combine_row_scores(pieces);
        if (!v) return step_failed(v.status());
        out[i].nll.push_back(*v);
        ++ri;
      }
    }
  }
  return out;
}

// --- Cluster's step I/O ---------------------------------------------------------------------

Status Cluster::send_step(std::span<const int32_t> tokens, Step& s) {
  if (!t_) return util::ok_status();
  const model::Matrix& embd = m_.weights.token_embd;
  rows_.resize(embd.row_bytes * tokens.size());
  for (size_t b = 0; b < tokens.size(); ++b)
    std::memcpy(rows_.data() + embd.row_bytes * b, embd.row(tokens[b]), embd.row_bytes);
  s.embd_type = embd.type;
  s.rows = rows_;
  const std::vector<uint8_t> payload = encode_message(s);
  for (int r = 1; r < t_->size(); ++r) RETURN_IF_ERROR(t_->send(r, msg_type(Msg::kStep), payload, o_.step_timeout_s));
  return util::ok_status();
}

Status Cluster::collect_replies(std::vector<StepReply>* replies) {
  replies->clear();
  if (!t_) return util::ok_status();
  for (int r = 1; r < t_->size(); ++r) {
    auto m = t_->recv_expect(r, msg_type(Msg::kStepReply), o_.step_timeout_s);
    if (!m) return m.status();
    auto rep = parse_message<StepReply>(m->payload, t_->peer_name(r));
    if (!rep) return rep.status().at_rank(r);
    nodes_[r].counters = rep->counters;
    replies->push_back(std::move(*rep));
  }
  const net::ByteCounters bc = t_->counters();
  nodes_[0].counters.bytes_sent = bc.bytes_sent;
  nodes_[0].counters.bytes_received = bc.bytes_received;
  return util::ok_status();
}

Expected<StepReply> Cluster::execute(Step& s, std::span<const int32_t> tokens, std::vector<StepReply>* replies) {
  for (StepSegment& g : s.segs) g.blocks_from = blocks_.entries(g.slot, g.pos, g.n, &g.blocks);
  blocks_.take_copies(&s.kv_copies);  // before the rows: the blocks they take may be saved first
  RETURN_IF_ERROR(send_step(tokens, s));
  NodeExecutor& exec = *node_.exec;
  const int D = m_.config.dim;
  x_.resize(tokens.size() * D);
  for (size_t b = 0; b < tokens.size(); ++b) exec.embed(tokens[b], &x_[D * b]);
  auto mine = exec.run(s, x_.data());
  if (!mine) return mine.status();
  nodes_[0].counters.compute_s = exec.counters().compute_s;
  nodes_[0].counters.sync_s = exec.counters().sync_s;
  nodes_[0].counters.steps = exec.counters().steps;
  nodes_[0].counters.rows = exec.counters().rows;
  RETURN_IF_ERROR(collect_replies(replies));
  for (size_t r = 0; r < replies->size(); ++r)
    if ((*replies)[r].sampled.size() != mine->sampled.size() || (*replies)[r].scores.size() != mine->scores.size())
      return Status::error(t_->peer_name(int(r) + 1) + " answered a step with the wrong number of candidate lists "
                           "or row scores", Status::Code::kProtocol, int(r) + 1);
  return mine;
}

}  // namespace runtime
