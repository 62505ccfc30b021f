// runtime_protocol_test.cc: the runtime's parts around the sliced model (runtime_test.cc
// has the slicing itself): distributed sampling (local candidates merged at the root) draws
// exactly what Sampler::sample draws on the concatenated logits, sliced row scores combine
// to the whole row's, the protocol's messages round-trip and refuse nonsense, a slot's
// history, the decode-speed probe. (The root's KV block pool: kv_pool_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <tuple>

#include "model/loader.h"
#include "runtime/history.h"
#include "runtime/protocol.h"
#include "runtime/scoring.h"
#include "runtime/speed.h"
#include "sampler/distributed.h"
#include "sampler/sampler.h"
#include "tensor/quants.h"
#include "toy_model.h"
#include "util/thread_pool.h"

namespace {

std::string toy_model(const std::string& shape, tensor::Type type) { return shardlm_test::toy_model(shape, type, 11); }

// --- distributed sampling -------------------------------------------------------------

std::vector<float> random_logits(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0, 3);
  std::vector<float> l(n);
  for (auto& v : l) v = nd(rng);
  for (int i = 0; i < n; i += 97) l[i] = l[(i + 5) % n];  // some exact ties
  return l;
}

int32_t merged_sample(sampler::DistributedSampler& ds, const std::vector<float>& logits,
                      const std::vector<int>& cuts, const std::vector<int32_t>& history) {
  const auto counts = sampler::penalty_counts(ds.params(), history);
  std::vector<std::vector<sampler::Candidate>> parts;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    std::vector<float> local(logits.begin() + cuts[i], logits.begin() + cuts[i + 1]);
    sampler::apply_penalty_counts(ds.params(), counts, local.data(), cuts[i], int(local.size()));
    sampler::apply_logit_bias(ds.params().logit_bias, local.data(), cuts[i], int(local.size()));
    parts.push_back(sampler::local_candidates(local.data(), cuts[i], int(local.size()), ds.k_asked()).cand);
  }
  return ds.sample(parts, int64_t(history.size()));
}

TEST(DistributedSampler, EqualsSamplingTheConcatenatedLogits) {
  const int V = 1000;
  const std::vector<std::vector<int>> splits = {{0, V}, {0, 500, V}, {0, 3, 400, 401, 999, V}, {0, 333, 666, V}};
  std::vector<sampler::Params> params;
  sampler::Params p;
  params.push_back(p);                                       // defaults: top-k 40, top-p, min-p
  p.temperature = 0; params.push_back(p);                    // greedy
  p.temperature = 1.2f; p.top_k = 0; params.push_back(p);    // top-k off: full fallback
  p.top_k = 5; p.top_p = 1; p.min_p = 0; params.push_back(p);
  p.top_k = 2000; params.push_back(p);                       // k >= V
  p.top_k = 40; p.repeat_penalty = 1.3f; p.presence_penalty = 0.5f; p.frequency_penalty = 0.2f;
  p.repeat_last_n = 16; params.push_back(p);
  p.temperature = 0; params.push_back(p);                    // greedy with penalties
  p.logit_bias = {{2, 3.0f}, {401, -100.0f}, {500, 2.5f}, {998, 4.0f}};  // across slices
  params.push_back(p);
  p.temperature = 0.9f; p.top_logprobs = 20; params.push_back(p);  // more candidates asked than drawn from
  for (size_t pi = 0; pi < params.size(); ++pi) {
    for (const auto& cuts : splits) {
      SCOPED_TRACE("params " + std::to_string(pi) + " parts " + std::to_string(cuts.size() - 1));
      sampler::Params q = params[pi];
      q.seed = 1234 + pi;
      sampler::Sampler ref(q, V);
      sampler::DistributedSampler ds(q, V);
      std::vector<int32_t> history = {1, 2, 3, 3, 500, 999, 0, 400};
      for (int step = 0; step < 200; ++step) {
        auto l = random_logits(V, step * 31 + pi);
        std::vector<float> copy = l;
        const int32_t want = ref.sample(copy.data(), history);
        const int32_t got = merged_sample(ds, l, cuts, history);
        ASSERT_EQ(got, want) << "step " << step;
        history.push_back(want);
      }
    }
  }
}

