// The overlap GEMM's tile tables on the host: stream-K's cut of a partial last wave (every CTA the
// same share of K-tiles, each tile's K covered once, its splits in table order, the last one
// storing and notifying) walked as the kernel's CTAs walk it, and the table check's rules for
// splits and padding. No GPU: these are the host functions the CUDA executor's lowering calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

#include "weft/kernels/overlap_gemm.hpp"
#include "weft/plan/gpu_lowering.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/transforms.hpp"
#include "weft/reference/cpu_proof.hpp"

namespace weft {
namespace {

constexpr OverlapGemmConfig kConfig = OverlapGemmConfig::tile_128x256;

// A launch over m x n x k with placeholder (aligned, never dereferenced) pointers: what
// require_valid_table checks without a GPU.
OverlapGemmLaunch launch_for(int64_t m, int64_t n, int64_t k, int k_splits) {
  OverlapGemmLaunch l;
  l.a = reinterpret_cast<const void*>(uintptr_t{0x10000});
  l.lda = k;
  l.b = reinterpret_cast<const void*>(uintptr_t{0x20000});
  l.ldb = k;
  l.m = m;
  l.n = n;
  l.k = k;
  l.targets[0] = OverlapGemmTarget{reinterpret_cast<void*>(uintptr_t{0x30000}), n, m, n};
  l.target_count = 1;
  l.wait_signals = reinterpret_cast<const uint64_t*>(uintptr_t{0x40000});
  l.notify_signals[0] = reinterpret_cast<uint64_t*>(uintptr_t{0x40000});
  l.k_splits = k_splits;
  return l;
}

// Every tile of an m x n grid of 128x256 tiles, row by row, each notifying signal 1 and waiting for
// signal 0 (as an AllGather GEMM's tiles do).
std::vector<OverlapGemmTile> whole_table(int64_t m, int64_t n) {
  std::vector<OverlapGemmTile> table;
  for (int64_t i = 0; i * 128 < m; ++i)
    for (int64_t j = 0; j * 256 < n; ++j) {
      OverlapGemmTile e;
      e.tile_m = static_cast<int32_t>(i);
      e.tile_n = static_cast<int32_t>(j);
      e.rows = static_cast<int32_t>(std::min<int64_t>(128, m - i * 128));
      e.cols = static_cast<int32_t>(std::min<int64_t>(256, n - j * 256));
      e.store_row = i * 128;
      e.store_col = j * 256;
      e.wait_signal = 0;
      e.wait_value = static_cast<uint64_t>(i + 1);
      e.notify_rank = 0;
      e.notify_signal = 1;
      e.notify_increment = 1;
      table.push_back(e);
    }
  return table;
}

bool same(const OverlapGemmTile& a, const OverlapGemmTile& b) {
  return a.tile_m == b.tile_m && a.tile_n == b.tile_n && a.rows == b.rows && a.cols == b.cols && a.store_row == b.store_row &&
         a.store_col == b.store_col && a.store_target == b.store_target && a.wait_signal == b.wait_signal && a.wait_value == b.wait_value &&
         a.notify_rank == b.notify_rank && a.notify_signal == b.notify_signal && a.notify_increment == b.notify_increment &&
         a.k_begin == b.k_begin && a.k_tiles == b.k_tiles && a.split == b.split && a.splits == b.splits && a.addend_target == b.addend_target &&
         a.addend_count == b.addend_count && a.addend_row == b.addend_row && a.addend_row_step == b.addend_row_step &&
         a.addend_col == b.addend_col && a.a_operand == b.a_operand && a.a_tile_m == b.a_tile_m;
}
bool same(const std::vector<OverlapGemmTile>& a, const std::vector<OverlapGemmTile>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const auto& x, const auto& y) { return same(x, y); });
}

int64_t k_tiles_of(const OverlapGemmTile& e, int64_t k_tiles) { return e.k_tiles == 0 ? k_tiles : std::max<int32_t>(e.k_tiles, 0); }

// Walks the table as `ctas` persistent CTAs do (CTA c: entries c, c + ctas, ...), each entry taking
// its K-tiles in time and a split finishing no earlier than the split before it (no fix-up cost).
// Returns the time the last CTA finishes; fails the test if the CTAs would wait on each other forever.
double walk(const std::vector<OverlapGemmTile>& table, int ctas, int64_t k_tiles) {
  std::vector<size_t> next(static_cast<size_t>(ctas));
  std::vector<double> clock(static_cast<size_t>(ctas), 0.0);
  for (int c = 0; c < ctas; ++c) next[static_cast<size_t>(c)] = static_cast<size_t>(c);
  std::map<std::pair<int32_t, int32_t>, std::pair<int, double>> done;  // tile -> (splits finished, when the last finished)
  for (bool moved = true; moved;) {
    moved = false;
    for (int c = 0; c < ctas; ++c) {
      size_t& i = next[static_cast<size_t>(c)];
      while (i < table.size()) {
        const OverlapGemmTile& e = table[i];
        double end = clock[static_cast<size_t>(c)] + static_cast<double>(k_tiles_of(e, k_tiles));
        if (e.splits > 1) {
          auto& [finished, when] = done[{e.tile_m, e.tile_n}];
          if (finished != e.split) break;  // waits for the split before it
          end = std::max(end, when);
          finished += 1;
          when = end;
        }
        clock[static_cast<size_t>(c)] = end;
        i += static_cast<size_t>(ctas);
        moved = true;
      }
    }
  }
  for (int c = 0; c < ctas; ++c) EXPECT_GE(next[static_cast<size_t>(c)], table.size()) << "CTA " << c << " never finishes: a cycle of waits";
  return *std::max_element(clock.begin(), clock.end());
}

