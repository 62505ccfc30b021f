// speculative.cc: guesses and how many of them to verify (see speculative.h).
#include "runtime/speculative.h"

#include <algorithm>
#include <cmath>

#include "util/timer.h"

namespace runtime {

std::vector<int32_t> lookup_draft(std::span<const int32_t> text, int max_tokens, int max_ngram, int min_ngram) {
  const int64_t L = int64_t(text.size());
  for (int n = max_ngram; n >= min_ngram && max_tokens > 0; --n) {
    if (L <= n) continue;
    const auto suffix = text.subspan(size_t(L - n));
    for (int64_t i = L - n - 1; i >= 0; --i) {  // the latest earlier occurrence
      if (!std::equal(suffix.begin(), suffix.end(), text.begin() + i)) continue;
      const int64_t from = i + n, to = std::min(L, from + max_tokens);
      return {text.begin() + from, text.begin() + to};
    }
  }
  return {};
}

void StepCost::add(int rows, double seconds) {
  constexpr double kDecay = 0.95;
  w_ = w_ * kDecay + 1;
  sx_ = sx_ * kDecay + rows;
  sy_ = sy_ * kDecay + seconds;
  sxx_ = sxx_ * kDecay + double(rows) * rows;
  sxy_ = sxy_ * kDecay + rows * seconds;
}

double StepCost::per_row() const {
  if (w_ <= 0) return 0;
  const double mx = sx_ / w_, my = sy_ / w_, var = sxx_ / w_ - mx * mx;
  if (var < 0.1) return prior_ratio_ * my / (1 + prior_ratio_ * mx);  // b = ratio * a, a + b * mx = my
  return std::max(0.0, (sxy_ / w_ - mx * my) / var);
}

double StepCost::per_step() const {
  if (w_ <= 0) return 0;
  return std::max(0.0, sy_ / w_ - per_row() * sx_ / w_);
}

int choose_guesses(double acceptance, double step_s, double row_s, double guess_s, int max) {
  int best = 0;
  double best_rate = 1 / std::max(step_s, 1e-9), expected = 1, term = 1;
  for (int k = 1; k <= max; ++k) {
    term *= acceptance;
    expected += term;
    const double rate = expected / std::max(step_s + k * (row_s + guess_s), 1e-9);
    if (rate > best_rate * 1.02) {  // a guess must pay for itself clearly
      best_rate = rate;
      best = k;
    }
  }
  return best;
}

DraftModel::DraftModel(Cluster& draft) : cl_(draft) {
  for (int s = 0; s < draft.n_slots(); ++s) seqs_.push_back(std::make_unique<Sequence>(s, draft.n_vocab()));
}

void DraftModel::start(int slot, const sampler::Params& p) {
  sampler::Params q = p;
  q.top_logprobs = -1;
  seqs_[size_t(slot)]->set_sampling(q);
}

util::Status DraftModel::draft(std::vector<Request>& reqs) {
  // The draft's time per guess: steps of a few rows only (a first catch-up with a whole
  // prompt would count as one guess otherwise).
  const auto timed = [&](const std::vector<Cluster::SeqStep>& b, double seconds) {
    int rows = 0;
    for (const auto& q : b) rows += int(q.tokens.size());
    if (rows > int(b.size()) + 3) return;
    step_s_ = step_s_ == 0 ? seconds : 0.8 * step_s_ + 0.2 * seconds;
  };
  // First each draft sequence catches up with its target (the tokens it lacks, then `next`)
  // and draws the first guess; together in one step when they fit, else alone.
  std::vector<std::vector<int32_t>> lack(reqs.size());
  std::vector<Cluster::SeqStep> batch;
  std::vector<size_t> who;
  int rows = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    Request& r = reqs[i];
    r.guesses.clear();
    r.guesses.reserve(size_t(std::max(r.max, 0)));
    if (r.max <= 0) continue;
    Sequence& d = *seqs_[size_t(r.target->slot())];
    const auto& have = d.tokens();
    const auto& want = r.target->tokens();
    size_t common = size_t(std::mismatch(have.begin(), have.end(), want.begin(), want.end()).first - have.begin());
    if (!cl_.can_rewind(d.slot(), int(common))) common = 0;  // its rings no longer hold the window there
    d.truncate(int(common));
    lack[i].assign(want.begin() + int64_t(common), want.end());
    lack[i].push_back(r.next);
    if (d.n_past() + int64_t(lack[i].size()) + r.max > cl_.ctx()) {
      r.max = 0;  // no room left in the draft's context
      continue;
    }
    if (rows + int(lack[i].size()) > cl_.max_rows()) {
      auto t = cl_.extend(d, lack[i], true);
      if (!t) return t.status();
      r.guesses.push_back(*t);
      continue;
    }
    rows += int(lack[i].size());
    batch.push_back({&d, lack[i], Want::kCandidates, {}});
    who.push_back(i);
  }
  for (;;) {
    if (!batch.empty()) {
      util::Timer timer;
      auto res = cl_.run(batch);
      if (!res) return res.status();
      timed(batch, timer.seconds());
      for (size_t b = 0; b < batch.size(); ++b) reqs[who[b]].guesses.push_back((*res)[b].tokens[0]);
    }
    batch.clear();
    who.clear();
    for (size_t i = 0; i < reqs.size(); ++i) {
      Request& r = reqs[i];
      if (r.guesses.empty() || int(r.guesses.size()) >= r.max) continue;
      batch.push_back({seqs_[size_t(r.target->slot())].get(), std::span<const int32_t>(&r.guesses.back(), 1),
                       Want::kCandidates, {}});
      who.push_back(i);
    }
    if (batch.empty()) break;
  }
  return util::ok_status();
}

}  // namespace runtime
