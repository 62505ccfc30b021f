// speculative_test.cc: speculative decoding's parts (lookup guesses, the step-cost fit, the
// choice of k) and its one promise: with guesses from the text, from an identical draft
// model or from an unrelated one, adaptive or fixed, every job's tokens and log-probabilities
// are those it gets without speculation, greedy or sampled, with penalties, several jobs
// at once (one node; e2e/test_speculative.py does clusters); on a sliding-window model, a
// slot taken back after rejected guesses, and a sliding-window draft model, keep to the rings.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <random>

#include "model/loader.h"
#include "model/synthetic.h"
#include "runtime/cluster.h"
#include "runtime/scheduler.h"
#include "runtime/speculative.h"
#include "scratch.h"
#include "toy_model.h"

namespace {

TEST(LookupDraft, ContinuesTheLatestEarlierOccurrenceOfTheLongestSuffix) {
  using V = std::vector<int32_t>;
  // "1 2 3" recurs: the tokens after its latest earlier occurrence (at 5) are 8 9
  const V t = {1, 2, 3, 4, 7, 1, 2, 3, 8, 9, 5, 1, 2, 3};
  EXPECT_EQ(runtime::lookup_draft(t, 2), (V{8, 9}));
  EXPECT_EQ(runtime::lookup_draft(t, 10), (V{8, 9, 5, 1, 2, 3}));  // up to the end of the text
  EXPECT_EQ(runtime::lookup_draft(t, 0), V{});
  EXPECT_EQ(runtime::lookup_draft(V{1, 2, 3, 4}, 4), V{});          // nothing recurs
  EXPECT_EQ(runtime::lookup_draft(V{5, 6, 9, 9, 5, 6}, 3), (V{9, 9, 5}));  // a 2-gram
  EXPECT_EQ(runtime::lookup_draft(V{5, 6, 9, 9, 5, 6}, 3, 4, 3), V{});     // but not when 3 are needed
  EXPECT_EQ(runtime::lookup_draft(V{7, 7, 7, 7}, 3), (V{7}));       // overlapping: the latest one
  EXPECT_EQ(runtime::lookup_draft(V{}, 3), V{});
}

TEST(StepCost, FitsStepAndRowTimesAndUsesThePriorUntilRowsVary) {
  runtime::StepCost c(0.25);
  EXPECT_FALSE(c.known());
  for (int i = 0; i < 10; ++i) c.add(1, 0.010);
  EXPECT_NEAR(c.per_step(), 0.008, 1e-9);  // a + 0.25 a = 0.010
  EXPECT_NEAR(c.per_row(), 0.002, 1e-9);
  for (int i = 0; i < 200; ++i) c.add(1 + i % 5, 0.020 + 0.003 * (1 + i % 5));
  EXPECT_NEAR(c.per_step(), 0.020, 1e-6);
  EXPECT_NEAR(c.per_row(), 0.003, 1e-6);
  EXPECT_NEAR(c.at(4), 0.032, 1e-6);
}

TEST(ChooseGuesses, GuessesOnlyWhatPaysForItself) {
  // A round trip dominates (rows nearly free): guess much when guesses are kept.
  EXPECT_EQ(runtime::choose_guesses(0.9, 0.064, 0.001, 0, 8), 8);
  EXPECT_GE(runtime::choose_guesses(0.5, 0.064, 0.001, 0, 8), 2);
  // A row costs as much as a step (one node, compute-bound): never.
  EXPECT_EQ(runtime::choose_guesses(0.7, 0.010, 0.010, 0, 8), 0);
  // Guesses never kept: never; and never more than allowed.
  EXPECT_EQ(runtime::choose_guesses(0.0, 0.064, 0.001, 0, 8), 0);
  EXPECT_LE(runtime::choose_guesses(0.99, 0.064, 0.0, 0, 3), 3);
  // A draft model that costs a step per guess cannot pay for itself at any acceptance.
  EXPECT_EQ(runtime::choose_guesses(0.95, 0.010, 0.001, 0.010, 8), 0);
}

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logprobs;
  int guessed = 0, kept = 0;
};

