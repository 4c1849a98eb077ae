// Before each GPU test: a new shared test group if an earlier test's failure aborted it (see
// bench::renew_test_group_if_aborted), so that the failure stays that test's alone.
#include <gtest/gtest.h>

#include <cstdio>
#include <exception>

#include "check_against_host.hpp"

namespace weft {
namespace {

class RenewAbortedTestGroup : public testing::EmptyTestEventListener {
  void OnTestStart(const testing::TestInfo& test) override {
    try {
      bench::renew_test_group_if_aborted();
    } catch (const std::exception& e) {  // the test then fails on the old group, saying why
      std::fprintf(stderr, "weft tests: could not renew the test group before %s.%s: %s\n", test.test_suite_name(), test.name(), e.what());
    }
  }
};

// Registered before main: the listener list belongs to the UnitTest singleton.
const bool registered = (testing::UnitTest::GetInstance()->listeners().Append(new RenewAbortedTestGroup), true);

}  // namespace
}  // namespace weft
