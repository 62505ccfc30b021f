// sampler_test.cc: the sampling chain's rules on small hand-made logit vectors.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "sampler/distributed.h"
#include "sampler/sampler.h"

namespace {

TEST(Sampler, GreedyPicksMaxLowestIdOnTies) {
  std::vector<float> l = {0.5f, 2.0f, 2.0f, -1.0f};
  sampler::Params p;
  p.temperature = 0;
  sampler::Sampler s(p, 4);
  EXPECT_EQ(s.sample(l.data(), {}), 1);
}

TEST(Sampler, TopKOneIsGreedy) {
  sampler::Params p;
  p.top_k = 1;
  p.temperature = 1.5f;
  sampler::Sampler s(p, 5);
  for (int i = 0; i < 20; ++i) {
    std::vector<float> l = {0.1f, 0.2f, 3.0f, 0.4f, 2.9f};
    EXPECT_EQ(s.sample(l.data(), {}, i), 2);
  }
}

TEST(Sampler, SeededIsReproducibleAndFollowsProbabilities) {
  sampler::Params p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 123;
  std::vector<float> base = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  sampler::Sampler a(p, 3), b(p, 3);
  std::map<int, int> counts;
  for (int i = 0; i < 3000; ++i) {
    auto l1 = base, l2 = base;
    const int x = a.sample(l1.data(), {}, i);
    EXPECT_EQ(x, b.sample(l2.data(), {}, i));
    counts[x]++;
  }
  EXPECT_NEAR(counts[0] / 3000.0, 0.5, 0.04);
  EXPECT_NEAR(counts[1] / 3000.0, 0.3, 0.04);
  EXPECT_NEAR(counts[2] / 3000.0, 0.2, 0.04);
}

TEST(Sampler, TopPAndMinPCutTheTail) {
  sampler::Params p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 0.6f;  // keeps 0.5 and 0.3
  p.min_p = 0.0f;
  sampler::Sampler s(p, 3);
  for (int i = 0; i < 200; ++i) {
    std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
    EXPECT_NE(s.sample(l.data(), {}, i), 2);
  }
  p.top_p = 1.0f;
  p.min_p = 0.7f;  // keeps tokens with p >= 0.35: only the first
  sampler::Sampler m(p, 3);
  for (int i = 0; i < 200; ++i) {
    std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
    EXPECT_EQ(m.sample(l.data(), {}, i), 0);
  }
}

TEST(Sampler, PenaltiesLowerSeenTokens) {
  sampler::Params p;
  p.temperature = 0;
  p.repeat_penalty = 2.0f;
  sampler::Sampler s(p, 3);
  std::vector<float> l = {1.0f, 1.5f, 0.9f};
  EXPECT_EQ(s.sample(l.data(), {1}), 0);  // 1.5 / 2 = 0.75 < 1.0
  p.repeat_penalty = 1.0f;
  p.frequency_penalty = 0.3f;
  p.presence_penalty = 0.1f;
  sampler::Sampler f(p, 3);
  std::vector<float> l2 = {1.0f, 1.5f, 0.9f};
  EXPECT_EQ(f.sample(l2.data(), {1, 1}), 0);  // 1.5 - 0.6 - 0.1 = 0.8
  EXPECT_NEAR(l2[1], 0.8f, 1e-6);
}

// The Gumbel-max draw is a sample of softmax(logit / T) over the kept candidates: a
// chi-square test over 20000 positions on 6 tokens with top-k, top-p and temperature in
// play (the cut tokens never appear), at a significance of about 1e-4. The draw for a
// position depends on (seed, position) alone.
TEST(Sampler, GumbelDrawsFollowTheKeptDistribution) {
  const std::vector<float> base = {2.0f, 1.5f, 1.4f, 0.3f, -0.5f, -3.0f, -4.0f};
  sampler::Params p;
  p.temperature = 0.7f;
  p.top_k = 6;     // cuts id 6
  p.top_p = 0.99f; // cuts id 5 (its softmax share is below 1%)
  p.min_p = 0.0f;
  p.seed = 42;
  // the kept distribution, computed directly
  std::vector<double> prob(base.size(), 0);
  double z = 0;
  for (int i = 0; i < 5; ++i) z += prob[i] = std::exp((base[i] - base[0]) / p.temperature);
  for (auto& v : prob) v /= z;
  const int N = 20000;
  sampler::Sampler s(p, int(base.size()));
  std::vector<int> counts(base.size(), 0);
  for (int pos = 0; pos < N; ++pos) {
    auto l = base;
    counts[s.sample(l.data(), {}, pos)]++;
  }
  EXPECT_EQ(counts[5] + counts[6], 0);
  double chi2 = 0;
  for (int i = 0; i < 5; ++i) chi2 += std::pow(counts[i] - N * prob[i], 2) / (N * prob[i]);
  EXPECT_LT(chi2, 23.5) << "4 degrees of freedom";  // P(chi2_4 > 23.5) ~ 1e-4
  auto l1 = base, l2 = base;
  sampler::Sampler again(p, int(base.size()));
  EXPECT_EQ(s.sample(l1.data(), {}, 77), again.sample(l2.data(), {1, 2, 3}, 77));
  p.seed = 43;
  sampler::Sampler other(p, int(base.size()));
  int differ = 0;
  for (int pos = 0; pos < 200; ++pos) {
    auto a = base, b = base;
    differ += s.sample(a.data(), {}, pos) != other.sample(b.data(), {}, pos);
  }
  EXPECT_GT(differ, 50);  // another seed draws other tokens
}

}  // namespace