class SpeculativeDecoding : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (int i = 0; i < 2; ++i) {
      paths_[i] = shardlm_test::scratch_path("spec" + std::to_string(i) + ".gguf");
      ASSERT_TRUE(
          model::write_synthetic_model(paths_[i], *model::shape_by_name("toy"), tensor::Type::Q8_0, 21 + i).ok());
    }
  }
  static std::string paths_[2];

  static constexpr int kSlots = 3, kChunk = 16, kGuesses = 6;
  runtime::ClusterOptions options() const {
    runtime::ClusterOptions o;
    o.run.ctx = 160;
    o.run.n_slots = kSlots;
    o.run.max_batch = kChunk + kSlots * (1 + kGuesses);
    o.progress = false;
    return o;
  }
  // Every job at once; spec.draft is filled from draft_path when it is not "".
  Outcome run(const std::vector<std::vector<int32_t>>& prompts, const std::vector<sampler::Params>& params,
          runtime::Speculation spec, const std::string& draft_path = "") {
    util::ThreadPool pool(2);
    auto m = model::load_model(paths_[0]);
    EXPECT_TRUE(m.ok());
    auto cl = runtime::Cluster::start(**m, paths_[0], options(), pool);
    EXPECT_TRUE(cl.ok()) << cl.error();
    std::unique_ptr<model::LoadedModel> dm;
    std::unique_ptr<runtime::Cluster> dc;
    if (!draft_path.empty()) {
      auto loaded = model::load_model(draft_path);
      EXPECT_TRUE(loaded.ok());
      dm = std::move(*loaded);
      auto d = runtime::Cluster::start(*dm, draft_path, options(), pool);
      EXPECT_TRUE(d.ok()) << d.error();
      dc = std::move(*d);
      spec.draft = dc.get();
    }
    Outcome out;
    out.tokens.resize(prompts.size());
    out.logprobs.resize(prompts.size());
    {
      runtime::Scheduler sched(**cl, kChunk, spec);
      std::vector<std::promise<runtime::JobEnd>> ends(prompts.size());
      for (size_t j = 0; j < prompts.size(); ++j) {
        auto job = std::make_shared<runtime::Job>();
        job->prompt = prompts[j];
        job->params = params[j];
        job->max_tokens = 40;
        job->on_token = [&out, j](int32_t t, const sampler::Logprobs* lp) {
          out.tokens[j].push_back(t);
          if (lp) {
            out.logprobs[j].push_back(lp->logprob);
            for (const auto& x : lp->top) out.logprobs[j].push_back(x.logprob + float(x.id));
          }
          return true;
        };
        job->on_end = [&ends, j](const runtime::JobEnd& e) { ends[j].set_value(e); };
        sched.submit(job);
      }
      for (auto& e : ends) {
        const runtime::JobEnd end = e.get_future().get();
        EXPECT_TRUE(end.status.ok()) << end.status.message();
        out.guessed += end.guessed;
        out.kept += end.kept;
      }
    }
    return out;
  }
};
std::string SpeculativeDecoding::paths_[2];