TEST(DistributedSampler, LocalLogSumExpsMergeToTheGlobalOne) {
  auto l = random_logits(300, 9);
  double sum = 0;
  for (float v : l) sum += std::exp(double(v));
  std::vector<float> lses;
  for (int c : {0, 100, 250})
    lses.push_back(sampler::local_candidates(l.data() + c, c, c == 250 ? 50 : (c == 0 ? 100 : 150), 3).lse);
  EXPECT_NEAR(sampler::merge_lse(lses), std::log(sum), 1e-4);
}

// The reported log-probabilities equal a whole-row log-softmax (in double) of the logits
// after penalties and logit_bias, for the drawn token and the top list, on odd vocabulary
// sizes cut at odd places, greedy or sampled.
TEST(DistributedSampler, LogprobsEqualAWholeRowSoftmax) {
  for (int V : {13, 997}) {
    const std::vector<std::vector<int>> splits = {{0, V}, {0, V / 2, V}, {0, 1, V / 3, V - 1, V}};
    for (int top : {0, 1, 5, 20}) {
      for (float temp : {0.0f, 1.0f}) {
        sampler::Params p;
        p.temperature = temp;
        p.top_logprobs = top;
        p.repeat_penalty = 1.2f;
        p.logit_bias = {{0, 1.5f}, {V / 2, -3.0f}, {V - 1, 2.0f}};
        const std::vector<int32_t> history = {1, 3, 3, V - 2};
        for (const auto& cuts : splits) {
          SCOPED_TRACE("V " + std::to_string(V) + " top " + std::to_string(top) + " temp " + std::to_string(temp) +
                       " parts " + std::to_string(cuts.size() - 1));
          sampler::DistributedSampler ds(p, V);
          const auto l = random_logits(V, V + top);
          std::vector<float> row = l;  // the reference: the whole row shaped as the nodes do
          const auto counts = sampler::penalty_counts(p, history);
          sampler::apply_penalty_counts(p, counts, row.data(), 0, V);
          sampler::apply_logit_bias(p.logit_bias, row.data(), 0, V);
          double sum = 0;
          for (float v : row) sum += std::exp(double(v));
          const double lse = std::log(sum);
          std::vector<std::vector<sampler::Candidate>> parts;
          std::vector<float> lses;
          for (size_t i = 0; i + 1 < cuts.size(); ++i) {
            std::vector<float> local(l.begin() + cuts[i], l.begin() + cuts[i + 1]);
            sampler::apply_penalty_counts(p, counts, local.data(), cuts[i], int(local.size()));
            sampler::apply_logit_bias(p.logit_bias, local.data(), cuts[i], int(local.size()));
            auto lc = sampler::local_candidates(local.data(), cuts[i], int(local.size()), ds.k_asked());
            parts.push_back(lc.cand);
            lses.push_back(lc.lse);
          }
          const int32_t t = ds.sample(parts, int64_t(history.size()));
          const auto lp = sampler::logprobs(parts, sampler::merge_lse(lses), t, top);
          EXPECT_NEAR(lp.logprob, row[t] - lse, 1e-4);
          std::vector<int> order(V);
          for (int i = 0; i < V; ++i) order[i] = i;
          std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
          ASSERT_EQ(lp.top.size(), size_t(std::min(top, V)));
          for (size_t i = 0; i < lp.top.size(); ++i) {
            EXPECT_EQ(lp.top[i].id, order[i]) << i;
            EXPECT_NEAR(lp.top[i].logprob, row[order[i]] - lse, 1e-4) << i;
          }
          if (temp == 0) { EXPECT_EQ(t, order[0]); }
        }
      }
    }
  }
}

