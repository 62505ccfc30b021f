// sampler.cc: the sampling chain.
#include "sampler/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace sampler {

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

double draw_uniform(uint64_t seed, int64_t pos, int32_t id) {
  const uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ uint64_t(pos)) ^ uint64_t(uint32_t(id)));
  return (double(h >> 11) + 0.5) * 0x1.0p-53;  // never 0 nor 1
}

int32_t draw_from_sorted(const Params& p, const std::vector<Candidate>& cand, size_t n, int64_t pos) {
  // softmax over the kept candidates
  std::vector<double> probs(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += probs[i] = std::exp(double(cand[i].logit - cand[0].logit));
  for (auto& pr : probs) pr /= sum;
  if (p.top_p < 1.0f) {
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += probs[i];
      if (cum >= p.top_p) { keep = i + 1; break; }
    }
    n = std::max<size_t>(1, keep);
  }
  if (p.min_p > 0.0f) {
    const double floor = probs[0] * p.min_p;
    size_t keep = 1;
    while (keep < n && probs[keep] >= floor) ++keep;
    n = keep;
  }
  // temperature, then the Gumbel-max draw (the first of equal scores wins)
  size_t best = 0;
  double best_score = -INFINITY;
  for (size_t i = 0; i < n; ++i) {
    const double g = -std::log(-std::log(draw_uniform(p.seed, pos, cand[i].id)));
    const double score = double(cand[i].logit - cand[0].logit) / p.temperature + g;
    if (score > best_score) {
      best_score = score;
      best = i;
    }
  }
  return cand[best].id;
}

int32_t argmax(const float* x, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

Sampler::Sampler(const Params& p, int n_vocab) : p_(p), n_vocab_(n_vocab) {}

void Sampler::apply_penalties(float* logits, const std::vector<int32_t>& history) const {
  const bool any = p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
  if (!any || p_.repeat_last_n == 0) return;
  const size_t n = p_.repeat_last_n < 0 ? history.size() : std::min<size_t>(history.size(), p_.repeat_last_n);
  std::unordered_map<int32_t, int> counts;
  for (size_t i = history.size() - n; i < history.size(); ++i) counts[history[i]]++;
  for (const auto& [id, count] : counts) {
    if (id < 0 || id >= n_vocab_) continue;
    float& l = logits[id];
    if (p_.repeat_penalty != 1.0f) l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    l -= static_cast<float>(count) * p_.frequency_penalty + (count > 0 ? p_.presence_penalty : 0.0f);
  }
}

void apply_logit_bias(const LogitBias& biases, float* logits, int32_t first, int n) {
  for (const auto& [id, bias] : biases)
    if (id >= first && id < first + n) logits[id - first] += bias;
}

int32_t Sampler::sample(float* logits, const std::vector<int32_t>& history, int64_t pos) {
  apply_penalties(logits, history);
  apply_logit_bias(p_.logit_bias, logits, 0, n_vocab_);
  if (p_.temperature <= 0.0f) return argmax(logits, n_vocab_);

  cand_.resize(n_vocab_);
  for (int i = 0; i < n_vocab_; ++i) cand_[i] = {i, logits[i]};
  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  size_t n = cand_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
    n = p_.top_k;
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  return draw_from_sorted(p_, cand_, n, pos < 0 ? int64_t(history.size()) : pos);
}

}  // namespace sampler