TEST_F(SpeculativeDecoding, EveryJobDrawsTheTokensItDrawsWithout) {
  // Prompts that repeat themselves (lookup finds guesses) and one that does not.
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 40, 41, 42, 43, 44, 45, 40, 41, 42, 43, 44, 45, 40, 41},
      {1, 300, 301, 302, 303, 300, 301, 302, 303, 300, 301, 302, 303, 300},
      {1, 7, 99, 250, 33, 18, 402, 5, 77}};
  std::vector<std::vector<sampler::Params>> settings;
  sampler::Params greedy;
  greedy.temperature = 0;
  sampler::Params sampled;  // defaults: top-k 40, top-p, min-p, temperature 0.8
  sampled.seed = 5;
  sampled.top_logprobs = 2;
  sampler::Params penalised = sampled;
  penalised.repeat_penalty = 1.3f;
  penalised.frequency_penalty = 0.2f;
  penalised.repeat_last_n = 8;
  penalised.top_k = 0;  // every node sends its whole range
  penalised.seed = 7;
  settings.push_back({greedy, greedy, greedy});
  settings.push_back({sampled, penalised, greedy});
  for (size_t si = 0; si < settings.size(); ++si) {
    SCOPED_TRACE("settings " + std::to_string(si));
    const Outcome plain = run(prompts, settings[si], {});
    for (const auto& t : plain.tokens) ASSERT_EQ(t.size(), 40u);
    for (bool adaptive : {false, true}) {
      SCOPED_TRACE(adaptive ? "adaptive" : "fixed");
      runtime::Speculation lookup;
      lookup.lookup = kGuesses;
      lookup.adaptive = adaptive;
      const Outcome l = run(prompts, settings[si], lookup);
      EXPECT_EQ(l.tokens, plain.tokens);
      EXPECT_EQ(l.logprobs, plain.logprobs);
      if (!adaptive) {
        EXPECT_GT(l.guessed, 0);
      }
      runtime::Speculation draft;
      draft.draft_max = kGuesses;
      draft.adaptive = adaptive;
      const Outcome same = run(prompts, settings[si], draft, paths_[0]);  // the model itself: every guess kept
      EXPECT_EQ(same.tokens, plain.tokens);
      EXPECT_EQ(same.logprobs, plain.logprobs);
      EXPECT_EQ(same.kept, same.guessed);
      if (!adaptive) {
        EXPECT_GT(same.guessed, 40);
      }
      const Outcome other = run(prompts, settings[si], draft, paths_[1]);  // an unrelated model
      EXPECT_EQ(other.tokens, plain.tokens);
      EXPECT_EQ(other.logprobs, plain.logprobs);
      if (!adaptive) {
        EXPECT_LT(other.kept, other.guessed);
      }
    }
  }
}

// A job's own cap: max_guesses 0 turns speculation off for it alone.
TEST_F(SpeculativeDecoding, AJobCanTurnItOff) {
  runtime::Speculation spec;
  spec.lookup = kGuesses;
  spec.adaptive = false;
  util::ThreadPool pool(2);
  auto m = model::load_model(paths_[0]);
  ASSERT_TRUE(m.ok());
  auto cl = runtime::Cluster::start(**m, paths_[0], options(), pool);
  ASSERT_TRUE(cl.ok());
  runtime::Scheduler sched(**cl, kChunk, spec);
  for (int cap : {0, 2}) {
    auto job = std::make_shared<runtime::Job>();
    job->prompt = {1, 40, 41, 42, 40, 41, 42, 40, 41, 42, 40};
    job->params.temperature = 0;
    job->max_tokens = 30;
    job->max_guesses = cap;
    job->on_token = [](int32_t, const sampler::Logprobs*) { return true; };
    std::promise<runtime::JobEnd> end;
    job->on_end = [&](const runtime::JobEnd& e) { end.set_value(e); };
    sched.submit(job);
    const runtime::JobEnd e = end.get_future().get();
    if (cap == 0) {
      EXPECT_EQ(e.guessed, 0);
    }
    if (cap == 2) {
      EXPECT_GT(e.guessed, 0);
      EXPECT_LE(e.guessed, 2 * e.rounds);
    }
  }
}

// One slot of 192 positions, prompt chunks of 16 and 6 guesses: toy-gemma3's rings (window 8)
// keep (8 + 23 + 31) rows rounded up to 64.
runtime::ClusterOptions window_options() {
  runtime::ClusterOptions o;
  o.run.ctx = 192;
  o.run.n_slots = 1;
  o.run.max_batch = 16 + 1 + 6;
  o.progress = false;
  return o;
}

