// scheduler.cc: the continuous-batching loop (see scheduler.h).
#include "runtime/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace runtime {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Scheduler::Scheduler(Cluster& cluster, int chunk, Speculation spec)
    : cluster_(cluster), chunk_(std::max(1, chunk)), spec_(spec) {
  CHECK_MSG(cluster.max_rows() >= chunk_ + cluster.n_slots(), "the cluster's rows per step must hold a prompt "
                                                              "chunk and one decode row per slot");
  if (spec_.draft && spec_.draft_max > 0) {
    CHECK(spec_.draft->n_slots() == cluster.n_slots() && spec_.draft->n_vocab() == cluster.n_vocab());
    draft_ = std::make_unique<DraftModel>(*spec_.draft);
  }
  for (int s = 0; s < cluster.n_slots(); ++s) slots_.push_back(std::make_unique<Sequence>(s, cluster.n_vocab()));
  busy_.assign(slots_.size(), false);
  last_used_.assign(slots_.size(), 0);
  stats_.slots = int(slots_.size());
  kv_stats();
  stats_.nodes = cluster.stats();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  end_jobs(active_, queue_, [](JobEnd& e) { e.cancelled = true; });
}

void Scheduler::end_jobs(std::vector<Active>& active, Queue& queued, const std::function<void(JobEnd&)>& mark) {
  for (Active& a : active) {
    mark(a.end);
    finish(a);
  }
  for (auto& [job, t] : queued) {
    JobEnd e;
    mark(e);
    if (job->on_end) job->on_end(e);
  }
}

void Scheduler::submit(std::shared_ptr<Job> job) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_.ok()) {
    JobEnd e;
    e.status = broken_;
    lock.unlock();
    if (job->on_end) job->on_end(e);
    return;
  }
  queue_.emplace_back(std::move(job), now_s());
  stats_.queued = int(queue_.size());
  cv_.notify_all();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

util::Status Scheduler::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

// Whether row p (>= from) of an n-row prompt runs in lane order when the prompt is read in
// chunks from row `from`: its chunk's length decides (model::lane_ordered), a short last
// chunk taking vec_dot order. The one rule shareable and in_order compare orders by.
bool Scheduler::lane_row(size_t n, size_t from, size_t p) const {
  const size_t c = size_t(chunk_);
  return model::lane_ordered(int(std::min(c, n - from - (p - from) / c * c)), false, cluster_.lane_order(),
                             cluster_.decode_lanes());
}

// The registered blocks of prompt's prefix (kv_blocks.h) it may take: as many as give every
// row the order (lane or vec_dot) the prompt alone gives it, read in chunks from position
// 0, while the rest is read in chunks from the shared prefix's end; the shared rows are all
// in lane order (vec_dot with lane order off), and a short last chunk takes vec_dot order.
size_t Scheduler::shareable(const std::vector<int32_t>& prompt, bool host) const {
  const size_t n = prompt.size();
  const bool lo = cluster_.lane_order();
  const auto same_order = [&](size_t start) {
    for (size_t p = 0; p < n; ++p)
      if (lane_row(n, 0, p) != (p < start ? lo : lane_row(n, start, p))) return false;
    return true;
  };
  for (size_t k = size_t(cluster_.shared_prefix(prompt, int(n) - 1, host)); k > 0; k -= size_t(model::kKvBlockRows))
    if (same_order(k)) return k;
  return 0;
}

// A slot's own rows [0, k) are kept only where each ran in the order the prompt alone gives
// that row (read in chunks from position 0; its history says how each ran: a previous
// answer's decode rows ran in vec_dot order, a prompt's chunks of 4+ rows in lane order),
// and the rest, read in chunks from k, must give its rows alone's orders too: for the
// lane-order weight types (kernels.h) a row's bits depend on its order, so without this a
// request that reuses its slot's cache could part from the same request alone. With lane
// order off, or on a model without a lane-order type (Q5_0, Q5_1, float: both orders give
// the same bits), any k is kept.
size_t Scheduler::in_order(const std::vector<int32_t>& prompt, int slot, size_t own) const {
  const size_t n = prompt.size();
  if (own == 0 || !cluster_.order_matters()) return own;
  std::vector<int8_t> alone(n);
  for (size_t p = 0; p < n; ++p) alone[p] = lane_row(n, 0, p) ? 1 : 0;
  const std::vector<int8_t> ran = cluster_.row_orders(slot, int(own));
  size_t k = 0;
  while (k < own && ran[k] == alone[k]) ++k;  // the rows kept must have run as alone
  for (;; --k) {
    bool ok = true;
    for (size_t p = k; p < n && ok; ++p) ok = (lane_row(n, k, p) ? 1 : 0) == alone[p];
    if (ok || k == 0) return k;
  }
}