// logit_bias reaches every node's slice: -100 on the argmax (on one node) forbids it, +100
// on a weak token of another node forces it, greedy or sampled.
TEST(DistributedSampler, LogitBiasForbidsAndForcesAcrossSlices) {
  const int V = 301;
  const std::vector<int> cuts = {0, 100, 201, V};
  auto l = random_logits(V, 77);
  const int32_t best = sampler::argmax(l.data(), V);
  const int32_t weak = int32_t(std::min_element(l.begin(), l.end()) - l.begin());
  for (float temp : {0.0f, 1.0f}) {
    sampler::Params p;
    p.temperature = temp;
    p.logit_bias = {{best, -100.0f}};
    sampler::DistributedSampler forbid(p, V);
    for (int i = 0; i < 50; ++i) EXPECT_NE(merged_sample(forbid, l, cuts, std::vector<int32_t>(i, 1)), best);
    p.logit_bias = {{weak, 100.0f}};
    sampler::DistributedSampler force(p, V);
    for (int i = 0; i < 50; ++i) EXPECT_EQ(merged_sample(force, l, cuts, std::vector<int32_t>(i, 1)), weak);
  }
}

// Perplexity across nodes: each node's (max, sum of exp) over its vocabulary range plus the
// owner's target logit combine to the whole row's -log p (double-precision reference).
TEST(Scoring, SlicedRowScoresCombineToTheWholeRow) {
  auto l = random_logits(1000, 4);
  for (int target : {0, 417, 999}) {
    double sum = 0;
    for (float v : l) sum += std::exp(double(v));
    const double want = std::log(sum) - l[target];
    for (std::vector<int> cuts : {std::vector<int>{0, 1000}, {0, 300, 1000}, {0, 1, 500, 1000}}) {
      std::vector<runtime::RowScore> parts;
      for (size_t i = 0; i + 1 < cuts.size(); ++i)
        parts.push_back(runtime::local_row_score(l.data() + cuts[i], cuts[i], cuts[i + 1] - cuts[i], target));
      auto got = runtime::combine_row_scores(parts);
      ASSERT_TRUE(got.ok()) << got.error();
      EXPECT_NEAR(*got, want, 1e-5) << "target " << target << " nodes " << parts.size();
    }
    // No owner (or two) is an error, not a number.
    runtime::RowScore none = runtime::local_row_score(l.data(), 0, 10, 999);
    EXPECT_FALSE(runtime::combine_row_scores(std::vector<runtime::RowScore>{none}).ok());
  }
}