runtime::Speculation fixed_draft(runtime::Cluster* draft) {
  runtime::Speculation spec;
  spec.draft = draft;
  spec.draft_max = 6;
  spec.adaptive = false;
  return spec;
}

// One greedy job of up to 30 tokens, its caller stopping it after `stop`: its end.
runtime::JobEnd window_job(runtime::Scheduler& sched, std::vector<int32_t> prompt, int stop, std::vector<int32_t>* out) {
  auto j = std::make_shared<runtime::Job>();
  j->prompt = std::move(prompt);
  j->params.temperature = 0;
  j->max_tokens = 30;
  j->on_token = [out, stop](int32_t t, const sampler::Logprobs*) {
    out->push_back(t);
    return int(out->size()) < stop;
  };
  std::promise<runtime::JobEnd> end;
  j->on_end = [&](const runtime::JobEnd& e) { end.set_value(e); };
  sched.submit(j);
  return end.get_future().get();
}

// A sliding-window model (toy-gemma3: window 8, rings of 64 rows here) with a draft model
// that guesses wrong (toy), so the steps reject guesses: a verifying step writes ring rows
// past the tokens the slot keeps. A job that ends in such a step (its caller stops after 10
// tokens), then a job that shares the slot's first 64 tokens: whether the slot can go on
// from there must be judged from the rows the step wrote (Cluster::can_rewind), not from
// the tokens kept (before, the step failed: "KV slot 0 rewound from position 121 to 64").
// Prompt lengths 104-111, so that some land where the two judgements differ.
// The second job ends without error and draws what it draws alone.
TEST(SpeculativeWindow, ReuseAfterRejectedGuessesKeepsToTheRing) {
  const std::string paths[2] = {shardlm_test::toy_model("toy-gemma3", tensor::Type::Q4_1, 31),
                                 shardlm_test::toy_model("toy", tensor::Type::Q4_1, 32)};
  util::ThreadPool pool(1);
  auto m = model::load_model(paths[0]);
  auto dm = model::load_model(paths[1]);
  ASSERT_TRUE(m.ok() && dm.ok());
  const runtime::ClusterOptions o = window_options();
  constexpr int kShared = 64, kStop = 10, kWindow = 8, kRing = 64;
  std::mt19937 rng(5);
  std::vector<int32_t> text(130);
  for (int32_t& t : text) t = int32_t(rng() % 500) + 1;
  std::vector<int32_t> next(text.begin(), text.begin() + kShared), alone_out;
  for (int i = 0; i < 5; ++i) next.push_back(int32_t(rng() % 500) + 1);
  {
    auto fresh = runtime::Cluster::start(**m, paths[0], o, pool);
    ASSERT_TRUE(fresh.ok());
    runtime::Scheduler alone(**fresh, 16);
    ASSERT_TRUE(window_job(alone, next, 30, &alone_out).status.ok());
  }
  int differ = 0;  // cases where the tokens kept would have allowed what the rings do not
  for (int len = 104; len < 112; ++len) {
    SCOPED_TRACE("prompt " + std::to_string(len));
    auto cl = runtime::Cluster::start(**m, paths[0], o, pool);
    auto dc = runtime::Cluster::start(**dm, paths[1], o, pool);
    ASSERT_TRUE(cl.ok() && dc.ok());
    std::vector<int32_t> first_out, next_out;
    runtime::Scheduler sched(**cl, 16, fixed_draft(dc->get()));
    const runtime::JobEnd first = window_job(sched, {text.begin(), text.begin() + len}, kStop, &first_out);
    ASSERT_TRUE(first.status.ok()) << first.status.message();
    ASSERT_LT(first.kept, first.guessed);
    const int kept_end = len + kStop - 2;  // the last position the tokens kept reach (the last draw is not fed)
    differ += kShared - kWindow + 1 > kept_end - kRing && !(*cl)->can_rewind(0, kShared);
    const runtime::JobEnd e = window_job(sched, next, 30, &next_out);
    ASSERT_TRUE(e.status.ok()) << e.status.message();
    EXPECT_EQ(next_out, alone_out);
  }
  EXPECT_GT(differ, 0);
}

