// The attention kernel's unit order (weft/kernels/attention_schedule.hpp), which the kernel runs as
// it is: every (query tile, head) once whatever the grid, CTAs balanced under a causal mask, and the
// units running at once without a causal mask inside one KV head's section. A unit computed twice or
// never is a wrong output; an unbalanced order is a slow kernel no correctness test sees.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "weft/kernels/attention_schedule.hpp"

namespace weft::attention_detail {
namespace {

struct Shape {
  int64_t tokens;
  int heads, kv_heads;
  bool causal;
};

std::string name(const Shape& s, int grid) {
  return std::to_string(s.tokens) + " tokens " + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + (s.causal ? " causal" : "") +
         ", grid " + std::to_string(grid);
}

// Each CTA's units in the order it runs them, as the kernel's loop walks the rounds.
std::vector<std::vector<int>> walk(const AttentionSchedule& schedule, int grid) {
  std::vector<std::vector<int>> units(static_cast<size_t>(grid));
  for (int cta = 0; cta < grid; ++cta)
    for (int round = 0, index = AttentionSchedule::unit_index(cta, grid, 0); index < schedule.unit_count();
         index = AttentionSchedule::unit_index(cta, grid, ++round))
      units[static_cast<size_t>(cta)].push_back(index);
  return units;
}

constexpr int kTileQ = 128;

TEST(AttentionSchedule, EveryQueryTileOfEveryHeadOnceOnAnyGrid) {
  for (const Shape& s : {Shape{4096, 32, 8, false}, Shape{4096, 32, 8, true}, Shape{1000, 12, 4, false}, Shape{1000, 12, 4, true},
                         Shape{200, 6, 1, false}, Shape{16384, 32, 32, true}, Shape{129, 1, 1, true}})
    for (int grid : {1, 2, 7, 64, 131, 132}) {
      const AttentionSchedule schedule = AttentionSchedule::of(s.tokens, kTileQ, s.heads, s.kv_heads, s.causal);
      const int units = schedule.unit_count();
      if (grid > units) continue;  // the kernel launches at most one CTA per unit
      std::set<std::pair<int, int>> seen;
      int count = 0;
      for (const std::vector<int>& cta : walk(schedule, grid))
        for (int index : cta) {
          const UnitCoord c = schedule.unit(index);
          ASSERT_TRUE(c.q_tile >= 0 && c.q_tile < schedule.q_tiles && c.head >= 0 && c.head < s.heads) << name(s, grid) << ", unit " << index;
          seen.insert({c.q_tile, c.head});
          ++count;
        }
      EXPECT_EQ(count, units) << name(s, grid);
      EXPECT_EQ(static_cast<int>(seen.size()), units) << name(s, grid) << ": a unit twice or never";
    }
}

TEST(AttentionSchedule, CausalWorkIsBalancedOverTheCtas) {
  // Under a causal mask (queries and keys at the same positions, 128-key pieces) query tile t reads
  // t + 1 pieces; the most loaded of 132 CTAs against the mean. Units b, b + grid, ... (no snake)
  // put 1.125x the mean on one CTA at 4096 tokens.
  for (const Shape& s : {Shape{4096, 32, 8, true}, Shape{8192, 32, 8, true}, Shape{16384, 32, 8, true}, Shape{8192, 32, 32, true},
                         Shape{8192, 16, 16, true}, Shape{16384, 32, 4, true}}) {
    const AttentionSchedule schedule = AttentionSchedule::of(s.tokens, kTileQ, s.heads, s.kv_heads, s.causal);
    std::vector<int64_t> load;
    for (const std::vector<int>& cta : walk(schedule, 132)) {
      int64_t pieces = 0;
      for (int index : cta) pieces += schedule.unit(index).q_tile + 1;
      load.push_back(pieces);
    }
    const double mean = static_cast<double>(std::accumulate(load.begin(), load.end(), int64_t{0})) / static_cast<double>(load.size());
    EXPECT_LE(static_cast<double>(*std::max_element(load.begin(), load.end())), 1.01 * mean) << name(s, 132);
  }
}

TEST(AttentionSchedule, WithoutACausalMaskTheCtasRunningAtOnceReadOneKvHead) {
  // 16384 tokens, 32 query heads on 8 KV heads: sections of 4 query heads (one KV head) of 128 query
  // tiles each; the 132 units of any round span at most two KV heads (a section boundary), where
  // every head at once would be all 8.
  const Shape s{16384, 32, 8, false};
  const AttentionSchedule schedule = AttentionSchedule::of(s.tokens, kTileQ, s.heads, s.kv_heads, s.causal);
  EXPECT_EQ(schedule.section_heads, 4);
  const int grid = 132, group = s.heads / s.kv_heads;
  for (int round = 0; round * grid < schedule.unit_count(); ++round) {
    std::set<int> kv_heads;
    for (int cta = 0; cta < grid; ++cta) {
      const int index = AttentionSchedule::unit_index(cta, grid, round);
      if (index < schedule.unit_count()) kv_heads.insert(schedule.unit(index).head / group);
    }
    EXPECT_LE(kv_heads.size(), 2u) << "round " << round;
  }
  // Causal: one section of every head, the longest query tiles first.
  const AttentionSchedule causal = AttentionSchedule::of(s.tokens, kTileQ, s.heads, s.kv_heads, true);
  EXPECT_EQ(causal.section_heads, 32);
  EXPECT_EQ(causal.unit(0).q_tile, causal.q_tiles - 1);
  EXPECT_EQ(causal.unit(causal.unit_count() - 1).q_tile, 0);
}

}  // namespace
}  // namespace weft::attention_detail
