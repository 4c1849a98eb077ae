// Turns a plan GemmStep whose tile table has waits, notifies or remapped stores into a launch of
// the overlap GEMM: the tile table in the kernel's device format, the store targets, the signal
// arrays. Internal to the runtime (the executor's GEMM lowering for non-plain tables).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "weft/core/plan.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/overlap_gemm.hpp"

namespace weft {

struct OverlapGemmPlanContext {
  int rank = 0;
  int world_size = 1;
  std::function<DeviceRegion(const Region&)> region;        // plan region -> device memory as this GPU sees it
  std::function<DeviceRegion(int rank, int buffer)> whole;  // a whole buffer of a rank
  const uint64_t* own_signals = nullptr;
  std::function<uint64_t*(int rank)> signals_of;
  const uint64_t* raised_per_call = nullptr;  // device
  OverlapGemmError* error = nullptr;          // device
  bool allow_k_splits = true;                 // false: one entry per tile, whatever the shape
};

struct LoweredOverlapGemm {
  std::unique_ptr<OverlapGemm> gemm;        // prepared once; a call is gemm->launch(stream, epoch)
  OverlapGemmTile* device_table = nullptr;  // owned by the caller once returned (cudaFree)
};

// Builds and uploads the table; throws std::invalid_argument naming the step when the plan's tile
// shape is not a compiled one or a feature is unsupported (accumulating tables).
LoweredOverlapGemm lower_overlap_gemm(const GemmStep& gemm, const std::string& label, const OverlapGemmPlanContext& context);

}  // namespace weft
