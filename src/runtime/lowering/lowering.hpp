// The CUDA executor's lowerings: one function per kind of plan step, each turning the step into
// what one call enqueues on the step's stream. Internal to the runtime.
//
// Addresses are read when a call is enqueued, not when the step is lowered: a caller's buffer
// (ExecutorOptions::caller_buffers) may move between calls, and the lowered step follows it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "weft/ir/plan.hpp"
#include "weft/kernels/attention.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/overlap_gemm.hpp"

namespace weft::lowering {

// A region of a buffer whose address is read from `base` at enqueue time.
struct BoundRegion {
  void* const* base = nullptr;
  int64_t offset = 0;  // elements from the buffer's start
  int64_t rows = 0, cols = 0, stride = 0;
  // Whether the buffer is the caller's (its address, and so its alignment, may change per call).
  bool moves = false;
  // A column-major buffer's region (BufferDecl::order; only a GEMM's b operand): rows and cols are
  // the box's as the plan sees it, while `offset` and `stride` address its memory, the [cols, rows]
  // transpose, row-major (element (i, j) at offset + j * stride + i). resolve() gives that memory.
  bool column_major = false;
  DType dtype = DType::bf16;

  DeviceRegion resolve() const { return DeviceRegion{static_cast<char*>(*base) + offset * dtype_bytes(dtype), rows, cols, stride}; }
};

// The scales of an FP8 region: its buffer's whole scale array, in device_scale_index's layout
// (runtime/cuda_executor.hpp): byte_offset bytes after the buffer's start, or for a caller's buffer
// where the caller bound them (*scale_base, read at enqueue time like the elements' address).
struct BoundScales {
  BoundRegion elements;  // the region itself
  size_t byte_offset = 0;
  void* const* scale_base = nullptr;
  ScaleGrid grid;
  int64_t buffer_rows = 0, buffer_cols = 0;

  const float* resolve() const {
    if (scale_base) return static_cast<const float*>(*scale_base);
    return reinterpret_cast<const float*>(static_cast<const char*>(*elements.base) + byte_offset);
  }
};

// Where an operand's scales start for a GEMM's rows: the executor's layout (device_scale_index),
// which for tensor and row scales is one float per scale from the region's first row. Block scales
// are strided over the whole buffer: the GEMM must read all of it (throws otherwise, naming the step).
const float* scales_from(const BoundScales& s, const std::string& label, const char* operand);
// One scale per row (an outer vector), not one for the whole operand or per block.
bool is_row_scaled(const ScaleGrid& grid);

// What a lowering may use from the executor.
struct Context {
  const Plan* plan = nullptr;  // the plan being lowered
  int rank = 0;
  int world_size = 1;
  std::function<BoundRegion(const Region&)> region;          // a plan region as this GPU sees it
  std::function<BoundRegion(int rank, int buffer)> whole;    // a whole buffer of a rank
  std::function<std::optional<BoundScales>(const Region&)> scales;  // an FP8 region's scales (empty: not FP8)
  cublasLtHandle_t lt = nullptr;
  void* gemm_workspace = nullptr;
  size_t gemm_workspace_bytes = 0;
  ncclComm_t nccl = nullptr;
  const uint64_t* own_signals = nullptr;                     // device
  std::function<uint64_t*(int rank)> signals_of;             // every rank's counters as this GPU sees them
  WaitRecord* device_error = nullptr;                  // where bounded waits report
  uint64_t device_wait_timeout_ns = 0;
  bool plain_gemm_on_overlap = false;                        // ExecutorOptions::PlainGemm::overlap
  bool fp8_fast_accumulation = false;                        // ExecutorOptions::fp8_fast_accumulation
  // Peers in this process (local_group, a thread per GPU): a copy engine's copy between this GPU's
  // memory and a peer GPU's can queue behind that GPU's own work, so a pull can wait forever for a
  // peer that spins in its next call's barrier waiting for this rank. Such copies run on SMs
  // instead, and a GEMM or attention kernel that waits leaves kPeerCopySms SMs to them. Off with
  // WEFT_PEER_COPIES_IN_PROCESS=copy_engine.
  bool peer_copies_on_sms = false;
};

// The CTAs of a peer copy moved onto SMs, and the SMs a waiting kernel leaves free for them.
inline constexpr int kPeerCopySms = 8;
// A kernel's CTA limit (0: one per SM) capped at this GPU's SMs less kPeerCopySms: where its CTAs
// wait for peer copies that run on SMs (Context::peer_copies_on_sms), CTAs spinning on every SM
// would keep those copies off the GPU.
int leave_sms_for_peer_copies(int max_ctas);

// One lowered step. `enqueue` is empty where a step has nothing to do (an empty copy); `warm_up`
// runs the step's library kernel once at construction (see CudaExecutor::load_gemm_kernels).
struct Lowered {
  std::function<void(cudaStream_t)> enqueue;
  std::function<void(cudaStream_t)> warm_up;
};

// Throws std::invalid_argument naming the step and what is missing where it touches a buffer that
// is not bf16 and its lowering has no such form yet (only the library GEMM takes FP8 so far).
void require_lowerable_dtypes(const Step& step, const Context& context);

Lowered lower_gemm(const GemmStep& gemm, const std::string& label, const Context& context);
Lowered lower_library_gemm(const GemmStep& gemm, const std::string& label, const Context& context);
Lowered lower_overlap_gemm(const GemmStep& gemm, const std::string& label, const Context& context);
// The MoE steps of the choices given on the device (moe_route.cpp): the route, and the grouped GEMM
// whose table it builds per call on the device before the overlap GEMM runs it.
Lowered lower_route(const RouteStep& route, const std::string& label, const Context& context);
Lowered lower_routed_gemm(const GemmStep& gemm, const std::string& label, const Context& context);
Lowered lower_copy(const CopyStep& copy, Engine engine, const std::string& label, const Context& context);
Lowered lower_reduce(const ReduceStep& reduce, const std::string& label, const Context& context);
Lowered lower_permute_rows(const PermuteRowsStep& permute, const std::string& label, const Context& context);
Lowered lower_combine_rows(const CombineRowsStep& combine, const std::string& label, const Context& context);
Lowered lower_move_boxes(const MoveBoxesStep& moves, const std::string& label, const Context& context);
Lowered lower_collective(const CollectiveStep& collective, const std::string& label, const Context& context);
// An attention step on weft's attention kernel (kernels/attention.hpp), merging in place where it says.
Lowered lower_attention(const AttentionStep& attention, const std::string& label, const Context& context);
// The steps `step_indices` of `plan` (one companion group, in stream order) as one launch of the
// companion kernel; their waits and notifies happen inside it.
Lowered lower_companion(const RankPlan& plan, const std::vector<int>& step_indices, const Context& context);

// Device memory holding `bytes` of `data` for as long as a lowered step keeps the pointer.
std::shared_ptr<void> upload(const void* data, size_t bytes);

}  // namespace weft::lowering
