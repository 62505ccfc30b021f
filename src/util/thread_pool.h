// thread_pool.h: one persistent pool per process. run(fn) calls fn(part, n_parts) once for
// every part of [0, n_threads) and returns when all are done. The parts are claimed by
// whichever of the pool's threads (the caller included) is free first, not assigned: on an
// oversubscribed machine (several nodes or test processes on one box) a worker the OS has
// not scheduled yet does not hold the job up, the caller runs its part instead. A part's
// index is what keys per-part scratch; no two threads run the same part. Workers spin
// briefly waiting for the next job, then sleep on a condition variable; no thread is
// created per token. Deliberately no task queue or futures: the forward pass is a
// sequence of data-parallel ops, each split by output rows.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace util {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Runs fn(part, nth) for every part in [0, nth = size()), each once, on whichever threads
  // claim them; blocks until every call returned.
  void run(const std::function<void(int, int)>& fn);
  // Splits [0, n) into contiguous chunks of at least `grain` items, one per thread.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker();
  // Runs unclaimed parts of job `generation` until none is left.
  void run_parts(uint64_t generation);

  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> state_{0};  // job generation << 32 | next unclaimed part
  std::atomic<int> pending_{0};       // parts of the current job not yet finished
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

// Range of [0, n) owned by thread ith of nth (contiguous, balanced).
inline void split_range(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
  const int64_t per = n / nth, rem = n % nth;
  *begin = ith * per + (ith < rem ? ith : rem);
  *end = *begin + per + (ith < rem ? 1 : 0);
}

}  // namespace util
