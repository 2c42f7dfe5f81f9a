// MESHTRAIN_INJECT_FAULT's text (core/injected_fault.hpp): the forms share/docs/design.md gives
// parse to the name, step and rank written out here; every malformed entry and every unknown name
// is refused naming the entry.
#include "core/errors.hpp"
#include "core/injected_fault.hpp"

#include <gtest/gtest.h>

#include <string>

namespace meshtrain {
namespace test_injected_fault {

TEST(InjectedFault, ParsesEveryForm) {
  const auto faults = parse_injected_faults("nan_gradient@3,skip_collective@2:1,,stall@10");
  ASSERT_EQ(faults.size(), 3u);
  EXPECT_EQ(faults[0].name, "nan_gradient");
  EXPECT_EQ(faults[0].step, 3);
  EXPECT_EQ(faults[0].rank, -1);
  EXPECT_EQ(faults[1].name, "skip_collective");
  EXPECT_EQ(faults[1].step, 2);
  EXPECT_EQ(faults[1].rank, 1);
  EXPECT_EQ(faults[2].step, 10);
  EXPECT_TRUE(parse_injected_faults("").empty());
}

TEST(InjectedFault, RefusesMalformedEntries) {
  for (const std::string bad : {"nan_gradient", "nan_gradient@", "nan_gradient@0", "nan_gradient@-1",
                                "nan_gradient@3:", "nan_gradient@3:x", "nan_gradient@3x", "nan_gradient@3:-2"}) {
    try {
      parse_injected_faults(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + bad + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(InjectedFault, RefusesUnknownNames) {
  try {
    parse_injected_faults("nan_gradeint@3");
    ADD_FAILURE() << "a misspelt name was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'nan_gradeint'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nan_gradient"), std::string::npos) << e.what();
  }
}

TEST(InjectedFault, NothingFiresWhenUnset) {
  // ctest runs this without MESHTRAIN_INJECT_FAULT.
  EXPECT_FALSE(fault_fires("nan_gradient", 1, 0));
}

}  // namespace test_injected_fault
}  // namespace meshtrain