TEST(Protocol, StepOfSegmentsAndReplyRoundTrip) {
  runtime::Step s;
  runtime::StepSegment score;
  score.slot = 2;
  score.pos = 7;
  score.n = 3;
  score.want = runtime::Want::kScores;
  score.targets = {-1, 5, 9};
  runtime::StepSegment decode;
  decode.slot = 0;
  decode.pos = 40;
  decode.n = 1;
  decode.want = runtime::Want::kCandidates;
  decode.k = 40;
  decode.penalties = {{{3, 2}, {17, 1}}};
  decode.repeat_penalty = 1.1f;
  decode.logit_bias = {{4, -100.0f}, {90, 2.5f}};
  decode.rowwise = true;
  runtime::StepSegment verify;  // drafts: every row sampled, a penalty list per row
  verify.slot = 1;
  verify.pos = 12;
  verify.n = 3;
  verify.want = runtime::Want::kCandidates;
  verify.every_row = verify.rowwise = true;
  verify.penalties = {{}, {{7, 1}}, {{7, 1}, {8, 1}}};
  s.segs = {score, decode, verify};
  std::vector<uint8_t> rows(7 * 4 * 8, 0x3c);  // 7 rows of 8 F32 values
  s.rows = rows;
  auto p = runtime::parse_message<runtime::Step>(runtime::encode_message(s), "test");
  ASSERT_TRUE(p.ok()) << p.error();
  ASSERT_EQ(p->segs.size(), 3u);
  EXPECT_TRUE(p->segs[2].every_row && p->segs[2].rowwise && !p->segs[1].every_row);
  EXPECT_EQ(p->segs[2].penalties, verify.penalties);
  EXPECT_EQ(p->segs[0].targets, score.targets);
  EXPECT_EQ(p->segs[0].want, runtime::Want::kScores);
  EXPECT_EQ(p->segs[1].slot, 0);
  EXPECT_EQ(p->segs[1].pos, 40);
  EXPECT_EQ(p->segs[1].penalties, decode.penalties);
  EXPECT_EQ(p->segs[1].repeat_penalty, 1.1f);
  EXPECT_EQ(p->segs[1].logit_bias, decode.logit_bias);
  EXPECT_TRUE(p->segs[0].logit_bias.empty());
  EXPECT_FALSE(p->segs[0].rowwise);
  EXPECT_TRUE(p->segs[1].rowwise);
  EXPECT_EQ(p->rows_total(), 7);
  EXPECT_TRUE(runtime::check_step_fits(*p, 8, 64, 3, 8, "test").ok());
  // Each refused by name: too few slots, too short a context, too many rows, a slot twice.
  for (auto [ctx, slots, rows_max] : {std::tuple{64, 2, 8}, {40, 3, 8}, {64, 3, 6}})
    EXPECT_FALSE(runtime::check_step_fits(*p, 8, ctx, slots, rows_max, "test").ok()) << ctx << slots << rows_max;
  runtime::Step twice = *p;
  twice.segs[1].slot = 2;
  EXPECT_NE(runtime::check_step_fits(twice, 8, 64, 3, 8, "test").message().find("twice"), std::string::npos);
  // KV block entries (issue 32): the blocks of the segment's rows, from blocks_from on.
  {
    runtime::Step b = s;
    b.segs[0].blocks_from = 0;  // positions 7..9: block 0
    b.segs[0].blocks = {5};
    b.segs[1].blocks_from = 0;  // position 40, the table from its start
    b.segs[1].blocks = {2};
    auto pb = runtime::parse_message<runtime::Step>(runtime::encode_message(b), "test");
    ASSERT_TRUE(pb.ok()) << pb.error();
    EXPECT_EQ(pb->segs[0].blocks, std::vector<int32_t>{5});
    EXPECT_EQ(pb->segs[1].blocks_from, 0);
    EXPECT_EQ(pb->segs[2].blocks_from, -1);
    EXPECT_TRUE(runtime::check_step_fits(*pb, 8, 64, 3, 8, "test", 6).ok());
    EXPECT_NE(runtime::check_step_fits(*pb, 8, 64, 3, 8, "test", 5).message().find("outside the pool"),
              std::string::npos);
    b.segs[0].blocks = {5, 6};  // past the block of its last row: malformed
    EXPECT_FALSE(runtime::parse_message<runtime::Step>(runtime::encode_message(b), "test").ok());
    b.segs[0].blocks_from = 1;  // after the block of its first row: malformed
    b.segs[0].blocks = {};
    EXPECT_FALSE(runtime::parse_message<runtime::Step>(runtime::encode_message(b), "test").ok());
  }
  // Host KV cache copies (issue 32 step 4), in order; a block outside the pool, a negative
  // entry and an unknown kind refused.
  {
    runtime::Step c = s;
    using K = model::KvCopy::Kind;
    c.kv_copies = {{K::kSave, 4, 7}, {K::kRestore, 1, 3}, {K::kForget, 0, 9}};
    auto pc = runtime::parse_message<runtime::Step>(runtime::encode_message(c), "test");
    ASSERT_TRUE(pc.ok()) << pc.error();
    EXPECT_EQ(pc->kv_copies, c.kv_copies);
    EXPECT_TRUE(runtime::check_step_fits(*pc, 8, 64, 3, 8, "test", 5).ok());
    EXPECT_NE(runtime::check_step_fits(*pc, 8, 64, 3, 8, "test", 4).message().find("outside the pool"),
              std::string::npos);
    c.kv_copies[1].entry = -1;
    EXPECT_FALSE(runtime::parse_message<runtime::Step>(runtime::encode_message(c), "test").ok());
    c.kv_copies[1] = {model::KvCopy::Kind(3), 1, 3};
    EXPECT_FALSE(runtime::parse_message<runtime::Step>(runtime::encode_message(c), "test").ok());
  }
  // Token masks, both encodings: a few allowed (run lengths) and every other one (bitmap).
  for (int pattern = 0; pattern < 2; ++pattern) {
    runtime::Step m = s;
    m.segs[1].allowed.assign(3, 0);  // 192 ids
    for (int id = 0; id < 192; ++id)
      if (pattern ? id % 2 == 0 : (id == 5 || id == 130 || id == 131))
        m.segs[1].allowed[size_t(id) / 64] |= uint64_t(1) << (id % 64);
    const std::vector<uint8_t> bytes = runtime::encode_message(m);
    auto pm = runtime::parse_message<runtime::Step>(bytes, "test");
    ASSERT_TRUE(pm.ok()) << pm.error();
    EXPECT_EQ(pm->segs[1].allowed, m.segs[1].allowed) << pattern;
    EXPECT_TRUE(pm->segs[0].allowed.empty() && pm->segs[2].allowed.empty());
    // the shorter encoding: 5 runs (1 + 4 + 5 * 4 bytes) or the 3 words (1 + 4 + 3 * 8), for the 1 byte of none
    EXPECT_EQ(bytes.size(), runtime::encode_message(s).size() + (pattern ? 28 : 24));
    m.segs[0].allowed = m.segs[1].allowed;  // a mask on a segment that samples nothing
    EXPECT_FALSE(runtime::parse_message<runtime::Step>(runtime::encode_message(m), "test").ok());
  }
  s.segs[2].penalties.pop_back();  // a penalty list per sampled row is required
  EXPECT_FALSE(runtime::parse_message<runtime::Step>(runtime::encode_message(s), "test").ok());
  s.segs[2].penalties.push_back({});
  s.segs[0].targets = {1};  // a target per row is required
  EXPECT_FALSE(runtime::parse_message<runtime::Step>(runtime::encode_message(s), "test").ok());
  s.segs.clear();  // a step has at least one segment
  EXPECT_FALSE(runtime::parse_message<runtime::Step>(runtime::encode_message(s), "test").ok());
  runtime::StepReply r;
  r.sampled = {{{{5, 1.5f}, {9, 1.0f}}, 3.25f}, {{}, -1.0f}};
  r.scores = {{1.5f, 2.25, 0.5f, true}, {-3.0f, 10.0, 0.0f, false}};
  auto q = runtime::parse_message<runtime::StepReply>(runtime::encode_message(r), "test");
  ASSERT_TRUE(q.ok()) << q.error();
  ASSERT_EQ(q->sampled.size(), 2u);
  ASSERT_EQ(q->sampled[0].cand.size(), 2u);
  EXPECT_EQ(q->sampled[0].cand[1].id, 9);
  EXPECT_EQ(q->sampled[0].lse, 3.25f);
  ASSERT_EQ(q->scores.size(), 2u);
  EXPECT_EQ(q->scores[0].max, 1.5f);
  EXPECT_EQ(q->scores[0].sum, 2.25);
  EXPECT_TRUE(q->scores[0].owns);
  EXPECT_FALSE(q->scores[1].owns);
}

