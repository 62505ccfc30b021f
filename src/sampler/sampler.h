// sampler.h: turns logits into the next token: repetition / presence / frequency
// penalties, top-k, top-p (nucleus), min-p, temperature, then a seeded draw; greedy
// (argmax, lowest id on ties) when temperature <= 0. The order follows llama.cpp's default
// chain. The draw is the Gumbel-max trick with noise that is a function of (seed, the
// position the token will take, token id) alone: the token at a position does not depend
// on how many draws came before it, so speculative decoding (runtime/speculative.h), which
// verifies several positions in one step, draws exactly the tokens plain decoding draws.
// Deliberately no knowledge of tokens' text (stop strings live with the caller).
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace sampler {

// (token id, bias) sorted by id, each id once.
using LogitBias = std::vector<std::pair<int32_t, float>>;

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
  // Added to the logits after the penalties (OpenAI's logit_bias; -100 forbids a token in
  // practice, +100 forces it).
  LogitBias logit_bias;
  // Log-probabilities to report with each drawn token: -1 none, 0 the drawn token's, k > 0
  // also the k most likely (OpenAI's logprobs / top_logprobs). They do not change the draw.
  int top_logprobs = -1;
};

// Adds bias to logits[0..n) holding ids [first, first + n).
void apply_logit_bias(const LogitBias& bias, float* logits, int32_t first, int n);

struct Candidate {
  int32_t id;
  float logit;
};

class Sampler {
 public:
  Sampler(const Params& p, int n_vocab);
  // Picks a token from logits[0..n_vocab) (modified in place by penalties) given the
  // tokens seen so far (prompt and generated); the token takes position pos (default:
  // history.size()), which selects the draw's noise.
  int32_t sample(float* logits, const std::vector<int32_t>& history, int64_t pos = -1);
  const Params& params() const { return p_; }

 private:
  void apply_penalties(float* logits, const std::vector<int32_t>& history) const;
  Params p_;
  int n_vocab_;
  std::vector<Candidate> cand_;
};

// Index of the largest value (lowest index on ties).
int32_t argmax(const float* x, int n);

// Uniform in (0, 1), a pure function of (seed, pos, id): the draw's randomness.
double draw_uniform(uint64_t seed, int64_t pos, int32_t id);

// The tail of the chain: top-p, min-p, temperature and the draw for position pos, on
// candidates already sorted best first and cut to top-k. Shared by Sampler and the
// distributed merge. The draw is argmax over the kept i of logit_i / T + Gumbel noise
// -log(-log(draw_uniform(seed, pos, id_i))): exactly a sample of softmax(logit / T) over them.
int32_t draw_from_sorted(const Params& p, const std::vector<Candidate>& cand, size_t n, int64_t pos);

}  // namespace sampler
