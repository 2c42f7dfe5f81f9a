// core/build_once_cache.hpp, as the cuDNN attention wrapper uses it: each key built once, a failed key
// never rebuilt and answered with nothing (the caller's fallback), the first failure of the process
// warned, later ones not, and what is not a build failure passed through with nothing kept. Counts are
// checked against the calls made here.
#include "core/build_once_cache.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace meshtrain {
namespace test_build_once_cache {

struct Calls {
  std::vector<int> builds;  // the keys built, in order
  std::vector<std::string> warnings;
};

// Builds key * 10, refusing the odd keys (as cuDNN refuses a shape its engines lack).
const int* get(BuildOnceCache<int, int>& cache, Calls& calls, int key) {
  return cache.get(
      key,
      [&] {
        calls.builds.push_back(key);
        if (key % 2 != 0) throw std::runtime_error("no engine for key " + std::to_string(key));
        return key * 10;
      },
      [&](const std::string& why) { calls.warnings.push_back(why); });
}

TEST(BuildOnceCache, EachKeyBuiltOnceAndAFailureWarnedOnce) {
  BuildOnceCache<int, int> cache;
  Calls calls;
  for (int round = 0; round < 3; ++round) {
    for (int key : {2, 3, 4, 5}) {
      const int* value = get(cache, calls, key);
      if (key % 2 == 0) {
        ASSERT_NE(value, nullptr);
        EXPECT_EQ(*value, key * 10);
      } else {
        EXPECT_EQ(value, nullptr) << key;
      }
    }
  }
  EXPECT_EQ(calls.builds, (std::vector<int>{2, 3, 4, 5}));  // never rebuilt, failed or not
  EXPECT_EQ(calls.warnings, (std::vector<std::string>{"no engine for key 3"}));
  EXPECT_EQ(cache.failures(), 2u);
  // The value kept is the one built: its address does not move as keys are added.
  const int* two = get(cache, calls, 2);
  for (int key = 6; key < 40; key += 2) get(cache, calls, key);
  EXPECT_EQ(get(cache, calls, 2), two);
}

TEST(BuildOnceCache, OtherExceptionsPassThroughAndTheKeyIsTriedAgain) {
  BuildOnceCache<int, int> cache;
  int builds = 0;
  const auto build = [&] {
    if (++builds == 1) throw std::logic_error("not a refusal");
    return 7;
  };
  const auto warn = [](const std::string& why) { ADD_FAILURE() << "warned: " << why; };
  EXPECT_THROW(cache.get(1, build, warn), std::logic_error);
  ASSERT_NE(cache.get(1, build, warn), nullptr);
  EXPECT_EQ(*cache.get(1, build, warn), 7);
  EXPECT_EQ(builds, 2);
  EXPECT_EQ(cache.failures(), 0u);
}

}  // namespace test_build_once_cache
}  // namespace meshtrain