// The pieces of the streamed part that read K off the two fronts stream_k_tail promises: each CTA
// reads K-tile (t) of its pieces at time t from the streamed part's start, or K-tile (t - its share)
// in its last piece. Pieces inside one tile's K (a CTA whose share falls within a tile) are exempt.
int pieces_off_the_fronts(const std::vector<OverlapGemmTile>& table, int64_t kept, int ctas, int64_t k_tiles) {
  int off = 0;
  for (int c = 0; c < ctas; ++c) {
    int64_t clock = 0, share = 0;
    for (size_t i = static_cast<size_t>(kept) + static_cast<size_t>(c); i < table.size(); i += static_cast<size_t>(ctas))
      share += k_tiles_of(table[i], k_tiles);
    for (size_t i = static_cast<size_t>(kept) + static_cast<size_t>(c); i < table.size(); i += static_cast<size_t>(ctas)) {
      const OverlapGemmTile& e = table[i];
      if (e.k_tiles == kNoWorkKTiles) continue;
      const int64_t begin = e.splits > 1 ? e.k_begin : 0, count = k_tiles_of(e, k_tiles);
      const bool inside = begin > 0 && begin + count < k_tiles;
      const int64_t offset = ((begin - clock) % k_tiles + k_tiles) % k_tiles, last_offset = ((-share) % k_tiles + k_tiles) % k_tiles;
      if (!inside && offset != 0 && offset != last_offset) ++off;
      clock += count;
    }
  }
  return off;
}

struct StreamKCase {
  int64_t m, n, k;
  int ctas;
};

class StreamK : public testing::TestWithParam<StreamKCase> {};

TEST_P(StreamK, EveryCtaRunsAnEqualShareAndEveryTileIsWholeOnce) {
  const auto [m, n, k, ctas] = GetParam();
  const std::vector<OverlapGemmTile> before = whole_table(m, n);
  const int64_t k_tiles = (k + 63) / 64, count = static_cast<int64_t>(before.size());
  const std::vector<OverlapGemmTile> after = stream_k_tail(before, k, kConfig, ctas);
  ASSERT_NE(count % ctas, 0) << "the cases have a partial last wave";
  const int64_t kept = std::max<int64_t>(count / ctas - 1, 0) * ctas;
  ASSERT_EQ(after.size() % static_cast<size_t>(ctas), 0u) << "padded so that every CTA takes as many entries";
  for (int64_t i = 0; i < kept; ++i) EXPECT_TRUE(same(after[static_cast<size_t>(i)], before[static_cast<size_t>(i)])) << "whole waves but the last stay";
  // The table check accepts it (splits in table order, each tile's K covered once).
  OverlapGemmLaunch l = launch_for(m, n, k, most_splits(after));
  l.tiles = after.data();
  l.tile_count = static_cast<int>(after.size());
  EXPECT_NO_THROW(require_valid_table(l, kConfig, after));
  // Each CTA's share of the streamed K-tiles is within one of every other's.
  const int64_t streamed = (count - kept) * k_tiles;
  for (int c = 0; c < ctas; ++c) {
    int64_t share = 0;
    for (size_t i = static_cast<size_t>(kept) + static_cast<size_t>(c); i < after.size(); i += static_cast<size_t>(ctas))
      share += k_tiles_of(after[i], k_tiles);
    EXPECT_GE(share, streamed / ctas) << "CTA " << c;
    EXPECT_LE(share, (streamed + ctas - 1) / ctas) << "CTA " << c;
  }
  // Each tile stores and notifies once, from the split that comes last; waits stay on every piece.
  std::map<std::pair<int32_t, int32_t>, int> notifies, pieces;
  for (size_t i = 0; i < after.size(); ++i) {
    const OverlapGemmTile& e = after[i];
    if (e.k_tiles == kNoWorkKTiles) {
      EXPECT_GE(static_cast<int64_t>(i), kept) << "padding only in the streamed part";
      continue;
    }
    ++pieces[{e.tile_m, e.tile_n}];
    EXPECT_EQ(e.wait_signal, 0);
    EXPECT_EQ(e.wait_value, static_cast<uint64_t>(e.tile_m + 1)) << "each piece loads A, so each waits for it";
    if (e.notify_rank >= 0) {
      ++notifies[{e.tile_m, e.tile_n}];
      EXPECT_EQ(e.split + 1, e.splits) << "the notify belongs to the last split";
    }
  }
  EXPECT_EQ(notifies.size(), before.size());
  for (const auto& [tile, count_of] : notifies) EXPECT_EQ(count_of, 1);
  EXPECT_EQ(pieces_off_the_fronts(after, kept, ctas, k_tiles), 0) << "every CTA reads K in step with the others";
  // Walked as the kernel walks it: no CTA waits forever, and with free fix-ups none waits at all:
  // the last CTA finishes when its own share is done.
  const double makespan = walk(after, ctas, k_tiles);
  EXPECT_EQ(makespan, static_cast<double>(kept / ctas * k_tiles + (streamed + ctas - 1) / ctas));
  EXPECT_LT(makespan, static_cast<double>((count + ctas - 1) / ctas * k_tiles)) << "faster than whole tiles' waves";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, StreamK,
    testing::Values(StreamKCase{1024, 2304, 7168, 132},   // 72 tiles on 132 CTAs: each tile over ~2 CTAs
                    StreamKCase{1000, 3696, 8192, 132},   // 120 tiles: 0.91 of a wave, ragged M and N
                    StreamKCase{1000, 4608, 9216, 132},   // 144 tiles: one whole wave and 12
                    StreamKCase{2048, 7168, 4096, 132},   // 448 tiles: 3.4 waves, the last two streamed
                    StreamKCase{1000, 4608, 9216, 114},   // another CTA count (SMs left to peer copies)
                    StreamKCase{640, 1280, 512, 16},      // 25 tiles of 8 K-tiles on 16 CTAs
                    StreamKCase{384, 512, 256, 5}),       // 6 tiles of 4 K-tiles on 5 CTAs: shares across tiles
    [](const auto& info) {
      return std::to_string(info.param.m) + "x" + std::to_string(info.param.n) + "x" + std::to_string(info.param.k) + "_on_" +
             std::to_string(info.param.ctas);
    });

