// The attention kernel's KV tile table on the host: adjacent tiles that wait for the same signal
// value (or for nothing) merged into one, as the CUDA executor's lowering uploads them. No GPU.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <utility>
#include <vector>

#include "weft/kernels/attention.hpp"

namespace weft {
namespace {

AttentionKvTile tile(int64_t row, int64_t rows, int32_t signal = -1, uint64_t value = 0) {
  AttentionKvTile t;
  t.row = row;
  t.rows = rows;
  t.wait_signal = signal;
  t.wait_value = signal < 0 ? 0 : value;
  return t;
}

// Each row's wait, (-1, 0) for none; rows listed twice or missing show as a count != 1.
std::map<int64_t, std::pair<std::pair<int32_t, uint64_t>, int>> waits_by_row(const std::vector<AttentionKvTile>& tiles) {
  std::map<int64_t, std::pair<std::pair<int32_t, uint64_t>, int>> rows;
  for (const AttentionKvTile& t : tiles)
    for (int64_t r = t.row; r < t.row + t.rows; ++r) {
      auto& entry = rows[r];
      entry.first = {t.wait_signal, t.wait_value};
      ++entry.second;
    }
  return rows;
}

TEST(AttentionKvTables, TilesThatWaitForNothingBecomeOne) {
  const std::vector<AttentionKvTile> merged = merge_adjacent_kv_tiles({tile(0, 128), tile(128, 128), tile(256, 77)});
  ASSERT_EQ(merged.size(), 1u);
  EXPECT_EQ(merged[0].row, 0);
  EXPECT_EQ(merged[0].rows, 333);
  EXPECT_EQ(merged[0].wait_signal, -1);
}

TEST(AttentionKvTables, OnlyTheSameWaitOnAdjacentRowsMerges) {
  const std::vector<AttentionKvTile> merged = merge_adjacent_kv_tiles({
      tile(0, 128, 3, 2), tile(128, 128, 3, 2),  // one arrival: merged
      tile(256, 128, 3, 4),                      // the same signal, a larger value: apart
      tile(384, 128, 5, 4),                      // another signal: apart
      tile(512, 128),                            // no wait after a wait: apart
      tile(640, 64), tile(800, 64),              // a gap: apart
      tile(864, 64, 5, 4), tile(928, 64, 5, 4),  // merged again
  });
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 256}, {256, 128}, {384, 128}, {512, 192}, {800, 64}, {864, 128}};
  ASSERT_EQ(merged.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(merged[i].row, want[i].first) << "entry " << i;
    EXPECT_EQ(merged[i].rows, want[i].second) << "entry " << i;
  }
  EXPECT_EQ(merged[1].wait_value, 4u);
  EXPECT_EQ(merged[2].wait_signal, 5);
  EXPECT_EQ(merged[3].wait_signal, -1);
}

// Random tables of a plan's kind (contiguous runs with gaps, waits from a few signals and values):
// every row keeps its wait and is read once, tiles keep their order, and no two neighbours of the
// merged table could merge further.
TEST(AttentionKvTables, MergingKeepsEveryRowsWaitOnRandomTables) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<AttentionKvTile> tiles;
    int64_t row = 0;
    const int count = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < count; ++i) {
      if (rng() % 8 == 0) row += 1 + static_cast<int64_t>(rng() % 100);  // a gap
      const int64_t rows = 1 + static_cast<int64_t>(rng() % 200);
      const int32_t signal = static_cast<int32_t>(rng() % 4) - 1;          // -1: none
      tiles.push_back(tile(row, rows, signal, 1 + rng() % 2));
      row += rows;
    }
    const std::vector<AttentionKvTile> merged = merge_adjacent_kv_tiles(tiles);
    EXPECT_EQ(waits_by_row(merged), waits_by_row(tiles)) << "trial " << trial;
    EXPECT_LE(merged.size(), tiles.size());
    for (size_t i = 1; i < merged.size(); ++i) {
      EXPECT_GT(merged[i].row, merged[i - 1].row) << "trial " << trial;
      const bool adjacent = merged[i - 1].row + merged[i - 1].rows == merged[i].row;
      const bool same_wait = merged[i - 1].wait_signal == merged[i].wait_signal && merged[i - 1].wait_value == merged[i].wait_value;
      EXPECT_FALSE(adjacent && same_wait) << "trial " << trial << ": entries " << i - 1 << " and " << i << " could merge";
    }
  }
}

// Exact FLOPs against a count of (query, key) pairs made one by one: causal with the keys' block
// after, before and across the queries' positions, and non-causal; tiles with a gap and ragged ends.
TEST(AttentionKvTables, ExactFlopsCountEveryVisiblePairOnce) {
  const std::vector<AttentionKvTile> tiles = {tile(0, 100), tile(100, 28), tile(200, 77)};
  for (const bool causal : {false, true})
    for (const int64_t q_position : {int64_t{0}, int64_t{150}, int64_t{500}}) {
      AttentionLaunch l;
      l.q_rows = 130;
      l.heads = 3;
      l.head_dim = 64;
      l.causal = causal;
      l.q_position = q_position;
      l.kv_position = 20;
      double pairs = 0;
      for (int64_t i = 0; i < l.q_rows; ++i)
        for (const AttentionKvTile& t : tiles)
          for (int64_t j = t.row; j < t.row + t.rows; ++j) pairs += !causal || l.kv_position + j <= l.q_position + i;
      EXPECT_DOUBLE_EQ(attention_exact_flops(l, tiles), 4.0 * 64 * 3 * pairs) << (causal ? "causal" : "non-causal") << " at " << q_position;
    }
}

}  // namespace
}  // namespace weft
