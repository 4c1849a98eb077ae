#include "weft/plan/gpu_lowering.hpp"

#include <tuple>
#include <variant>

namespace weft {

namespace {

const char* kind_of(const StepBody& body) {
  return std::visit(
      [](const auto& b) -> const char* {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, GemmStep>) return "GEMM";
        else if constexpr (std::is_same_v<T, CopyStep>) return "copy";
        else if constexpr (std::is_same_v<T, ReduceStep>) return "reduction";
        else if constexpr (std::is_same_v<T, PermuteRowsStep>) return "row permutation";
        else if constexpr (std::is_same_v<T, CombineRowsStep>) return "top-k combine";
        else if constexpr (std::is_same_v<T, MoveBoxesStep>) return "box move";
        else if constexpr (std::is_same_v<T, CollectiveStep>) return "collective";
        else if constexpr (std::is_same_v<T, AttentionStep>) return "attention";
        else if constexpr (std::is_same_v<T, RouteStep>) return "MoE route";
        else return "join";
      },
      body);
}

const BufferDecl& decl_of(const Plan& plan, const Region& r) {
  return plan.ranks.at(static_cast<size_t>(r.rank)).buffers.at(static_cast<size_t>(r.buffer));
}

bool whole(const Region& r, const BufferDecl& decl) {
  return r.box.row == 0 && r.box.col == 0 && r.box.rows == decl.rows && r.box.cols == decl.cols;
}

// A plain FP8 GEMM the library GEMM cannot take as planned: B stored [K, N], or a block-scaled
// operand that is part of its buffer.
std::optional<std::string> library_gemm_gap(const Plan& plan, const GemmStep& gemm, const std::string& label) {
  const BufferDecl& a = decl_of(plan, gemm.a);
  const BufferDecl& b = decl_of(plan, gemm.b);
  if (b.order == MemoryOrder::column_major)
    return "GEMM step '" + label + "' multiplies an FP8 B stored [K, N] (layout kn); cuBLASLt's FP8 matmul takes B row-major [N, K] only (TN)";
  // cuBLASLt's FP8 matmul reads K in 16-byte units from 16-byte aligned rows: a K slice (FiCCO's 2D
  // schedules cut K by the world size) must start and end at multiples of 16 columns.
  for (const auto& [operand, name] : {std::pair{gemm.a, "A"}, std::pair{gemm.b, "B"}})
    if (operand.box.col % 16 != 0 || operand.box.cols % 16 != 0)
      return "GEMM step '" + label + "' reads K columns " + std::to_string(operand.box.col) + ".." + std::to_string(operand.box.col + operand.box.cols) +
             " of FP8 " + name + "; cuBLASLt's FP8 matmul takes K slices that start and end at multiples of 16";
  // cuBLASLt's block-scaled FP8 matmul on Hopper has no algorithm for M (our rows of A) not a
  // multiple of 4, whatever the scales' padding; N and K ragged against 128 it takes.
  if (plan.problem.scaling == Scaling::block && gemm.a.box.rows % 4 != 0)
    return "GEMM step '" + label + "' multiplies " + std::to_string(gemm.a.box.rows) +
           " rows of block-scaled A; cuBLASLt's block-scaled FP8 matmul runs only row counts that are multiples of 4 (pad the rows to " +
           std::to_string((gemm.a.box.rows + 3) / 4 * 4) + ")";
  if (plan.problem.scaling == Scaling::block)
    for (const auto& [operand, decl, name] : {std::tuple{gemm.a, a, "A"}, std::tuple{gemm.b, b, "B"}})
      if (!whole(operand, decl))
        return "GEMM step '" + label + "' reads " + std::to_string(operand.box.rows) + "x" + std::to_string(operand.box.cols) + " of its block-scaled " +
               name + " '" + decl.name + "' (" + std::to_string(decl.rows) + "x" + std::to_string(decl.cols) +
               "); the library GEMM takes block scales of whole buffers only so far";
  return std::nullopt;
}

// An FP8 GEMM on the overlap GEMM (its tile table waits, notifies, stores remapped or to peers, reads
// addends, or the executor puts plain tables there too): the FP8 main loop as compiled
// (kernels/overlap_gemm.hpp, OverlapGemmLaunch::fp8): e4m3 A (and A rows read in place) and B stored
// [N, K], tensor or row scales applied in the epilogue, bf16 stores and addends, 128x128 or 64x128
// tiles, untransposed (clusters of two are judged with the bf16 ones: clustered_gemm_gap).
std::optional<std::string> overlap_fp8_gemm_gap(const Plan& plan, const GemmStep& gemm, const std::string& label) {
  const std::string step = "FP8 GEMM step '" + label + "' on the overlap GEMM (its tile table waits, notifies or stores elsewhere)";
  if (plan.problem.scaling != Scaling::tensor && plan.problem.scaling != Scaling::row)
    return step + " has " + std::string(to_string(plan.problem.scaling)) +
           " scales; the overlap GEMM's FP8 epilogue applies tensor and row scales only (block scales need a scale per K block in the main loop)";
  if ((gemm.tile_m != 128 && gemm.tile_m != 64) || gemm.tile_n != 128)
    return step + " has " + std::to_string(gemm.tile_m) + "x" + std::to_string(gemm.tile_n) +
           " tiles; its FP8 main loop is compiled for 128x128 and 64x128 only";
  if (gemm.exchanged) return step + " is exchanged; the FP8 main loop runs the untransposed product only";
  if (gemm.accumulate) return step + " accumulates into C; the overlap GEMM does not";
  if (decl_of(plan, gemm.b).order == MemoryOrder::column_major) return step + " reads B stored [K, N] (layout kn); FP8 B must be [N, K]";
  if (gemm.a.box.cols % 16 != 0) return step + " has K = " + std::to_string(gemm.a.box.cols) + "; FP8 operands need K a multiple of 16";
  for (const Region& r : {gemm.a, gemm.b})
    if (decl_of(plan, r).dtype != DType::e4m3)
      return step + " reads " + std::string(to_string(decl_of(plan, r).dtype)) + " '" + decl_of(plan, r).name + "'; the FP8 main loop multiplies e4m3 by e4m3";
  for (const GemmTile& t : gemm.tiles) {
    if (t.a_rows && decl_of(plan, *t.a_rows).dtype != DType::e4m3) return step + " reads A rows in place that are not e4m3";
    std::vector<Region> written{t.store};
    written.insert(written.end(), t.addends.begin(), t.addends.end());
    for (const Region& r : written)
      if (decl_of(plan, r).dtype != DType::bf16)
        return step + " stores or adds " + std::string(to_string(decl_of(plan, r).dtype)) + " '" + decl_of(plan, r).name +
               "'; the FP8 epilogue writes bf16 (and adds bf16)";
  }
  return std::nullopt;
}

}  // namespace

