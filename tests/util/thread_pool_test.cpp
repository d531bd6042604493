// The thread pool: every index runs exactly once, every thread joins run(),
// and back-to-back dispatches are correct whether workers spin or sleep.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "util/thread_pool.h"

namespace nibble {
namespace {

TEST(ThreadPool, ParallelForCoversEachIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 7, 64, 1000}) {
      for (int64_t grain : {1, 3, 100}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> calls{0};
        pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
          EXPECT_LT(b, e);
          EXPECT_GE(t, 0);
          EXPECT_LT(t, threads);
          calls.fetch_add(1);
          for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
        }, grain);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "n=" << n << " i=" << i;
        // Ranges hold at least `grain` items (unless n itself is smaller).
        if (n > 0) {
          EXPECT_LE(calls.load(), std::max<int64_t>(1, n / grain));
        }
      }
    }
  }
}

TEST(ThreadPool, RunGivesEveryThreadOneCall) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> seen(4);
  pool.run([&](int i, int n) {
    EXPECT_EQ(n, 4);
    seen[size_t(i)].fetch_add(1);
  });
  for (auto& s : seen) EXPECT_EQ(s.load(), 1);
}

TEST(ThreadPool, ManySmallJobsSpinningAndSleeping) {
  for (int spin_us : {200, 0}) {  // 0: workers sleep between every job
    ThreadPool pool(3);
    pool.set_spin_us(spin_us);
    int64_t total = 0;
    for (int rep = 0; rep < 3000; ++rep) {
      std::atomic<int64_t> sum{0};
      pool.parallel_for(30, [&](int64_t b, int64_t e, int) {
        int64_t s = 0;
        for (int64_t i = b; i < e; ++i) s += i + rep;
        sum.fetch_add(s);
      });
      total += sum.load();
      ASSERT_EQ(sum.load(), 435 + 30 * rep) << "rep " << rep;
    }
    EXPECT_GT(total, 0);
  }
}

TEST(ThreadPool, IdleWorkersSleepAndWake) {
  ThreadPool pool(2);
  pool.set_spin_us(50);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // workers asleep now
  std::atomic<int> hits{0};
  pool.parallel_for(2, [&](int64_t b, int64_t e, int) { hits.fetch_add(int(e - b)); });
  EXPECT_EQ(hits.load(), 2);
}

TEST(ThreadPool, ExceptionsReachTheCaller) {
  ThreadPool pool(3);
  for (int thrower : {0, 1, 2}) {  // the caller's part, or a worker's
    std::atomic<int> done{0};
    EXPECT_THROW(pool.run([&](int i, int) {
      done.fetch_add(1);
      if (i == thrower) throw std::runtime_error("part failed");
    }),
                 std::runtime_error);
    EXPECT_EQ(done.load(), 3);  // every part ran to the end first
  }
  // The pool is still usable afterwards.
  std::atomic<int> hits{0};
  pool.parallel_for(10, [&](int64_t b, int64_t e, int) { hits.fetch_add(int(e - b)); });
  EXPECT_EQ(hits.load(), 10);
}

TEST(ThreadPool, FunctionRefCallsTheReferencedCallable) {
  int calls = 0;
  auto f = [&](int a, int b) { calls += a * b; };
  ThreadPool::TeamFn ref(f);
  ref(3, 4);
  ThreadPool::TeamFn copy = ref;
  copy(1, 2);
  EXPECT_EQ(calls, 14);
}

}  // namespace
}  // namespace nibble
