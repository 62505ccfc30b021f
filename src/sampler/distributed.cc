// distributed.cc: penalties by id, local top-k with log-sum-exp, the merge and the draw.
// The draw repeats Sampler::sample's arithmetic on the merged candidates, operation for
// operation, so both produce the same token for the same position.
#include "sampler/distributed.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "kernels/kernels.h"
#include "util/check.h"

namespace sampler {

namespace {

bool by_logit(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

bool penalties_on(const Params& p) {
  const bool any = p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  return any && p.repeat_last_n != 0;
}

}  // namespace

PenaltyCounts penalty_counts(const Params& p, std::span<const int32_t> history, std::span<const int32_t> more) {
  if (!penalties_on(p)) return {};
  const size_t total = history.size() + more.size();
  const size_t n = p.repeat_last_n < 0 ? total : std::min<size_t>(total, p.repeat_last_n);
  std::map<int32_t, int32_t> counts;
  for (size_t i = total - n; i < total; ++i)
    counts[i < history.size() ? history[i] : more[i - history.size()]]++;
  return PenaltyCounts(counts.begin(), counts.end());
}

void apply_penalty_counts(const Params& p, const PenaltyCounts& counts, float* logits, int32_t first, int n) {
  for (const auto& [id, count] : counts) {
    if (id < first || id >= first + n) continue;
    float& l = logits[id - first];
    if (p.repeat_penalty != 1.0f) l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
    l -= static_cast<float>(count) * p.frequency_penalty + (count > 0 ? p.presence_penalty : 0.0f);
  }
}

int request_k(const Params& p, int n_vocab) {
  if (p.temperature <= 0.0f) return 1;
  if (p.top_k > 0 && p.top_k < n_vocab) return p.top_k;
  return n_vocab;
}

LocalCandidates local_candidates(const float* logits, int32_t first, int n, int k,
                                 const std::vector<uint64_t>* allowed) {
  LocalCandidates out;
  if (allowed) {
    CHECK(allowed->size() * 64 >= size_t(first) + size_t(n));
    std::vector<float> v;
    for (int i = 0; i < n; ++i) {
      const size_t id = size_t(first) + size_t(i);
      if (((*allowed)[id / 64] >> (id % 64)) & 1) {
        out.cand.push_back({int32_t(id), logits[i]});
        v.push_back(logits[i]);
      }
    }
    out.lse = v.empty() ? -INFINITY : kernels::log_sum_exp(v.data(), int64_t(v.size()));
    const size_t keep = std::min(out.cand.size(), size_t(std::max(k, 1)));
    std::partial_sort(out.cand.begin(), out.cand.begin() + ptrdiff_t(keep), out.cand.end(), by_logit);
    out.cand.resize(keep);
    return out;
  }
  out.lse = kernels::log_sum_exp(logits, n);
  k = std::min(k, n);
  if (k == 1) {
    int best = 0;
    for (int i = 1; i < n; ++i)
      if (logits[i] > logits[best]) best = i;
    out.cand.push_back({first + best, logits[best]});
    return out;
  }
  out.cand.resize(n);
  for (int i = 0; i < n; ++i) out.cand[i] = {first + i, logits[i]};
  std::partial_sort(out.cand.begin(), out.cand.begin() + k, out.cand.end(), by_logit);
  out.cand.resize(k);
  return out;
}

std::vector<Candidate> merge_candidates(const std::vector<std::vector<Candidate>>& parts, int k) {
  std::vector<Candidate> all;
  for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  const size_t keep = std::min<size_t>(std::max(k, 0), all.size());
  std::partial_sort(all.begin(), all.begin() + keep, all.end(), by_logit);
  all.resize(keep);
  return all;
}

float merge_lse(const std::vector<float>& lses) {
  float mx = -INFINITY;
  for (float l : lses) mx = std::max(mx, l);
  if (mx == -INFINITY) return mx;
  double sum = 0;
  for (float l : lses) sum += std::exp(double(l) - mx);
  return float(mx + std::log(sum));
}

Logprobs logprobs(const std::vector<std::vector<Candidate>>& parts, float lse, int32_t drawn, int n_top) {
  Logprobs out;
  bool found = false;
  for (const auto& p : parts)
    for (const Candidate& c : p)
      if (c.id == drawn) {
        out.logprob = c.logit - lse;
        found = true;
      }
  CHECK_MSG(found, "the drawn token is not among the candidates");
  for (const Candidate& c : merge_candidates(parts, n_top)) out.top.push_back({c.id, c.logit - lse});
  return out;
}

DistributedSampler::DistributedSampler(const Params& p, int n_vocab) : p_(p), n_vocab_(n_vocab) {}

int32_t DistributedSampler::sample(const std::vector<std::vector<Candidate>>& parts, int64_t pos) const {
  const std::vector<Candidate> cand = merge_candidates(parts, k());
  if (cand.empty()) return 0;
  if (p_.temperature <= 0.0f) return cand[0].id;
  // The rest of Sampler::sample's chain, on the merged (sorted, top-k cut) candidates.
  return draw_from_sorted(p_, cand, cand.size(), pos);
}

}  // namespace sampler