std::string Scheduler::pool_unfit(int prompt_tokens) const {
  const int blocks = cluster_.kv_pool().n_blocks();
  if (model::kv_blocks_for(prompt_tokens) <= blocks) return "";
  return "the prompt is " + std::to_string(prompt_tokens) + " tokens, but the KV pool holds " +
         std::to_string(int64_t(blocks) * model::kKvBlockRows) + " positions (" + std::to_string(blocks) +
         " blocks of " + std::to_string(model::kKvBlockRows) + "); shorten the prompt or raise --kv-memory";
}

// Blocks from the host cache only at admission (in a batch being built, the blocks their
// restores would take are the batch's): when they reach past the slot's own prefix, the
// slot lets its rows go and, as a prompt's chunks would, idle slots (least recently used
// first) give the pool room for them. True: the slot's rows went.
bool Scheduler::room_for_host(const std::vector<int32_t>& prompt, int slot, size_t own) {
  const int most = int(prompt.size()) - 1;
  if (cluster_.kv_pool().host_blocks() == 0) return false;
  const int want = cluster_.shared_prefix(prompt, most, true, true);
  if (size_t(want) <= own) return false;
  cluster_.release(*slots_[size_t(slot)]);
  while (cluster_.shared_prefix(prompt, most, true) < want) {
    int idle = -1;
    for (size_t s = 0; s < slots_.size(); ++s)
      if (!busy_[s] && int(s) != slot && cluster_.kv_pool().held(int(s)) > 0 &&
          (idle < 0 || last_used_[s] < last_used_[size_t(idle)]))
        idle = int(s);
    if (idle < 0) break;
    cluster_.release(*slots_[size_t(idle)]);
  }
  return true;
}

// Queued jobs take free slots: the longest cached prefix first, then the least recently used.
void Scheduler::admit(std::unique_lock<std::mutex>& lock) {
  std::vector<std::pair<std::shared_ptr<Job>, util::Status>> refused;  // ok: cancelled
  while (!queue_.empty()) {
    auto [job, t_submit] = queue_.front();
    if (job->cancel) {
      queue_.pop_front();
      refused.emplace_back(job, util::Status());
      continue;
    }
    int best = -1;
    size_t best_common = 0;
    for (size_t s = 0; s < slots_.size(); ++s) {
      if (busy_[s]) continue;
      const auto& have = slots_[s]->tokens();
      const size_t c = size_t(std::mismatch(have.begin(), have.end(), job->prompt.begin(), job->prompt.end()).first -
                              have.begin());
      if (best < 0 || c > best_common || (c == best_common && last_used_[s] < last_used_[best])) {
        best = int(s);
        best_common = c;
      }
    }
    if (best < 0) break;
    queue_.pop_front();
    Active a;
    a.job = job;
    a.seq = slots_[best].get();
    a.t_start = now_s();
    a.end.queued_s = a.t_start - t_submit;
    a.end.prompt_tokens = int(job->prompt.size());
    const size_t n = job->prompt.size();
    if (n == 0 || job->max_tokens < 1 || int64_t(n) + job->max_tokens > cluster_.ctx()) {
      refused.emplace_back(job, util::Status::error("internal: a prompt of " + std::to_string(n) +
                                                    " tokens and max_tokens " + std::to_string(job->max_tokens) +
                                                    " do not fit the slot's context"));
      continue;
    }
    if (std::string e = pool_unfit(int(n)); !e.empty()) {  // not even alone: no step is spent on it
      refused.emplace_back(job, util::Status::error(e));
      continue;
    }
    // Its own cached prefix (at least the last prompt token is evaluated), or the pool's
    // registered blocks of its prefix when they reach further or its own blocks to be
    // rewritten are shared.
    size_t own = std::min(best_common, n - 1);
    // Not into a registered block (another prompt may share it): cut at its start.
    if (int64_t(own) < cluster_.kv_pool().registered(best)) own -= own % size_t(model::kKvBlockRows);
    own = in_order(job->prompt, best, own);
    // After every cut: a cut can move the start back past a sliding-window ring's rows.
    if (!cluster_.can_rewind(best, int(own))) own = 0;
    if (room_for_host(job->prompt, best, own)) own = 0;
    const size_t shared = shareable(job->prompt, true);
    if (shared > own || !cluster_.keep_own(*a.seq, int(own))) {
      a.fed = size_t(cluster_.share_prefix(*a.seq, job->prompt, int(shared), true));
      count_shared(a, a.fed);
    } else {
      a.fed = own;
    }
    a.end.cached_tokens = int(a.fed);
    a.seq->set_sampling(job->params);
    if (draft_) draft_->start(best, job->params);
    busy_[best] = true;
    active_.push_back(std::move(a));
  }
  stats_.queued = int(queue_.size());
  stats_.slots_in_use = int(active_.size());
  if (refused.empty()) return;
  lock.unlock();
  for (auto& [job, why] : refused) {
    JobEnd e;
    e.cancelled = why.ok();
    e.status = why;
    e.prompt_tokens = int(job->prompt.size());
    if (job->on_end) job->on_end(e);
  }
  lock.lock();
}

