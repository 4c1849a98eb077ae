// Which earlier items each item of the companion kernel follows (order_tile_program_items): only
// those whose regions overlap its own where one writes, the latest of each chain, up to
// kTileProgramMaxAfter; every earlier one for an item that notifies or a join. No GPU: the host
// function the companion's lowering calls.
#include <gtest/gtest.h>

#include <vector>

#include "weft/kernels/tile_program.hpp"

namespace weft {
namespace {

TileProgramRegion rows_of(int base, int64_t row, int64_t rows, int64_t cols = 256) {
  return TileProgramRegion{base, 0, row * cols, rows, cols, cols};
}

TileProgramItem reduce_into(TileProgramRegion dst, TileProgramRegion src, bool accumulate) {
  TileProgramItem it;
  it.kind = TileProgramItem::reduce;
  it.dst = dst;
  it.srcs[0] = src;
  it.source_count = 1;
  it.accumulate = accumulate;
  return it;
}

std::vector<int> after_of(const TileProgramItem& it) { return std::vector<int>(it.after, it.after + it.after_count); }

TEST(TileProgramOrder, TileLinksReduceScatterChainsEachChannelOverTheSourcesAlone) {
  // gemm_rs at world 4, 3 channels: for each source j (outer), each channel ch reduces the source's
  // partial rows into the channel's rows of C (base 0); sources' partials are bases 1..4.
  const int world = 4, channels = 3;
  // Each waits for the partial sums it reads, as the plan's do.
  std::vector<TileProgramItem> items;
  for (int j = 0; j < world; ++j)
    for (int ch = 0; ch < channels; ++ch) {
      items.push_back(reduce_into(rows_of(0, ch * 64, 64), rows_of(1 + j, ch * 64, 64), j > 0));
      items.back().wait_count = 1;
      items.back().wait_signal[0] = j * channels + ch;
      items.back().wait_value[0] = 1;
    }
  order_tile_program_items(items);
  for (int j = 0; j < world; ++j)
    for (int ch = 0; ch < channels; ++ch) {
      const TileProgramItem& it = items[static_cast<size_t>(j * channels + ch)];
      SCOPED_TRACE(testing::Message() << "source " << j << ", channel " << ch);
      EXPECT_EQ(it.after_all, 0);
      if (j == 0)
        EXPECT_TRUE(after_of(it).empty());
      else
        EXPECT_EQ(after_of(it), std::vector<int>{(j - 1) * channels + ch}) << "the same channel's item of the source before, not its ancestors";
    }
}

TEST(TileProgramOrder, AnItemReadingWhatAnotherWroteFollowsIt) {
  // 0: copy X -> Y[0:64); 1: copy X -> Y[64:128) (independent); 2: Z = Y[0:64) + X (reads what 0
  // wrote); 3: writes X[0:128), which 0, 1 and 2 read (write after read: follows all three).
  std::vector<TileProgramItem> items(4);
  items[0].kind = items[1].kind = TileProgramItem::copy;
  items[0].dst = rows_of(1, 0, 64), items[0].srcs[0] = rows_of(0, 0, 64);
  items[1].dst = rows_of(1, 64, 64), items[1].srcs[0] = rows_of(0, 64, 64);
  items[2].kind = TileProgramItem::reduce;
  items[2].dst = rows_of(2, 0, 64), items[2].source_count = 2, items[2].srcs[0] = rows_of(1, 0, 64), items[2].srcs[1] = rows_of(0, 0, 64);
  items[3].kind = TileProgramItem::copy;
  items[3].dst = rows_of(0, 0, 128), items[3].srcs[0] = rows_of(3, 0, 128);
  order_tile_program_items(items);
  EXPECT_EQ(items[0].after_all, 0);
  EXPECT_TRUE(after_of(items[0]).empty());
  EXPECT_EQ(items[1].after_all, 0);
  EXPECT_TRUE(after_of(items[1]).empty()) << "its rows of Y and X touch no one else's writes";
  EXPECT_EQ(items[2].after_all, 0);
  EXPECT_EQ(after_of(items[2]), std::vector<int>{0});
  EXPECT_EQ(items[3].after_all, 0);
  EXPECT_EQ(after_of(items[3]), (std::vector<int>{1, 2})) << "0 is covered by 2, which follows it";
}

TEST(TileProgramOrder, ANotifyOrAJoinFollowsEveryEarlierItem) {
  std::vector<TileProgramItem> items;
  items.push_back(reduce_into(rows_of(0, 0, 64), rows_of(1, 0, 64), false));
  items.push_back(reduce_into(rows_of(0, 64, 64), rows_of(1, 64, 64), false));
  TileProgramItem notifying = reduce_into(rows_of(0, 128, 64), rows_of(1, 128, 64), false);
  notifying.notify_count = 1;
  items.push_back(notifying);
  TileProgramItem join;
  join.kind = TileProgramItem::sync;
  join.source_count = 0;
  items.push_back(join);
  items.push_back(reduce_into(rows_of(0, 192, 64), rows_of(1, 192, 64), false));
  order_tile_program_items(items);
  EXPECT_EQ(items[2].after_all, 1) << "its notify says every step before it is done";
  EXPECT_EQ(items[3].after_all, 1);
  EXPECT_EQ(items[4].after_all, 0) << "an item after a join that shares no rows with anyone";
  EXPECT_EQ(after_of(items[4]), std::vector<int>{3}) << "but it follows the join: a join gates every step after it";
}

TEST(TileProgramOrder, AnItemThatWaitsForNothingFollowsTheItemsThatWait) {
  // 0 waits for a signal, then copies X -> Y; 1 copies Z -> W and waits for nothing: it may rely on
  // 0's wait (the data it covers), so it follows 0 though they share no rows; 2 waits itself.
  std::vector<TileProgramItem> items(3);
  for (int i = 0; i < 3; ++i) {
    items[i].kind = TileProgramItem::copy;
    items[i].dst = rows_of(2 * i + 1, 0, 64), items[i].srcs[0] = rows_of(2 * i, 0, 64);
  }
  items[0].wait_count = 1;
  items[2].wait_count = 1, items[2].wait_signal[0] = 1;
  order_tile_program_items(items);
  EXPECT_EQ(after_of(items[1]), std::vector<int>{0});
  EXPECT_EQ(items[2].after_all, 0);
  EXPECT_TRUE(after_of(items[2]).empty()) << "it waits for its own data";
}

TEST(TileProgramOrder, AStridedRegionReachesItsLastRow) {
  // X: 4 rows of 8 elements, 100 apart (elements 0-7, 100-107, 200-207, 300-307); Y writes elements
  // 300-307 of the same buffer, X's last row: Y follows the item that reads X.
  std::vector<TileProgramItem> items(2);
  items[0].kind = items[1].kind = TileProgramItem::copy;
  items[0].dst = rows_of(2, 0, 4, 8), items[0].srcs[0] = TileProgramRegion{1, 0, 0, 4, 8, 100};
  items[1].dst = TileProgramRegion{1, 0, 300, 1, 8, 8}, items[1].srcs[0] = rows_of(3, 0, 1, 8);
  order_tile_program_items(items);
  EXPECT_EQ(after_of(items[1]), std::vector<int>{0});
}

TEST(TileProgramOrder, MoreChainsThanAnItemCanNameFollowEverything) {
  // One reduction over the rows that six independent copies wrote: more than kTileProgramMaxAfter.
  std::vector<TileProgramItem> items;
  for (int i = 0; i < 6; ++i) {
    TileProgramItem copy;
    copy.kind = TileProgramItem::copy;
    copy.dst = rows_of(1, i * 16, 16), copy.srcs[0] = rows_of(0, i * 16, 16);
    items.push_back(copy);
  }
  items.push_back(reduce_into(rows_of(2, 0, 96), rows_of(1, 0, 96), false));
  order_tile_program_items(items);
  static_assert(kTileProgramMaxAfter < 6);
  EXPECT_EQ(items[6].after_all, 1);
}

TEST(TileProgramOrder, RegionsOverlapByTheirElementRangesOnOneBase) {
  // Column halves of the same rows of one buffer with a stride: the linear ranges overlap, so the
  // second follows the first (conservative: the test is by element range, not by columns).
  std::vector<TileProgramItem> items(2);
  items[0].kind = items[1].kind = TileProgramItem::copy;
  items[0].dst = TileProgramRegion{1, 0, 0, 8, 128, 256}, items[0].srcs[0] = rows_of(0, 0, 8, 128);
  items[1].dst = TileProgramRegion{1, 0, 128, 8, 128, 256}, items[1].srcs[0] = rows_of(3, 0, 8, 128);
  // Another base: never.
  TileProgramItem other;
  other.kind = TileProgramItem::copy;
  other.dst = TileProgramRegion{4, 0, 0, 8, 128, 256}, other.srcs[0] = rows_of(5, 0, 8, 128);
  items.push_back(other);
  order_tile_program_items(items);
  EXPECT_EQ(after_of(items[1]), std::vector<int>{0});
  EXPECT_TRUE(after_of(items[2]).empty());
}

}  // namespace
}  // namespace weft
