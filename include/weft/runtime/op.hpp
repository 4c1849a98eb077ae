// An Op: one GEMM and the communication that depends on it, made once per layer and called every
// step on the caller's buffers and stream.
//
//   weft::Op up(comm, {.op = weft::OpKind::ag_gemm, .n = 14336 / W, .k = 4096, .max_rows = 8192 / W});
//   up.run({.a = x_shard, .b = w_up, .c = y, .rows = tokens / W}, stream);
//
// What `rows` is and what the buffers hold, per op (row-major bf16; B is the [n, k] matrix of
// A * B^T, laid out as OpSpec::b_layout says: row-major [n, k] like a linear layer's weight (nk), or
// row-major [k, n] (kn: B^T, torch.mm's right operand, e.g. that weight itself for its input
// gradient); `rows` may change from call to call up to max_rows):
//   ag_gemm : a = this rank's A shard [rows, k];        c = gather(A) * B^T          [W * rows, n]
//   gemm_rs : a = this rank's A [rows, k] (a K shard);  c = rows r*rows/W.. of sum_r A_r B_r^T
//             [rows / W, n]; rows must be a multiple of W
//   gemm_ar : a = [rows, k];                             c = sum_r A_r B_r^T           [rows, n]
//   gemm_a2a: a = [rows, k]; row i of A_r B_r^T goes to rank routing[r][i];  c = the rows routed
//             here, by source rank then row                                 [output_rows(args), n]
//   a2a_gemm: a = tokens [rows, k]; row i goes to rank routing[r][i]; c = (the rows routed here) * B^T
//   ag_moe  : tensor-parallel MoE, first half (TileLink Figure 5): a = this rank's tokens [rows, k],
//             b = this rank's shard [n, k] of every expert's weight stacked [experts * n, k]; token i
//             of rank s picks experts choices[s][i * topk + j], j < topk (RunArgs::choices, every
//             rank's, the same on every rank); c = every rank's tokens times their experts' shards,
//             [W * rows * topk, n] in the rows' MoE layout (moe_rows(): by source rank, then
//             expert, token and choice), the same on every rank
//   moe_rs  : the second half: a [W * rows * topk, k] in that layout (k: this rank's shard of the
//             experts' inner dimension), b [experts * n, k], topk_weights [W * rows, topk] (bf16,
//             every rank's tokens' weights); c = this rank's tokens, each the weighted sum over its
//             choices of its rows times their expert's b, summed over ranks: [rows, n]
// FP8 (OpSpec::input_dtype e4m3 or e5m2, with a scaling mode): a and b hold FP8 values, row-major
// [rows, k] and [n, k] (b_layout nk only: cuBLASLt's FP8 matmul reads both K-major), c is
// output_dtype (bf16 or f32), and the call computes c = (scale_a * a) (scale_b * b)^T with fp32
// dequantization scales (torch._scaled_mm's meaning; ir/scaling.hpp). RunArgs::scale_a and scale_b
// point to fp32 device arrays, 16-byte aligned, laid out as device_scale_index says:
//   tensor: one float each (A's the same on every rank: the scale of the whole logical A);
//   row   : scale_a one per row of this rank's A [rows], scale_b one per row of B [n] (per output
//           column of c);
//   block : DeepSeek-V3's. scale_a 1x128: a scale per row and 128-column block of K, K-block-major
//           with the rows padded to a multiple of 4 (block b of row i at b * pad4(rows) + i);
//           scale_b 128x128: row-block-major with the K blocks padded to a multiple of 4 (block
//           (i, j) at i * pad4(ceil(k / 128)) + j): cuBLASLt's VEC128_32F and BLK128x128_32F.
// RunArgs::scale_a_count / scale_b_count say how many floats each holds (op_scale_count gives it,
// plan/op_arguments.hpp); run checks them. Only plans whose GEMMs are library GEMMs and whose other
// steps move no FP8 data run on the GPU so far (gpu_lowering_gap, plan/gpu_lowering.hpp): a strategy
// whose FP8 plan does not declines at construction naming why, and auto picks among those that run.
// In practice: every strategy at world 1 (the GEMM alone); above it, ag_gemm's strategies whose
// GEMMs are plain (sequential, decomposed, two_level, FiCCO's: NCCL's all-gather or the copy
// engine's copies of the FP8 rows with their tensor or row scales) and the strategies of gemm_rs and
// gemm_ar whose GEMMs are plain and which reduce bf16 partial sums (never f32 ones, nor FP8 rows
// copied): see the CPU test Fp8OpStrategies for the list. gathered_a is not taken with FP8.
//
// Each op's sequential equivalent is the `sequential` strategy: cuBLASLt GEMM, then the NCCL
// collective (before it, for ag_gemm and a2a_gemm), on one stream. Every strategy takes B in either
// layout (the GEMMs read kn through their transpose flag, or an N-major B operand: no copy).
// ag_gemm with RunArgs::gathered_a also hands back gather(A) [W * rows, k] (AsyncTP's return_A):
// where the strategy gathers A into one buffer of its own (sequential), that buffer is the caller's
// memory; elsewhere the shards are copied there from where the call left them, at its end.
//
// At world 1 a call is its GEMM alone, from a into c, on `stream` (make_plan; nothing symmetric, no
// copy), whatever the strategy. Otherwise, the timeline of a call on `stream`: the counters of the op's signals reset, a device barrier where the
// strategy reaches peers' memory, the caller's A shard copied into symmetric memory where the
// strategy gathers from there, and a second barrier (unless the producer wrote it in place:
// a_in_workspace; then a barrier at the end of the call instead), then the
// strategy's streams fork from `stream` and join back into it, and the result lands in c. Nothing
// waits on the host, so a call can be captured in a CUDA graph; capture after a first eager call
// with the same rows (or prepare(rows)): planning and lowering allocate, capturing may not. Left
// eager, a call whose pointers repeat the previous call's (same rows) is replayed from a graph the
// op captured itself (ExecutorOptions::replay_calls), one launch instead of one per operation.
//
// What it allocates: once, at construction, the symmetric memory and signals for max_rows (grown,
// never shrunk, if a smaller row count's plan needs more); per distinct row count (per routing or
// choice table, for the routed and MoE ops, but per row count alone for an MoE op whose choices are
// given on the device: OpSpec::routing_on_device), a plan and its lowering, cached: the 64 (8) most
// recently used are kept (never the last call's, one a producer writes A into in place, nor one a
// stream capture ran: a captured graph uses its memory). Nothing per call.
//
// Errors: std::invalid_argument before anything is launched (null or misaligned pointers, scales
// missing, misaligned or of the wrong count for the scaling mode, rows
// above max_rows, rows not a multiple of W for gemm_rs, a routing that does not fit, ranks that
// disagree on the spec or on a call's plan); DeviceWaitTimeout at the next run, finish or check
// after a call whose device-side wait gave up; CallTimeout (communicator aborted) when a call does
// not finish within WEFT_COLLECTIVE_TIMEOUT_S.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <deque>
#include <map>
#include <tuple>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/ir/problem.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/runtime/communicator.hpp"