void Scheduler::finish(Active& a) {
  if (a.t_first > 0) a.end.gen_s = now_s() - a.t_first;
  const int s = a.seq->slot();
  busy_[s] = false;
  last_used_[s] = ++clock_;
  {  // a client that reads the stats once its job ended sees the slot free
    std::lock_guard<std::mutex> lock(mu_);
    stats_.slots_in_use = int(std::count(busy_.begin(), busy_.end(), true));
  }
  if (a.job->on_end) a.job->on_end(a.end);
  a.job.reset();
}

void Scheduler::guess(const std::vector<size_t>& dec) {
  for (size_t i : dec) {
    active_[i].row.assign(1, active_[i].next);
    active_[i].shadow = -1;
  }
  if (!spec_.on() || dec.empty()) return;
  // Rows beyond a prompt chunk and a decode row per slot are the guesses' (cli/options.h
  // sizes the cluster so), shared by the generating jobs.
  const int room = (cluster_.max_rows() - chunk_ - int(slots_.size())) / int(dec.size());
  const double step_s = cost_.at(int(dec.size())), row_s = cost_.per_row();
  double guess_s = draft_ ? draft_->seconds_per_step() : 0;
  if (draft_ && guess_s == 0) {  // not timed yet: from the root's compute per step
    const NodeCounters c = cluster_.stats()[0].counters;
    guess_s = spec_.draft_cost_ratio * (c.steps ? c.compute_s / double(c.steps) : step_s);
  }
  std::vector<DraftModel::Request> reqs;
  std::vector<size_t> req_of;
  std::vector<int32_t> text;
  for (size_t i : dec) {
    Active& a = active_[i];
    const int own = a.job->constraint ? 0 : a.job->max_guesses >= 0 ? a.job->max_guesses : room;
    const int cap = std::min({own, room, a.job->max_tokens - a.end.generated - 1,
                              cluster_.ctx() - a.seq->n_past() - 1});
    if (cap <= 0) continue;
    if (spec_.lookup > 0) {
      text.assign(a.seq->tokens().begin(), a.seq->tokens().end());
      text.push_back(a.next);
      const std::vector<int32_t> g = lookup_draft(text, std::min(cap, spec_.lookup));
      if (!g.empty()) {  // guesses for free: the draft model is not asked
        const int k = spec_.adaptive ? choose_guesses(a.acc.rate(), step_s, row_s, 0, int(g.size())) : int(g.size());
        if (k == 0) a.shadow = g[0];  // its fate is still measured
        a.row.insert(a.row.end(), g.begin(), g.begin() + k);
        continue;
      }
    }
    if (!draft_) continue;
    const int most = std::min(cap, spec_.draft_max);
    int k = most;
    if (spec_.adaptive) {
      k = choose_guesses(a.acc.rate(), step_s, row_s, guess_s, most);
      // Measure the acceptance again now and then, if a good one would pay at all.
      if (k == 0 && ++a.idle_rounds >= 16 && choose_guesses(0.95, step_s, row_s, guess_s, most) > 0) k = 1;
    }
    if (k == 0) continue;
    a.idle_rounds = 0;
    reqs.push_back({a.seq, a.next, k, {}});
    req_of.push_back(i);
  }
  if (reqs.empty()) return;
  if (util::Status st = draft_->draft(reqs); !st.ok()) {
    std::fprintf(stderr, "speculation: the draft model failed (%s); going on without it\n", st.message().c_str());
    draft_.reset();
    return;
  }
  for (size_t r = 0; r < reqs.size(); ++r) {
    Active& a = active_[req_of[r]];
    a.row.insert(a.row.end(), reqs[r].guesses.begin(), reqs[r].guesses.end());
  }
}

