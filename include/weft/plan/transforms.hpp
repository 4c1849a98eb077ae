// Plans made from plans, for measuring how a design's pieces behave: a plan cut down to its GEMMs or
// its collectives (the T_gemm and T_comm of every benchmark row), and the same GEMMs cut into row or
// K pieces, whose time against the whole GEMM's is FiCCO's decomposition loss (ficco.txt Section IV).
//
//   Plan gemm_alone = steps_of_kind(plan, StepKind::gemm);
//   Plan pieces = split_gemms(plan, GemmSplitAxis::rows, 4);   // every GEMM as 4 row GEMMs
#pragma once

#include "weft/ir/plan.hpp"

namespace weft {

// The plan with only its GEMM steps (and attention steps: an attention plan's computation), or only its collectives, on the same streams, without waits
// (what they waited for is gone) but with their notifies (a GEMM timed alone still pays for its
// epilogue's). It is for timing one part of the plan: it does not validate (its GEMMs read buffers
// nobody writes now) and computes nothing meaningful, so it runs with ExecutorOptions::validate off. The strategy's name gets "/gemm-only" or
// "/communication-only".
enum class StepKind { gemm, collective };
Plan steps_of_kind(Plan plan, StepKind kind);

// Every GEMM split along one axis (split_gemms).
enum class GemmSplitAxis { rows, k };

// Each GEMM step (plain tile table) becomes `parts` GEMMs on the same stream, one after another:
// by rows of A and C, or by K (later pieces accumulate; cuts on multiples of 64 so that every
// piece's operands stay 16-byte aligned, so at most one piece per 64-deep slice). The first piece
// keeps the step's waits, the last its notifies. Throws std::invalid_argument for tables with
// waits, notifies or remapped stores.
Plan split_gemms(const Plan& plan, GemmSplitAxis axis, int parts);

// The GEMM step's tiles reordered into groups of cluster_m x cluster_n for the overlap GEMM's
// clusters (GemmStep::cluster_m / cluster_n, which it sets): each group a block of cluster_m tile
// rows by cluster_n tile columns, its tile at (i, j) of the block at position i + j * cluster_m
// (j + i * cluster_n for the exchanged product, whose kernel runs C's tile columns as its rows), the
// blocks in the order their first tile had (the plan's raster and swizzle, at block granularity).
// Throws std::invalid_argument when the tiles do not cover whole blocks (a tile grid whose rows are
// not a multiple of cluster_m or whose columns are not a multiple of cluster_n) or are not one
// grid of tile_m x tile_n tiles.
void order_tiles_in_clusters(GemmStep& gemm, int cluster_m, int cluster_n);

}  // namespace weft
