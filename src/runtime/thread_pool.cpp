#include "runtime/thread_pool.h"

#include <algorithm>

namespace nibble {

int ThreadPool::hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads <= 0 ? hardware_threads() : n_threads) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {
// Part p of n items split into `parts` near-equal contiguous ranges.
void part_range(int64_t n, int parts, int p, int64_t* begin, int64_t* end) {
  *begin = n * p / parts;
  *end = n * (p + 1) / parts;
}
}  // namespace

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t, int)>* job;
    int64_t n;
    int parts;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      parts = job_parts_;
    }
    if (index < parts) {
      int64_t b, e;
      part_range(n, parts, index, &b, &e);
      if (b < e) (*job)(b, e, index);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  int parts = int(std::min<int64_t>(n_threads_, std::max<int64_t>(1, n / std::max<int64_t>(grain, 1))));
  if (parts <= 1 || workers_.empty()) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_parts_ = parts;
    pending_ = int(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  int64_t b, e;
  part_range(n, parts, 0, &b, &e);
  fn(b, e, 0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
}

}  // namespace nibble