size_t Scheduler::build_batch(std::vector<Cluster::SeqStep>* batch, std::vector<size_t>* who) {
  std::vector<size_t> dec;
  for (size_t i = 0; i < active_.size(); ++i)
    if (active_[i].fed == active_[i].job->prompt.size() && active_[i].redone == active_[i].redo.size()) dec.push_back(i);
  guess(dec);
  for (;;) {
    batch->clear();
    who->clear();
    const size_t n_dec = fill_batch(dec, batch, who);
    if (!batch->empty() || active_.empty()) return n_dec;
    // No running request can get a KV block: the youngest holding blocks gives them back
    // (it is computed again later), unless it is alone: then it cannot fit, and ends.
    size_t y = active_.size();
    while (y-- > 0 && cluster_.kv_pool().held(active_[y].seq->slot()) == 0) {
    }
    if (y < active_.size() && active_.size() > 1) {
      preempt(active_[y]);
      dec.erase(std::remove(dec.begin(), dec.end(), y), dec.end());
      continue;
    }
    Active& a = active_.back();
    a.end.status = util::Status::error("the KV pool is full (" + std::to_string(cluster_.kv_pool().n_blocks()) +
                                       " blocks of " + std::to_string(model::kKvBlockRows) +
                                       " positions, all held by running requests); start the server with a "
                                       "larger --kv-memory or a smaller --parallel");
    Sequence& seq = *a.seq;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.kv_full_ends++;
    }
    finish(a);
    cluster_.release(seq);
    active_.pop_back();
    dec.erase(std::remove(dec.begin(), dec.end(), active_.size()), dec.end());
  }
}

void Scheduler::count_shared(Active& a, size_t fed) {
  if (fed <= a.shared) return;
  prefix_hits_ += a.shared == 0;
  prefix_tokens_ += fed - a.shared;
  a.shared = fed;
}

void Scheduler::preempt(Active& a) {
  const size_t n = a.job->prompt.size();
  if (a.fed == n && a.redone == a.redo.size())  // caught up: its log is the prompt, then its tokens but `next`
    a.redo.assign(a.seq->tokens().begin() + int64_t(n), a.seq->tokens().end());
  a.redone = 0;
  a.fed = 0;
  a.read = false;
  a.shared = 0;
  a.end.preempted++;
  cluster_.release(*a.seq);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.kv_preemptions++;
}

bool Scheduler::take_blocks(Sequence& seq, int n, int* reserved) {
  const BlockPool& pool = cluster_.kv_pool();
  const int need = cluster_.kv_blocks_needed(seq, n);
  while (need > pool.free_blocks() - *reserved) {  // idle slots' rows go, least recently used first
    int idle = -1;
    for (size_t s = 0; s < slots_.size(); ++s)
      if (!busy_[s] && pool.held(int(s)) > 0 && (idle < 0 || last_used_[s] < last_used_[size_t(idle)])) idle = int(s);
    if (idle < 0) return false;
    cluster_.release(*slots_[size_t(idle)]);
  }
  *reserved += need;
  return true;
}

