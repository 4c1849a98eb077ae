// Which steps the CUDA executor lowers for buffers that are not bf16: FP8 operands (with their
// scales) and the f32 an FP8 GEMM may give are taken by the library GEMM alone so far; every other
// step that meets them is refused here, naming what is missing, rather than run as bf16.
#include <stdexcept>

#include "lowering.hpp"

namespace weft::lowering {

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
        else return "join";
      },
      body);
}

std::vector<Region> regions_of(const StepBody& body) {
  return std::visit(
      [](const auto& b) -> std::vector<Region> {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, GemmStep>) {
          std::vector<Region> r{b.a, b.b};
          for (const GemmTile& t : b.tiles) {
            r.push_back(t.store);
            r.insert(r.end(), t.addends.begin(), t.addends.end());
            if (t.a_rows) r.push_back(*t.a_rows);
          }
          return r;
        } else if constexpr (std::is_same_v<T, CopyStep> || std::is_same_v<T, PermuteRowsStep> || std::is_same_v<T, MoveBoxesStep> ||
                             std::is_same_v<T, CollectiveStep>) {
          return {b.src, b.dst};
        } else if constexpr (std::is_same_v<T, ReduceStep>) {
          std::vector<Region> r = b.srcs;
          r.push_back(b.dst);
          return r;
        } else if constexpr (std::is_same_v<T, CombineRowsStep>) {
          return {b.src, b.weights, b.dst};
        } else if constexpr (std::is_same_v<T, AttentionStep>) {
          return {b.q, b.k, b.v, b.o, b.lse};
        } else {
          return {};
        }
      },
      body);
}

}  // namespace

void require_lowerable_dtypes(const Step& step, const Context& context) {
  if (std::holds_alternative<AttentionStep>(step.body)) return;  // lower_attention checks its own (bf16, f32 lse)
  for (const Region& r : regions_of(step.body)) {
    const BoundRegion bound = context.region(r);
    if (bound.dtype == DType::bf16) continue;
    if (const auto* gemm = std::get_if<GemmStep>(&step.body)) {
      if (is_plain_tile_table(*gemm) && !context.plain_gemm_on_overlap) continue;  // the library GEMM takes it
      throw std::invalid_argument("CudaExecutor: GEMM step '" + step.label + "' reads or writes " + std::string(to_string(bound.dtype)) +
                                  " and its tile table needs the overlap GEMM (waits, notifies, remapped or peer stores, addends, or "
                                  "ExecutorOptions::PlainGemm::overlap), which has no FP8 mainloop yet; FP8 runs on the GPU only as a "
                                  "plain library GEMM (cuBLASLt) so far");
    }
    throw std::invalid_argument("CudaExecutor: " + std::string(kind_of(step.body)) + " step '" + step.label + "' touches " +
                                std::string(to_string(bound.dtype)) + " data; the executor lowers only library GEMMs for FP8 so far: "
                                "moving FP8 rows with their scales (copies, NCCL all_gather / all_to_all, row permutations) has no "
                                "lowering yet, so this plan runs on the CPU only (weft check)");
  }
}

}  // namespace weft::lowering
