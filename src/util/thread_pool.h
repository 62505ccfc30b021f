// thread_pool.h: one persistent pool per process. run(fn) calls fn(thread_index, n_threads)
// on every thread (the caller is thread 0) and returns when all are done. Workers spin
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
  // Runs fn(ith, nth) on all threads; blocks until every call returned.
  void run(const std::function<void(int, int)>& fn);
  // Splits [0, n) into contiguous chunks of at least `grain` items, one per thread.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker(int ith);

  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
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