// The replay history of a KV slot (runtime/cluster.h): a segment at position p drops every
// segment that starts at or after p, keeps one that starts before p whole, and the list
// stays sorted by position.
TEST(SlotHistory, KeepsWhatTheSlotStillReadsInOrder) {
  runtime::SlotHistory h;
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8}, b = {9, 10}, c = {11}, d = {12, 13, 14};
  h.add(0, a);  // 0..7
  h.add(8, b);  // 8..9
  h.add(10, c); // 10
  ASSERT_EQ(h.segs().size(), 3u);
  h.add(9, d);  // truncated to 9: drops c (10), keeps b (8..9) whole
  ASSERT_EQ(h.segs().size(), 3u);
  EXPECT_EQ(h.segs()[1].pos, 8);
  EXPECT_EQ(h.segs()[2].pos, 9);
  EXPECT_EQ(std::vector<int32_t>(h.tokens(h.segs()[2]).begin(), h.tokens(h.segs()[2]).end()), d);
  h.add(4, b);  // truncated to 4: drops b and d, keeps a (0..7) whole
  ASSERT_EQ(h.segs().size(), 2u);
  EXPECT_EQ(h.segs()[0].n, 8);
  EXPECT_EQ(h.segs()[1].pos, 4);
  EXPECT_EQ(h.n_tokens(), a.size() + b.size());
  h.add(0, c);  // a new conversation from 0: only it
  ASSERT_EQ(h.segs().size(), 1u);
  EXPECT_EQ(h.n_tokens(), 1u);
  // A rowwise segment (verified guesses) reaching past the next one's start is cut there.
  h.add(1, d, /*rowwise=*/true);  // 1..3
  h.add(2, b);                    // 2..3: keeps 1 of d
  ASSERT_EQ(h.segs().size(), 3u);
  EXPECT_EQ(h.segs()[1].n, 1);
  EXPECT_EQ(h.tokens(h.segs()[1])[0], 12);
  EXPECT_EQ(h.tokens(h.segs()[2])[0], 9);
  EXPECT_EQ(h.n_tokens(), 1u + 1u + b.size());
}

