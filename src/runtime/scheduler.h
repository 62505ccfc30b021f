// scheduler.h: continuous batching on the root. Jobs (a prompt, sampling parameters, a
// token budget) are queued; a job takes a free KV slot (the one whose cached tokens share
// the longest prefix with its prompt, so a conversation's next turn evaluates only the new
// part; or, when they reach further, the KV pool's registered blocks of its prompt's prefix,
// shared with other sequences: Cluster::share_prefix, shareable() below), and every step of the cluster carries one decode row for each generating job plus
// prompt chunks of the jobs still reading their prompt (at most `chunk` prompt tokens per
// step, chunks cut at the same places whatever else runs). A job leaves as soon as its
// callback says stop, its budget is spent or it is cancelled; its slot then serves the
// next job. Every job's tokens are exactly those it would get alone (Cluster::run keeps
// rows independent; the chunking depends only on the job).
// Speculation (Speculation, below): a generating job's decode row can carry guesses of
// the tokens after it (speculative.h), verified in the same step; the job then gets every
// kept guess and one more token from one step, exactly the tokens it would get without.
// Deliberately no text: tokens go to the job's callback, which detokenizes and matches
// stop strings (serve/engine.cc, cli/generate.cc).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/cluster.h"
#include "runtime/sequence.h"
#include "runtime/speculative.h"

namespace runtime {

struct JobEnd {
  util::Status status;      // a failed step (the cluster is then unusable)
  bool cancelled = false;   // Job::cancel was set
  int prompt_tokens = 0, cached_tokens = 0, generated = 0;
  int rounds = 0;           // decode steps the job took part in
  int preempted = 0;        // times it gave its KV blocks back (the pool was full) and was computed again
  int guessed = 0, kept = 0;  // speculation: guesses verified, and kept
  double queued_s = 0, prompt_s = 0, gen_s = 0;  // waiting, prompt (to first token), decode
};

struct Job {
  std::vector<int32_t> prompt;  // non-empty; prompt.size() + max_tokens <= the slot context
  sampler::Params params;       // seed included
  int max_tokens = 1;
  int max_guesses = -1;  // speculation: guesses per step at most; -1: the scheduler's own
  // Constrained decoding: every drawn token is one it allows (no speculation then).
  std::shared_ptr<TokenConstraint> constraint;
  // Every drawn token (with its log-probabilities when params.top_logprobs >= 0, else
  // null), on the scheduler's thread; false: the job is done (end of text, a stop string,
  // the client left). Keep it short: the whole batch waits for it.
  std::function<bool(int32_t, const sampler::Logprobs*)> on_token;
  std::function<void(const JobEnd&)> on_end;  // once, when the job leaves (also on error)
  std::atomic<bool> cancel{false};            // set from any thread; noticed between steps
};

// Speculative decoding for every job (--lookup, --draft-model): guesses from the job's own
// text (up to `lookup` per step), else from a draft model; how many are verified adapts to
// the measured acceptance and row cost (speculative.h) unless `adaptive` is off.
struct Speculation {
  int lookup = 0;             // 0: no lookup guesses
  Cluster* draft = nullptr;   // the draft model's one-node cluster (slots as the target's), or null
  int draft_max = 0;          // guesses per step from the draft model at most
  // The draft model's weight bytes over the root's share of the model's: until the draft is
  // timed, a guess is assumed to cost this times the root's compute per step.
  double draft_cost_ratio = 1;
  bool adaptive = true;       // false: always as many as there are (measurements)
  bool on() const { return lookup > 0 || (draft && draft_max > 0); }
};

struct SchedulerStats {
  int slots = 0, slots_in_use = 0, queued = 0;
  int last_batch_rows = 0, last_batch_seqs = 0;  // the latest step
  uint64_t steps = 0;
  uint64_t decode_rounds = 0, decode_tokens = 0;  // a job's decode row in a step, tokens it drew
  uint64_t guessed = 0, kept = 0;                 // speculation
  // The paged KV pool (kv_blocks.h): blocks in all, held by slots (running or idle), keeping
  // rows no running job holds (idle slots' and the registered prefixes no slot holds: a
  // next turn or a shared prefix may reuse them), held by more than one slot; jobs ended
  // because it was full; jobs that took a shared prefix and the positions they skipped.
  int kv_blocks = 0, kv_blocks_used = 0, kv_blocks_idle = 0, kv_blocks_shared = 0;
  uint64_t kv_full_ends = 0, kv_prefix_hits = 0, kv_prefix_tokens = 0;
  uint64_t kv_preemptions = 0;  // jobs that gave their blocks back to be computed again later
  // The host cache (--cache-ram): blocks it holds and their bytes (the whole model's; each
  // node keeps its KV heads' share), blocks saved to it and restored from it.
  int kv_host_blocks = 0;
  uint64_t kv_host_bytes = 0, kv_host_saves = 0, kv_host_restores = 0;
  std::vector<NodeStats> nodes;  // the cluster's counters after the latest step
};

class Scheduler {
 public:
  // chunk: prompt tokens per step (>= 1); the cluster's max_rows() must hold chunk plus one
  // decode row per slot (rows beyond that are room for guesses).
  Scheduler(Cluster& cluster, int chunk, Speculation spec = {});
  ~Scheduler();  // ends every job (cancelled) and stops the thread

