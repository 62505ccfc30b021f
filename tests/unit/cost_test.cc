// cost_test.cc: the plan module's cost model: per-node traffic of each all-reduce against
// distributed-llama's figures, uneven ring chunks, choose_allreduce's choices, compute and
// sync time, and the printed plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "plan/cost.h"
#include "plan/plan.h"
#include "plan_fixture.h"

namespace plan {
namespace {

using namespace plan::test;
using tensor::Type;

TEST(Cost, AllGatherEqualsDistributedLlama) {
  const ModelShape s = llama8b(Type::Q4_0);
  const double dllama_kib[] = {272, 816, 1904};
  int k = 0;
  for (int n : {2, 4, 8}) {
    const Plan p = must_plan(s, equal(n));
    const CostParams c;  // Q8_0 sync
    const ReferenceTraffic ref = dllama_traffic(s, n);
    EXPECT_EQ(ref.per_node_each_way, uint64_t(2 * 32 * (n - 1) * 4096 * 34 / 32));
    EXPECT_DOUBLE_EQ(ref.per_node_each_way / 1024.0, dllama_kib[k++]);
    for (int i = 0; i < n; ++i) {
      const NodeCost nc = node_cost(p, i, c);
      const Traffic ag = nc.allreduce[int(AllReduce::kAllGather)];
      EXPECT_EQ(ag.sent, ref.per_node_each_way);
      EXPECT_EQ(ag.received, ref.per_node_each_way);
      const Traffic ring = nc.allreduce[int(AllReduce::kRing)];
      const Traffic star = nc.allreduce[int(AllReduce::kStar)];
      // ring: 2(N-1)/N of a vector per all-reduce (chunks are equal here).
      EXPECT_EQ(ring.sent, uint64_t(2 * 32) * 2 * (n - 1) * 4352 / n);
      if (n > 2) {
        EXPECT_LT(ring.sent, ag.sent);
        EXPECT_LT(ring.received, ag.received);
      }
      if (i > 0) {
        EXPECT_EQ(star.sent, uint64_t(2 * 32) * 4352);  // a worker sends one vector
        if (n > 2) {
          EXPECT_LT(star.sent, ag.sent);
        }
        // Sampling reply: 40 candidates + lse, versus its F32 logits range.
        EXPECT_EQ(nc.sample.sent, 40u * 8 + 4);
        EXPECT_EQ(nc.logits.sent, 4u * p.nodes[i].vocab.size());
        EXPECT_EQ(nc.step.received, 8u + 4352);
      } else {
        EXPECT_EQ(star.sent, ag.sent);  // the root sends N-1 vectors either way
        EXPECT_EQ(nc.logits.received, ref.root_logits);  // equal vocab split like dllama
        EXPECT_EQ(nc.step.sent, (n - 1) * (8u + 4352));
      }
    }
  }
}

TEST(Cost, RingChunksUneven) {
  // 576 values = 18 Q8_0 blocks over 4 nodes: chunks 5,5,4,4 blocks.
  uint64_t sent = 0, received = 0;
  for (int i = 0; i < 4; ++i) {
    const Traffic t = allreduce_traffic(AllReduce::kRing, 4, i, 576, Type::Q8_0);
    sent += t.sent;
    received += t.received;
    EXPECT_LE(t.sent, 2 * 612u);
  }
  EXPECT_EQ(sent, received);
  EXPECT_EQ(sent, 2u * 3 * 612);  // every chunk travels N-1 hops in each phase
  EXPECT_EQ(allreduce_traffic(AllReduce::kRing, 2, 0, 4096, Type::F16).sent, 8192u);
  EXPECT_EQ(allreduce_traffic(AllReduce::kAllGather, 3, 1, 4096, Type::F32).sent, 2u * 16384);
  EXPECT_EQ(allreduce_traffic(AllReduce::kStar, 1, 0, 4096, Type::F32).sent, 0u);
}

TEST(Cost, ChooseAllReduce) {
  const double row = 4352;  // one Llama 3 8B D-vector in Q8_0
  // Decode on a fast switched LAN: one-shot all-gather.
  EXPECT_EQ(choose_allreduce(8, row, 20, 10), AllReduce::kAllGather);
  EXPECT_EQ(choose_allreduce(2, row, 50, 1), AllReduce::kAllGather);
  EXPECT_EQ(choose_allreduce(4, row, 50, 1), AllReduce::kAllGather);
  // A prefill batch of 512 rows on gigabit: ring.
  EXPECT_EQ(choose_allreduce(8, 512 * row, 100, 1), AllReduce::kRing);
  EXPECT_EQ(choose_allreduce(4, 32 * row, 50, 0.1), AllReduce::kRing);
  // A shared medium: star beats an all-gather that floods it.
  EXPECT_EQ(choose_allreduce(8, row, 50, 1, true), AllReduce::kStar);
  EXPECT_EQ(choose_allreduce(1, row, 50, 1), AllReduce::kAllGather);
  // Q8_0 on the wire: the ring must win by kQuantizedRingHandicap. At N = 3 on a fast link
  // its gain is small (all-gather instead); at N = 8 on gigabit it stays the choice.
  const Link fast{20, 10};
  const double b3 = 512 * 576 * 34.0 / 32;
  ASSERT_LT(allreduce_us(AllReduce::kRing, 3, b3, fast), allreduce_us(AllReduce::kAllGather, 3, b3, fast));
  EXPECT_EQ(choose_allreduce(3, b3, 20, 10), AllReduce::kRing);
  EXPECT_EQ(choose_allreduce(3, b3, 20, 10, false, /*quantized=*/true), AllReduce::kAllGather);
  EXPECT_EQ(choose_allreduce(8, 512 * row, 100, 1, false, true), AllReduce::kRing);
  // Times follow the formulas.
  const Link link{50, 1};
  EXPECT_DOUBLE_EQ(allreduce_us(AllReduce::kAllGather, 8, 1000, link), 50 + 7 * 8.0);
  EXPECT_DOUBLE_EQ(allreduce_us(AllReduce::kRing, 8, 1000, link), 14 * 50 + 14.0 / 8 * 8.0);
  EXPECT_DOUBLE_EQ(allreduce_us(AllReduce::kStar, 8, 1000, link), 100 + 14 * 8.0);
}

TEST(Cost, ComputeAndSync) {
  const Plan p = must_plan(llama8b(Type::Q4_0), {2, 1, 1});
  CostParams c;
  c.mem_gbps = {20, 10, 10};
  const NodeCost n0 = node_cost(p, 0, c), n1 = node_cost(p, 1, c);
  EXPECT_DOUBLE_EQ(n0.compute_ms, double(weight_bytes(p, 0)) / 20e9 * 1e3);
  EXPECT_DOUBLE_EQ(n1.compute_ms, double(weight_bytes(p, 1)) / 10e9 * 1e3);
  EXPECT_GT(n0.embedding_bytes, 0u);
  EXPECT_EQ(n1.embedding_bytes, 0u);
  EXPECT_EQ(n0.algo, AllReduce::kAllGather);
  EXPECT_DOUBLE_EQ(n0.sync_ms, 64 * allreduce_us(n0.algo, 3, 4352, c.link) / 1e3);
  const ClusterCost cc = cluster_cost(p, c);
  EXPECT_DOUBLE_EQ(cc.compute_ms, std::max({n0.compute_ms, n1.compute_ms, node_cost(p, 2, c).compute_ms}));
  EXPECT_GT(cc.tokens_per_s, 0);
  // One node: no traffic, no sync.
  const Plan p1 = must_plan(llama8b(Type::Q4_0), {});
  const NodeCost solo = node_cost(p1, 0, CostParams{});
  EXPECT_EQ(solo.total().sent + solo.total().received, 0u);
  EXPECT_EQ(solo.sync_ms, 0);
  // A batch of rows picks the algorithm for the batch's message size.
  CostParams big;
  big.batch = 512;
  EXPECT_EQ(node_cost(must_plan(llama8b(Type::Q4_0), equal(8)), 0, big).algo, AllReduce::kRing);
}

TEST(Cost, FormatPlan) {
  CostParams c;
  const std::string a = format_plan(must_plan(smollm2(Type::Q8_0), equal(4)), c);
  EXPECT_NE(a.find("dup"), std::string::npos) << a;
  EXPECT_NE(a.find("<- chosen"), std::string::npos) << a;
  EXPECT_NE(a.find("distributed-llama"), std::string::npos) << a;
  const std::string b = format_plan(must_plan(llama1b(Type::Q4_K), equal(16)), c);
  EXPECT_NE(b.find("re-encodes them to Q8_0"), std::string::npos) << b;
  EXPECT_NE(b.find("cannot run N=16"), std::string::npos) << b;
  const std::string solo = format_plan(must_plan(llama8b(Type::Q4_0), {}), c);
  EXPECT_NE(solo.find("predicted"), std::string::npos) << solo;
}


}  // namespace
}  // namespace plan
