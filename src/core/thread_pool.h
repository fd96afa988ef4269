// ThreadPool: a fixed set of worker threads for data-parallel loops (the CPU backend's ops).
// Test partner: tests/unit/cpu/thread_pool_test.cpp.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace flint {

class ThreadPool {
 public:
  // num_threads <= 0 means one per hardware thread. The calling thread also works, so a pool of
  // n threads starts n - 1 workers.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint ranges covering [0, n), at most num_threads() at once, and
  // returns when all are done. Ranges hold at least `grain` items. Not reentrant: fn must not call
  // parallel_for on the same pool. Calls from several threads are serialised.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

 private:
  void worker_loop(int worker_idx);

  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // one parallel_for at a time
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace flint
