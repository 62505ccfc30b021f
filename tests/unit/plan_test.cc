// plan_test.cc: the plan module. For many (H, G, N, capacities) combinations: every head,
// ff row and vocab row owned exactly once, KV ranges exact, shares proportional, bytes
// equal to an independent recomputation, re-encodes exactly where block boundaries are
// cut (cost_test.cc: the cost model).
// Deliberately not here: anything that runs a slice (runtime tests compare multi-node
// results with single-node ones).
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "plan/cost.h"
#include "plan/plan.h"
#include "plan_fixture.h"
#include "model/backend.h"
#include "model/kv_cache.h"
#include "runtime/node.h"
#include "util/swa_ring.h"

namespace plan {
namespace {

using namespace plan::test;
using tensor::Type;


// Bytes recomputed from scratch: per node, per matrix, rows owned times bytes per row.
uint64_t direct_bytes(const Plan& p, int i) {
  const ModelShape& s = p.shape;
  const NodeSlice& ns = p.nodes[i];
  uint64_t b = 0;
  for (int l = 0; l < s.n_layers; ++l) {
    const MatrixTypes& m = s.types(l);
    for (int h = ns.heads.begin; h < ns.heads.end; ++h) b += s.head_dim * tensor::row_bytes(m.wq, s.dim);
    for (int g = ns.kv_heads.begin; g < ns.kv_heads.end; ++g)
      b += s.head_dim * (tensor::row_bytes(m.wk, s.dim) + tensor::row_bytes(m.wv, s.dim));
    const int64_t cols = int64_t(ns.heads.size()) * s.head_dim;
    const Type wo = slice_type(m.wo, int64_t(ns.heads.begin) * s.head_dim, int64_t(ns.heads.end) * s.head_dim);
    b += uint64_t(s.dim) * (cols / tensor::traits(wo).block_size) * tensor::traits(wo).block_bytes;
    b += uint64_t(ns.ff.size()) * (tensor::row_bytes(m.gate, s.dim) + tensor::row_bytes(m.up, s.dim));
    const Type down = slice_type(m.down, ns.ff.begin, ns.ff.end);
    b += uint64_t(s.dim) * (ns.ff.size() / tensor::traits(down).block_size) * tensor::traits(down).block_bytes;
    b += 2 * 4 * uint64_t(s.dim);
    if (s.qk_norm) b += 2 * 4 * uint64_t(s.head_dim);
    if (s.qkv_bias) b += 4 * uint64_t(s.head_dim) * (ns.heads.size() + 2 * ns.kv_heads.size());
  }
  b += uint64_t(ns.vocab.size()) * tensor::row_bytes(s.output, s.dim) + 4 * uint64_t(s.dim);
  return b;
}

// Every invariant of a plan against its shape and capacities.
void check_plan(const Plan& p, const std::vector<double>& caps) {
  const ModelShape& s = p.shape;
  const int n = p.n_nodes();
  ASSERT_EQ(n, static_cast<int>(caps.size()));
  double sum = 0;
  for (double c : caps) sum += c;
  std::vector<int> head_owner(s.n_heads, 0), ff_owner(s.n_ff, 0), vocab_owner(s.n_vocab, 0);
  std::vector<std::set<int>> kv_nodes(s.n_kv_heads);
  for (int i = 0; i < n; ++i) {
    const NodeSlice& ns = p.nodes[i];
    EXPECT_GE(ns.heads.size(), n <= s.n_heads ? 1 : 0) << "node " << i;  // beyond H nodes some get none
    EXPECT_GE(ns.ff.size(), 1);
    EXPECT_GE(ns.vocab.size(), 1);
    for (int h = ns.heads.begin; h < ns.heads.end; ++h) ++head_owner[h];
    for (int f = ns.ff.begin; f < ns.ff.end; ++f) ++ff_owner[f];
    for (int v = ns.vocab.begin; v < ns.vocab.end; ++v) ++vocab_owner[v];
    // KV range: exactly the KV heads this node's query heads read.
    std::set<int> read;
    for (int h = ns.heads.begin; h < ns.heads.end; ++h) read.insert(h / s.group());
    std::set<int> have;
    for (int g = ns.kv_heads.begin; g < ns.kv_heads.end; ++g) {
      have.insert(g);
      kv_nodes[g].insert(i);
    }
    EXPECT_EQ(read, have) << "node " << i;
    // Shares proportional: within one unit of the exact quota (largest remainder).
    const double q_heads = double(s.n_heads) / p.head_unit * caps[i] / sum;
    EXPECT_LT(std::abs(ns.heads.size() / p.head_unit - q_heads), 1.0 + 1e-9) << "node " << i;
    if (n <= s.n_heads) {
      EXPECT_DOUBLE_EQ(ns.ff_share, caps[i] / sum);  // else larger where heads are fewer
    }
    const double q_ff = double(s.n_ff) / p.ff_unit * ns.ff_share;
    EXPECT_LT(std::abs(ns.ff.size() / p.ff_unit - q_ff), 1.0 + 1e-9);
    EXPECT_LT(std::abs(ns.vocab.size() - double(s.n_vocab) * caps[i] / sum), 1.0 + 1e-9);
    EXPECT_EQ(ns.ff.begin % p.ff_unit, 0);
    EXPECT_EQ(ns.heads.begin % p.head_unit, 0);
    EXPECT_EQ(ns.holds_embedding, i == 0);
    EXPECT_EQ(weight_bytes(p, i), direct_bytes(p, i)) << "node " << i;
    EXPECT_EQ(kv_bytes_per_1k(p, i), 2ull * ns.kv_heads.size() * s.head_dim * 2 * s.n_layers * 1000);
  }
  for (int c : head_owner) EXPECT_EQ(c, 1);
  for (int c : ff_owner) ASSERT_EQ(c, 1);
  for (int c : vocab_owner) ASSERT_EQ(c, 1);
  // Duplicated KV heads: a node's shared count equals its KV heads another node also has.
  for (int i = 0; i < n; ++i) {
    int shared = 0;
    for (int g = p.nodes[i].kv_heads.begin; g < p.nodes[i].kv_heads.end; ++g) shared += kv_nodes[g].size() > 1;
    EXPECT_EQ(p.nodes[i].n_kv_shared, shared) << "node " << i;
  }
  // Summed over nodes, the weights are the model once, plus duplicated KV rows and the
  // norms replicated on every node (when nothing was re-encoded).
  bool reencoded = false;
  for (const NodeSlice& ns : p.nodes) reencoded = reencoded || ns.n_wo_reencoded || ns.n_down_reencoded;
  if (!reencoded && s.layers.empty() && !s.qkv_bias && !s.qk_norm) {
    uint64_t total = 0, kv_rows = 0;
    for (int i = 0; i < n; ++i) {
      total += weight_bytes(p, i);
      kv_rows += uint64_t(p.nodes[i].kv_heads.size()) * s.head_dim;
    }
    const MatrixTypes& m = s.layer;
    const uint64_t D = s.dim, q = uint64_t(s.n_heads) * s.head_dim, F = s.n_ff;
    const uint64_t per_layer = q * tensor::row_bytes(m.wq, D) + D * tensor::row_bytes(m.wo, q) +
                               F * (tensor::row_bytes(m.gate, D) + tensor::row_bytes(m.up, D)) +
                               D * tensor::row_bytes(m.down, F);
    const uint64_t expect = s.n_layers * (per_layer + kv_rows * (tensor::row_bytes(m.wk, D) +
                                                                 tensor::row_bytes(m.wv, D))) +
                            uint64_t(s.n_vocab) * tensor::row_bytes(s.output, D) +
                            n * 4 * D * (2 * s.n_layers + 1);
    EXPECT_EQ(total, expect);
  }
}

TEST(Apportion, LargestRemainder) {
  EXPECT_EQ(apportion(9, equal(4)), (std::vector<int>{3, 2, 2, 2}));
  EXPECT_EQ(apportion(32, {2, 1, 1}), (std::vector<int>{16, 8, 8}));
  EXPECT_EQ(apportion(10, {2, 1, 1}), (std::vector<int>{5, 3, 2}));
  EXPECT_EQ(apportion(9, {100, 1}), (std::vector<int>{8, 1}));  // minimum of one
  EXPECT_EQ(apportion(3, equal(3)), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(apportion(2, equal(4), 0), (std::vector<int>{1, 1, 0, 0}));
  for (int n = 1; n <= 64; ++n) {
    std::vector<double> caps;
    for (int i = 0; i < n; ++i) caps.push_back(1 + (i * 7) % 5);
    const auto a = apportion(1000, caps);
    int sum = 0;
    for (int x : a) sum += x;
    EXPECT_EQ(sum, 1000);
  }
}

TEST(Plan, SliceType) {
  EXPECT_EQ(slice_type(Type::Q4_K, 0, 512), Type::Q4_K);
  EXPECT_EQ(slice_type(Type::Q4_K, 256, 384), Type::Q8_0);
  EXPECT_EQ(slice_type(Type::Q4_0, 32, 64), Type::Q4_0);
  EXPECT_EQ(slice_type(Type::Q4_0, 16, 64), Type::F16);
  EXPECT_EQ(slice_type(Type::F16, 3, 7), Type::F16);
  EXPECT_EQ(slice_type(Type::BF16, 3, 7), Type::BF16);
}

TEST(Plan, SmolLM2AllN) {
  for (Type t : {Type::Q8_0, Type::Q4_0, Type::F16}) {
    for (int n = 1; n <= 9; ++n) {
      SCOPED_TRACE("N=" + std::to_string(n) + " " + tensor::type_name(t));
      const Plan p = must_plan(smollm2(t), equal(n));
      check_plan(p, equal(n));
      for (const NodeSlice& ns : p.nodes) {
        EXPECT_EQ(ns.n_wo_reencoded, 0);  // d = 64 always fills 32-blocks
        EXPECT_EQ(ns.n_down_reencoded, 0);
      }
    }
  }
  const Plan p4 = must_plan(smollm2(Type::Q8_0), equal(4));
  EXPECT_EQ(p4.nodes[0].heads, (Range{0, 3}));
  EXPECT_EQ(p4.nodes[1].kv_heads, (Range{1, 2}));
  EXPECT_EQ(p4.nodes[2].kv_heads, (Range{1, 3}));  // heads 5,6 read KV heads 1 and 2
  EXPECT_EQ(p4.nodes[2].n_kv_shared, 2);
  EXPECT_EQ(p4.nodes[0].n_kv_shared, 0);
}

TEST(Plan, SmolLM2Uneven) {
  const std::vector<double> caps = {2, 1};
  const Plan p = must_plan(smollm2(Type::Q8_0), caps);
  check_plan(p, caps);
  EXPECT_EQ(p.nodes[0].heads, (Range{0, 6}));
  EXPECT_EQ(p.nodes[1].heads, (Range{6, 9}));
  EXPECT_EQ(p.nodes[0].kv_heads, (Range{0, 2}));
  EXPECT_EQ(p.nodes[1].kv_heads, (Range{2, 3}));
  EXPECT_EQ(p.nodes[0].ff, (Range{0, 1024}));
  EXPECT_EQ(p.nodes[0].vocab, (Range{0, 32768}));
  EXPECT_EQ(p.nodes[0].n_kv_shared + p.nodes[1].n_kv_shared, 0);
}

TEST(Plan, Llama8B) {
  for (Type t : {Type::Q4_0, Type::Q8_0, Type::Q4_K, Type::Q6_K}) {
    for (int n : {1, 2, 3, 5, 8, 16, 32}) {
      SCOPED_TRACE("N=" + std::to_string(n) + " " + tensor::type_name(t));
      const Plan p = must_plan(llama8b(t), equal(n));
      check_plan(p, equal(n));
      if (n <= 8 && 32 % n == 0) {
        for (const NodeSlice& ns : p.nodes) EXPECT_EQ(ns.n_kv_shared, 0);
      }
    }
  }
  for (auto caps : std::vector<std::vector<double>>{{2, 1, 1}, {3, 1}, {1, 2, 3, 4, 5}, {10, 1, 1, 1}}) {
    check_plan(must_plan(llama8b(Type::Q4_K), caps), caps);
  }
  // 16 nodes on 8 KV heads: every KV head computed by exactly two nodes.
  const Plan p16 = must_plan(llama8b(Type::Q4_0), equal(16));
  for (const NodeSlice& ns : p16.nodes) {
    EXPECT_EQ(ns.kv_heads.size(), 1);
    EXPECT_EQ(ns.n_kv_shared, 1);
  }
}

TEST(Plan, Llama70B64Nodes) {
  for (Type t : {Type::Q4_0, Type::Q4_K}) {
    const Plan p = must_plan(llama70b(t), equal(64));
    check_plan(p, equal(64));
    for (const NodeSlice& ns : p.nodes) EXPECT_EQ(ns.heads.size(), 1);
  }
  // 64 one-head ranges of 128 columns cannot all fall on Q4_K's 256-blocks.
  const Plan pk = must_plan(llama70b(Type::Q4_K), equal(64));
  EXPECT_EQ(pk.head_unit, 1);
  for (const NodeSlice& ns : pk.nodes) EXPECT_EQ(ns.n_wo_reencoded, 80);
  EXPECT_EQ(pk.ff_unit, 256);  // 112 down blocks over 64 nodes
}

TEST(Plan, TooManyNodes) {
  // Query heads do not limit N (below); MLP rows, vocabulary rows and embedding rows do.
  ModelShape s = make_shape("tiny-ff", 64, 2, 4, 2, 8, 100, Type::F32);
  auto p = make_plan(s, equal(9));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().find("only 8 MLP rows"), std::string::npos) << p.error();
  EXPECT_NE(p.error().find("at most 8 nodes"), std::string::npos) << p.error();
  check_plan(must_plan(s, equal(8)), equal(8));
  s.n_ff = 256, s.n_vocab = 40;
  ASSERT_FALSE(make_plan(s, equal(41)).ok());
  EXPECT_NE(make_plan(s, equal(41)).error().find("vocabulary rows"), std::string::npos);
  EXPECT_TRUE(make_plan(llama8b(Type::Q4_0), equal(33)).ok());
  EXPECT_TRUE(make_plan(llama70b(Type::Q4_0), equal(64)).ok());
}

// More nodes than query heads (Gemma 3 270M: 4 heads of 256 over one KV head): the
// smallest shares get no head and no KV head; everything else is dealt as usual.
TEST(Plan, MoreNodesThanQueryHeads) {
  ModelShape g = make_shape("gemma3-270m", 640, 18, 4, 1, 2048, 262144, Type::Q8_0);
  g.head_dim = 256;
  g.layer.wo = Type::Q4_K;
  for (bool exact : {false, true}) {
    for (const auto& caps : std::vector<std::vector<double>>{equal(5), equal(8), {2, 1, 2, 1, 2}, {1, 3, 1, 1, 1, 1}}) {
      SCOPED_TRACE("N=" + std::to_string(caps.size()) + (exact ? " exact" : ""));
      const Plan p = must_plan(g, caps, exact);
      if (!exact) check_plan(p, caps);  // (its byte recount is the partial-sum cut's)
      if (exact) {  // the weights add up to one node's, plus the one KV head's copies and norms
        uint64_t sum = 0, kv_copies = 0;
        for (int i = 0; i < p.n_nodes(); ++i) {
          sum += weight_bytes(p, i);
          kv_copies += p.nodes[i].kv_heads.size();
          EXPECT_TRUE(p.nodes[i].gather_q8_att && p.nodes[i].gather_q8_ff);
        }
        const uint64_t kv = uint64_t(g.head_dim) * 2 * tensor::row_bytes(Type::Q8_0, g.dim) * g.n_layers;
        const uint64_t replicated = uint64_t(p.n_nodes() - 1) * (2 * g.n_layers + 1) * g.dim * 4;
        EXPECT_EQ(sum, weight_bytes(must_plan(g, equal(1)), 0) + (kv_copies - 1) * kv + replicated);
      }
      int headless = 0;
      for (const NodeSlice& ns : p.nodes) {
        EXPECT_LE(ns.heads.size(), 2);
        if (ns.heads.size() == 0) {
          ++headless;
          EXPECT_EQ(ns.kv_heads.size(), 0);
          EXPECT_EQ(ns.n_kv_shared, 0);
          EXPECT_EQ(ns.n_wo_reencoded, 0);
          EXPECT_EQ(kv_bytes_per_1k(p, int(&ns - p.nodes.data())), 0u);
        } else {
          EXPECT_EQ(ns.kv_heads, (Range{0, 1}));
          EXPECT_EQ(ns.n_kv_shared, 1);  // the one KV head, on every node with a head
        }
      }
      int with_heads = 0;
      for (const NodeSlice& ns : p.nodes) with_heads += ns.heads.size() > 0;
      EXPECT_EQ(headless, p.n_nodes() - with_heads);
      EXPECT_GE(headless, p.n_nodes() - 4);
      bool noted = false;
      for (const std::string& note : p.notes) noted = noted || note.find("no query heads") != std::string::npos;
      EXPECT_TRUE(noted);
    }
  }
  // Largest remainder: the smaller shares go without (ties: the higher index); here node 3,
  // between nodes with heads.
  const Plan p = must_plan(g, {2, 1, 2, 1, 2}, true);
  EXPECT_EQ(p.nodes[1].heads, (Range{1, 2}));
  EXPECT_EQ(p.nodes[3].heads.size(), 0);
  EXPECT_EQ(p.nodes[4].heads, (Range{3, 4}));
  EXPECT_NE(describe_slices(p).find("node 3: share 0.125 heads [3,3) kv [0,0) ff"), std::string::npos)
      << describe_slices(p);
}

// A node without heads gets more MLP rows in their place: every node's bytes read per token
// follow its share, within the rounding of two ff units (and a vocabulary row).
TEST(Plan, HeadlessNodesTakeMoreMlpRows) {
  ModelShape g = make_shape("gemma3-270m", 640, 18, 4, 1, 2048, 262144, Type::Q8_0);
  g.head_dim = 256;
  for (bool exact : {false, true}) {
    for (int n : {5, 6, 8}) {
      SCOPED_TRACE("N=" + std::to_string(n) + (exact ? " exact" : ""));
      const Plan p = must_plan(g, equal(n), exact);
      const uint64_t ff_row = uint64_t(g.n_layers) * 3 * tensor::row_bytes(Type::Q8_0, g.dim);
      const uint64_t slack = 2 * uint64_t(p.ff_unit) * ff_row + 2 * tensor::row_bytes(Type::Q8_0, g.dim);
      uint64_t lo = UINT64_MAX, hi = 0;
      int ff_headless = 0, ff_headed = INT32_MAX;
      for (int i = 0; i < n; ++i) {
        lo = std::min(lo, weight_bytes(p, i));
        hi = std::max(hi, weight_bytes(p, i));
        if (p.nodes[i].heads.size() == 0) ff_headless = std::max(ff_headless, p.nodes[i].ff.size());
        else ff_headed = std::min(ff_headed, p.nodes[i].ff.size());
      }
      EXPECT_LE(hi - lo, slack);
      EXPECT_GT(ff_headless, ff_headed);
      // Dealt by share alone, a node with a head would read one head's attention more.
      const uint64_t head = uint64_t(g.n_layers) * (exact ? 1 : 2) * g.head_dim * tensor::row_bytes(Type::Q8_0, g.dim);
      EXPECT_LT(hi - lo, head);
    }
  }
}

TEST(Plan, BadInput) {
  EXPECT_FALSE(make_plan(llama8b(Type::Q4_0), {1, 0}).ok());
  EXPECT_FALSE(make_plan(llama8b(Type::Q4_0), {1, -2}).ok());
  EXPECT_FALSE(make_plan(llama8b(Type::Q4_0), {1, NAN}).ok());
  auto bad = make_plan(smollm2(Type::Q4_K), equal(2));  // 576 columns are not 256-blocks
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("Q4_K"), std::string::npos);
  ModelShape s = llama8b(Type::Q4_0);
  s.n_kv_heads = 5;
  EXPECT_FALSE(make_plan(s, equal(2)).ok());
  EXPECT_TRUE(make_plan(llama8b(Type::Q4_0), {}).ok());  // one node
}

TEST(Plan, ReencodeOnlyWhenBoundariesCut) {
  for (int n : {2, 4, 8}) {
    const Plan p = must_plan(llama8b(Type::Q4_0), equal(n));
    for (const NodeSlice& ns : p.nodes) EXPECT_EQ(ns.n_wo_reencoded + ns.n_down_reencoded, 0);
    EXPECT_TRUE(p.notes.empty()) << p.notes[0];
  }
  // Q4_K at head_dim 64: heads dealt in fours keep Wo on 256-blocks whenever H/4 >= N.
  for (int n : {2, 3, 5, 8}) {
    const Plan p = must_plan(llama1b(Type::Q4_K), equal(n));
    EXPECT_EQ(p.head_unit, 4);
    for (const NodeSlice& ns : p.nodes) {
      EXPECT_EQ(ns.heads.size() % 4, 0);
      EXPECT_EQ(ns.n_wo_reencoded, 0);
    }
  }
  // 16 nodes: two heads each, 128 columns: Wo slices of odd nodes start mid-block.
  const Plan p16 = must_plan(llama1b(Type::Q4_K), equal(16));
  check_plan(p16, equal(16));
  EXPECT_EQ(p16.head_unit, 1);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(p16.nodes[i].n_wo_reencoded, 16) << i;  // every node cuts
  bool noted = false;
  for (const std::string& note : p16.notes) noted = noted || note.find("re-encodes them to Q8_0") != std::string::npos;
  EXPECT_TRUE(noted);
  EXPECT_EQ(weight_bytes(p16, 1), direct_bytes(p16, 1));
  // down: F = 768 is three Q4_K blocks; four nodes get 32-unit ranges, some re-encoded.
  ModelShape s = make_shape("narrow-ff", 1024, 2, 16, 4, 768, 1000, Type::Q4_K);
  const Plan pf = must_plan(s, equal(4));
  check_plan(pf, equal(4));
  EXPECT_EQ(pf.ff_unit, 32);
  int reencoded = 0;
  for (const NodeSlice& ns : pf.nodes) {
    const bool cut = ns.ff.begin % 256 || ns.ff.end % 256;
    EXPECT_EQ(ns.n_down_reencoded, cut ? 2 : 0);
    reencoded += cut;
  }
  EXPECT_GT(reencoded, 0);
  bool down_noted = false;
  for (const std::string& note : pf.notes) down_noted = down_noted || note.find("down columns") != std::string::npos;
  EXPECT_TRUE(down_noted);
}

// An MoE shape (the 30B-A3B's): a node reads its rows of n_expert_used experts and the
// whole F32 router per token, and holds its rows of all n_expert.
TEST(Plan, MoeReadsUsedExpertsHoldsAll) {
  ModelShape s = make_shape("qwen3-30b-a3b", 2048, 48, 32, 4, 768, 151936, Type::Q4_0);
  s.head_dim = 128, s.n_expert = 128, s.n_expert_used = 8;
  ModelShape dense = s;
  dense.n_expert = dense.n_expert_used = 0;
  for (int n : {1, 2, 3, 4, 16}) {
    auto p = make_plan(s, std::vector<double>(n, 1.0));
    auto d = make_plan(dense, std::vector<double>(n, 1.0));
    ASSERT_TRUE(p.ok() && d.ok()) << p.error();
    for (int i = 0; i < n; ++i) {
      const uint64_t f = p->nodes[i].ff.size();
      const uint64_t one = f * 2 * tensor::row_bytes(Type::Q4_0, 2048) + 2048 * tensor::row_bytes(Type::Q4_0, f);
      const uint64_t router = 128 * 2048 * 4;
      EXPECT_EQ(weight_bytes(*p, i), weight_bytes(*d, i) + 48 * (7 * one + router)) << "N=" << n << " node " << i;
      EXPECT_EQ(resident_bytes(*p, i), weight_bytes(*p, i) + 48 * 120 * one) << "N=" << n << " node " << i;
    }
  }
}

// F = 768 of Q4_K is 3 down blocks. With partial sums, 2 nodes get 512 / 256 rows (a
// smaller unit would re-encode down's slices); in exact mode down is cut by rows, so the
// rows follow the shares (384 / 384, gathered as F32) and whole blocks stay where they can.
TEST(Plan, ExactModeDealsExpertRowsByTheShares) {
  ModelShape s = make_shape("qwen3-30b-a3b", 2048, 48, 32, 4, 768, 151936, Type::Q4_K);
  s.head_dim = 128, s.n_expert = 128, s.n_expert_used = 8;
  const Plan sums = must_plan(s, equal(2));
  EXPECT_EQ(sums.nodes[0].ff.size(), 512);
  EXPECT_EQ(sums.nodes[0].n_down_reencoded, 0);
  const Plan exact = must_plan(s, equal(2), /*exact=*/true);
  EXPECT_EQ(exact.ff_unit, 32);
  EXPECT_EQ(exact.nodes[0].ff, (Range{0, 384}));
  EXPECT_EQ(exact.nodes[1].ff, (Range{384, 768}));
  EXPECT_FALSE(exact.nodes[0].gather_q8_ff);
  EXPECT_EQ(weight_bytes(exact, 0), weight_bytes(exact, 1));  // 512 / 256 rows: 334 / 249 MB
  // Exact sync's traffic counts the hidden rows of all 8 experts a token reads (F32 here).
  CostParams c;
  const uint64_t per_layer = tensor::row_bytes(Type::Q8_K, 16 * 128) + 8 * 4 * 384 + 8 * 1024;
  EXPECT_EQ(node_cost(exact, 0, c).allreduce[0].sent, per_layer * s.n_layers * c.batch);
  // 3 nodes: one block each, on the shares: blocks kept, gathered as Q8_K.
  const Plan three = must_plan(s, equal(3), /*exact=*/true);
  EXPECT_EQ(three.ff_unit, 256);
  EXPECT_TRUE(three.nodes[0].gather_q8_ff);
  // {2, 1}: 512 / 256 is the shares: blocks kept.
  EXPECT_EQ(must_plan(s, {2, 1}, /*exact=*/true).ff_unit, 256);
}

TEST(Plan, MixedLayerTypesAndExtras) {
  ModelShape s = llama8b(Type::Q4_K);
  s.layers.assign(s.n_layers, s.layer);
  for (int l = 0; l < s.n_layers; l += 3) s.layers[l].down = s.layers[l].wv = Type::Q6_K;
  s.layers[1].wo = Type::Q8_0;
  s.output = Type::Q6_K;
  s.qkv_bias = true;
  s.qk_norm = true;
  for (int n : {1, 3, 7}) check_plan(must_plan(s, equal(n)), equal(n));
}

TEST(Plan, ExactModeCutsWoAndDownByRows) {
  for (Type t : {Type::Q4_0, Type::Q4_K}) {
    SCOPED_TRACE(tensor::type_name(t));
    const ModelShape s = llama8b(t);
    const Plan whole = must_plan(s, equal(1));
    for (auto caps : std::vector<std::vector<double>>{equal(2), equal(3), {2, 1, 1}, equal(16)}) {
      const Plan p = must_plan(s, caps, /*exact=*/true);
      // Rows tile D; nothing re-encoded, so the weights add up to one node's (plus the
      // duplicated KV heads' Wk/Wv rows).
      int next = 0;
      uint64_t sum = 0;
      for (int i = 0; i < p.n_nodes(); ++i) {
        const NodeSlice& ns = p.nodes[i];
        EXPECT_TRUE(ns.exact);
        EXPECT_EQ(ns.rows.begin, next);
        next = ns.rows.end;
        EXPECT_EQ(ns.n_wo_reencoded + ns.n_down_reencoded, 0);
        // Q8_0 activations (Q4_0) fall on 32-blocks; Q8_K ones (Q4_K) need heads in 4s.
        EXPECT_TRUE(ns.gather_q8_ff);
        sum += weight_bytes(p, i);
      }
      EXPECT_EQ(next, s.dim);
      uint64_t dup = 0;
      for (const NodeSlice& ns : p.nodes)
        dup += uint64_t(ns.kv_heads.size()) * s.head_dim * 2 * tensor::row_bytes(t, s.dim) * s.n_layers;
      dup -= uint64_t(s.n_kv_heads) * s.head_dim * 2 * tensor::row_bytes(t, s.dim) * s.n_layers;
      const uint64_t replicated = uint64_t(p.n_nodes() - 1) * (2 * s.n_layers + 1) * s.dim * 4;
      EXPECT_EQ(sum, weight_bytes(whole, 0) + dup + replicated);
      // Traffic: every node sends its share to N-1 peers and receives everyone else's.
      CostParams c;
      uint64_t sent = 0, received = 0;
      for (int i = 0; i < p.n_nodes(); ++i) {
        const NodeCost nc = node_cost(p, i, c);
        sent += nc.allreduce[0].sent;
        received += nc.allreduce[0].received;
        EXPECT_GT(nc.sync_ms, 0);
      }
      EXPECT_EQ(sent, received);
      EXPECT_NE(format_plan(p, c).find("exact sync"), std::string::npos);
    }
  }
}

// Sliding-window layers cost their ring (window + a step's rows + 31, rounded up to 64), not
// the window alone: plan's KV figure and the runtime's memory check count what KvCache holds.
TEST(Plan, SlidingWindowRingsAreCounted) {
  ModelShape s = make_shape("gpt-oss-like", 4096, 4, 64, 8, 2880, 1000, Type::Q8_0);
  s.n_swa = 128;
  s.n_swa_layers = 2;
  const Plan p = must_plan(s, equal(2));
  const uint64_t row = 2ull * 4 * 64 * 2;  // K and V, 4 KV heads per node, d 64, F16
  EXPECT_EQ(util::swa_ring_rows(128, 1 << 20, 1), 192);
  EXPECT_EQ(util::swa_ring_rows(128, 1 << 20, 129), 320);
  EXPECT_EQ(util::swa_ring_rows(128, 100, 129), 100);
  EXPECT_EQ(kv_bytes_per_1k(p, 1), row * (2 * 1000 + 2 * 192));
  EXPECT_EQ(kv_bytes_per_1k(p, 1, Type::F16, 128), row * (2 * 1000 + 2 * 320));
  bool noted = false;
  for (const auto& n : p.notes) noted = noted || n.find("192 rows for steps of 1 row, 320 for") != std::string::npos;
  EXPECT_TRUE(noted);

  // The same rule sizes the cache, and memory_fit counts what the cache allocates.
  model::Config c;
  c.n_layers = 4; c.n_kv_heads = 8; c.head_dim = 64; c.n_swa = 128; c.swa_pattern = 2;
  const std::vector<int> rings = model::kv_layer_ctx(c, 4096, 129);
  EXPECT_EQ(rings, (std::vector<int>{320, 4096, 320, 4096}));
  for (int blocks : {0, 100}) {
    const size_t held = model::KvCache::bytes_for(4, 64, 4096, model::KvType::kF16, 3, rings, blocks);
    const runtime::MemoryFit f = runtime::memory_fit(c, 4, model::KvType::kF16, 4096, 3, 129, 0, 1.0, blocks);
    EXPECT_EQ(f.kv_bytes, double(held)) << blocks;
    model::KvCache cache(4, 4, 64, 4096, model::KvType::kF16, 3, rings, blocks);
    EXPECT_EQ(held, 2 * cache.row_bytes() * ((blocks ? blocks : 3 * 64) * 2 * 4 * 64 + 3 * 2 * 4 * 320)) << blocks;
    // The host KV cache's entries (--cache-ram) at what KvCache::copy saves: one block's rows
    // of every full layer (no ring), on these KV heads.
    const runtime::MemoryFit h = runtime::memory_fit(c, 4, model::KvType::kF16, 4096, 3, 129, 0, 1.0, blocks, 5);
    EXPECT_EQ(h.host_bytes, 5.0 * double(cache.block_bytes())) << blocks;
    EXPECT_EQ(h.need, f.need + h.host_bytes) << blocks;
  }
}

}  // namespace
}  // namespace plan