// A log cut short (Cluster::keep_own, a rollback) cuts the history as the next segment's
// add would, at once: a re-forming before that step must not replay rows past the log,
// except a lane-order segment kept whole, whose end() the slot's block table must reach.
TEST(SlotHistory, TruncateCutsTheLogAndSaysHowFarAReplayWrites) {
  runtime::SlotHistory h;
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8}, b = {9, 10, 11};
  EXPECT_EQ(h.end(), 0);
  h.add(0, a);                    // 0..7, lane order
  h.add(8, b, /*rowwise=*/true);  // 8..10
  EXPECT_EQ(h.end(), 11);
  h.truncate(9);  // the rowwise segment is cut to 8
  ASSERT_EQ(h.segs().size(), 2u);
  EXPECT_EQ(h.segs()[1].n, 1);
  EXPECT_EQ(h.end(), 9);
  h.truncate(5);  // drops it; the lane segment 0..7 stays whole
  ASSERT_EQ(h.segs().size(), 1u);
  EXPECT_EQ(h.end(), 8);
  EXPECT_EQ(h.n_tokens(), a.size());
  h.truncate(0);
  EXPECT_TRUE(h.segs().empty());
  EXPECT_EQ(h.end(), 0);
}

// The speed probe and its reply cross the wire unchanged; a probe of an impossible shape or
// unknown type, and a reply with a negative or NaN speed, are refused by name.
TEST(Protocol, SpeedProbeAndReplyRoundTripAndRefuseNonsense) {
  const runtime::SpeedProbe probe{true, {576, 9, 3, 64, 1536, tensor::Type::Q4_1}};
  auto p = runtime::parse_message<runtime::SpeedProbe>(runtime::encode_message(probe), "test");
  ASSERT_TRUE(p.ok()) << p.error();
  EXPECT_TRUE(p->measure);
  EXPECT_EQ(p->shape.dim, 576);
  EXPECT_EQ(p->shape.n_kv_heads, 3);
  EXPECT_EQ(p->shape.n_ff, 1536);
  EXPECT_EQ(p->shape.type, tensor::Type::Q4_1);
  for (runtime::ProbeShape bad : {runtime::ProbeShape{576, 9, 2, 64, 1536, tensor::Type::Q4_1},   // 9 % 2
                                  runtime::ProbeShape{100, 4, 2, 25, 256, tensor::Type::Q4_0},    // 100 % 32
                                  runtime::ProbeShape{576, 9, 3, 64, -1, tensor::Type::Q4_1}}) {
    auto r = runtime::parse_message<runtime::SpeedProbe>(runtime::encode_message(runtime::SpeedProbe{false, bad}), "worker x");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("speed probe from worker x"), std::string::npos) << r.error();
  }
  std::vector<uint8_t> unknown = runtime::encode_message(probe);
  unknown[unknown.size() - 4] = 200;  // the type id (u32, last)
  EXPECT_FALSE(runtime::parse_message<runtime::SpeedProbe>(unknown, "test").ok());
  const runtime::SpeedReply rep{"Vulkan device 0 (llvmpipe)", 24.5};
  auto q = runtime::parse_message<runtime::SpeedReply>(runtime::encode_message(rep), "test");
  ASSERT_TRUE(q.ok()) << q.error();
  EXPECT_EQ(q->device, rep.device);
  EXPECT_EQ(q->tokens_per_s, 24.5);
  for (double bad : {-1.0, std::nan("")}) {
    auto r = runtime::parse_message<runtime::SpeedReply>(runtime::encode_message(runtime::SpeedReply{"cpu", bad}), "worker y");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("speed reply from worker y"), std::string::npos) << r.error();
  }
}

