// distributed.h: exact sampling when the logits are spread over nodes by vocabulary range
// (DESIGN §4). The root tells every node how many candidates to return (request_k) and
// which token ids to penalise (penalty_counts) or bias (Params::logit_bias); each node
// applies the penalties, then the biases, to its own range and returns its local top
// candidates plus its local log-sum-exp
// (local_candidates); the root merges them (DistributedSampler::sample) and draws exactly
// what Sampler::sample would draw on the concatenated logits with the same Params and
// seed: greedy is the global argmax (lowest id on ties); top-k / top-p / min-p /
// temperature run on the merged candidates when k covers top_k. When top_k is off (or
// >= n_vocab) every node sends its whole range: the exact fallback. The draw's
// log-probabilities come from the same candidates and log-sum-exps (logprobs, below).
// Deliberately no networking (runtime/ carries the candidates) and no text.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "sampler/sampler.h"

namespace sampler {

// (token id, count in the last repeat_last_n tokens), sorted by id; empty when the
// penalties are off.
using PenaltyCounts = std::vector<std::pair<int32_t, int32_t>>;
// The history is `history` followed by `more` (a sequence's log and the tokens of the step
// that ends in the sampled row), read in place.
PenaltyCounts penalty_counts(const Params& p, std::span<const int32_t> history, std::span<const int32_t> more = {});
// Applies the penalties to logits[0..n) holding ids [first, first + n).
void apply_penalty_counts(const Params& p, const PenaltyCounts& counts, float* logits, int32_t first, int n);

// Candidates each node must return: 1 for greedy, top_k when 0 < top_k < n_vocab, else
// n_vocab (everything: the full-gather fallback).
int request_k(const Params& p, int n_vocab);

struct LocalCandidates {
  std::vector<Candidate> cand;  // best first (logit desc, id asc); global ids
  float lse = 0;                // log(sum(exp(logit))) over the node's whole range
};
// The k best of logits[0..n) (ids first..first+n), and the range's log-sum-exp. With
// `allowed` (a bitmap over the whole vocabulary: constrained decoding), only the allowed
// ids count, for both (none allowed: no candidates, log-sum-exp -inf).
LocalCandidates local_candidates(const float* logits, int32_t first, int n, int k,
                                 const std::vector<uint64_t>* allowed = nullptr);

// Log-probabilities of a draw, exact from the nodes' candidates and log-sum-exps (no
// whole row is gathered): log p(t) = logit(t) - log-sum-exp over the whole vocabulary, of
// the logits the nodes returned (after penalties and logit_bias, at temperature 1, before
// top-k / top-p / min-p), i.e. the model's distribution as the request shaped it.
struct TokenLogprob {
  int32_t id;
  float logprob;
};
struct Logprobs {
  float logprob = 0;              // the drawn token's
  std::vector<TokenLogprob> top;  // the n_top most likely, best first
};
// drawn must be among the candidates (every drawn token is); n_top <= each part's length
// (or that part's whole range) for the top list to be exact.
Logprobs logprobs(const std::vector<std::vector<Candidate>>& parts, float lse, int32_t drawn, int n_top);

// Merges nodes' candidate lists (each best first) into the global k best, best first.
std::vector<Candidate> merge_candidates(const std::vector<std::vector<Candidate>>& parts, int k);
// log-sum-exp over the whole vocabulary from the nodes' local ones.
float merge_lse(const std::vector<float>& lses);

class DistributedSampler {
 public:
  DistributedSampler(const Params& p, int n_vocab);
  const Params& params() const { return p_; }
  int k() const { return request_k(p_, n_vocab_); }
  // Candidates each node returns: k(), or more for top_logprobs (the draw still uses k()).
  int k_asked() const { return std::max(k(), std::min(p_.top_logprobs, n_vocab_)); }
  // Draws the token for position pos from the nodes' candidates (penalties already
  // applied by the nodes). Equal to Sampler::sample on the concatenated logits for the
  // same Params and position.
  int32_t sample(const std::vector<std::vector<Candidate>>& parts, int64_t pos) const;

 private:
  Params p_;
  int n_vocab_;
};

}  // namespace sampler
