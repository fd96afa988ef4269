// ThreadPool: every index is visited exactly once, whatever the sizes.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace flint {
namespace {

TEST(ThreadPool, VisitsEveryIndexOnce) {
  ThreadPool pool(4);
  EXPECT_EQ(pool.num_threads(), 4);
  for (int64_t n : {0, 1, 3, 7, 129, 1000}) {
    for (int64_t grain : {1, 16}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int rep = 0; rep < 3; ++rep)
        pool.parallel_for(
            n,
            [&](int64_t b, int64_t e) {
              for (int64_t i = b; i < e; ++i) hits[i]++;
            },
            grain);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 3) << "n=" << n << " i=" << i;
    }
  }
}

}  // namespace
}  // namespace flint
