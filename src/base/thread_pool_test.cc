#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <vector>

#include "base/clock.h"

namespace deepinfer::base {
namespace {

TEST(ThreadPoolTest, RunsEverySubmittedTask) {
  std::atomic<int> count{0};
  {
    ThreadPool pool(3);
    for (int i = 0; i < 1000; ++i) pool.Submit([&count] { count.fetch_add(1); });
  }  // destructor drains the queue
  EXPECT_EQ(count.load(), 1000);
}

TEST(ThreadPoolTest, ParallelForCoversRangeExactlyOnce) {
  ThreadPool pool(4);
  for (int64_t n : {0, 1, 7, 100, 12345}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, 3, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPoolTest, NestedParallelForDoesNotDeadlock) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  pool.ParallelFor(8, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      pool.ParallelFor(10, 1, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
    }
  });
  EXPECT_EQ(sum.load(), 80);
}

TEST(ClockTest, StopwatchIsMonotonic) {
  Stopwatch sw;
  int64_t a = sw.ElapsedNanos();
  int64_t b = sw.ElapsedNanos();
  EXPECT_GE(a, 0);
  EXPECT_GE(b, a);
  EXPECT_GT(UnixSeconds(), 1700000000);
}

}  // namespace
}  // namespace deepinfer::base
