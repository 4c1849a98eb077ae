#include <gtest/gtest.h>

#include <random>
#include <set>

#include "weft/ir/tile_grid.hpp"

namespace weft {
namespace {

TEST(TileGrid, RaggedEdgesAreClipped) {
  const TileGrid grid{130, 70, 64, 32};
  EXPECT_EQ(grid.tiles_m(), 3);
  EXPECT_EQ(grid.tiles_n(), 3);
  EXPECT_EQ(grid.tile(grid.index(2, 2)), (Rect{128, 64, 2, 6}));
  int64_t area = 0;
  for (int64_t t = 0; t < grid.count(); ++t) area += grid.tile(t).rows * grid.tile(t).cols;
  EXPECT_EQ(area, 130 * 70);
}

TEST(TileGrid, RasterAlongMWalksDownColumns) {
  const TileGrid grid{3 * 8, 2 * 8, 8, 8};
  EXPECT_EQ(rasterized_order(grid, Raster::along_m, 1), (std::vector<int64_t>{0, 2, 4, 1, 3, 5}));
  EXPECT_EQ(rasterized_order(grid, Raster::along_n, 1), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

TEST(TileGrid, SwizzleVisitsStripsRowByRow) {
  const TileGrid grid{2 * 8, 4 * 8, 8, 8};  // 2 x 4 tiles
  // Strips of 2 tile columns: (0,0) (0,1) (1,0) (1,1), then columns 2-3.
  EXPECT_EQ(rasterized_order(grid, Raster::along_m, 2), (std::vector<int64_t>{0, 1, 4, 5, 2, 3, 6, 7}));
}

TEST(TileGrid, EveryOrderIsAPermutation) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const TileGrid grid{static_cast<int64_t>(1 + rng() % 300), static_cast<int64_t>(1 + rng() % 300), 1 + static_cast<int>(rng() % 64), 1 + static_cast<int>(rng() % 64)};
    const Raster raster = trial % 2 ? Raster::along_m : Raster::along_n;
    const int swizzle = 1 + static_cast<int>(rng() % 5);
    SCOPED_TRACE("trial " + std::to_string(trial));
    const auto order = rasterized_order(grid, raster, swizzle);
    EXPECT_NO_THROW(check_is_permutation(grid, order));
    const int world = 1 + static_cast<int>(rng() % 8);
    const auto shifted = rank_shifted_order(grid, order, (grid.m + world - 1) / world, world,
                                            static_cast<int>(rng() % static_cast<unsigned>(world)), 1);
    EXPECT_NO_THROW(check_is_permutation(grid, shifted));
  }
}

TEST(TileGrid, RankShiftStartsAfterTheOwnShardForReduceScatter) {
  const TileGrid grid{4 * 16, 16, 16, 16};  // one tile per shard, 4 shards
  const auto base = rasterized_order(grid, Raster::along_m, 1);
  EXPECT_EQ(rank_shifted_order(grid, base, 16, 4, 1, 1), (std::vector<int64_t>{2, 3, 0, 1}));
  EXPECT_EQ(rank_shifted_order(grid, base, 16, 4, 1, 0), (std::vector<int64_t>{1, 2, 3, 0}));
  // Two ranks never start on the same shard.
  std::set<int64_t> first;
  for (int r = 0; r < 4; ++r) first.insert(rank_shifted_order(grid, base, 16, 4, r, 1).front());
  EXPECT_EQ(first.size(), 4u);
}

TEST(TileGrid, PersistentWavesCoverAllTilesInOrder) {
  const TileGrid grid{10 * 8, 7 * 8, 8, 8};  // 70 tiles
  const auto schedule = schedule_persistent(rasterized_order(grid, Raster::along_m, 1), 32);
  ASSERT_EQ(schedule.wave_count(), 3);
  const auto waves = schedule.waves();
  EXPECT_EQ(waves[0].size(), 32u);
  EXPECT_EQ(waves[2].size(), 6u);
  EXPECT_EQ(schedule.sm_of_position[33], 1);
  EXPECT_EQ(waves[1].front(), schedule.order[32]);
}

TEST(TileGrid, RejectsBadArguments) {
  const TileGrid grid{8, 8, 8, 8};
  EXPECT_THROW(rasterized_order(grid, Raster::along_m, 0), std::invalid_argument);
  EXPECT_THROW(schedule_persistent({0}, 0), std::invalid_argument);
  EXPECT_THROW(check_is_permutation(grid, {0, 0}), std::invalid_argument);
  EXPECT_THROW(parse_raster("diagonal"), std::invalid_argument);
}

}  // namespace
}  // namespace weft
