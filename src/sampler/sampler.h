// sampler.h: turns logits into the next token: repetition / presence / frequency
// penalties, top-k, top-p (nucleus), min-p, temperature, then a seeded draw; greedy
// (argmax, lowest id on ties) when temperature <= 0. The order follows llama.cpp's default
// chain. Deliberately no knowledge of tokens' text (stop strings live with the caller).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace sampler {

struct Params {
  float temperature = 0.8f;
  int top_k = 40;              // <= 0: off
  float top_p = 0.95f;         // >= 1: off
  float min_p = 0.05f;         // <= 0: off
  float repeat_penalty = 1.0f; // 1: off
  int repeat_last_n = 64;      // tokens of history the penalties look at
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
};

struct Candidate {
  int32_t id;
  float logit;
};

class Sampler {
 public:
  Sampler(const Params& p, int n_vocab);
  // Picks a token from logits[0..n_vocab) (modified in place by penalties) given the
  // tokens seen so far (prompt and generated).
  int32_t sample(float* logits, const std::vector<int32_t>& history);
  const Params& params() const { return p_; }

 private:
  void apply_penalties(float* logits, const std::vector<int32_t>& history) const;
  Params p_;
  int n_vocab_;
  std::mt19937_64 rng_;
  std::vector<Candidate> cand_;
};

// Index of the largest value (lowest index on ties).
int32_t argmax(const float* x, int n);

// The tail of the chain: top-p, min-p, temperature and the draw, on candidates already
// sorted best first and cut to top-k. Shared by Sampler and the distributed merge.
int32_t draw_from_sorted(const Params& p, const std::vector<Candidate>& cand, size_t n, std::mt19937_64& rng);

}  // namespace sampler
