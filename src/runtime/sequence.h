// sequence.h: one conversation as the runtime schedules it: its KV slot, its token log
// (the tokens whose KV rows the slot holds, at positions 0 .. n_past()-1) and its sampling
// state (parameters and the seeded generator). Truncating the log to n makes positions
// >= n free again (their rows are overwritten when the sequence is extended), which is
// what rolling back rejected drafts and reusing a cached prefix need; replaying the log
// rebuilds the slot from nothing. Deliberately no scheduling and no text.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "sampler/distributed.h"
#include "util/check.h"

namespace runtime {

// What a sequence may draw next (constrained decoding: grammar/vocab_mask.h implements it
// for a grammar). The scheduler asks allowed() before each step that samples the sequence
// and passes accept() every token drawn.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // The tokens allowed next: bit (id % 64) of word id / 64; at least one is set.
  virtual const std::vector<uint64_t>& allowed() = 0;
  virtual void accept(int32_t id) = 0;
};

class Sequence {
 public:
  Sequence(int slot, int n_vocab) : slot_(slot), n_vocab_(n_vocab) { set_sampling({}); }

  int slot() const { return slot_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int n_past() const { return int(tokens_.size()); }
  // Keeps positions [0, n).
  void truncate(int n) {
    CHECK(n >= 0 && n <= n_past());
    tokens_.resize(size_t(n));
  }
  // New sampling parameters (a draw is a function of p.seed and its position).
  void set_sampling(const sampler::Params& p) { sampler_ = std::make_unique<sampler::DistributedSampler>(p, n_vocab_); }
  sampler::DistributedSampler& sampler() { return *sampler_; }

  // The runtime appends the tokens a step evaluated (Cluster::run).
  void append(std::span<const int32_t> t) { tokens_.insert(tokens_.end(), t.begin(), t.end()); }

 private:
  int slot_, n_vocab_;
  std::vector<int32_t> tokens_;
  std::unique_ptr<sampler::DistributedSampler> sampler_;
};

}  // namespace runtime
