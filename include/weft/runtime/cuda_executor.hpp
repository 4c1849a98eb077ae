// The CUDA executor: runs one rank's part of a plan on that rank's GPU. Most users call an Op
// (runtime/op.hpp), which keeps one executor per row count; the executor is for running a plan of
// one's own.
//
//   CudaExecutor exec(comm, plan);          // collective; places buffers, lowers every step
//   fill(exec.buffer("A")); fill(exec.buffer("B"));
//   exec.run(stream);                       // enqueue one call; may be repeated or graph-captured
//   exec.finish(stream);                    // bounded wait; raises what went wrong on the device
//
// Buffers: a plan's non-symmetric inputs named in ExecutorOptions::caller_buffers are the caller's,
// given per call with bind(); a symmetric input so named is copied in from the bound pointer after
// the call's barrier (peers read it); with caller_output the result lands in memory given with
// bind_output() (directly where the output is a whole plain buffer, else copied there at the end of
// the call); everything else lives in the workspace.
//
// One call (run): the plan's counters reset (where it has signals), then a device-side barrier where
// the plan reaches peers (a peer may still read what this call overwrites; SignalSet::barrier: a
// one-warp kernel on symmetric arrival words, no NCCL call), symmetric inputs copied in and a second
// barrier (peers read them from the start), then every plan stream forks from the caller's stream,
// runs its steps (each step's waits as stream waits, cuStreamWaitValue64: no SM), and joins back; a
// plan of one stream runs its steps on the caller's stream itself. Calls in flight are bounded
// (ExecutorOptions::max_calls_in_flight) except where a call cannot wait on anything (no signals,
// no peers, no collective between ranks), which can neither hang nor hold a peer.
// Nothing in a call waits on the host, so a call can be captured into a CUDA graph and replayed;
// capture after one eager call (or prepare()) so that nothing is allocated while capturing. The
// executor does so itself (ExecutorOptions::replay_calls): a call whose bindings repeat the last
// call's is captured once and replayed, so that its enqueue is one graph launch (not a call that is
// one operation anyway: a graph launch is no cheaper).
//
// Lowering, one function per step kind (src/runtime/lowering/): GEMM -> cuBLASLt for plain tile
// tables, the overlap GEMM for tables with waits, notifies or remapped stores; copy ->
// cudaMemcpy2DAsync (copy engine; peers through symmetric memory); reduce, row permutation, box
// moves -> small kernels; collectives -> NCCL; notifies -> a write (one writer) or a one-thread
// release increment.
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

#include "weft/ir/plan.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/runtime/communicator.hpp"
#include "weft/runtime/workspace.hpp"

namespace weft {

struct ExecutorOptions {
  // Off only for plans that time one part of another plan (its GEMMs alone, its collectives alone),
  // whose results are not meant to be correct.
  bool validate = true;
  // FP8 library GEMMs with cuBLASLt's fast accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM: no periodic
  // promotion of the partial sums to fp32, less accurate). Off: the CPU reference's rounding. Never
  // with block scaling, which cuBLASLt runs only without it.
  bool fp8_fast_accumulation = false;
  // Which GEMM runs plain tile tables: cuBLASLt, or the overlap GEMM with an empty table (how
  // `weft bench gemm` compares the two). Tables with waits, notifies or remapped stores always
  // run on the overlap GEMM.
  enum class PlainGemm { library, overlap } plain_gemm = PlainGemm::library;
  // Calls of this executor that may be queued on the device at once; run() waits (bounded) for the
  // call this many calls back before it enqueues the next. 1: every call waits for the previous one.
  // 0: the environment's WEFT_MAX_CALLS_IN_FLIGHT, else 8. Not applied while a stream is captured.
  int max_calls_in_flight = 0;
  // Input buffers given per call with bind() instead of living in the workspace (see the header).
  std::vector<std::string> caller_buffers = {};
  // The result lands in memory given per call with bind_output().
  bool caller_output = false;
  // ag_gemm: every call also leaves the gathered A (RankPlan::gathered_a: every rank's A shard, in
  // rank order) in memory given with bind_gathered_a(), [W * M, K] row-major contiguous (AsyncTP's
  // return_A: the caller keeps it for the weight gradient instead of gathering again). Written there
  // directly where the plan gathers into one whole plain buffer (sequential's all-gather lands in
  // it), else copied there piece by piece at the end of the call (a device copy of W * M * K
  // elements). The constructor refuses a plan that keeps no gathered A.
  bool caller_gathered_a = false;
  // A symmetric input of caller_buffers may be written in place (into buffer(name)) instead of
  // being copied from a bound pointer; then every call ends with a second barrier, so that no
  // rank's producer overwrites it while a peer still reads it.
  bool symmetric_inputs_in_place = false;
  // Where buffers, signals and the device error record live; null: a workspace of its own.
  Workspace* workspace = nullptr;
  // A device-side wait gives up after this many ms (0: WEFT_DEVICE_WAIT_TIMEOUT_MS, else 10,000).
  int64_t device_wait_timeout_ms = 0;
  // A call not finished after this many ms fails with CallTimeout (0: Communicator::timeout_ms()).
  int64_t call_timeout_ms = 0;
  // The second call with the same bindings (bind(), bind_output()) is captured into a CUDA graph,
  // and later calls with those bindings launch it: one enqueue instead of one per operation.
  // Not where the call has an NCCL operation (a collective step) at world > 1 (NCCL requires every
  // rank to capture it alike), nor while the caller's stream is being captured, nor where peers run in
  // this process (Communicator::local_group: a capture there waits for peers' devices that wait for
  // this rank). WEFT_REPLAY_CALLS=0 turns it off.
  bool replay_calls = true;
};

class CudaExecutor {
 public:
  CudaExecutor(Communicator& comm, Plan plan, ExecutorOptions options = {});
  ~CudaExecutor();
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  const Plan& plan() const { return plan_; }
  Communicator& communicator() const { return comm_; }
  // "ag_gemm m=... n=... k=... world=W bf16->bf16, strategy S": what every error of a call names.
  std::string call_context() const;
  const RankPlan& rank_plan() const { return plan_.ranks.at(static_cast<size_t>(comm_.rank())); }
  // This rank's device memory of buffer `name` (throws naming it when absent; null for a caller's
  // buffer not bound yet).
  void* buffer(std::string_view name) const;
  // A region's memory; for a column-major buffer (BufferDecl::order) the box's [cols, rows]
  // transpose, row-major, as that memory holds it.
  DeviceRegion region(const Region& region) const;
  // Where this rank's result is after a call: the caller's memory with caller_output.
  DeviceRegion output() const;