namespace weft {

class CudaExecutor;
class Workspace;

struct OpSpec {
  OpKind op = OpKind::gemm_ar;
  int64_t n = 0;
  int64_t k = 0;
  int64_t max_rows = 0;  // the largest `rows` a call will pass
  DType input_dtype = DType::bf16;   // A's: bf16, or FP8 (e4m3, e5m2) with `scaling`
  DType output_dtype = DType::bf16;  // bf16; FP8 ops: bf16 or f32
  // A strategy of strategies(), or "default" (default_strategy: auto). auto chooses per row count by
  // plan.machine and plan.tuning, where left as they are by default_machine_profile() and
  // default_tuning_table() (model/shipped_defaults.hpp: the environment's, else weft's measured H200
  // profile and table); plan(rows).strategy says what it chose ("auto=decomposed").
  std::string strategy = "default";
  // Knobs of the strategies (machine profile, signal's wave groups, ...); the tile and K split are
  // the model's (model/tiling.hpp). At world 1 an op is its GEMM alone unless
  // plan.keep_strategy_at_world_one (or WEFT_KEEP_STRATEGY_AT_WORLD_ONE=1): studies of a strategy's
  // machinery on one GPU.
  PlanOptions plan;
  // Device-side waits give up after this (0: WEFT_DEVICE_WAIT_TIMEOUT_MS, else 10 s); a call that has
  // not finished after call_timeout_ms fails (0: WEFT_COLLECTIVE_TIMEOUT_S, else 120 s).
  int64_t device_wait_timeout_ms = 0;
  int64_t call_timeout_ms = 0;
  // ag_moe and moe_rs: experts, and the experts each token picks (RunArgs::choices per call).
  int experts = 0;
  int topk = 0;
  // ag_moe and moe_rs: the choices are this rank's [rows, topk] int32 on the device per call
  // (RunArgs::choices_device), not a host table: one plan serves every routing, nothing is read on the
  // host, and a call replays in a CUDA graph with new choices (docs/design/moe_device_routing.md;
  // the strategy runs as sequential).
  bool routing_on_device = false;
  // How RunArgs::b is laid out (ir/problem.hpp): nk, row-major [n, k]; kn, row-major [k, n].
  BLayout b_layout = BLayout::nk;
  // FP8 (input_dtype e4m3 or e5m2): B's dtype where it differs from A's (e5m2 x e4m3 either way
  // round), and how both are scaled: tensor, row or block (see the header).
  std::optional<DType> b_dtype = std::nullopt;
  Scaling scaling = Scaling::none;
};

struct RunArgs {
  const void* a = nullptr;  // this rank's A (see the header); 16-byte aligned, like b and c
  const void* b = nullptr;  // B [n, k], as OpSpec::b_layout lays it out
  void* c = nullptr;        // the result
  int64_t rows = 0;
  // gemm_a2a and a2a_gemm: routing[r][i] is the destination of row i of rank r, for every rank (the
  // same table on every rank); other ops: empty.
  std::vector<std::vector<int>> routing;
  // ag_gemm only, optional: where gather(A) lands, [W * rows, k] row-major contiguous (see the header).
  void* gathered_a = nullptr;
  // FP8 ops: the dequantization scales of a and b (fp32 on the device, see the header) and how many
  // floats each holds; bf16 ops: none.
  const float* scale_a = nullptr;
  const float* scale_b = nullptr;
  int64_t scale_a_count = 0;
  int64_t scale_b_count = 0;
  // ag_moe and moe_rs: choices[s][i * topk + j] is the j-th expert of token i of rank s, for every
  // rank (the same on every rank); other ops: empty. moe_rs: topk_weights [W * rows, topk] bf16.
  std::vector<std::vector<int>> choices;
  const void* topk_weights = nullptr;
  // OpSpec::routing_on_device: this rank's choices, [rows, topk] int32 (not the int64 torch.topk
  // gives: a raw pointer's dtype cannot be checked here, and int64 ids read as int32 pairs name expert
  // 0), contiguous, 16-byte aligned like every caller buffer, on the device (`choices` then empty);
  // read by the call on the stream, like a.
  const void* choices_device = nullptr;
};

// The strategy "default" stands for: auto (plan/auto.hpp), which runs sequential at world 1 and
// wherever nothing is measured or trusted to be faster.
std::string default_strategy(OpKind op, int world_size);

class Op {
 public:
  // Collective: every rank constructs its op with the same spec (checked).
  Op(Communicator& comm, OpSpec spec);
  ~Op();
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;