// Constrained decoding: each node keeps only the allowed ids of its range, for its
// candidates and its log-sum-exp; the merged draw equals one node's draw on logits whose
// other ids are pushed out of reach, and is always allowed.
TEST(Sampler, MaskedCandidatesKeepOnlyAllowedIds) {
  const int n = 203;  // odd, and two parts of unequal size
  std::vector<float> logits(n);
  for (int i = 0; i < n; ++i) logits[size_t(i)] = float(std::sin(i * 1.7) * 4);
  std::vector<uint64_t> allowed(4, 0);
  std::vector<int> ids;
  for (int i = 0; i < n; ++i)
    if (i % 7 == 3 || i > 190) {
      allowed[size_t(i) / 64] |= uint64_t(1) << (i % 64);
      ids.push_back(i);
    }
  const int split = 120;
  auto a = sampler::local_candidates(logits.data(), 0, split, 5, &allowed);
  auto b = sampler::local_candidates(logits.data() + split, split, n - split, 5, &allowed);
  for (const auto* part : {&a, &b})
    for (const sampler::Candidate& c : part->cand) EXPECT_TRUE((allowed[size_t(c.id) / 64] >> (c.id % 64)) & 1);
  double sum = 0;
  for (int i : ids) sum += std::exp(double(logits[size_t(i)]));
  EXPECT_NEAR(sampler::merge_lse({a.lse, b.lse}), std::log(sum), 1e-4);
  std::vector<uint64_t> none(4, 0);
  auto empty = sampler::local_candidates(logits.data(), 0, split, 5, &none);
  EXPECT_TRUE(empty.cand.empty());
  EXPECT_EQ(empty.lse, -INFINITY);
  sampler::Params p;
  p.top_k = 5;
  p.temperature = 0.9f;
  std::vector<float> masked = logits;
  for (int i = 0; i < n; ++i)
    if (!((allowed[size_t(i) / 64] >> (i % 64)) & 1)) masked[size_t(i)] = -1e30f;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    p.seed = seed;
    sampler::DistributedSampler ds(p, n);
    sampler::Sampler one(p, n);
    std::vector<float> l = masked;
    const int32_t t = ds.sample({a.cand, b.cand}, 17);
    EXPECT_EQ(t, one.sample(l.data(), {}, 17)) << seed;
    EXPECT_TRUE((allowed[size_t(t) / 64] >> (t % 64)) & 1);
  }
}
