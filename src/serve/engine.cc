// engine.cc: requests on the continuous-batching scheduler, their text and stop strings
// (see engine.h).
#include "serve/engine.h"

#include <chrono>
#include <deque>
#include <random>

#include "plan/plan.h"
#include "serve/stop.h"

namespace serve {

Engine::Engine(runtime::Cluster& cluster, const tokenizer::Tokenizer& tok, int chunk, runtime::Speculation spec)
    : cluster_(cluster), tok_(tok), sched_(cluster, chunk, spec) {
  root_device_ = cluster_.root_device();  // no job yet: the scheduler's thread waits
  refresh_info();
}

void Engine::refresh_info() {
  const runtime::ClusterHealth h = cluster_.health();
  const std::vector<runtime::NodeStats> now = cluster_.stats();
  const plan::Plan& p = cluster_.plan();
  const std::string summary = cluster_.describe();
  std::lock_guard<std::mutex> lock(info_mu_);
  std::vector<NodeInfo> next;
  for (size_t i = 0; i < now.size(); ++i) {
    NodeInfo n;
    n.name = now[i].name;
    n.device = now[i].device.empty() && i == 0 ? root_device_ : now[i].device;
    n.link_alpha_us = now[i].link_alpha_us;
    if (int(i) < p.n_nodes()) {
      n.share = p.nodes[i].share;
      n.memory_bytes = plan::resident_bytes(p, int(i));
    }
    for (const NodeInfo& old : info_.nodes)
      if (old.name == n.name && (old.state == "lost" || old.state == "rejoined")) n.state = "rejoined";
    next.push_back(std::move(n));
  }
  for (const NodeInfo& old : info_.nodes) {
    bool here = false;
    for (const NodeInfo& n : next) here = here || n.name == old.name;
    if (here) continue;
    NodeInfo gone = old;
    gone.state = "lost";
    gone.share = 0;
    gone.memory_bytes = 0;
    next.push_back(std::move(gone));
  }
  info_.nodes = std::move(next);
  info_.summary = summary;
  seen_events_ = h.recoveries + h.lost;
}

void Engine::maybe_refresh_info() {
  const runtime::ClusterHealth h = cluster_.health();
  if (h.recoveries + h.lost != seen_events_) refresh_info();
}

ClusterInfo Engine::cluster_info() const {
  std::lock_guard<std::mutex> lock(info_mu_);
  return info_;
}

namespace {

// What the scheduler's thread hands to the request's thread.
struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  struct Piece {
    std::string text;
    std::vector<TokenLogprobs> logprobs;  // of the tokens behind it
    int tokens = 0;  // how many
  };
  std::deque<Piece> pieces;
  std::vector<TokenLogprobs> pending;  // of tokens whose text is not out yet
  bool started = false, done = false, stopped = false;
  int completion = 0;  // tokens shown (end-of-text not counted)
  int pending_tokens = 0;  // of those, the ones not yet in a piece
  runtime::JobEnd end;
  void push(std::string s) {
    std::lock_guard<std::mutex> lock(mu);
    started = true;
    if (!s.empty() || !pending.empty() || pending_tokens > 0)
      pieces.push_back({std::move(s), std::move(pending), pending_tokens});
    pending.clear();
    pending_tokens = 0;
    cv.notify_all();
  }
};

// The job's callbacks: its tokens as text through the stop strings into ch, then its end
// (refresh: on the scheduler's thread after each step, which may have re-formed).
void connect(runtime::Job& job, const std::shared_ptr<Channel>& ch, const tokenizer::Tokenizer* tok,
             const std::shared_ptr<StopMatcher>& stop, const std::function<void()>& refresh) {
  auto dec = std::make_shared<tokenizer::StreamDecoder>(*tok);
  job.on_token = [refresh, ch, dec, stop, tok](int32_t id, const sampler::Logprobs* lp) {
    refresh();
    if (tok->is_eog(id)) {
      ch->stopped = true;
      ch->push("");
      return false;
    }
    {
      std::lock_guard<std::mutex> lock(ch->mu);
      ch->completion++;
      ch->pending_tokens++;
    }
    if (lp) {
      TokenLogprobs t{tok->piece(id), lp->logprob, {}};
      for (const sampler::TokenLogprob& c : lp->top) t.top.emplace_back(tok->piece(c.id), c.logprob);
      std::lock_guard<std::mutex> lock(ch->mu);
      ch->pending.push_back(std::move(t));
    }
    ch->push(stop->push(dec->push(id)));
    if (stop->stopped()) ch->stopped = true;
    return !stop->stopped();
  };
  job.on_end = [refresh, ch, dec, stop](const runtime::JobEnd& e) {
    refresh();
    std::string rest;
    if (!e.cancelled && e.status.ok() && !stop->stopped()) rest = stop->push(dec->flush()) + stop->flush();
    std::lock_guard<std::mutex> lock(ch->mu);
    if (!rest.empty() || !ch->pending.empty() || ch->pending_tokens > 0)
      ch->pieces.push_back({std::move(rest), std::move(ch->pending), ch->pending_tokens});
    ch->pending_tokens = 0;
    ch->end = e;
    ch->done = true;
    ch->cv.notify_all();
  };
}

// Hands ch's pieces to the sinks as they come, on the caller's thread, until the job is
// done; true when the client went away (the job is then cancelled). lock holds ch.mu, at
// the start and at the end.
bool deliver(Channel& ch, std::unique_lock<std::mutex>& lock, runtime::Job& job, const TextSink& sink,
             const StillWaiting& waiting, const LogprobSink& logprobs, const TokenCountSink& tokens) {
  bool gone = false;
  for (;;) {
    const bool woke = ch.cv.wait_for(lock, std::chrono::milliseconds(100),
                                     [&] { return ch.done || !ch.pieces.empty(); });
    std::deque<Channel::Piece> pieces;
    pieces.swap(ch.pieces);
    const bool done = ch.done, started = ch.started;
    lock.unlock();
    for (const Channel::Piece& p : pieces) {
      if (gone) break;
      if (logprobs && !p.logprobs.empty()) logprobs(p.logprobs);
      if (tokens && p.tokens > 0) tokens(p.tokens);
      if (!p.text.empty() && !sink(p.text)) gone = true;
    }
    if (!woke && !gone) gone = started || !waiting ? !sink("") : !waiting();
    if (gone) job.cancel = true;
    lock.lock();
    if (done && ch.pieces.empty()) return gone;
  }
}

}  // namespace

