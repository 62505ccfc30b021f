// thread_pool.cc: spin-then-sleep persistent worker threads; a job's parts are claimed, not
// assigned (see thread_pool.h).
#include "util/thread_pool.h"

#include <algorithm>

#include "util/check.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define SHARDLM_PAUSE() _mm_pause()
#else
#define SHARDLM_PAUSE() std::this_thread::yield()
#endif

namespace util {

namespace {
// Waiting: spin with PAUSE (cheap wake-up between the ~250 ops of a token), then yield the
// core (so an oversubscribed machine still makes progress), then sleep.
constexpr int kSpinIterations = 1 << 12;
constexpr int kYieldIterations = 1 << 10;

// state_: the job's generation in the high 32 bits, the next unclaimed part in the low 32.
constexpr uint64_t generation_of(uint64_t s) { return s >> 32; }
constexpr uint64_t part_of(uint64_t s) { return s & 0xffffffffu; }
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    state_.store((generation_of(state_.load()) + 1) << 32 | uint64_t(n_threads_));
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run_parts(uint64_t generation) {
  uint64_t s = state_.load(std::memory_order_acquire);
  while (generation_of(s) == generation && part_of(s) < uint64_t(n_threads_)) {
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    // The part is ours: run() cannot return (nor start another job) before it is done.
    (*job_)(int(part_of(s)), n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
    s = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    pending_.store(n_threads_, std::memory_order_relaxed);
    generation = generation_of(state_.load()) + 1;
    state_.store(generation << 32, std::memory_order_release);
  }
  cv_.notify_all();
  run_parts(generation);
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kSpinIterations) {
      SHARDLM_PAUSE();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::worker() {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_of(state_.load(std::memory_order_acquire)) == seen && spins < kSpinIterations + kYieldIterations) {
      if (spins < kSpinIterations) {
        SHARDLM_PAUSE();
      } else {
        std::this_thread::yield();
      }
      ++spins;
    }
    if (generation_of(state_.load(std::memory_order_acquire)) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_of(state_.load()) != seen; });
    }
    seen = generation_of(state_.load(std::memory_order_acquire));
    if (stop_.load()) return;
    run_parts(seen);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  if (max_chunks == 1 || n_threads_ == 1) {
    fn(0, n);
    return;
  }
  run([&](int ith, int nth) {
    int64_t b, e;
    split_range(n, ith, nth, &b, &e);
    if (b < e) fn(b, e);
  });
}

}  // namespace util