  void submit(std::shared_ptr<Job> job);
  SchedulerStats stats() const;
  util::Status health() const;  // the error that broke the cluster, or ok
  int slot_ctx() const { return cluster_.ctx(); }
  // Why a prompt of this many tokens can never run: it needs more KV blocks than the whole
  // pool holds (a job with one ends at once with this error, before any step); "" if it fits.
  std::string pool_unfit(int prompt_tokens) const;

 private:
  using Queue = std::deque<std::pair<std::shared_ptr<Job>, double>>;
  struct Active {
    std::shared_ptr<Job> job;
    Sequence* seq = nullptr;
    size_t fed = 0;          // prompt tokens evaluated (from the cached prefix on)
    bool read = false;       // a prompt chunk was evaluated since admission or preemption
    size_t shared = 0;       // prompt positions taken from shared blocks (since a preemption)
    // After a preemption: the tokens it drew before (but `next`), evaluated again once the
    // prompt is read again, in vec_dot order as they first ran; redone: how many so far.
    std::vector<int32_t> redo;
    size_t redone = 0;
    int32_t next = -1;       // decode: the token to evaluate next
    std::vector<int32_t> row;  // decode: next, then the guesses verified with it
    int32_t shadow = -1;     // a lookup guess not verified, to measure acceptance with
    Acceptance acc;
    int idle_rounds = 0;     // rounds since the draft model last guessed (to measure again)
    JobEnd end;
    double t_start = 0, t_first = 0;
  };
  void loop();
  void admit(std::unique_lock<std::mutex>& lock);
  // Whether row p of an n-row prompt read in chunks from row `from` runs in lane order.
  bool lane_row(size_t n, size_t from, size_t p) const;
  // How many positions of prompt's prefix the pool's shared blocks may give (scheduler.cc).
  // host: blocks restored from the host cache count too (at admission only).
  size_t shareable(const std::vector<int32_t>& prompt, bool host) const;
  // How much of its own cached prefix of `own` positions slot may keep so that every row of
  // prompt has the order (lane or vec_dot) the prompt alone gives it (scheduler.cc).
  size_t in_order(const std::vector<int32_t>& prompt, int slot, size_t own) const;
  // Room in the pool for the host cache's blocks of prompt's prefix (scheduler.cc).
  bool room_for_host(const std::vector<int32_t>& prompt, int slot, size_t own);
  void finish(Active& a);
  // a's blocks go back to the pool; it keeps its slot and reads its prompt again (sharing
  // what it can), then the tokens it drew, in vec_dot order: the same rows, the same text.
  void preempt(Active& a);
  bool step();  // false: the cluster failed
  // A step's batch: the decoding sequences (with their guesses) first, then prompt chunks
  // (and rows evaluated again after a preemption) in arrival order; who: each entry's
  // active index; returns how many decode. Within the KV pool (cluster.h, kv_blocks.h): an
  // entry whose new blocks the pool cannot give, even after releasing idle slots' cached
  // rows (least recently used first), waits for a later step (a row's bits do not depend on
  // the step it runs in); when no running request can get a block, the youngest holding
  // blocks is preempted (preempt()); a job alone that cannot get one ends with an error
  // naming the pool.
  size_t build_batch(std::vector<Cluster::SeqStep>* batch, std::vector<size_t>* who);
  size_t fill_batch(const std::vector<size_t>& dec, std::vector<Cluster::SeqStep>* batch, std::vector<size_t>* who);
  // Whether seq's next n rows get their new blocks (*reserved: blocks taken by the batch so far).
  bool take_blocks(Sequence& seq, int n, int* reserved);
  void kv_stats();  // stats_'s KV pool figures (mu_ held, or before the thread starts)
  void fail_all(const util::Status& why);
  // a now holds `fed` positions of shared blocks: counts a prefix hit (its first) and the
  // positions it skipped (a re-share before its first chunk adds only what it gained).
  void count_shared(Active& a, size_t fed);
  uint64_t prefix_hits_ = 0, prefix_tokens_ = 0;  // the scheduler thread's; stats_ copies them  // every job, active and queued, ends with why
  void end_jobs(std::vector<Active>& active, Queue& queued, const std::function<void(JobEnd&)>& mark);
  // A step's results to its sequences; the decode counts of stats_.
  struct Drawn {
    uint64_t rounds = 0, drawn = 0, guessed = 0, kept = 0;
  };
  Drawn take_results(const std::vector<Cluster::SeqStep>& batch, const std::vector<size_t>& who,
                     const std::vector<Cluster::SeqResult>& res);
  // Fills a.row (next, then guesses) for each generating job in `dec`.
  void guess(const std::vector<size_t>& dec);

  Cluster& cluster_;
  const int chunk_;
  Speculation spec_;
  std::unique_ptr<DraftModel> draft_;
  StepCost cost_;
  std::vector<std::unique_ptr<Sequence>> slots_;
  std::vector<bool> busy_;
  std::vector<uint64_t> last_used_;
  uint64_t clock_ = 0;
  std::vector<Active> active_;  // in admission order

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Queue queue_;  // with submit time
  bool stop_ = false;
  util::Status broken_;
  SchedulerStats stats_;
  std::thread thread_;
};

}  // namespace runtime
