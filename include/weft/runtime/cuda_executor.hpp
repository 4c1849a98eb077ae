// The CUDA executor: runs one rank's part of a plan on that rank's GPU.
//
//   CudaExecutor exec(comm, plan);          // collective; allocates buffers, signals, streams
//   fill(exec.buffer("A")); fill(exec.buffer("B"));
//   exec.run(stream);                       // enqueue one call; may be repeated or graph-captured
//   if (!synchronize_with_timeout(stream, 10000)) throw ... exec.diagnose();
//
// Lowering, step by step: GEMM -> cuBLASLt for plain tile tables, the overlap GEMM (weft's
// table-driven kernel) for tables with waits, notifies or remapped stores; copy -> cudaMemcpy2DAsync (copy engine; peers through
// symmetric memory), reduce and row permutation -> small kernels, collectives -> NCCL, step waits ->
// cuStreamWaitValue64, notifies -> a one-thread release increment. Each plan stream is a CUDA stream
// that forks from and joins back into the caller's stream.
//
// One process driving several GPUs (Communicator::local_group, a thread per rank): a rank's thread
// that allocates or frees device memory, or loads a library, can wait for a peer's device while that
// device sits in a collective waiting for this rank (NCCL's caveat for this mode). So construct and
// fill every rank's executors, and finish any other such driver work, before any rank calls run()
// (Communicator::host_barrier between the two), and destroy them together. One process per GPU
// (torchrun, mpirun) has no such hazard.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/plan.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/runtime/communicator.hpp"

namespace weft {

struct OverlapGemmPlanContext;

struct ExecutorOptions {
  // Off only for plans that time one part of another plan (its GEMMs alone, its collectives alone),
  // whose results are not meant to be correct.
  bool validate = true;
  // Which GEMM runs plain tile tables: cuBLASLt, or the overlap GEMM with an empty table (how
  // `weft bench gemm` compares the two). Tables with waits, notifies or remapped stores always
  // run on the overlap GEMM.
  enum class PlainGemm { library, overlap } plain_gemm = PlainGemm::library;
  // Calls of this executor that may be queued on the device at once; run() waits (bounded) for the
  // call this many calls back before it enqueues the next. 1: every call waits for the previous one.
  // 0: the environment's WEFT_MAX_CALLS_IN_FLIGHT, else 8.
  int max_calls_in_flight = 0;
};

class CudaExecutor {
 public:
  CudaExecutor(Communicator& comm, Plan plan, ExecutorOptions options = {});
  ~CudaExecutor();
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  const Plan& plan() const { return plan_; }
  const RankPlan& rank_plan() const { return plan_.ranks.at(static_cast<size_t>(comm_.rank())); }
  // This rank's device memory of buffer `name` (throws naming it when absent).
  void* buffer(std::string_view name) const;
  DeviceRegion region(const Region& region) const;
  DeviceRegion output() const { return region(rank_plan().output); }

  void run(cudaStream_t stream);
  // Which waits of the last call are not met yet, with the signals' current values, and any
  // overlap GEMM tile that gave up waiting.
  std::string diagnose() const;
  // Empty while no overlap GEMM tile has timed out in a wait; else which tile, signal and value.
  std::string overlap_gemm_error() const;

 private:
  struct Impl;
  OverlapGemmPlanContext overlap_context() const;
  void load_gemm_kernels();
  Communicator& comm_;
  Plan plan_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft
