#include "util/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__linux__)
#include <sched.h>
#endif

namespace nibble {

namespace {

// Tells the core we are spinning (frees the sibling hyper-thread, saves power).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// One step of a spin-wait: a few hundred pause instructions first (a
// dispatch on an idle machine answers within a microsecond or two), then
// yield the core between checks, so that on an oversubscribed machine the
// thread we wait for gets to run instead of our spinning.
inline void relax(int spins) {
  if (spins < 256) cpu_relax();
  else std::this_thread::yield();
}

using Clock = std::chrono::steady_clock;

// Part p of n items split into `parts` near-equal contiguous ranges.
void part_range(int64_t n, int parts, int p, int64_t* begin, int64_t* end) {
  *begin = n * p / parts;
  *end = n * (p + 1) / parts;
}

}  // namespace

int ThreadPool::hardware_threads() {
#if defined(__linux__)
  // The affinity mask, not the machine: containers and taskset restrict it.
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads <= 0 ? hardware_threads() : n_threads) {
  workers_.reserve(size_t(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  {
    std::lock_guard<std::mutex> lock(mu_);
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Wait for a new generation: spin for spin_us_, then sleep. The sleeper
    // count and the generation form a Dekker pair with dispatch() (both
    // seq_cst), so a worker never sleeps through a job.
    uint64_t gen;
    Clock::time_point deadline = Clock::now() + std::chrono::microseconds(spin_us_.load());
    int spins = 0;
    while ((gen = generation_.load(std::memory_order_acquire)) == seen) {
      if (stop_.load(std::memory_order_relaxed)) return;
      relax(++spins);
      if ((spins & 15) == 0 && Clock::now() > deadline) {
        std::unique_lock<std::mutex> lock(mu_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        start_cv_.wait(lock, [&] {
          return generation_.load(std::memory_order_seq_cst) != seen || stop_.load();
        });
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
    }
    if (stop_.load(std::memory_order_relaxed)) return;
    seen = gen;
    if (index < job_parts_) run_part(index);
    if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        caller_sleeping_.load(std::memory_order_seq_cst)) {
      { std::lock_guard<std::mutex> lock(mu_); }
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::run_part(int index) {
  try {
    (*job_)(index, job_parts_);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::dispatch() {
  pending_.store(int(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);  // publishes job_*
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    start_cv_.notify_all();
  }
  run_part(0);

  Clock::time_point deadline = Clock::now() + std::chrono::microseconds(spin_us_.load());
  int spins = 0;
  while (pending_.load(std::memory_order_acquire) != 0) {
    relax(++spins);
    if ((spins & 15) == 0 && Clock::now() > deadline) {
      std::unique_lock<std::mutex> lock(mu_);
      caller_sleeping_.store(true, std::memory_order_seq_cst);
      done_cv_.wait(lock, [&] { return pending_.load(std::memory_order_seq_cst) == 0; });
      caller_sleeping_.store(false, std::memory_order_relaxed);
      break;
    }
  }
  job_ = nullptr;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::swap(error, error_);
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::run(TeamFn fn) {
  if (workers_.empty()) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  job_parts_ = n_threads_;
  dispatch();
}

void ThreadPool::parallel_for(int64_t n, RangeFn fn, int64_t grain) {
  if (n <= 0) return;
  const int64_t g = std::max<int64_t>(grain, 1);
  const int parts = int(std::min<int64_t>(n_threads_, std::max<int64_t>(1, n / g)));
  if (parts <= 1 || workers_.empty()) {
    fn(0, n, 0);
    return;
  }
  auto team = [&](int i, int p) {
    int64_t b, e;
    part_range(n, p, i, &b, &e);
    if (b < e) fn(b, e, i);
  };
  TeamFn ref(team);
  job_ = &ref;
  job_parts_ = parts;
  dispatch();
}

}  // namespace nibble
