// The driver process of the crash torture (see RunTorture in torture_util.h).
// Disabled: it runs only when RunTorture re-executes this binary with
// --gtest_also_run_disabled_tests and a filter naming it.
#include <gtest/gtest.h>

#include "crash/torture_util.h"

namespace kvtier::testing {
namespace {

TEST(TortureDriver, DISABLED_Run) {
  std::string error;
  ASSERT_TRUE(RunTortureDriver(&error)) << error;
}

}  // namespace
}  // namespace kvtier::testing
