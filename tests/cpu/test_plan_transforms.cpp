// Plan transforms for characterisation: GEMMs split by rows or by K must validate and compute what
// the original plan computes.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "weft/reference/cpu_proof.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/transforms.hpp"

namespace weft {
namespace {

size_t gemm_steps(const Plan& plan) {
  size_t count = 0;
  for (const Step& s : plan.ranks.at(0).steps) count += std::holds_alternative<GemmStep>(s.body);
  return count;
}

std::vector<Problem> problems(int world) {
  // Ragged against 128-row tiles and 64-deep K cuts.
  return {Problem{OpKind::ag_gemm, 72, 136, 200, world, DType::bf16, DType::bf16, {}},
          Problem{OpKind::gemm_rs, 40 * world, 96, 200, world, DType::bf16, DType::bf16, {}},
          Problem{OpKind::gemm_ar, 130, 72, 264, world, DType::bf16, DType::bf16, {}}};
}

TEST(PlanTransforms, SplitGemmsComputeTheSameResultByRowsAndByK) {
  for (int world : {1, 2, 4})
    for (const Problem& p : problems(world))
      for (GemmSplitAxis axis : {GemmSplitAxis::rows, GemmSplitAxis::k})
        for (int parts : {2, 3, 4}) {
          const Plan plan = plan_sequential(p, PlanOptions{});
          const Plan split = split_gemms(plan, axis, parts);
          // K = 200 has 4 slices of 64 (the last ragged), so every part count here is honoured.
          EXPECT_EQ(gemm_steps(split), gemm_steps(plan) * static_cast<size_t>(parts)) << describe(p);
          const CpuProof proof = prove_on_cpu(split, 7);
          EXPECT_TRUE(proof.passed()) << describe(p) << " parts " << parts << "\n" << proof.explain();
        }
}

TEST(PlanTransforms, KCutsStayOnMultiplesOf64AndNeverExceedTheSlices) {
  const Problem p{OpKind::gemm_ar, 64, 64, 136, 1, DType::bf16, DType::bf16, {}};  // 3 slices of 64
  const Plan split = split_gemms(plan_sequential(p, PlanOptions{}), GemmSplitAxis::k, 8);
  std::vector<int64_t> starts;
  for (const Step& s : split.ranks[0].steps)
    if (const auto* g = std::get_if<GemmStep>(&s.body)) starts.push_back(g->a.box.col);
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 64, 128}));
  EXPECT_TRUE(prove_on_cpu(split, 3).passed());
}

TEST(PlanTransforms, PiecesOfAnExchangedGemmStayExchanged) {
  // The overlap GEMM runs an exchanged step's C tiles (96x128 here) as its 128x96 kernel: a piece
  // that lost the flag would ask for a 96x128 kernel, or run a 128x128 one unexchanged.
  const Problem p{OpKind::gemm_ar, 200, 256, 128, 1, DType::bf16, DType::bf16, {}};
  PlanOptions o;
  o.tile_m = 96;
  o.tile_n = 128;
  Plan plan = plan_sequential(p, o);
  for (Step& s : plan.ranks[0].steps)
    if (auto* g = std::get_if<GemmStep>(&s.body)) g->exchanged = true;
  for (GemmSplitAxis axis : {GemmSplitAxis::rows, GemmSplitAxis::k}) {
    const Plan split = split_gemms(plan, axis, 2);
    int pieces = 0;
    for (const Step& s : split.ranks[0].steps)
      if (const auto* g = std::get_if<GemmStep>(&s.body)) {
        ++pieces;
        EXPECT_TRUE(g->exchanged) << s.label;
        EXPECT_EQ(g->tile_m, 96);
      }
    EXPECT_EQ(pieces, 2);
  }
}

TEST(PlanTransforms, SplitRefusesTablesWithNotifies) {
  Plan plan = plan_sequential(problems(1)[2], PlanOptions{});
  for (Step& s : plan.ranks[0].steps)
    if (auto* g = std::get_if<GemmStep>(&s.body)) {
      plan.ranks[0].signals.push_back("tile");
      g->tiles.front().notify = Notify{SignalRef{0, static_cast<SignalId>(plan.ranks[0].signals.size()) - 1}, 1};
    }
  EXPECT_THROW(split_gemms(plan, GemmSplitAxis::rows, 2), std::invalid_argument);
}

TEST(PlanTransforms, TilesInClustersComeInWholeBlocksInTheirRasterAndStillCompute) {
  // 200 x 1024 on 128x128 tiles: 2 tile rows (the second ragged), 8 tile columns; the plan's raster
  // along M (8-column strips) gives (0,0) (0,1) .. (0,7) (1,0) ..; in 2x4 clusters the blocks come
  // as their first tiles did: columns 0-3, then 4-7, each block as (0,c) (1,c) (0,c+1) (1,c+1) ...
  const Problem p{OpKind::gemm_ar, 200, 1024, 256, 1, DType::bf16, DType::bf16, {}};
  PlanOptions o;
  o.tile_m = 128;
  o.tile_n = 128;
  Plan plan = plan_sequential(p, o);
  GemmStep* gemm = nullptr;
  for (Step& s : plan.ranks[0].steps)
    if (auto* g = std::get_if<GemmStep>(&s.body)) gemm = g;
  ASSERT_NE(gemm, nullptr);
  ASSERT_EQ(gemm->tiles.size(), 16u);
  const std::vector<GemmTile> before = gemm->tiles;
  order_tiles_in_clusters(*gemm, 2, 4);
  EXPECT_EQ(gemm->cluster_m, 2);
  EXPECT_EQ(gemm->cluster_n, 4);
  ASSERT_EQ(gemm->tiles.size(), 16u);
  for (size_t t = 0; t < 16; ++t) {
    const int64_t block = static_cast<int64_t>(t) / 8, j = static_cast<int64_t>(t) % 8;
    EXPECT_EQ(gemm->tiles[t].tile.row, 128 * (j % 2)) << t;
    EXPECT_EQ(gemm->tiles[t].tile.col, 128 * (block * 4 + j / 2)) << t;
  }
  // The same tiles, stores and all: a permutation, and the plan computes what it did.
  for (const GemmTile& t : before) EXPECT_NE(std::find(gemm->tiles.begin(), gemm->tiles.end(), t), gemm->tiles.end());
  EXPECT_TRUE(prove_on_cpu(plan, 5).passed());
  // Blocks that are not whole, and tiles off the step's grid, are refused by name.
  GemmStep copy = *gemm;
  EXPECT_THROW(order_tiles_in_clusters(copy, 4, 2), std::invalid_argument);  // 2 tile rows
  copy = *gemm;
  copy.tiles.pop_back();
  try {
    order_tiles_in_clusters(copy, 2, 4);
    ADD_FAILURE() << "a block with a tile missing was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("is not whole"), std::string::npos) << e.what();
  }
  copy = *gemm;
  copy.tile_n = 96;
  EXPECT_THROW(order_tiles_in_clusters(copy, 2, 2), std::invalid_argument);
}


}  // namespace
}  // namespace weft