// probe_shape takes the model's width (an MoE layer: the experts a token reads) and the type
// of most of a layer's matrix bytes; measure_decode_speed times one such layer on the CPU
// and refuses an impossible shape.
TEST(Speed, ProbeShapeAndCpuDecodeSpeed) {
  auto m = model::load_model(toy_model("toy-qwen3", tensor::Type::Q4_K));
  ASSERT_TRUE(m.ok()) << m.error();
  const runtime::ProbeShape s = runtime::probe_shape((*m)->config, (*m)->weights);
  EXPECT_EQ(s.dim, (*m)->config.dim);
  EXPECT_EQ(s.n_heads, (*m)->config.n_heads);
  EXPECT_EQ(s.head_dim, (*m)->config.head_dim);
  EXPECT_EQ(s.n_ff, (*m)->config.n_ff);
  EXPECT_EQ(s.type, tensor::Type::Q4_K);
  model::Config narrow = (*m)->config;  // widths Q4_K blocks do not tile: Q8_0, else F16
  narrow.dim = 96;
  EXPECT_EQ(runtime::probe_shape(narrow, (*m)->weights).type, tensor::Type::Q8_0);
  narrow.dim = 100;
  EXPECT_EQ(runtime::probe_shape(narrow, (*m)->weights).type, tensor::Type::F16);
  util::ThreadPool pool(1);
  auto v = runtime::measure_decode_speed(s, pool, nullptr);
  ASSERT_TRUE(v.ok()) << v.error();
  EXPECT_GT(*v, 10.0);  // a toy layer: thousands of tokens per second
  auto moe = model::load_model(toy_model("toy-qwen3moe", tensor::Type::Q4_0));
  ASSERT_TRUE(moe.ok()) << moe.error();
  const runtime::ProbeShape e = runtime::probe_shape((*moe)->config, (*moe)->weights);
  EXPECT_EQ(e.n_ff, (*moe)->config.n_ff * (*moe)->config.n_expert_used);  // the experts a token reads
  EXPECT_EQ(e.type, tensor::Type::Q4_0);
  runtime::ProbeShape bad = s;
  bad.n_kv_heads = 3;
  EXPECT_FALSE(runtime::measure_decode_speed(bad, pool, nullptr).ok());
  bad = s;
  bad.n_heads = bad.n_kv_heads = 1 << 16;  // a root asking for an absurd width is refused, not obeyed
  auto wide = runtime::measure_decode_speed(bad, pool, nullptr);
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.error().find("too wide"), std::string::npos) << wide.error();
}