size_t Scheduler::fill_batch(const std::vector<size_t>& dec, std::vector<Cluster::SeqStep>* batch,
                             std::vector<size_t>* who) {
  int reserved = 0;  // new KV blocks the entries taken need
  for (size_t i : dec) {
    Active& a = active_[i];
    if (!take_blocks(*a.seq, int(a.row.size()), &reserved)) continue;  // waits for a block
    batch->push_back({a.seq, a.row, Want::kCandidates, {}, int(a.row.size()) - 1});
    if (a.job->constraint) batch->back().allowed = &a.job->constraint->allowed();
    who->push_back(i);
  }
  const size_t n_dec = batch->size();
  int budget = chunk_;
  for (size_t i = 0; i < active_.size(); ++i) {
    Active& a = active_[i];
    if (a.fed < a.job->prompt.size() && !a.read) {
      // Nothing read yet: blocks of its prefix registered since it was admitted (a prompt
      // admitted beside another with the same system prompt) are taken now.
      const size_t shared = shareable(a.job->prompt, false);
      if (shared > a.fed) {
        a.fed = size_t(cluster_.share_prefix(*a.seq, a.job->prompt, int(shared)));
        a.end.cached_tokens = int(a.fed);
        count_shared(a, a.fed);
      }
    }
    const size_t left = a.job->prompt.size() - a.fed;
    if (left == 0) {  // after a preemption: the rows of the tokens it drew, as they first ran
      const size_t again = a.redo.size() - a.redone;
      if (again == 0) continue;
      const int n = int(std::min(again, size_t(chunk_)));
      if (n > budget) break;
      if (!take_blocks(*a.seq, n, &reserved)) continue;
      budget -= n;
      batch->push_back({a.seq, std::span<const int32_t>(a.redo).subspan(a.redone, size_t(n)), Want::kNothing, {}});
      batch->back().rowwise = true;
      who->push_back(i);
      continue;
    }
    const int n = int(std::min(left, size_t(chunk_)));  // the same cut whatever else runs
    if (n > budget) break;                              // arrival order: no overtaking
    if (!take_blocks(*a.seq, n, &reserved)) continue;   // waits for blocks (the others may go)
    budget -= n;
    const bool draw = size_t(n) == left && a.end.generated == 0;  // a preempted job drew already
    batch->push_back({a.seq, std::span<const int32_t>(a.job->prompt).subspan(a.fed, n),
                      draw ? Want::kCandidates : Want::kNothing, {}});
    if (draw && a.job->constraint) batch->back().allowed = &a.job->constraint->allowed();
    who->push_back(i);
  }
  return n_dec;
}

void Scheduler::fail_all(const util::Status& why) {
  std::vector<Active> failed;
  failed.swap(active_);
  Queue queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = why;
    queued.swap(queue_);
    stats_.queued = 0;
    stats_.slots_in_use = 0;
  }
  end_jobs(failed, queued, [&](JobEnd& e) { e.status = why; });
}

Scheduler::Drawn Scheduler::take_results(const std::vector<Cluster::SeqStep>& batch, const std::vector<size_t>& who,
                                         const std::vector<Cluster::SeqResult>& res) {
  const double t = now_s();
  Drawn d;
  for (size_t b = 0; b < batch.size(); ++b) {
    Active& a = active_[who[b]];
    const bool prompt = a.fed < a.job->prompt.size();
    if (prompt) {
      a.read = true;
      a.fed += batch[b].tokens.size();
      if (a.fed < a.job->prompt.size() || a.end.generated > 0) continue;  // more to read, or preempted
      a.t_first = t;
      a.end.prompt_s = t - a.t_start;
    }
    if (!prompt && a.redone < a.redo.size()) {  // rows evaluated again after a preemption
      a.redone += batch[b].tokens.size();
      continue;
    }
    const Cluster::SeqResult& r = res[b];
    if (!prompt) {
      const int tried = batch[b].drafts, ok = int(r.tokens.size()) - 1;
      a.end.rounds++;
      a.end.guessed += tried;
      a.end.kept += ok;
      ++d.rounds;
      d.drawn += r.tokens.size();
      d.guessed += uint64_t(tried);
      d.kept += uint64_t(ok);
      if (tried > 0) a.acc.add(ok, ok < tried ? ok + 1 : tried);  // rejected guesses after the first are untried
      if (a.shadow >= 0) a.acc.add(r.tokens[0] == a.shadow, 1);
    }
    bool more = true;
    for (size_t j = 0; j < r.tokens.size() && more; ++j) {
      a.end.generated++;
      if (a.job->constraint) a.job->constraint->accept(r.tokens[j]);
      more = a.job->on_token(r.tokens[j], r.logprobs.empty() ? nullptr : &r.logprobs[j]) &&
             a.end.generated < a.job->max_tokens;
      a.next = r.tokens[j];
    }
    if (!more) finish(a);
  }
  return d;
}