  const OpSpec& spec() const { return spec_; }
  // The strategy asked for ("default" resolved: auto); plan(rows).strategy says what auto chose.
  const std::string& strategy() const { return strategy_; }
  Communicator& communicator() const { return comm_; }

  // Enqueues one call on `stream` (see the header). Collective: every rank calls it with the same
  // rows (and routing).
  void run(const RunArgs& args, cudaStream_t stream);
  // `routing` below: the routed ops' destinations, the MoE ops' expert choices (RunArgs::choices);
  // empty for an op whose choices are given on the device (OpSpec::routing_on_device).
  // Plans and lowers for `rows` (and routing) now, so that a later run can be captured; collective:
  // every rank calls it alike (it may drop the least recently used plan).
  void prepare(int64_t rows, const std::vector<std::vector<int>>& routing = {});
  // Where the strategy keeps this rank's A shard in symmetric memory for `rows`, so that a producer
  // can write it there and pass it as args.a: the op then copies nothing in, and ends each call with
  // a barrier so that no rank overwrites its shard while a peer still reads it. Null where the
  // strategy does not read A from symmetric memory. Collective: every rank calls it alike (it
  // prepares `rows`, and may drop the least recently used plan).
  void* a_in_workspace(int64_t rows, const std::vector<std::vector<int>>& routing = {});
  // Rows of c for these arguments.
  int64_t output_rows(const RunArgs& args) const;

