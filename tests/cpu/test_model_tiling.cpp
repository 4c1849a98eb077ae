// The model's tiling rule (model/tiling.hpp) and its one entry point into plans (make_plan).
#include <gtest/gtest.h>

#include <array>
#include <tuple>
#include <vector>

#include "weft/model/tiling.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/validation.hpp"

namespace weft {
namespace {

TEST(Tiling, SplitsKOnlyWhereTilesCannotFillTheGpu) {
  // H100/H200: 132 SMs. Large GEMMs: no split. Flux GPT-3 m = 512 (192 tiles of 128x256 are 1.45
  // waves): 128x192 tiles (1.94 waves), measured faster than 2 splits. m = 64 is memory-bound: no
  // split. Too few tiles for the GPU (a table of 16 tiles, K = 12288): split.
  EXPECT_EQ(choose_overlap_gemm_tiling(8192, 8192, 8192, 132).k_splits, 1);
  EXPECT_EQ(choose_overlap_gemm_tiling(8192, 2752, 4096, 132).k_splits, 1);
  EXPECT_EQ(choose_overlap_gemm_tiling(512, 12288, 12288, 132).k_splits, 1);
  EXPECT_EQ(choose_overlap_gemm_tiling(512, 12288, 12288, 132).tile, (TileShape{128, 192, 64}));
  EXPECT_GT(choose_k_splits(16, 2048, 2048, 12288, TileShape{128, 256, 64}, 132), 1);
  EXPECT_EQ(choose_overlap_gemm_tiling(256, 12288, 12288, 132).k_splits, 1) << "memory-bound, 96 tiles: a split would add a wave";
  EXPECT_EQ(choose_overlap_gemm_tiling(256, 12288, 12288, 132).tile.tile_m, 128);
  EXPECT_EQ(choose_k_splits(100, 4096, 4096, 64, TileShape{128, 256, 64}, 132), 1) << "one K-tile cannot be split";
}

TEST(Tiling, AtMost64RowsTakeTheNarrowest64RowTileThatFillsOneWave) {
  // The H200 sweep at m = 64 (2026-11-28j): 64x64x128 where n / 64 tiles fit in one wave of 132 SMs,
  // split in two where they fill under 90% of it twice over; 64x128 and 64x192 above.
  EXPECT_EQ(choose_overlap_gemm_tiling(64, 7168, 4096, 132), (GemmTiling{TileShape{64, 64, 128}, 1})) << "112 tiles";
  EXPECT_EQ(choose_overlap_gemm_tiling(64, 4096, 4096, 132), (GemmTiling{TileShape{64, 64, 128}, 1})) << "64 tiles: 128 split";
  EXPECT_EQ(choose_overlap_gemm_tiling(64, 3584, 4096, 132), (GemmTiling{TileShape{64, 64, 128}, 2})) << "56 tiles";
  EXPECT_EQ(choose_overlap_gemm_tiling(64, 1792, 4096, 132), (GemmTiling{TileShape{64, 64, 128}, 2})) << "28 tiles: two, not four";
  EXPECT_EQ(choose_overlap_gemm_tiling(64, 9216, 4608, 132), (GemmTiling{TileShape{64, 128, 128}, 1})) << "144 of 64x64";
  EXPECT_EQ(choose_overlap_gemm_tiling(64, 18432, 4608, 132), (GemmTiling{TileShape{64, 192, 128}, 1})) << "144 of 64x128";
  // m = 64, n = k = 12288 (Flux GPT-3 AG at world 4): 96 unsplit 64x128x128 tiles, measured the
  // fastest on H200.
  EXPECT_EQ(choose_overlap_gemm_tiling(64, 12288, 12288, 132), (GemmTiling{TileShape{64, 128, 128}, 1}));
  // Wider than any 64-row tile fits in one wave: the widest.
  EXPECT_EQ(choose_overlap_gemm_tiling(64, 65536, 4096, 132), (GemmTiling{TileShape{64, 256, 64}, 1}));
  for (int64_t m : {1, 8, 33, 64}) EXPECT_EQ(choose_overlap_gemm_tiling(m, 4096, 4096, 132).tile.tile_m, 64) << m;
  EXPECT_EQ(choose_overlap_gemm_tiling(65, 4096, 4096, 132).tile.tile_m, 128);
  // Few K-tiles: never below 4 K-tiles per split.
  EXPECT_EQ(choose_overlap_gemm_tiling(64, 1792, 768, 132).k_splits, 1);
  EXPECT_EQ(choose_overlap_gemm_tiling(64, 1792, 1024, 132).k_splits, 2);
}

TEST(Tiling, Fp8TakesItsCompiledTilesAt64RowsAndAbove) {
  // FP8's main loop is compiled for 128x128x128 and 64x128x128: up to 64 rows the 64-row tile, split
  // in two where its tiles fill under 90% of the SMs twice over (K permitting); above, 128x128x128.
  EXPECT_EQ(choose_fp8_overlap_gemm_tiling(64, 3696, 8192, 132), (GemmTiling{TileShape{64, 128, 128}, 2})) << "29 tiles";
  EXPECT_EQ(choose_fp8_overlap_gemm_tiling(64, 12288, 12288, 132), (GemmTiling{TileShape{64, 128, 128}, 1})) << "96 tiles";
  EXPECT_EQ(choose_fp8_overlap_gemm_tiling(64, 1792, 512, 132), (GemmTiling{TileShape{64, 128, 128}, 1})) << "4 K-tiles";
  EXPECT_EQ(choose_fp8_overlap_gemm_tiling(64, 1792, 1024, 132), (GemmTiling{TileShape{64, 128, 128}, 2})) << "8 K-tiles";
  for (int64_t m : {1, 33, 64}) EXPECT_EQ(choose_fp8_overlap_gemm_tiling(m, 4096, 4096, 132).tile, kFp8SmallMTile) << m;
  for (int64_t m : {65, 200, 8192}) EXPECT_EQ(choose_fp8_overlap_gemm_tiling(m, 4096, 4096, 132).tile, kFp8OverlapGemmTile) << m;
}

TEST(Tiling, MemoryBoundGemmsAbove64RowsTakeWideTilesSplitToFillOneWave) {
  // m = 200 rows of the GEMM sweep (bench/results/2026-11-25_h{1,2}00x1_gemm_sweep), the best tile
  // and split measured on both GPUs: 128x256 split in two (112 entries) at n = 7168, k = 8192
  // (H200 0.063 ms; the old rule's 128x128 0.071); 128x256 unsplit where its 112 tiles fill the GPU
  // (n = 14336); 128x192 split in three (132 entries) at n = 3584, k = 8192 (old rule: 128x96).
  EXPECT_EQ(choose_overlap_gemm_tiling(200, 7168, 8192, 132), (GemmTiling{TileShape{128, 256, 64}, 2}));
  EXPECT_EQ(choose_overlap_gemm_tiling(200, 14336, 8192, 132), (GemmTiling{TileShape{128, 256, 64}, 1}));
  EXPECT_EQ(choose_overlap_gemm_tiling(200, 3584, 8192, 132), (GemmTiling{TileShape{128, 192, 64}, 3}));
  // Whatever the shape, a split never adds a wave and leaves at least 4 K-tiles per split.
  for (int64_t m : {65, 128, 200, 256})
    for (int64_t n : {1792, 4608, 7392, 18432})
      for (int64_t k : {512, 2304, 8192, 14336}) {
        if (!memory_bound_gemm(m, n, k)) continue;
        const GemmTiling t = choose_overlap_gemm_tiling(m, n, k, 132);
        const int64_t tiles = (m + t.tile.tile_m - 1) / t.tile.tile_m * ((n + t.tile.tile_n - 1) / t.tile.tile_n);
        EXPECT_EQ(t.tile.tile_m, 128) << m << "x" << n << "x" << k;
        if (t.k_splits > 1) {
          EXPECT_LE(tiles * t.k_splits, 132) << m << "x" << n << "x" << k;
          EXPECT_GE((k + t.tile.tile_k - 1) / t.tile.tile_k / t.k_splits, 4) << m << "x" << n << "x" << k;
        }
      }
}

TEST(Tiling, MemoryBoundGemmsOfUpTo224RowsRunTheExchangedProductInPairsWhereAllowedAndOneWave) {
  auto clustered = [](int64_t m, int64_t n, int64_t k) { return choose_overlap_gemm_tiling(m, n, k, 132, {}, true, /*clusters_allowed=*/true); };
  auto exchanged = [](int splits) {
    GemmTiling t{TileShape{112, 128, 64}, splits};
    t.cluster_m = 2;
    t.exchanged = true;
    return t;
  };
  // Shapes of the sweep at m = 200 (C's 112x128 tiles: two rows of n / 128): 112 tiles unsplit; 64 at
  // 112 K-tiles in two (one wave); 64 at 28 K-tiles unsplit (14 a split); 56 at 64 in two; 28 in
  // three; 72 unsplit at 72 K-tiles, in three (two waves) at 144; 36 in three.
  EXPECT_EQ(clustered(200, 7168, 4096), exchanged(1));
  EXPECT_EQ(clustered(200, 4096, 7168), exchanged(2));
  EXPECT_EQ(clustered(200, 4096, 1792), exchanged(1));
  EXPECT_EQ(clustered(200, 3584, 4096), exchanged(2));
  EXPECT_EQ(clustered(200, 1792, 4096), exchanged(3));
  EXPECT_EQ(clustered(200, 4608, 4608), exchanged(1));
  EXPECT_EQ(clustered(200, 4608, 9216), exchanged(3));
  EXPECT_EQ(clustered(200, 2304, 7168), exchanged(3));
  EXPECT_EQ(clustered(129, 7168, 4096), exchanged(1));
  EXPECT_EQ(clustered(224, 7168, 4096), exchanged(1));
  // One and a half waves of C's tiles or more: unsplit, in blocks of 2x2 where the tile columns are
  // even (224 tiles at n = 14336, 288 at 18432), else pairs (n = 14720: 115 columns).
  auto blocks = [&](int cluster_n) {
    GemmTiling t = exchanged(1);
    t.cluster_n = cluster_n;
    return t;
  };
  EXPECT_EQ(clustered(200, 14336, 8192), blocks(2));
  EXPECT_EQ(clustered(200, 18432, 4608), blocks(2));
  EXPECT_EQ(clustered(200, 14720, 8192), blocks(1));
  // Not taken: not allowed; between one wave of C's tiles and one and a half (144 at n = 9216; there
  // 128x128 tiles would make a second wave too); C in three tile rows (m = 225); one (m <= 128).
  EXPECT_EQ(choose_overlap_gemm_tiling(200, 7168, 4096, 132), choose_overlap_gemm_tiling(200, 7168, 4096, 132, {}, true, false));
  EXPECT_FALSE(choose_overlap_gemm_tiling(200, 7168, 4096, 132).exchanged);
  for (const auto& [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{200, 9216, 4608}, {200, 9216, 7168}, {128, 7168, 4096}})
    EXPECT_FALSE(choose_memory_bound_clusters(m, n, k, 132)) << m << "x" << n << "x" << k;
  EXPECT_FALSE(clustered(225, 7168, 4096).exchanged);
  // Whatever the shape: C's tiles in one wave, in pairs, K-tiles enough for each split; or from one
  // and a half waves on, unsplit in whole blocks.
  for (int64_t m : {129, 200, 224})
    for (int64_t n : {1024, 1792, 2304, 3584, 4608, 7168, 7392, 8192, 14336})
      for (int64_t k : {1024, 4096, 8192, 18432}) {
        const auto t = choose_memory_bound_clusters(m, n, k, 132);
        if (!t) continue;
        EXPECT_TRUE(t->exchanged) << m << "x" << n << "x" << k;
        EXPECT_EQ(t->tile, (TileShape{112, 128, 64})) << m << "x" << n << "x" << k;
        const int64_t columns = (n + 127) / 128;
        if (2 * columns > 132) {
          EXPECT_GE(2 * columns, 1.5 * 132) << m << "x" << n << "x" << k;
          EXPECT_EQ(t->k_splits, 1) << m << "x" << n << "x" << k;
          EXPECT_EQ(columns % t->cluster_n, 0) << m << "x" << n << "x" << k;
        } else {
          EXPECT_EQ(t->cluster_m * 10 + t->cluster_n, 21) << m << "x" << n << "x" << k;
        }
        EXPECT_EQ(t->cluster_m, 2) << m << "x" << n << "x" << k;
        EXPECT_LE(t->k_splits, 3) << m << "x" << n << "x" << k;
        EXPECT_GE((k + 63) / 64 / t->k_splits, 16) << m << "x" << n << "x" << k;
      }
}

TEST(Tiling, MemoryBoundGemmsOf225To256RowsRunInClustersOf128x128WhereAllowedAndTheyFillOneWave) {
  // Shapes of the sweep's widths at m = 240 (two rows of 128x128 tiles): 112 tiles in clusters of 2x4;
  // 116 (58 columns) in 2x2; 128, more than clusters of 4 or 8 fit at once (120 of 132 SMs): pairs; 56
  // split in two; 36 in three.
  auto clustered = [](int64_t m, int64_t n, int64_t k) { return choose_overlap_gemm_tiling(m, n, k, 132, {}, true, /*clusters_allowed=*/true); };
  auto tiling = [](int splits, int cluster_n) {
    GemmTiling t{TileShape{128, 128, 64}, splits};
    t.cluster_m = 2;
    t.cluster_n = cluster_n;
    return t;
  };
  EXPECT_EQ(clustered(240, 7168, 4096), tiling(1, 4));
  EXPECT_EQ(clustered(240, 7392, 8192), tiling(1, 2));
  EXPECT_EQ(clustered(240, 8192, 7168), tiling(1, 1));
  EXPECT_EQ(clustered(240, 3584, 4096), tiling(2, 4));
  EXPECT_EQ(clustered(240, 2304, 7168), tiling(3, 2));
  EXPECT_EQ(clustered(256, 7168, 4096), tiling(1, 4));
  // Not taken: 64 entries that a split would leave 14 K-tiles each; 72 entries (too few SMs busy);
  // 144 (a second wave); more than two tile rows; not memory-bound.
  for (const auto& [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {240, 4096, 1792}, {240, 4608, 4608}, {240, 9216, 4608}, {257, 7168, 4096}, {64, 7168, 4096}, {1000, 7168, 4096}}) {
    EXPECT_FALSE(choose_memory_bound_clusters(m, n, k, 132)) << m << "x" << n << "x" << k;
    EXPECT_EQ(clustered(m, n, k), choose_overlap_gemm_tiling(m, n, k, 132)) << m << "x" << n << "x" << k;
  }
  // Whatever the shape: one wave, whole blocks of tiles, clusters of 4 or 8 within the SMs they fit.
  for (int64_t m : {225, 240, 256})
    for (int64_t n : {1024, 1792, 2304, 3584, 4608, 7168, 7392, 8192, 14336})
      for (int64_t k : {1024, 4096, 8192, 18432}) {
        const auto t = choose_memory_bound_clusters(m, n, k, 132);
        if (!t) continue;
        const int64_t columns = (n + 127) / 128, entries = 2 * columns * t->k_splits;
        EXPECT_FALSE(t->exchanged) << m << "x" << n << "x" << k;
        EXPECT_LE(entries, 132) << m << "x" << n << "x" << k;
        EXPECT_GE(entries, 0.8 * 132) << m << "x" << n << "x" << k;
        EXPECT_EQ(columns % t->cluster_n, 0) << m << "x" << n << "x" << k;
        if (t->cluster_n > 1) {
          EXPECT_LE(entries, 120) << m << "x" << n << "x" << k;
        }
        EXPECT_GE((k + 63) / 64 / t->k_splits, 16) << m << "x" << n << "x" << k;
      }
}

TEST(Tiling, APartialLastWaveIsSplitAlongKWhereItLeavesHalfTheSmsIdle) {
  // MLP-1 AG at world 4 (8192 x 2752 x 4096): 704 tiles of 128x256 are 5 waves and 44 tiles on 132
  // SMs; split 3 ways those 44 fill the last wave.
  const GemmTiling mlp1 = choose_overlap_gemm_tiling(8192, 2752, 4096, 132);
  EXPECT_EQ(mlp1.k_splits, 1);
  EXPECT_EQ(mlp1.tail_splits, 3);
  // 1,024 tiles: a last wave of 100 tiles is most of a wave; one wave or less: the K split's rule.
  EXPECT_EQ(choose_tail_splits(1024, 2752, TileShape{128, 256, 64}, 132), 1);
  EXPECT_EQ(choose_tail_splits(100, 12288, TileShape{128, 256, 64}, 132), 1);
  EXPECT_EQ(choose_tail_splits(140, 12288, TileShape{128, 256, 64}, 132), 4) << "8 tiles: at most 4 ways";
  EXPECT_EQ(choose_tail_splits(140, 128, TileShape{128, 256, 64}, 132), 1) << "2 K-tiles cannot be split";
}

TEST(Tiling, GemmsThatKeepTheirSmsOrWavesTakeNoTailSplit) {
  // MLP-1 AG at world 4 takes a tail split where the GEMM has every SM (fused); the strategies whose
  // GEMM leaves SMs to copies, NCCL or the companion keep their waves, and every plan validates.
  const Problem p{OpKind::ag_gemm, 2048, 2752, 4096, 4, DType::bf16, DType::bf16, {}};
  auto tail_of = [](const Plan& plan) {
    int tail = 0;
    for (const Step& s : plan.ranks[0].steps)
      if (const auto* g = std::get_if<GemmStep>(&s.body)) tail = std::max(tail, g->tail_splits);
    return tail;
  };
  EXPECT_EQ(tail_of(make_plan(find_strategy("fused"), p)), 3);
  PlanOptions sm_copies;
  sm_copies.chunked.backend = ChunkBackend::sm;
  for (const PlanOptions& o : {PlanOptions{}, sm_copies}) {
    const Plan chunked = make_plan(find_strategy("chunked"), p, o);
    EXPECT_NO_THROW(require_valid(chunked));
    if (o.chunked.backend == ChunkBackend::sm) {
      EXPECT_EQ(tail_of(chunked), 1) << "a GEMM beside SM copies keeps its waves";
    }
  }
  EXPECT_EQ(tail_of(make_plan(find_strategy("tilelink"), p)), 1);
  const Problem rs{OpKind::gemm_rs, 8192, 2752, 4096, 4, DType::bf16, DType::bf16, {}};
  EXPECT_EQ(tail_of(make_plan(find_strategy("signal"), rs)), 1);
}

// Stream-K over a wide tile where its estimate is well ahead of every whole-tile schedule (the
// recorded sweeps' m = 1000 and 2048 shapes at n = 2304-4608, measured 1.03-1.25x faster on H200),
// not where it is only a little ahead (2048 x 7168 x 8192: 0.89 of the best whole-tile estimate), not
// on whole waves, and never for memory-bound or 64-row GEMMs (their own rules).
TEST(Tiling, StreamKIsTakenOverAWideTileWhereItIsEstimatedWellAhead) {
  for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{{1000, 4608, 4608}, {1000, 4608, 9216}, {2048, 2304, 7168}}) {
    const GemmTiling t = choose_overlap_gemm_tiling(m, n, k, 132);
    EXPECT_TRUE(t.stream_k) << m << "x" << n << "x" << k;
    EXPECT_EQ(t.tile, (TileShape{128, 256, 64})) << m << "x" << n << "x" << k;
    EXPECT_EQ(t.k_splits, 1);
    EXPECT_EQ(t.tail_splits, 1);
  }
  EXPECT_FALSE(choose_overlap_gemm_tiling(2048, 7168, 8192, 132).stream_k) << "estimated only 11% ahead";
  EXPECT_FALSE(choose_overlap_gemm_tiling(16896, 4096, 4096, 132).stream_k) << "132 tile rows: whole waves of every tile";
  EXPECT_FALSE(choose_overlap_gemm_tiling(1000, 4608, 4608, 132, {}, false).stream_k) << "not allowed";
  EXPECT_FALSE(choose_overlap_gemm_tiling(200, 7168, 4096, 132).stream_k) << "memory-bound";
  EXPECT_FALSE(choose_overlap_gemm_tiling(64, 7168, 4096, 132).stream_k) << "64 rows";
  // make_plan writes it into the GEMM of a strategy that has every SM, and the plan validates.
  const Problem p{OpKind::ag_gemm, 250, 4608, 4608, 4, DType::bf16, DType::bf16, {}};
  const Plan fused = make_plan(find_strategy("fused"), p);
  EXPECT_NO_THROW(require_valid(fused));
  bool streamed = false;
  for (const Step& s : fused.ranks[0].steps)
    if (const auto* g = std::get_if<GemmStep>(&s.body)) streamed = streamed || g->stream_k;
  EXPECT_TRUE(streamed) << "ag_gemm of 4 x 250 rows: the 1000 x 4608 x 4608 GEMM";
}

// A strategy whose GEMM shares the GPU (with NCCL, the companion kernel or SM copies) keeps its waves
// and runs no stream-K, so it takes the whole-tile pick for its SMs, not the tile stream-K brought.
TEST(Tiling, StrategiesThatCannotStreamKeepTheWholeTilePick) {
  const PlanOptions base;
  const Problem ag{OpKind::ag_gemm, 250, 4608, 4608, 4, DType::bf16, DType::bf16, {}};
  const Problem rs{OpKind::gemm_rs, 1000, 4608, 4608, 4, DType::bf16, DType::bf16, {}};
  const int sms = base.machine.sm_count;
  struct Case {
    const char* strategy;
    const Problem& problem;
    int gemm_sms;
  };
  for (const Case& c : {Case{"chunked", ag, sms}, Case{"tilelink", ag, sms - base.tilelink.comm_sms},
                        Case{"signal", rs, sms - base.machine.collective_sms}}) {
    const PlanOptions o = resolve_options(find_strategy(c.strategy), c.problem, base);
    const GemmTiling whole = choose_overlap_gemm_tiling(1000, 4608, 4608, c.gemm_sms, {}, false);
    EXPECT_FALSE(o.stream_k) << c.strategy;
    EXPECT_EQ((TileShape{o.tile_m, o.tile_n, 64}), whole.tile) << c.strategy;
  }
  const PlanOptions fused = resolve_options(find_strategy("fused"), ag, base);
  EXPECT_TRUE(fused.stream_k);
  EXPECT_EQ((TileShape{fused.tile_m, fused.tile_n, 64}), (TileShape{128, 256, 64}));
  // fused gemm_rs adds the peers' partial sums in its own tiles' epilogue, which stream-K's cut leaves
  // whole: the whole-tile pick (2048 x 2304 x 7168: shares of 512 rows, reduced in the epilogue).
  const Problem rs_reduced{OpKind::gemm_rs, 2048, 2304, 7168, 4, DType::bf16, DType::bf16, {}};
  ASSERT_TRUE(choose_overlap_gemm_tiling(2048, 2304, 7168, sms).stream_k) << "a shape where the rule would stream";
  const PlanOptions fused_rs = resolve_options(find_strategy("fused"), rs_reduced, base);
  EXPECT_FALSE(fused_rs.stream_k);
  EXPECT_EQ((TileShape{fused_rs.tile_m, fused_rs.tile_n, 64}), choose_overlap_gemm_tiling(2048, 2304, 7168, sms, {}, false).tile);
}

TEST(Tiling, MeasuredTileRatesFromTheMachineProfileDecide) {
  // MLP-5 AG (8192 x 7168 x 8192, 1,792 tiles of 128x256 = 13.6 waves): the built-in rates keep
  // 128x256; a profile measuring 128x192 at 1.1 of 128x256 (2,432 tiles = 18.4 waves) makes it the
  // faster estimate, through make_plan as well; a tile the profile leaves out keeps its estimate.
  EXPECT_EQ(choose_overlap_gemm_tiling(8192, 7168, 8192, 132).tile, (TileShape{128, 256, 64}));
  const TileRates faster_192{{"128x192", 1.1}};
  EXPECT_EQ(choose_overlap_gemm_tiling(8192, 7168, 8192, 132, faster_192).tile, (TileShape{128, 192, 64}));
  EXPECT_DOUBLE_EQ(tile_rate(TileShape{128, 192, 64}, faster_192), 1.1);
  EXPECT_DOUBLE_EQ(tile_rate(TileShape{128, 128, 64}, faster_192), tile_rate(TileShape{128, 128, 64}));
  const Problem p{OpKind::ag_gemm, 2048, 7168, 8192, 4, DType::bf16, DType::bf16, {}};
  PlanOptions options;
  options.machine.tile_rates = faster_192;
  EXPECT_EQ(resolve_options(find_strategy("fused"), p, options).tile_n, 192);
  EXPECT_EQ(resolve_options(find_strategy("fused"), p, PlanOptions{}).tile_n, 256);
}

TEST(Tiling, MakePlanWritesTheModelsChoiceIntoTheOverlapGemm) {
  // fused ag_gemm at world 4 with 128 rows per rank: one GEMM of 512 x 12288 x 12288 per rank, the
  // GPT-3 row the rule gives 128x192 tiles. The plan's GEMM carries the tile and the split.
  const Problem p{OpKind::ag_gemm, 128, 12288, 12288, 4, DType::bf16, DType::bf16, {}};
  const Plan plan = make_plan(find_strategy("fused"), p);
  int gemms = 0;
  for (const Step& s : plan.ranks[0].steps)
    if (const auto* g = std::get_if<GemmStep>(&s.body)) {
      ++gemms;
      EXPECT_EQ(g->tile_m, 128);
      EXPECT_EQ(g->tile_n, 192);
      EXPECT_EQ(g->k_splits, 1);
    }
  EXPECT_EQ(gemms, 1);
  // A strategy whose GEMM shares the GPU with NCCL keeps its waves: never split, whatever the shape.
  const Problem small{OpKind::gemm_ar, 256, 2048, 12288, 2, DType::bf16, DType::bf16, {}};
  // (The plan is named: a range-for over a temporary's member would read freed memory.)
  const Plan signal_plan = make_plan(find_strategy("signal"), small);
  for (const Step& s : signal_plan.ranks[0].steps) {
    if (const auto* g = std::get_if<GemmStep>(&s.body)) {
      EXPECT_EQ(g->k_splits, 1);
    }
  }
  // Strategies on library GEMMs keep the options' tile.
  const PlanOptions options = resolve_options(find_strategy("decomposed"), p, PlanOptions{});
  EXPECT_EQ(options.tile_n, PlanOptions{}.tile_n);
}

TEST(Tiling, ASplitTableOnLimitedSmsIsRejected) {
  const Problem p{OpKind::gemm_ar, 256, 256, 256, 2, DType::bf16, DType::bf16, {}};
  PlanOptions o;
  o.k_splits = 2;
  o.gemm_sms = 8;
  EXPECT_FALSE(validate_plan(plan_signal(p, o)).ok());
}

}  // namespace
}  // namespace weft