// The exchanged product (GemmStep::exchanged) as the overlap GEMM compiles it: C tiles of 96, 112,
// 128 or 192 rows by 128 columns (kernel tiles 128x96, 128x112, 128x128, 128x192), bf16, B stored
// [N, K], no tile reading its A rows in place (kernels/overlap_gemm.hpp, OverlapGemmLaunch::store_transposed).
std::optional<std::string> exchanged_gemm_gap(const Plan& plan, const GemmStep& gemm, const std::string& label) {
  const std::string step = "GEMM step '" + label + "' runs the exchanged product (C^T = B A^T)";
  if (gemm.tile_n != 128 || (gemm.tile_m != 96 && gemm.tile_m != 112 && gemm.tile_m != 128 && gemm.tile_m != 192))
    return step + " on " + std::to_string(gemm.tile_m) + "x" + std::to_string(gemm.tile_n) +
           " tiles of C; the overlap GEMM has it for 96x128, 112x128, 128x128 and 192x128 only";
  if (decl_of(plan, gemm.b).order == MemoryOrder::column_major) return step + " with B stored [K, N] (layout kn); it reads B as its A operand, [N, K] only";
  for (const Region& r : {gemm.a, gemm.b})
    if (decl_of(plan, r).dtype != DType::bf16) return step + " on " + std::string(to_string(decl_of(plan, r).dtype)) + " operands; bf16 only";
  for (const GemmTile& t : gemm.tiles)
    if (t.a_rows) return step + " and a tile reads its A rows in place, which it does not";
  return std::nullopt;
}

