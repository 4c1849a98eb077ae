// How a benchmark process tells that a launcher started it as one rank of several (bench/lib/launcher).
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher.hpp"

namespace weft::bench {
namespace {

// Sets the launchers' variables for one test and restores the process's afterwards.
class LauncherEnvironment : public testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kNames) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value) setenv(name, value->c_str(), 1);
      else unsetenv(name);
    }
  }
  static constexpr const char* kNames[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS",
                                           "RANK",       "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

TEST_F(LauncherEnvironment, AloneTheProcessDrivesEveryRankAndPrints) {
  EXPECT_FALSE(launched_one_rank_per_process());
  EXPECT_TRUE(prints_for_every_rank());
  setenv("SLURM_NTASKS", "1", 1);  // one task of an allocation: still every GPU's threads
  setenv("SLURM_PROCID", "0", 1);
  EXPECT_FALSE(launched_one_rank_per_process());
  EXPECT_TRUE(prints_for_every_rank());
}

TEST_F(LauncherEnvironment, UnderALauncherRankZeroAlonePrints) {
  setenv("WORLD_SIZE", "4", 1);
  setenv("RANK", "2", 1);
  EXPECT_TRUE(launched_one_rank_per_process());
  EXPECT_FALSE(prints_for_every_rank());
  setenv("RANK", "0", 1);
  EXPECT_TRUE(prints_for_every_rank());
  unsetenv("WORLD_SIZE");
  unsetenv("RANK");
  setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  setenv("OMPI_COMM_WORLD_RANK", "7", 1);
  EXPECT_TRUE(launched_one_rank_per_process());
  EXPECT_FALSE(prints_for_every_rank());
}

}  // namespace
}  // namespace weft::bench