// Many tile counts, CTA counts and K depths: the table check accepts every cut, no CTA waits on
// another with free fix-ups, and every piece but those inside one tile's K is on a front.
TEST(StreamK, EveryCutOfManyShapesIsCheckedBalancedAndInStep) {
  int cases = 0;
  for (int ctas : {3, 7, 16, 114, 132})
    for (int64_t k_tiles : {8, 13, 64, 112, 231})
      for (int64_t count = ctas / 2 + 1; count <= 4 * ctas; count += std::max(1, ctas / 5) + 1) {
        if (count % ctas == 0) continue;
        const int64_t n = 256 * 7, m = 128 * ((count + 6) / 7);
        std::vector<OverlapGemmTile> table = whole_table(m, n);
        table.resize(static_cast<size_t>(count));
        const int64_t k = k_tiles * 64;
        const std::vector<OverlapGemmTile> after = stream_k_tail(table, k, kConfig, ctas);
        const int64_t kept = std::max<int64_t>(count / ctas - 1, 0) * ctas, streamed = (count - kept) * k_tiles;
        if (streamed < ctas) continue;
        ++cases;
        const std::string what = std::to_string(count) + " tiles of " + std::to_string(k_tiles) + " K-tiles on " + std::to_string(ctas) + " CTAs";
        OverlapGemmLaunch l = launch_for(m, n, k, most_splits(after));
        l.tiles = after.data();
        l.tile_count = static_cast<int>(after.size());
        ASSERT_NO_THROW(require_valid_table(l, kConfig, after)) << what;
        EXPECT_EQ(walk(after, ctas, k_tiles), static_cast<double>(kept / ctas * k_tiles + (streamed + ctas - 1) / ctas)) << what;
        EXPECT_EQ(pieces_off_the_fronts(after, kept, ctas, k_tiles), 0) << what;
      }
  EXPECT_GT(cases, 100);
}

TEST(StreamK, LeavesWholeWavesSplitTablesAndTinyOnesAlone) {
  const std::vector<OverlapGemmTile> table = whole_table(1024, 2048);  // 64 tiles
  EXPECT_TRUE(same(stream_k_tail(table, 4096, kConfig, 64), table)) << "whole waves";
  EXPECT_TRUE(same(stream_k_tail(table, 4096, kConfig, 1), table)) << "one CTA";
  const std::vector<OverlapGemmTile> split = split_along_k(table, 2, 4096, kConfig);
  EXPECT_TRUE(same(stream_k_tail(split, 4096, kConfig, 100), split)) << "split already";
  const std::vector<OverlapGemmTile> one = whole_table(128, 256);
  EXPECT_TRUE(same(stream_k_tail(one, 64, kConfig, 4), one)) << "one K-tile for four CTAs";
  std::vector<OverlapGemmTile> partial = table;
  partial[3].k_begin = 1;
  partial[3].k_tiles = 2;
  EXPECT_THROW(stream_k_tail(partial, 4096, kConfig, 100), std::invalid_argument) << "an entry over part of K";
}

