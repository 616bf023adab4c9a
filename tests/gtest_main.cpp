// The main() of every GoogleTest binary (instead of gtest_main): CTest runs
// one suite per process (cmake/gtest_suites.cmake), and a suite whose every
// case skipped (GTEST_SKIP: a CUDA case on a machine without a GPU) exits
// 77, which CTest reports as skipped (SKIP_RETURN_CODE) instead of passed.
// A suite with a failed case fails; one with a case that passed passes,
// and gtest's output lists the cases it skipped.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int status = RUN_ALL_TESTS();
  const auto& run = *::testing::UnitTest::GetInstance();
  if (status == 0 && run.successful_test_count() == 0 && run.skipped_test_count() > 0) return 77;
  return status;
}
