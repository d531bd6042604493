// A fixed pool of worker threads for data-parallel kernels. Decode runs many
// small ops per token, so dispatch must be cheap: workers stay alive and
// parallel_for hands out contiguous ranges without allocating.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace nibble {

class ThreadPool {
 public:
  // n_threads <= 0 means all hardware threads. The calling thread takes part,
  // so a pool of n runs n-1 workers.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end, thread_index) over [0, n) split into at most size()
  // contiguous ranges of at least `grain` items; returns when all are done.
  // Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                    int64_t grain = 1);

  static int hardware_threads();

 private:
  void worker(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_parts_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace nibble