void Scheduler::kv_stats() {
  const BlockPool& pool = cluster_.kv_pool();
  stats_.kv_blocks = pool.n_blocks();
  stats_.kv_blocks_used = pool.used_blocks();
  stats_.kv_blocks_shared = pool.shared_blocks();
  stats_.kv_prefix_hits = prefix_hits_;
  stats_.kv_prefix_tokens = prefix_tokens_;
  stats_.kv_host_blocks = pool.host_blocks();
  stats_.kv_host_bytes = uint64_t(pool.host_blocks()) * cluster_.kv_block_bytes();
  stats_.kv_host_saves = pool.host_saves();
  stats_.kv_host_restores = pool.host_restores();
  // Blocks no running request holds that keep rows: idle slots' (each counted once) and
  // the cached ones.
  std::vector<uint8_t> seen(size_t(pool.n_blocks()), 0);
  for (size_t s = 0; s < slots_.size(); ++s)
    if (busy_[s])
      for (int32_t b : pool.table(int(s))) seen[size_t(b)] = 1;
  stats_.kv_blocks_idle = pool.cached_blocks();
  for (size_t s = 0; s < slots_.size(); ++s)
    if (!busy_[s])
      for (int32_t b : pool.table(int(s))) stats_.kv_blocks_idle += !seen[size_t(b)], seen[size_t(b)] = 1;
}

bool Scheduler::step() {
  std::vector<Cluster::SeqStep> batch;
  std::vector<size_t> who;  // active index of each batch entry
  size_t n_dec = build_batch(&batch, &who);
  if (batch.empty()) return true;
  int rows = 0;
  for (const auto& q : batch) rows += int(q.tokens.size());
  const double t0 = now_s();
  auto res = cluster_.run(batch);
  if (res && batch.size() == n_dec) cost_.add(rows, now_s() - t0);  // decode rows only
  if (!res) {
    fail_all(res.status());
    return false;
  }
  const Drawn d = take_results(batch, who, *res);
  active_.erase(std::remove_if(active_.begin(), active_.end(), [](const Active& a) { return !a.job; }),
                active_.end());
  std::lock_guard<std::mutex> lock(mu_);
  stats_.last_batch_rows = rows;
  stats_.last_batch_seqs = int(batch.size());
  stats_.steps++;
  stats_.decode_rounds += d.rounds;
  stats_.decode_tokens += d.drawn;
  stats_.guessed += d.guessed;
  stats_.kept += d.kept;
  stats_.slots_in_use = int(active_.size());
  stats_.nodes = cluster_.stats();
  kv_stats();
  return true;
}

void Scheduler::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    admit(lock);
    if (stop_) return;
    if (active_.empty()) {
      if (!broken_.ok() || queue_.empty()) cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      continue;
    }
    lock.unlock();
    for (Active& a : active_)
      if (a.job->cancel) {
        a.end.cancelled = true;
        finish(a);
      }
    active_.erase(std::remove_if(active_.begin(), active_.end(), [](const Active& a) { return !a.job; }),
                  active_.end());
    if (!active_.empty()) step();
    lock.lock();
    stats_.slots_in_use = int(active_.size());
  }
}

}  // namespace runtime
