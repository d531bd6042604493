// A fixed pool of worker threads for data-parallel kernels.
//
// Decode runs many small ops per token (a DeepSeek-V4 layer is a few dozen
// linears, each a few hundred microseconds), so dispatch must cost far less
// than an op: workers stay alive, spin briefly on an atomic generation
// counter before falling asleep on a condition variable, and a dispatch
// neither allocates nor takes a lock unless some worker is asleep. Jobs are
// passed as a non-owning FunctionRef, so a capturing lambda costs nothing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace nibble {

// A non-owning reference to a callable (like C++26 std::function_ref): two
// pointers, no allocation. The callable must outlive the call it is used in.
template <class Sig>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT: implicit on purpose, lambdas convert at call sites
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, Args... a) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(a)...);
        }) {}
  R operator()(Args... a) const { return call_(obj_, std::forward<Args>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

class ThreadPool {
 public:
  // fn(begin, end, thread_index): one contiguous range of [0, n).
  using RangeFn = FunctionRef<void(int64_t, int64_t, int)>;
  // fn(thread_index, n_threads): every thread of the pool once.
  using TeamFn = FunctionRef<void(int, int)>;

  // n_threads <= 0 means all hardware threads. The calling thread takes part,
  // so a pool of n runs n-1 workers.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end, thread_index) over [0, n) split into at most size()
  // contiguous near-equal ranges of at least `grain` items; returns when all
  // are done. Not reentrant: fn must not call into the same pool. If fn
  // throws on any thread, the first exception is rethrown here once every
  // part has finished.
  void parallel_for(int64_t n, RangeFn fn, int64_t grain = 1);

  // Calls fn(i, size()) on every thread (i = 0 is the caller) and returns when
  // all are done: for kernels that partition their work themselves.
  void run(TeamFn fn);

  // How long an idle worker spins before it sleeps (microseconds). Spinning
  // makes back-to-back ops cheap; sleeping leaves the cores to other work.
  void set_spin_us(int us) { spin_us_.store(us, std::memory_order_relaxed); }

  static int hardware_threads();

 private:
  void worker(int index);
  void dispatch();  // wakes workers for job_*, runs part 0, waits
  void run_part(int index);  // runs one part, keeping its exception

  int n_threads_;
  std::vector<std::thread> workers_;
  std::atomic<int> spin_us_{200};

  // The current job (written by the caller before it bumps generation_).
  TeamFn* job_ = nullptr;
  int job_parts_ = 0;

  std::atomic<uint64_t> generation_{0};  // bumped once per dispatch
  std::atomic<int> pending_{0};          // workers still running the job
  std::atomic<int> sleepers_{0};         // workers blocked on start_cv_
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  std::exception_ptr error_;  // the first exception of the current job (under mu_)
};

}  // namespace nibble