// can_rewind says what the step itself finds: a slot 150 positions in (rings of 64 rows) can
// go on from position 120 and not from 64; once it went on from 120, from 64 it can, and
// from 40 the step fails naming the slot. On one node the error says to start again, not to
// check a worker that does not exist.
TEST(SpeculativeWindow, CanRewindAgreesWithTheStep) {
  const std::string path = shardlm_test::toy_model("toy-gemma3", tensor::Type::Q4_1, 51);
  util::ThreadPool pool(1);
  auto m = model::load_model(path);
  ASSERT_TRUE(m.ok());
  auto cl = runtime::Cluster::start(**m, path, window_options(), pool);
  ASSERT_TRUE(cl.ok());
  std::vector<int32_t> text(150);
  for (size_t i = 0; i < text.size(); ++i) text[i] = int32_t(i % 400) + 1;
  runtime::Sequence seq(0, (*cl)->n_vocab());
  ASSERT_TRUE((*cl)->extend(seq, text, false).ok());
  EXPECT_TRUE((*cl)->can_rewind(0, 120));
  EXPECT_FALSE((*cl)->can_rewind(0, 64));
  seq.truncate(120);
  ASSERT_TRUE((*cl)->extend(seq, std::vector<int32_t>{7}, false).ok());
  EXPECT_TRUE((*cl)->can_rewind(0, 64));  // the latest step wrote position 120: 57-120 are kept
  EXPECT_FALSE((*cl)->can_rewind(0, 40));
  seq.truncate(40);
  auto r = (*cl)->extend(seq, std::vector<int32_t>{7}, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("KV slot 0 rewound"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("the model cannot go on; start it again"), std::string::npos);
  EXPECT_EQ(r.status().message().find("worker"), std::string::npos) << r.status().message();
}

// A sliding-window draft model: its own slot, after a long first job, is taken back to the
// next job's shared 64 tokens past what its rings hold. It starts that slot again from
// position 0 instead (before, its step failed and speculation was off for good: "the
// draft model failed ...; going on without it"), so the next job is still guessed for.
TEST(SpeculativeWindow, ASlidingWindowDraftStartsItsSlotAgain) {
  std::string paths[2];  // two of one shape and type: toy_model would write both to one file
  for (int i = 0; i < 2; ++i) {
    paths[i] = shardlm_test::scratch_path("spec_swa_draft" + std::to_string(i) + ".gguf");
    ASSERT_TRUE(model::write_synthetic_model(paths[i], *model::shape_by_name("toy-gemma3"), tensor::Type::Q4_1, 41 + i).ok());
  }
  util::ThreadPool pool(1);
  auto m = model::load_model(paths[0]);
  auto dm = model::load_model(paths[1]);
  ASSERT_TRUE(m.ok() && dm.ok());
  const runtime::ClusterOptions o = window_options();
  auto cl = runtime::Cluster::start(**m, paths[0], o, pool);
  auto dc = runtime::Cluster::start(**dm, paths[1], o, pool);
  ASSERT_TRUE(cl.ok() && dc.ok());
  std::mt19937 rng(7);
  std::vector<int32_t> text(140);
  for (int32_t& t : text) t = int32_t(rng() % 500) + 1;
  std::vector<int32_t> next(text.begin(), text.begin() + 64), out;
  for (int i = 0; i < 5; ++i) next.push_back(int32_t(rng() % 500) + 1);
  runtime::Scheduler sched(**cl, 16, fixed_draft(dc->get()));
  ASSERT_TRUE(window_job(sched, text, 30, &out).status.ok());
  out.clear();
  const runtime::JobEnd e = window_job(sched, next, 30, &out);
  ASSERT_TRUE(e.status.ok()) << e.status.message();
  EXPECT_GT(e.guessed, 0);
}

}  // namespace