// Clusters (GemmStep::cluster_m / cluster_n, C's tiles) as the overlap GEMM compiles them: 2x1 or 1x2
// on 128x128 or 128x256 tiles, bf16 (e4m3 on 128x128), and 2x2, 2x4 or 4x2 on bf16 128x128; the
// exchanged product in 2x1, 2x2 or 2x4 on C's 112x128 tiles (the kernel's 1x2, 2x2, 4x2 on 128x112);
// B stored [N, K], no tail splits or stream-K, no tile waiting. Whether the table comes in the
// cluster's groups is the kernel layer's check at lowering (require_valid_table).
std::optional<std::string> clustered_gemm_gap(const Plan& plan, const GemmStep& gemm, const std::string& label) {
  const std::string step = "GEMM step '" + label + "' runs in clusters of " + std::to_string(gemm.cluster_m) + "x" + std::to_string(gemm.cluster_n);
  const bool of_two = (gemm.cluster_m == 2 && gemm.cluster_n == 1) || (gemm.cluster_m == 1 && gemm.cluster_n == 2);
  const bool larger = (gemm.cluster_m == 2 && (gemm.cluster_n == 2 || gemm.cluster_n == 4)) || (gemm.cluster_m == 4 && gemm.cluster_n == 2);
  if (!of_two && !larger) return step + "; the overlap GEMM has clusters of 2x1, 1x2, 2x2, 2x4 and 4x2 only";
  if (gemm.exchanged) {
    if (gemm.tile_m != 112 || gemm.tile_n != 128 || gemm.cluster_m != 2)
      return step + " on " + std::to_string(gemm.tile_m) + "x" + std::to_string(gemm.tile_n) +
             " tiles of C and the exchanged product; compiled for C's 112x128 tiles in 2x1, 2x2 and 2x4 only";
  } else {
    if (gemm.tile_m != 128 || (gemm.tile_n != 128 && gemm.tile_n != 256))
      return step + " on " + std::to_string(gemm.tile_m) + "x" + std::to_string(gemm.tile_n) + " tiles; compiled for 128x128 and 128x256 only";
    if (larger && gemm.tile_n != 128) return step + " on 128x256 tiles; clusters of four and eight are compiled for 128x128 only";
  }
  if (decl_of(plan, gemm.b).order == MemoryOrder::column_major) return step + " with B stored [K, N] (layout kn); clusters read B [N, K] only";
  for (const Region& r : {gemm.a, gemm.b}) {
    const DType t = decl_of(plan, r).dtype;
    if (t == DType::e4m3 && gemm.tile_n == 128 && of_two) continue;  // FP8's 128x128x128 (overlap_fp8_gemm_gap judges the rest)
    if (t != DType::bf16) return step + " on " + std::string(to_string(t)) + " operands; bf16, and e4m3 on 128x128 tiles in clusters of two, only";
  }
  if (gemm.tail_splits != 1 || gemm.stream_k)
    return step + " with its last wave cut along K (tail splits or stream-K); clusters split every tile in step (k_splits) only";
  // A split waits for its tile's earlier split in another cluster, so every cluster must be resident
  // at once: on SMs shared with other kernels (sm_limit) free SM pairs may be fewer than the clusters.
  if (gemm.k_splits > 1 && gemm.sm_limit != 0)
    return step + " split " + std::to_string(gemm.k_splits) + " ways on " + std::to_string(gemm.sm_limit) +
           " SMs; split clusters need the whole GPU (free SM pairs beside other kernels may not hold every cluster)";
  for (const GemmTile& t : gemm.tiles)
    if (t.wait) return step + " and a tile waits; a wait would hold the peer's loads too";
  return std::nullopt;
}

