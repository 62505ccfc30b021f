// engine.cc: the request queue, KV prefix reuse and the generation loop (see engine.h).
#include "serve/engine.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "sampler/distributed.h"
#include "serve/stop.h"
#include "util/timer.h"

namespace serve {

Engine::Engine(runtime::Cluster& cluster, const tokenizer::Tokenizer& tok, int n_vocab, int ctx)
    : cluster_(cluster), tok_(tok), n_vocab_(n_vocab), ctx_(ctx) {
  m_.nodes = cluster_.stats();
}

GenerationResult Engine::generate(const GenerationRequest& req, const TextSink& sink, const StillWaiting& waiting) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t ticket = next_ticket_++;
  queue_.push_back(ticket);
  m_.queued = int(queue_.size());
  while (busy_ || queue_.front() != ticket) {
    if (cv_.wait_for(lock, std::chrono::milliseconds(100)) == std::cv_status::no_timeout || !waiting) continue;
    lock.unlock();
    const bool still = waiting();
    lock.lock();
    if (!still) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), ticket));
      m_.queued = int(queue_.size());
      m_.cancelled++;
      cv_.notify_all();
      GenerationResult r;
      r.finish_reason = "cancelled";
      return r;
    }
  }
  queue_.pop_front();
  m_.queued = int(queue_.size());
  busy_ = m_.busy = true;
  GenerationResult r;
  if (!broken_.ok()) {
    r.status = broken_;
    r.finish_reason = "error";
  } else {
    lock.unlock();
    r = run(req, sink);
    lock.lock();
  }
  if (!r.status.ok()) broken_ = r.status;
  m_.generations++;
  if (r.finish_reason == "cancelled") m_.cancelled++;
  m_.prompt_tokens += r.usage.prompt_tokens;
  m_.cached_tokens += r.usage.cached_tokens;
  m_.completion_tokens += r.usage.completion_tokens;
  m_.prompt_s += r.prompt_s;
  m_.gen_s += r.gen_s;
  if (r.usage.completion_tokens > 1 && r.gen_s > 0) m_.last_tokens_per_s = (r.usage.completion_tokens - 1) / r.gen_s;
  m_.nodes = cluster_.stats();
  busy_ = m_.busy = false;
  cv_.notify_all();
  return r;
}

GenerationResult Engine::run(const GenerationRequest& req, const TextSink& sink) {
  GenerationResult r;
  const std::vector<int32_t>& prompt = req.prompt;
  const int n = int(prompt.size());
  if (n == 0 || req.max_tokens < 1 || n + req.max_tokens > ctx_) {
    r.finish_reason = "error";
    r.status = util::Status::error("internal: prompt of " + std::to_string(n) + " tokens and max_tokens " +
                                   std::to_string(req.max_tokens) + " do not fit the context");
    return r;
  }
  sampler::Params p = req.params;
  if (!req.seed_given) p.seed = std::random_device{}();
  sampler::DistributedSampler smp(p, n_vocab_);

  // Reuse the cached prefix; evaluate at least the last prompt token.
  size_t c = std::mismatch(cached_.begin(), cached_.end(), prompt.begin(), prompt.end()).first - cached_.begin();
  c = std::min(c, size_t(n - 1));
  cached_.resize(c);
  r.usage.prompt_tokens = n;
  r.usage.cached_tokens = int(c);
  std::vector<int32_t> history = prompt;
  util::Timer t_prompt;
  auto next = cluster_.step(prompt.data() + c, n - int(c), int(c), &smp, history);
  r.prompt_s = t_prompt.seconds();
  auto failed = [&](const util::Status& st) {
    cached_.clear();
    r.status = st;
    r.finish_reason = "error";
    return r;
  };
  if (!next) return failed(next.status());
  cached_ = prompt;

  tokenizer::StreamDecoder dec(tok_);
  StopMatcher stop(req.stop);
  util::Timer t_gen;
  int generated = 0;
  for (;;) {
    const int32_t id = *next;
    if (tok_.is_eog(id)) {
      r.finish_reason = "stop";
      break;
    }
    history.push_back(id);
    ++generated;
    const std::string text = stop.push(dec.push(id));
    if (!sink(text)) {
      r.finish_reason = "cancelled";
      break;
    }
    if (stop.stopped()) {
      r.finish_reason = "stop";
      break;
    }
    if (generated == req.max_tokens) {
      r.finish_reason = "length";
      break;
    }
    next = cluster_.step(&id, 1, int(history.size()) - 1, &smp, history);
    if (!next) return failed(next.status());
    cached_.push_back(id);
  }
  if (r.finish_reason != "cancelled" && !stop.stopped()) {
    std::string rest = stop.push(dec.flush());
    rest += stop.flush();
    if (!rest.empty() && !sink(rest)) r.finish_reason = "cancelled";
  }
  r.gen_s = t_gen.seconds();
  r.usage.completion_tokens = generated;
  return r;
}

EngineMetrics Engine::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  return m_;
}

util::Status Engine::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

}  // namespace serve