TEST(Protocol, SetupCarriesAttentionModeKvTypeAndBatchOrder) {
  auto m = model::load_model(toy_model("toy", tensor::Type::Q8_0));
  ASSERT_TRUE(m.ok()) << m.error();
  runtime::Setup s;
  s.model_hash = "abc";
  s.config = (*m)->config;
  s.slice.heads = {0, 1};
  s.slice.kv_heads = {0, 1};
  s.slice.ff = {0, 8};
  s.slice.vocab = {0, 16};
  s.run.ctx = 64;
  s.run.kv_type = model::KvType::kQ8_0;
  s.run.attention = model::AttentionMode::kFlash;
  s.run.n_slots = 6;
  s.run.kv_blocks = 9;
  s.run.kv_host_blocks = 11;  // each node's memory check counts its share (protocol 14)
  auto p = runtime::parse_message<runtime::Setup>(runtime::encode_message(s), "test");
  ASSERT_TRUE(p.ok()) << p.error();
  EXPECT_EQ(p->run.n_slots, 6);
  EXPECT_EQ(p->run.kv_blocks, 9);
  EXPECT_EQ(p->run.kv_host_blocks, 11);
  s.run.kv_host_blocks = -1;
  EXPECT_FALSE(runtime::parse_message<runtime::Setup>(runtime::encode_message(s), "test").ok());
  s.run.kv_host_blocks = 11;
  EXPECT_EQ(p->run.kv_type, model::KvType::kQ8_0);
  EXPECT_EQ(p->run.attention, model::AttentionMode::kFlash);
  EXPECT_TRUE(p->run.lane_order);
  s.run.lane_order = false;
  auto exact = runtime::parse_message<runtime::Setup>(runtime::encode_message(s), "test");
  ASSERT_TRUE(exact.ok()) << exact.error();
  EXPECT_FALSE(exact->run.lane_order);
  EXPECT_FALSE(exact->run.decode_lanes);
  s.run.decode_lanes = true;
  auto fast = runtime::parse_message<runtime::Setup>(runtime::encode_message(s), "test");
  ASSERT_TRUE(fast.ok()) << fast.error();
  EXPECT_TRUE(fast->run.decode_lanes);
  s.run.decode_lanes = false;
  EXPECT_FALSE(fast->run.attn_bf16);
  s.run.attn_bf16 = true;  // --attn-bf16 reaches every node (protocol 15)
  auto bf16 = runtime::parse_message<runtime::Setup>(runtime::encode_message(s), "test");
  ASSERT_TRUE(bf16.ok()) << bf16.error();
  EXPECT_TRUE(bf16->run.attn_bf16);
  EXPECT_FALSE(bf16->run.decode_lanes);
  s.run.attn_bf16 = false;
  std::vector<uint8_t> bad = runtime::encode_message(s);
  bad[bad.size() - 17] = 8;  // the flag byte (lane order, decode lanes, attn bf16), before the step timeout (f64) and slice bytes (u64)
  auto refused = runtime::parse_message<runtime::Setup>(bad, "test");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("batch-order flag"), std::string::npos) << refused.error();
  s.run.lane_order = true;
  // A Q8_0 cache without flash parses (the wire carries it faithfully); the worker refuses
  // it by name with model::attention_unsupported before building its model.
  s.run.attention = model::AttentionMode::kExact;
  auto odd = runtime::parse_message<runtime::Setup>(runtime::encode_message(s), "test");
  ASSERT_TRUE(odd.ok()) << odd.error();
  EXPECT_NE(model::attention_unsupported(odd->config, odd->run.kv_type, odd->run.attention).find("flash"), std::string::npos);
  // A node without query heads (more nodes than heads) has no KV heads either; an empty
  // head range beside KV heads, or KV heads beyond the model's, are refused.
  s.slice.heads = {4, 4};
  s.slice.kv_heads = {2, 2};
  auto headless = runtime::parse_message<runtime::Setup>(runtime::encode_message(s), "test");
  ASSERT_TRUE(headless.ok()) << headless.error();
  EXPECT_EQ(headless->slice.heads.size(), 0);
  EXPECT_EQ(headless->slice.kv_heads.size(), 0);
  s.slice.kv_heads = {1, 2};
  EXPECT_FALSE(runtime::parse_message<runtime::Setup>(runtime::encode_message(s), "test").ok());
  s.slice.kv_heads = {3, 3};
  EXPECT_FALSE(runtime::parse_message<runtime::Setup>(runtime::encode_message(s), "test").ok());
  s.slice.heads = {1, 1};
  s.slice.kv_heads = {0, 1};
  EXPECT_FALSE(runtime::parse_message<runtime::Setup>(runtime::encode_message(s), "test").ok());
}

}  // namespace