std::optional<std::string> gpu_step_gap(const Plan& plan, const Step& step, bool plain_gemm_on_overlap) {
  if (std::holds_alternative<AttentionStep>(step.body)) return std::nullopt;  // the attention lowering checks its own (bf16, f32 lse)
  // The MoE steps of the choices given on the device (Problem::routing_on_device): the route reads
  // and writes i32 tables (its own lowering), the index permutes and combine move bf16 rows by them,
  // the routed grouped GEMM multiplies bf16 by a B stored [N, K] (lowering/moe_route.cpp).
  if (std::holds_alternative<RouteStep>(step.body)) return std::nullopt;
  if (const auto* c = std::get_if<CollectiveStep>(&step.body);
      c && c->kind == CollectiveKind::all_gather && decl_of(plan, c->src).dtype == DType::i32 && decl_of(plan, c->dst).dtype == DType::i32)
    return std::nullopt;  // every rank's choices (NCCL's int32)
  const auto* permute = std::get_if<PermuteRowsStep>(&step.body);
  const auto* combine = std::get_if<CombineRowsStep>(&step.body);
  const auto* routed = std::get_if<GemmStep>(&step.body);
  if ((permute && permute->index) || (combine && combine->index) || (routed && routed->routed)) {
    for (const Region& r : regions_of(step.body)) {
      const DType dtype = decl_of(plan, r).dtype;
      const bool index = (permute && r == *permute->index) || (combine && r == *combine->index) || (routed && r == routed->routed->expert_first);
      if (dtype != (index ? DType::i32 : DType::bf16))
        return std::string(kind_of(step.body)) + " step '" + step.label + "' of the routed MoE touches " + std::string(to_string(dtype)) + " " +
               describe_region(plan, r) + "; it moves and multiplies bf16 by i32 indices only";
    }
    if (routed && routed->routed) {
      if (decl_of(plan, routed->b).order == MemoryOrder::column_major)
        return "GEMM step '" + step.label + "' of the routed MoE reads B stored [K, N] (layout kn); it reads B [N, K] only";
      const int64_t n = routed->b.box.rows / std::max(routed->routed->experts, 1);
      const bool compiled = routed->tile_m == 128 && (routed->tile_n == 96 || routed->tile_n == 128 || routed->tile_n == 192 || routed->tile_n == 256);
      if (!compiled || n % routed->tile_n != 0 || !routed->persistent)
        return "GEMM step '" + step.label + "' of the routed MoE runs " + std::to_string(routed->tile_m) + "x" + std::to_string(routed->tile_n) +
               " tiles over " + std::to_string(n) + " columns per expert" + (routed->persistent ? "" : ", a CTA per tile") +
               "; its table is built for persistent 128-row tiles 96, 128, 192 or 256 wide that divide each expert's columns";
    }
    return std::nullopt;
  }
  if (const auto* gemm = std::get_if<GemmStep>(&step.body); gemm && gemm->exchanged)
    if (auto gap = exchanged_gemm_gap(plan, *gemm, step.label)) return gap;
  if (const auto* gemm = std::get_if<GemmStep>(&step.body); gemm && (gemm->cluster_m != 1 || gemm->cluster_n != 1))
    if (auto gap = clustered_gemm_gap(plan, *gemm, step.label)) return gap;
  // NCCL's all-gather and the copies of FP8 rows with tensor or row scales: the rows' bytes, and
  // the scales with them (runtime/lowering/collective.cpp, data_movement.cpp). Block scales are laid
  // out K-block-major over the buffer's rows, which moving rows does not keep.
  // (Row-major buffers, and not a companion group's copies, which the SM companion moves as bf16.)
  const auto moves_fp8_rows = [&](const Region& src, const Region& dst) {
    const BufferDecl &from = decl_of(plan, src), &to = decl_of(plan, dst);
    return is_fp8(from.dtype) && plan.problem.scaling != Scaling::block && to.dtype == from.dtype && from.order == MemoryOrder::row_major &&
           to.order == MemoryOrder::row_major && step.companion < 0;
  };
  if (const auto* c = std::get_if<CollectiveStep>(&step.body); c && c->kind == CollectiveKind::all_gather && moves_fp8_rows(c->src, c->dst))
    return std::nullopt;
  if (const auto* c = std::get_if<CopyStep>(&step.body); c && moves_fp8_rows(c->src, c->dst)) return std::nullopt;
  for (const Region& r : regions_of(step.body)) {
    const DType dtype = decl_of(plan, r).dtype;
    if (dtype == DType::bf16) continue;
    if (const auto* gemm = std::get_if<GemmStep>(&step.body)) {
      if (is_plain_tile_table(*gemm) && !plain_gemm_on_overlap) return library_gemm_gap(plan, *gemm, step.label);
      if (is_fp8(decl_of(plan, gemm->a).dtype)) return overlap_fp8_gemm_gap(plan, *gemm, step.label);
      return "GEMM step '" + step.label + "' reads bf16 and writes " + std::string(to_string(dtype)) +
             " on the overlap GEMM (its tile table waits, notifies or stores elsewhere), which stores bf16 only";
    }
    return std::string(kind_of(step.body)) + " step '" + step.label + "' touches " + std::string(to_string(dtype)) +
           " data; the executor lowers only library GEMMs for FP8 so far: moving FP8 rows with their scales (copies, NCCL all_gather / "
           "all_to_all, row permutations) or f32 partial sums has no lowering yet, so this plan runs on the CPU only (weft check)";
  }
  return std::nullopt;
}

std::optional<std::string> gpu_lowering_gap(const Plan& plan, const GpuLoweringOptions& options) {
  // (A caller's FP8 input kept in symmetric memory is copied in with its scales, CudaExecutor::bind:
  // whether peers can then take its rows is the steps' to say.)
  for (const RankPlan& rp : plan.ranks) {
    for (const Step& step : rp.steps)
      if (auto gap = gpu_step_gap(plan, step, options.plain_gemm_on_overlap)) return "rank " + std::to_string(rp.rank) + ": " + *gap;
  }
  return std::nullopt;
}

}  // namespace weft