// Tiles that add peers' partial sums wait in their epilogue for other ranks' GEMMs, which may wait
// for this rank's stores that come before them in the table: a cut that reordered a CTA's stores
// could hold those back behind such a wait (fused gemm_rs with whole tile rows per rank). Such
// tables, and tables that name a tile twice, are left whole.
TEST(StreamK, TablesWithAddendsOrRepeatedTilesAreLeftAlone) {
  std::vector<OverlapGemmTile> table = whole_table(1000, 3696);
  table.back().addend_target = 0;
  table.back().addend_count = 1;
  table.back().addend_row = table.back().store_row;
  table.back().addend_col = table.back().store_col;
  EXPECT_TRUE(same(stream_k_tail(table, 8192, kConfig, 132), table)) << "one tile with addends";
  table.back().addend_count = 0;
  table.back().addend_target = -1;
  EXPECT_FALSE(same(stream_k_tail(table, 8192, kConfig, 132), table)) << "the same table without them is cut";
  std::vector<OverlapGemmTile> twice = whole_table(1000, 3696);
  twice.back() = twice.front();
  EXPECT_TRUE(same(stream_k_tail(twice, 8192, kConfig, 132), twice)) << "a tile named twice";
}

// The table check on splits and padding: each rule broken once.
TEST(OverlapGemmTable, SplitsOutOfOrderOverlappingOrMissingAndBusyPaddingAreRejected) {
  const int64_t m = 256, n = 512, k = 1024;
  const std::vector<OverlapGemmTile> split = split_along_k(whole_table(m, n), 2, k, kConfig);
  auto check = [&](const std::vector<OverlapGemmTile>& table) {
    OverlapGemmLaunch l = launch_for(m, n, k, 2);
    l.tiles = table.data();
    l.tile_count = static_cast<int>(table.size());
    require_valid_table(l, kConfig, table);
  };
  auto rejects = [&](const std::vector<OverlapGemmTile>& table, const std::string& words) {
    try {
      check(table);
      ADD_FAILURE() << "accepted; expected an error with '" << words << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  EXPECT_NO_THROW(check(split));
  // Splits of a tile in any K order are fine, as long as split numbers follow table order.
  std::vector<OverlapGemmTile> reversed_k = split;
  reversed_k[0].k_begin = 8;
  reversed_k[1].k_begin = 0;
  EXPECT_NO_THROW(check(reversed_k));
  std::vector<OverlapGemmTile> out_of_order = split;
  std::swap(out_of_order[0], out_of_order[1]);
  rejects(out_of_order, "table order");
  std::vector<OverlapGemmTile> overlapping = split;
  overlapping[1].k_begin = 4;  // [0, 8) and [4, 12) of 16
  rejects(overlapping, "exactly once");
  std::vector<OverlapGemmTile> missing = split;
  missing.erase(missing.begin() + 1);
  rejects(missing, "1 of its 2 splits");
  std::vector<OverlapGemmTile> twice = split;
  twice.push_back(split[0]);
  twice.push_back(split[1]);
  rejects(twice, "a second time");
  std::vector<OverlapGemmTile> padded = split;
  OverlapGemmTile padding;
  padding.k_tiles = kNoWorkKTiles;
  padded.push_back(padding);
  EXPECT_NO_THROW(check(padded));
  padded.back().notify_rank = 0;
  padded.back().notify_increment = 1;
  rejects(padded, "does no work");
}

TEST(OverlapGemmTable, TheExchangedProductsEntriesHaveCsExtent) {
  // C is 200 x 700; the kernel runs the exchanged product (its m = 700, its n = 200) on 128x96 tiles:
  // kernel tile (i, j) is C's rows [96 j, 96 j + 96) and columns [128 i, 128 i + 128).
  const OverlapGemmConfig config = OverlapGemmConfig::tile_128x96;
  OverlapGemmLaunch l = launch_for(700, 200, 64, 1);  // the kernel's m and n
  l.targets[0] = OverlapGemmTarget{reinterpret_cast<void*>(uintptr_t{0x30000}), 700, 200, 700};
  l.store_transposed = true;
  std::vector<OverlapGemmTile> table;
  for (int32_t i = 0; i * 128 < 700; ++i)
    for (int32_t j = 0; j * 96 < 200; ++j) {
      OverlapGemmTile e;
      e.tile_m = i;
      e.tile_n = j;
      e.rows = std::min(96, 200 - j * 96);
      e.cols = std::min(128, 700 - i * 128);
      e.store_row = j * 96;
      e.store_col = i * 128;
      table.push_back(e);
    }
  l.tile_count = static_cast<int>(table.size());
  l.tiles = table.data();
  EXPECT_NO_THROW(require_valid_table(l, config, table));
  // A kernel tile is at most 128 of C's columns (its TileM) and 96 of C's rows (its TileN), inside
  // C's bounds either way.
  std::vector<OverlapGemmTile> wide = table;
  wide[3].cols = 129;  // kernel tile (1, 0): C's columns 128-256, C's rows 0-96
  EXPECT_THROW(require_valid_table(l, config, wide), std::invalid_argument);
  std::vector<OverlapGemmTile> tall = table;
  tall[0].rows = 97;
  EXPECT_THROW(require_valid_table(l, config, tall), std::invalid_argument);
  // Without the flag the same entries have the kernel's extent, and C's is refused.
  l.store_transposed = false;
  EXPECT_THROW(require_valid_table(l, config, table), std::invalid_argument);
  // Only K-major operands and no second A operand.
  l.store_transposed = true;
  l.a2 = reinterpret_cast<const void*>(uintptr_t{0x50000});
  l.lda2 = 64;
  l.m2 = 700;
  EXPECT_THROW(require_valid_table(l, config, table), std::invalid_argument);
  l.a2 = nullptr;
  l.b_n_major = true;
  l.ldb = 200;
  EXPECT_THROW(require_valid_table(l, config, table), std::invalid_argument);
}

TEST(OverlapGemmTable, ClustersOfTwoTakePairsThatShareATileOverTheSameK) {
  // 512 x 1000 on 128x256 tiles: 4 tile rows, 4 tile columns. Row by row, consecutive entries share
  // their tile row (A's tile: 1x2); column by column with rows paired, their tile column (B's: 2x1).
  OverlapGemmLaunch l = launch_for(512, 1000, 256, 1);  // 4 tile rows
  std::vector<OverlapGemmTile> by_rows = whole_table(512, 1000);
  for (OverlapGemmTile& e : by_rows) e.wait_signal = -1;
  std::vector<OverlapGemmTile> by_columns;
  for (int32_t j = 0; j < 4; ++j)
    for (int32_t i = 0; i < 4; ++i) by_columns.push_back(by_rows[static_cast<size_t>(i * 4 + j)]);
  auto check = [&](int cm, int cn, const std::vector<OverlapGemmTile>& table) {
    OverlapGemmLaunch c = l;
    c.cluster_m = cm, c.cluster_n = cn;
    c.tiles = table.data();
    c.tile_count = static_cast<int>(table.size());
    require_valid_table(c, kConfig, table);
  };
  auto rejects = [&](int cm, int cn, const std::vector<OverlapGemmTile>& table, const std::string& why) {
    try {
      check(cm, cn, table);
      ADD_FAILURE() << "accepted; expected: " << why;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  EXPECT_NO_THROW(check(1, 2, by_rows));
  EXPECT_NO_THROW(check(2, 1, by_columns));
  rejects(2, 1, by_rows, "tile columns");
  rejects(1, 2, by_columns, "different rows of A");
  // An odd count, a wait, a split or padding, and different K-tiles in a pair.
  rejects(1, 2, std::vector<OverlapGemmTile>(by_rows.begin(), by_rows.end() - 1), "whole groups of 2 entries");
  std::vector<OverlapGemmTile> waiting = by_rows;
  waiting[5].wait_signal = 0;
  rejects(1, 2, waiting, "wait for nothing");
  std::vector<OverlapGemmTile> padded = by_rows;
  padded[2].k_tiles = kNoWorkKTiles;
  rejects(1, 2, padded, "all do work");
  std::vector<OverlapGemmTile> shorter = by_rows;
  shorter[1].k_tiles = 2;
  rejects(1, 2, shorter, "different K-tiles");
  // Split in step, pairs stay pairs (split 0 of both, then split 1 of both); split entry by entry,
  // a pair would be two splits of one tile.
  OverlapGemmLaunch split_launch = l;
  split_launch.k_splits = 2;
  split_launch.cluster_n = 2;
  const std::vector<OverlapGemmTile> in_step = split_along_k(by_rows, 2, 256, kConfig, 2);
  ASSERT_EQ(in_step.size(), 2 * by_rows.size());
  EXPECT_EQ(in_step[0].tile_n + 1, in_step[1].tile_n);
  EXPECT_EQ(in_step[0].split, in_step[1].split);
  EXPECT_EQ(in_step[2].tile_n, in_step[0].tile_n);
  EXPECT_EQ(in_step[2].split, 1);
  split_launch.tiles = in_step.data();
  split_launch.tile_count = static_cast<int>(in_step.size());
  EXPECT_NO_THROW(require_valid_table(split_launch, kConfig, in_step));
  const std::vector<OverlapGemmTile> entry_by_entry = split_along_k(by_rows, 2, 256, kConfig);
  EXPECT_THROW(require_valid_table(split_launch, kConfig, entry_by_entry), std::invalid_argument);
  std::vector<OverlapGemmTile> mixed = in_step;
  std::swap(mixed[1].split, mixed[3].split);
  std::swap(mixed[1].k_begin, mixed[3].k_begin);
  std::swap(mixed[1].k_tiles, mixed[3].k_tiles);
  EXPECT_THROW(check(1, 2, mixed), std::invalid_argument) << "pairs of different splits";
  EXPECT_THROW(split_along_k(std::vector<OverlapGemmTile>(by_rows.begin(), by_rows.end() - 1), 2, 256, kConfig, 2), std::invalid_argument);
  // Reading a second A operand: both entries of a 1x2 pair the same rows of it.
  std::vector<OverlapGemmTile> second_a = by_rows;
  OverlapGemmLaunch with_a2 = l;
  with_a2.a2 = reinterpret_cast<const void*>(uintptr_t{0x50000});
  with_a2.lda2 = 256;
  with_a2.m2 = 512;
  with_a2.cluster_n = 2;
  second_a[0].a_operand = second_a[1].a_operand = 1;
  second_a[0].a_tile_m = 0, second_a[1].a_tile_m = 1;
  with_a2.tiles = second_a.data();
  with_a2.tile_count = static_cast<int>(second_a.size());
  EXPECT_THROW(require_valid_table(with_a2, kConfig, second_a), std::invalid_argument);
  second_a[1].a_tile_m = 0;
  EXPECT_NO_THROW(require_valid_table(with_a2, kConfig, second_a));
  // Shapes and tiles without a compiled cluster kernel.
  rejects(2, 2, by_rows, "2x1 and 1x2 are compiled");
  OverlapGemmLaunch n_major = l;
  n_major.b_n_major = true;
  n_major.ldb = 1000;
  n_major.cluster_n = 2;
  EXPECT_THROW(require_launchable(n_major, kConfig), std::invalid_argument);
  OverlapGemmLaunch narrow = l;
  narrow.cluster_n = 2;
  EXPECT_THROW(require_launchable(narrow, OverlapGemmConfig::tile_128x192), std::invalid_argument);
  // The launch alone: an odd entry count, or room for one CTA only.
  OverlapGemmLaunch odd = l;
  odd.cluster_m = 2;
  odd.tiles = by_columns.data();
  odd.tile_count = 15;
  EXPECT_THROW(require_launchable(odd, kConfig), std::invalid_argument);
  odd.tile_count = 16;
  EXPECT_NO_THROW(require_launchable(odd, kConfig));
  odd.max_ctas = 1;
  EXPECT_THROW(require_launchable(odd, kConfig), std::invalid_argument);
}

TEST(OverlapGemmTable, ClustersOfFourAndEightTakeBlocksThatShareTilesAlongTheirRowsAndColumns) {
  // 512 x 1024 on 128x128 tiles: 4 tile rows, 8 tile columns. Groups of 2x4: entry j of a group at
  // (j % 2, j / 2): (0,0) (1,0) (0,1) (1,1) ... of its block.
  constexpr OverlapGemmConfig k128 = OverlapGemmConfig::tile_128x128;
  OverlapGemmLaunch l = launch_for(512, 1024, 256, 1);
  std::vector<OverlapGemmTile> grid;  // row-major tile grid
  for (int32_t i = 0; i < 4; ++i)
    for (int32_t j = 0; j < 8; ++j) {
      OverlapGemmTile e{};
      e.tile_m = i, e.tile_n = j, e.rows = 128, e.cols = 128, e.store_row = 128 * i, e.store_col = 128 * j;
      e.wait_signal = -1, e.notify_signal = -1, e.splits = 1;
      grid.push_back(e);
    }
  auto blocks = [&](int cm, int cn) {
    std::vector<OverlapGemmTile> table;
    for (int32_t bi = 0; bi < 4 / cm; ++bi)
      for (int32_t bj = 0; bj < 8 / cn; ++bj)
        for (int32_t jj = 0; jj < cm * cn; ++jj) table.push_back(grid[static_cast<size_t>((bi * cm + jj % cm) * 8 + bj * cn + jj / cm)]);
    return table;
  };
  auto refusal = [&](int cm, int cn, const std::vector<OverlapGemmTile>& table, OverlapGemmConfig config = OverlapGemmConfig::tile_128x128) {
    OverlapGemmLaunch c = l;
    c.cluster_m = cm, c.cluster_n = cn;
    c.tiles = table.data();
    c.tile_count = static_cast<int>(table.size());
    try {
      require_valid_table(c, config, table);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  for (auto [cm, cn] : {std::pair{2, 2}, std::pair{2, 4}, std::pair{4, 2}}) {
    SCOPED_TRACE(std::to_string(cm) + "x" + std::to_string(cn));
    EXPECT_EQ(refusal(cm, cn, blocks(cm, cn)), "");
    // A group one tile short, or a table in another cluster's blocks, is refused by what it breaks.
    std::vector<OverlapGemmTile> short_one = blocks(cm, cn);
    short_one.pop_back();
    EXPECT_NE(refusal(cm, cn, short_one).find("whole groups of " + std::to_string(cm * cn)), std::string::npos);
    EXPECT_NE(refusal(cm, cn, cm == 4 ? blocks(2, 4) : blocks(4, 2)), "");
    // Splits in step keep the groups (split_along_k with the group's size); entry by entry they do not.
    const std::vector<OverlapGemmTile> in_step = split_along_k(blocks(cm, cn), 2, 256, k128, cm * cn);
    OverlapGemmLaunch split = l;
    split.cluster_m = cm, split.cluster_n = cn, split.k_splits = 2;
    split.tiles = in_step.data();
    split.tile_count = static_cast<int>(in_step.size());
    EXPECT_NO_THROW(require_valid_table(split, k128, in_step));
    const std::vector<OverlapGemmTile> entry_by_entry = split_along_k(blocks(cm, cn), 2, 256, k128);
    EXPECT_THROW(require_valid_table(split, k128, entry_by_entry), std::invalid_argument);
  }
  // In a 2x4 group, entry 5 at (1, 2): its cluster column is entries 4 and 5, its cluster row 1, 3, 5, 7.
  std::vector<OverlapGemmTile> moved_column = blocks(2, 4);
  moved_column[5].tile_n = 7;
  EXPECT_NE(refusal(2, 4, moved_column).find("put tile columns 2 and 7 in one cluster column (entries 4, 5)"), std::string::npos)
      << refusal(2, 4, moved_column);
  std::vector<OverlapGemmTile> moved_row = blocks(2, 4);
  moved_row[5].tile_m = 2;
  EXPECT_NE(refusal(2, 4, moved_row).find("read different rows of A in one cluster row (entries 1, 5)"), std::string::npos)
      << refusal(2, 4, moved_row);
  std::vector<OverlapGemmTile> waiting = blocks(2, 4);
  waiting[6].wait_signal = 0;
  EXPECT_NE(refusal(2, 4, waiting).find("wait for nothing"), std::string::npos);
  // Compiled for bf16 128x128 only: 128x256 and FP8's 128x128x128 refuse them by name; 4x4 nowhere.
  EXPECT_NE(refusal(2, 4, blocks(2, 4), OverlapGemmConfig::tile_128x256).find("no 128x256x64 kernel runs in clusters of 2x4"), std::string::npos);
  OverlapGemmLaunch fp8 = l;
  fp8.fp8 = true;
  const float scale = 1.0f;
  fp8.a_scales = fp8.b_scales = &scale;
  fp8.cluster_m = 2, fp8.cluster_n = 2;
  EXPECT_THROW(require_launchable(fp8, OverlapGemmConfig::tile_128x128x128_fp8), std::invalid_argument);
  EXPECT_NE(refusal(4, 4, grid).find("runs in clusters of 4x4"), std::string::npos);
  EXPECT_FALSE(compiled_in_cluster(OverlapGemmConfig::tile_128x128, 4, 4));
  EXPECT_TRUE(compiled_in_cluster(OverlapGemmConfig::tile_128x128, 2, 4));
  // The launch alone: room for a whole cluster.
  OverlapGemmLaunch few = l;
  few.cluster_m = 2, few.cluster_n = 4;
  few.tile_count = 32;
  few.tiles = grid.data();
  few.max_ctas = 4;
  EXPECT_THROW(require_launchable(few, OverlapGemmConfig::tile_128x128), std::invalid_argument);
  few.max_ctas = 8;
  EXPECT_NO_THROW(require_launchable(few, OverlapGemmConfig::tile_128x128));
}

TEST(OverlapGemmTable, Fp8LaunchesItCannotRunAreRefusedByName) {
  // The FP8 main loop (OverlapGemmLaunch::fp8): its scales, tiles, K and layout.
  OverlapGemmLaunch l = launch_for(128, 128, 128, 1);
  l.fp8 = true;
  auto refusal = [&](const OverlapGemmLaunch& launch, OverlapGemmConfig config) -> std::string {
    try {
      require_launchable(launch, config);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return {};
  };
  EXPECT_NE(refusal(l, OverlapGemmConfig::tile_128x128x128_fp8).find("without their scales"), std::string::npos);
  const float scale = 1.0f;
  l.a_scales = l.b_scales = &scale;
  EXPECT_EQ(refusal(l, OverlapGemmConfig::tile_128x128x128_fp8), "");
  EXPECT_NE(refusal(l, OverlapGemmConfig::tile_128x128).find("no 128x128x64 kernel has FP8 operands; 128x128x128 and 64x128x128 do"),
            std::string::npos);
  EXPECT_NE(refusal(l, OverlapGemmConfig::tile_128x256).find("no 128x256x64 kernel has FP8"), std::string::npos);
  // 64x128x128 (m <= 64) runs FP8 too, unclustered; 128x128x128 also in clusters of two.
  OverlapGemmLaunch small = launch_for(64, 128, 128, 1);
  small.fp8 = true;
  small.a_scales = small.b_scales = &scale;
  EXPECT_EQ(refusal(small, OverlapGemmConfig::tile_64x128), "");
  OverlapGemmLaunch pairs = launch_for(128, 256, 128, 1);
  pairs.fp8 = true;
  pairs.a_scales = pairs.b_scales = &scale;
  pairs.cluster_n = 2;
  EXPECT_EQ(refusal(pairs, OverlapGemmConfig::tile_128x128x128_fp8), "");
  OverlapGemmLaunch small_pairs = launch_for(64, 256, 128, 1);
  small_pairs.fp8 = true;
  small_pairs.a_scales = small_pairs.b_scales = &scale;
  small_pairs.cluster_n = 2;
  EXPECT_NE(refusal(small_pairs, OverlapGemmConfig::tile_64x128).find("kernel runs in clusters"), std::string::npos);
  OverlapGemmLaunch short_k = l;
  short_k.k = 56;
  EXPECT_NE(refusal(short_k, OverlapGemmConfig::tile_128x128x128_fp8).find("multiple of 16"), std::string::npos);
  OverlapGemmLaunch n_major = l;
  n_major.b_n_major = true;
  n_major.ldb = 128;
  EXPECT_NE(refusal(n_major, OverlapGemmConfig::tile_128x128x128_fp8).find("K-major"), std::string::npos);
  OverlapGemmLaunch bf16 = l;
  bf16.fp8 = false;
  EXPECT_NE(refusal(bf16, OverlapGemmConfig::tile_128x128).find("scales given for bf16"), std::string::npos);
  EXPECT_NE(refusal(bf16, OverlapGemmConfig::tile_128x128x128_fp8).find("compiled for FP8 operands"), std::string::npos);
}

}  // namespace

TEST(OverlapGemmTable, ExchangedTilesInClustersComeInTheKernelsOrder) {
  // 200 x 1024 as the exchanged product on C's 112x128 tiles: 2 tile rows, 8 tile columns; the
  // kernel (128x112) runs C's columns as its rows, so C's 2x4 blocks are its 4x2 clusters, each
  // group in the kernel's order: entry j at the kernel's (j % 4, j / 4), C's (j / 4, j % 4).
  const Problem p{OpKind::gemm_ar, 200, 1024, 256, 1, DType::bf16, DType::bf16, {}};
  PlanOptions o;
  o.tile_m = 112;
  o.tile_n = 128;
  auto clustered = [&](bool exchanged_while_ordering) {
    Plan plan = plan_sequential(p, o);
    for (Step& s : plan.ranks[0].steps)
      if (auto* g = std::get_if<GemmStep>(&s.body)) {
        g->exchanged = exchanged_while_ordering;
        order_tiles_in_clusters(*g, 2, 4);
        g->exchanged = true;
      }
    return plan;
  };
  // The kernel's table of the step, as the lowering makes it (runtime/lowering/overlap_gemm.cpp).
  auto refusal = [](const Plan& plan) {
    const GemmStep* gemm = nullptr;
    for (const Step& s : plan.ranks[0].steps)
      if (const auto* g = std::get_if<GemmStep>(&s.body)) gemm = g;
    std::vector<OverlapGemmTile> table;
    for (const GemmTile& t : gemm->tiles) {
      OverlapGemmTile e;
      e.tile_m = static_cast<int32_t>(t.tile.col / 128), e.tile_n = static_cast<int32_t>(t.tile.row / 112);
      e.rows = static_cast<int32_t>(t.store.box.rows), e.cols = static_cast<int32_t>(t.store.box.cols);
      e.store_row = t.store.box.row, e.store_col = t.store.box.col;
      table.push_back(e);
    }
    OverlapGemmLaunch l;
    l.a = reinterpret_cast<const void*>(uintptr_t{0x10000}), l.lda = 256;
    l.b = reinterpret_cast<const void*>(uintptr_t{0x20000}), l.ldb = 256;
    l.m = 1024, l.n = 200, l.k = 256;
    l.targets[0] = OverlapGemmTarget{reinterpret_cast<void*>(uintptr_t{0x30000}), 1024, 200, 1024};
    l.target_count = 1;
    l.store_transposed = true;
    l.cluster_m = gemm->cluster_n, l.cluster_n = gemm->cluster_m;
    l.tiles = table.data();
    l.tile_count = static_cast<int>(table.size());
    try {
      require_valid_table(l, OverlapGemmConfig::tile_128x112, table);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const Plan plan = clustered(true);
  EXPECT_EQ(refusal(plan), "");
  EXPECT_FALSE(gpu_lowering_gap(plan, {true})) << *gpu_lowering_gap(plan, {true});
  EXPECT_TRUE(prove_on_cpu(plan, 7).passed());
  // Ordered as the untransposed product's groups, the kernel's clusters would pair the wrong tiles.
  EXPECT_NE(refusal(clustered(false)), "");
  // Exchanged clusters are compiled on C's 112x128 tiles only, in 2x1, 2x2 and 2x4.
  Plan on_128 = plan_sequential(p, PlanOptions{});
  for (Step& s : on_128.ranks[0].steps)
    if (auto* g = std::get_if<GemmStep>(&s.body)) {
      g->exchanged = true;
      order_tiles_in_clusters(*g, 2, 4);
    }
  const auto gap = gpu_lowering_gap(on_128, {true});
  ASSERT_TRUE(gap);
  EXPECT_NE(gap->find("112x128 tiles in 2x1, 2x2 and 2x4"), std::string::npos) << *gap;
}

}  // namespace weft
