// thread_pool.cc: spin-then-sleep persistent worker threads.
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
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    pending_.store(n_threads_ - 1);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  fn(0, n_threads_);
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kSpinIterations) {
      SHARDLM_PAUSE();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::worker(int ith) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && spins < kSpinIterations + kYieldIterations) {
      if (spins < kSpinIterations) {
        SHARDLM_PAUSE();
      } else {
        std::this_thread::yield();
      }
      ++spins;
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    (*job_)(ith, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
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