  // Waits (bounded) until `stream` is done, then raises what went wrong in the op's calls.
  void finish(cudaStream_t stream);
  // Raises a device-side error recorded by an earlier call (DeviceWaitTimeout); never waits.
  void check();
  // The plan a call with these rows (and routing) runs: collective where it is not cached (the first
  // time, or after it was dropped); a cached one is only looked up (one rank may ask alone). The
  // reference stays valid until the op drops that plan (64 (8) other plans later, at the least).
  const Plan& plan(int64_t rows, const std::vector<std::vector<int>>& routing = {});
  // Which waits of the last call are unmet (for a stuck call's report).
  std::string diagnose() const;
  // Copies of the caller's A into symmetric memory the last call made (0: none was needed, or the
  // producer wrote it in place through a_in_workspace).
  size_t copies_in_last_call() const;

 private:
  struct Lowered;
  // What a cached plan is for, compared in full (a hash of it could make two calls share a plan):
  // rows, the producer writing A in place, the gathered A handed back, the per-call table.
  struct PlanKey {
    int64_t rows = 0;
    bool in_place = false;
    bool gathered_a = false;
    std::vector<std::vector<int>> table;
  };
  // The same, over a caller's table, for lookups that copy nothing.
  struct PlanKeyView {
    int64_t rows = 0;
    bool in_place = false;
    bool gathered_a = false;
    const std::vector<std::vector<int>>* table = nullptr;
  };
  struct PlanKeyLess {
    using is_transparent = void;
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      return std::tie(a.rows, a.in_place, a.gathered_a, table_of(a)) < std::tie(b.rows, b.in_place, b.gathered_a, table_of(b));
    }
    static const std::vector<std::vector<int>>& table_of(const PlanKey& k) { return k.table; }
    static const std::vector<std::vector<int>>& table_of(const PlanKeyView& k) { return *k.table; }
  };
  using Cache = std::map<PlanKey, std::unique_ptr<Lowered>, PlanKeyLess>;

  // touch: a hit becomes the most recently used (run, prepare, a_in_workspace); plan() only looks.
  Lowered& lowered(int64_t rows, const std::vector<std::vector<int>>& routing, bool in_place, bool gathered_a, const char* caller,
                   bool touch = true);
  Problem problem_for(int64_t rows, const std::vector<std::vector<int>>& routing) const;

  Communicator& comm_;
  OpSpec spec_;
  std::string strategy_;
  std::unique_ptr<Workspace> workspace_;
  Cache cache_;
  std::deque<Cache::iterator> plan_order_;  // the cached plans, least recently used first
  Lowered* last_ = nullptr;
};

}  // namespace weft