  // Gives a caller buffer's memory for the next calls (throws std::invalid_argument for a buffer
  // not in ExecutorOptions::caller_buffers, a null pointer, or one not 16-byte aligned). A symmetric
  // input's `data` may be null when symmetric_inputs_in_place: the caller writes buffer(name). An
  // FP8 buffer's `scales` (fp32, 16-byte aligned, in device_scale_index's layout) come with it, read
  // by the call as its elements are; other buffers take none. (An FP8 input in symmetric memory is
  // refused at construction: copying it in with its scales has no lowering yet.)
  void bind(std::string_view name, const void* data, const void* scales = nullptr);
  // With caller_output: the result lands at `data`, row-major [rows, cols] of the plan's output,
  // contiguous (16-byte aligned).
  void bind_output(void* data);
  // With caller_gathered_a: where the gathered A lands, [W * M, K] contiguous (16-byte aligned).
  void bind_gathered_a(void* data);

  // Enqueues one call on `stream`. Raises first what an earlier call left (DeviceWaitTimeout), and
  // CallTimeout when the call max_calls_in_flight back has not finished in time.
  void run(cudaStream_t stream);
  // Waits (bounded by call_timeout_ms) until `stream` is done, then raises what went wrong.
  void finish(cudaStream_t stream);
  // Raises DeviceWaitTimeout if a device-side wait of an earlier call gave up; never waits.
  void check();
  // Which waits of the last call are not met yet, with the signals' current values, and any
  // overlap GEMM tile that gave up waiting.
  std::string diagnose() const;
  // Calls launched as a captured graph so far (ExecutorOptions::replay_calls).
  uint64_t replayed_calls() const;
  // Copies of caller buffers into symmetric memory a call makes with the current bindings (0 where
  // the plan reads the caller's memory itself or the producer wrote the symmetric buffer in place).
  size_t copies_in_per_call() const;

 private:
  struct Impl;
  void place_buffers();
  void lower_steps();
  void load_gemm_kernels();
  [[noreturn]] void fail_stuck_call(const std::string& what);
  // One call's operations, enqueued one by one on `stream`.
  void enqueue_call(cudaStream_t stream);
  // Launches this call's captured graph, capturing it first where the bindings repeat; false:
  // enqueue it op by op.
  bool replay_call(cudaStream_t stream);
  std::vector<const void*> bindings() const;
  Communicator& comm_;
  Plan plan_;
  ExecutorOptions options_;
  std::unique_ptr<Impl> impl_;
};

// The layout of an FP8 buffer's scales at buffer(scale_name(name)): device_scale_index (ir/scaling.hpp).

// The workspace a plan needs on every rank (symmetric bytes: the largest of any rank's).
WorkspaceSize workspace_size(const Plan& plan, const ExecutorOptions& options);

}  // namespace weft