GenerationResult Engine::generate(const GenerationRequest& req, const TextSink& sink, const StillWaiting& waiting,
                                  const LogprobSink& logprobs, const TokenCountSink& tokens) {
  auto ch = std::make_shared<Channel>();
  auto job = std::make_shared<runtime::Job>();
  job->prompt = req.prompt;
  job->params = req.params;
  if (!req.seed_given) job->params.seed = std::random_device{}();
  job->max_tokens = req.max_tokens;
  job->max_guesses = req.max_guesses;
  std::shared_ptr<grammar::GrammarConstraint> constraint;
  std::shared_ptr<grammar::TriggeredConstraint> lazy;
  if (req.grammar) {
    std::shared_ptr<const grammar::VocabTrie> trie;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!trie_) trie_ = std::make_shared<const grammar::VocabTrie>(tok_);
      trie = trie_;
    }
    if (req.triggers.empty())
      job->constraint = constraint = std::make_shared<grammar::GrammarConstraint>(req.grammar, trie);
    else
      job->constraint = lazy = std::make_shared<grammar::TriggeredConstraint>(req.grammar, trie, req.triggers);
  }
  auto stop = std::make_shared<StopMatcher>(req.stop);
  connect(*job, ch, &tok_, stop, [this] { maybe_refresh_info(); });
  sched_.submit(job);

  std::unique_lock<std::mutex> lock(ch->mu);
  const bool gone = deliver(*ch, lock, *job, sink, waiting, logprobs, tokens);
  GenerationResult r;
  const runtime::JobEnd& e = ch->end;
  r.status = e.status;
  r.finish_reason = !e.status.ok() ? "error" : (gone || e.cancelled) ? "cancelled" : ch->stopped ? "stop" : "length";
  r.stop_string = stop->matched();
  r.usage.prompt_tokens = e.prompt_tokens;
  r.usage.cached_tokens = e.cached_tokens;
  r.usage.completion_tokens = ch->completion;
  r.prompt_s = e.prompt_s;
  r.gen_s = e.gen_s;
  lock.unlock();
  record(r, constraint ? &constraint->stats() : lazy ? &lazy->stats() : nullptr);
  return r;
}

void Engine::record(const GenerationResult& r, const grammar::MaskStats* grammar) {
  std::lock_guard<std::mutex> mlock(mu_);
  m_.generations++;
  if (r.finish_reason == "cancelled") m_.cancelled++;
  m_.prompt_tokens += r.usage.prompt_tokens;
  m_.cached_tokens += r.usage.cached_tokens;
  m_.completion_tokens += r.usage.completion_tokens;
  m_.prompt_s += r.prompt_s;
  m_.gen_s += r.gen_s;
  if (grammar) {
    m_.grammar.masks += grammar->masks;
    m_.grammar.cached += grammar->cached;
    m_.grammar.seconds += grammar->seconds;
  }
  if (r.usage.completion_tokens > 1 && r.gen_s > 0) m_.last_tokens_per_s = (r.usage.completion_tokens - 1) / r.gen_s;
}

EngineMetrics Engine::metrics() const {
  runtime::SchedulerStats s = sched_.stats();
  std::lock_guard<std::mutex> lock(mu_);
  EngineMetrics m = m_;
  m.sched = std::move(s);
  m.cluster = cluster_.health();
  return m;
}

}  // namespace serve
