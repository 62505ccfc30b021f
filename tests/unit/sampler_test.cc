// sampler_test.cc: the sampling chain's rules on small hand-made logit vectors.
#include <gtest/gtest.h>

#include <map>

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
    EXPECT_EQ(s.sample(l.data(), {}), 2);
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
    const int x = a.sample(l1.data(), {});
    EXPECT_EQ(x, b.sample(l2.data(), {}));
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
    EXPECT_NE(s.sample(l.data(), {}), 2);
  }
  p.top_p = 1.0f;
  p.min_p = 0.7f;  // keeps tokens with p >= 0.35: only the first
  sampler::Sampler m(p, 3);
  for (int i = 0; i < 200; ++i) {
    std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
    EXPECT_EQ(m.sample(l.data(), {}), 0);
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

}  // namespace
