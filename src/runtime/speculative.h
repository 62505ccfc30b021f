// speculative.h: the parts of speculative decoding that are not the scheduler's loop
// (scheduler.cc drives them): guessing the next tokens of a sequence (from its own text,
// lookup_draft, or with a small draft model on the root, DraftModel), and choosing how
// many guesses to verify (SpecTuner: measured acceptance against the measured cost of a
// row). The cluster verifies k guesses in one step of k + 1 rows (Cluster::SeqStep::drafts),
// so a round of network latency yields up to k + 1 tokens; the tokens are exactly those of
// plain decoding, sampled or greedy, because a draw depends only on its row, the seed and
// the position (sampler.h, Gumbel-max).
// Deliberately no scheduling and no text.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/cluster.h"
#include "runtime/sequence.h"

namespace runtime {

constexpr int kMaxGuesses = 32;  // per sequence and step (--lookup, --draft-max)

// Up to max_tokens guesses of what follows `text`: the tokens after the latest earlier
// occurrence of its longest suffix of max_ngram .. min_ngram tokens ({} when none recurs).
std::vector<int32_t> lookup_draft(std::span<const int32_t> text, int max_tokens, int max_ngram = 4,
                                  int min_ngram = 2);

// Step time as a + b * rows, fitted by least squares over recent decode steps (older ones
// count less: weight 0.95 per step). Until the rows have varied, b = a * prior_ratio.
class StepCost {
 public:
  explicit StepCost(double prior_ratio = 0.125) : prior_ratio_(prior_ratio) {}
  void add(int rows, double seconds);
  bool known() const { return w_ > 0; }
  double per_step() const;  // a
  double per_row() const;   // b
  double at(int rows) const { return per_step() + per_row() * rows; }

 private:
  double prior_ratio_;
  double w_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
};

// One sequence's acceptance: the chance a guess is kept given the ones before it were,
// from decayed counts with a uniform prior.
struct Acceptance {
  double kept = 0, tried = 0;
  void add(int kept_now, int tried_now) {
    kept = 0.9 * kept + kept_now;
    tried = 0.9 * tried + tried_now;
  }
  double rate() const { return (kept + 1) / (tried + 2); }
};

// The k in 0..max that maximises expected tokens per second, E(k) / (step + k * (row +
// guess)) with E(k) = 1 + a + a^2 + .. + a^k: step is the step's time without guesses,
// row the time of one more row, guess the time to make one guess.
int choose_guesses(double acceptance, double step_s, double row_s, double guess_s, int max);

// A small model with the target's vocabulary on the root (--draft-model), in a one-node
// cluster of its own with a KV slot per target slot. Its guesses are its own draws with the
// target sequence's sampling parameters, so that sampled drafts agree with the target as
// often as the two distributions allow (the same Gumbel noise per position and token).
class DraftModel {
 public:
  explicit DraftModel(Cluster& draft);
  // A job took target slot `slot` with these parameters.
  void start(int slot, const sampler::Params& p);
  struct Request {
    const Sequence* target = nullptr;  // its log, then `next`, is what the guesses continue
    int32_t next = -1;
    int max = 0;                       // guesses wanted
    std::vector<int32_t> guesses;      // out
  };
  // Fills every request's guesses (the requests' draft steps run batched).
  util::Status draft(std::vector<Request>& reqs);
  double seconds_per_step() const { return step_s_; }  // measured, a draft step of a few rows (0: not yet)

 private:
  Cluster& cl_;
  std::vector<std::unique_ptr<Sequence>> seqs_;  // per slot
  double step_s_ = 0;
};

}  // namespace runtime
