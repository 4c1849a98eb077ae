// Strategies: each is a plan builder, a pure function from (problem, options) to a Plan.
//
//   const Strategy& s = find_strategy("decomposed");
//   Plan plan = s.build(problem, PlanOptions{});
//
// strategies() lists every strategy weft knows, with a one-line description (the README's table and
// `weft --help` print it). Builders check the problem (check_problem) and throw std::invalid_argument
// for ops they do not implement.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <memory>
#include <optional>

#include "weft/ir/plan.hpp"
#include "weft/ir/schedule.hpp"
#include "weft/ir/topology.hpp"
#include "weft/model/machine_profile.hpp"

namespace weft {

// signal: where the steps that put each group's tiles back in place run. after_each_group: on the
// communication stream between the group's collective and the next one's; own_stream: on a third
// stream, each waiting for its group's collective, so that the collectives run back to back; at_end:
// one step after the last collective, when the GEMM has given back its SMs.
enum class SignalRestore { after_each_group, own_stream, at_end };
std::string_view to_string(SignalRestore restore);
SignalRestore parse_signal_restore(std::string_view text);  // throws std::invalid_argument naming the text

// Where an AllGather strategy's peers find this rank's A shard. pull: A is symmetric (the caller's
// shard copied in at the start of a call, or written there by its producer: Op::a_in_workspace) and
// each rank pulls its peers' shards; push: A stays where the caller has it (its own shard's GEMM
// reads it in place) and each rank pushes it into its peers' symmetric gathered buffers, raising
// their counters: no copy-in, no barrier between the copy and the first GEMM. decomposed, and fused
// where its tiles lie within shards (elsewhere fused pulls).
enum class AllGatherSource { pull, push };
std::string_view to_string(AllGatherSource source);
AllGatherSource parse_all_gather_source(std::string_view text);  // throws std::invalid_argument naming the text

// chunked (AutoOverlap): the schedule template and how its chunks move.
//   swizzle : ag_gemm: step i pulls every chunk of rank (r+i)'s shard; gemm_rs: step i pushes this
//             rank's rows of block (r+i) to their owner (Figure 4(a));
//   ring    : ag_gemm: step i pulls from rank r+1 the shard it got at step i-1 (Figure 4(c));
//   2d      : ag_gemm on a mesh of groups: first the shards of the own group, then each other
//             group's shards, relayed by that group's rank in this rank's column (Figure 4(e));
//   pull    : gemm_rs: the owner pulls each peer's rows of its block (Figure 4(b));
//   partition: gemm_ar: an NCCL all_reduce per row chunk (Figure 4(d)).
enum class ScheduleShape { swizzle, ring, mesh_2d, pull, partition };
std::string_view to_string(ScheduleShape shape);
ScheduleShape parse_schedule_shape(std::string_view text);  // throws std::invalid_argument naming the text

struct ChunkedOptions {
  std::optional<ScheduleShape> shape;  // empty: swizzle (ag_gemm, gemm_rs), partition (gemm_ar)
  int chunks = 0;                      // chunks per shard or block (gemm_ar: row chunks); 0: 2 (gemm_ar: 4)
  ChunkBackend backend = ChunkBackend::copy_engine;  // pulls and pushes: copy_engine or sm
  int comm_sms = 16;                   // SMs the GEMM leaves to the sm backend's copies
  int group_size = 0;                  // 2d: ranks per group (0: the largest divisor of W <= sqrt(W))
  std::optional<Schedule> schedule;    // a user-written schedule instead of a template
};

// tilelink (TileLink): communication on SMs, in a companion kernel beside a GEMM limited to the
// other SMs, with its own tile (rows per communication tile) and order.
struct TileLinkOptions {
  int comm_sms = 20;           // CTAs of the companion kernel; the GEMM keeps sm_count - comm_sms (ag_attention has
                               // no companion: the copy engine moves its keys and values)
  int64_t comm_tile_rows = 0;  // rows per communication tile (0: the model's pick, a multiple of the GEMM tile;
                               // ag_attention: a rank's whole block, as tilelink.txt §5.3)
  bool ring = true;            // ag_gemm, ag_moe: peers in ring order (false: all-to-all, chunk c of every peer in turn);
                               // ag_attention pulls in ring order always
};

struct TuningTable;

struct PlanOptions {
  // The GEMM tile; ag_attention's score tile (Q K^T): tile_m queries by tile_n keys (its KV tiles).
  int tile_m = 128;
  int tile_n = 128;
  // Pieces along K of each overlap GEMM tile (GemmStep::k_splits), and of the tiles of its partial
  // last wave (GemmStep::tail_splits).
  int k_splits = 1;
  int tail_splits = 1;
  // Stream-K for the partial last wave (GemmStep::stream_k).
  bool stream_k = false;
  Raster raster = Raster::along_m;
  // Strips of 8 tile columns: a wave of ~132 tiles then covers ~16 row blocks x 8 column blocks,
  // so a wave reads a few row blocks of A and of B from HBM; with strips of 1 a wave walks down
  // whole columns and re-reads all of A every wave.
  int swizzle = 8;
  // For strategies that pick by the machine (ficco's heuristic, signal's wave groups); --machine FILE.
  MachineProfile machine;
  // signal: SMs its persistent GEMM keeps (0: machine.sm_count - machine.collective_sms), the rest
  // left to NCCL for the whole call; a wave is that many tiles. With gemm_cta_per_tile the GEMM
  // launches a CTA per tile instead and NCCL's kernels take SMs as tiles finish. And the wave groups
  // (empty: the best the predictor finds, see wave_partition.hpp).
  int gemm_sms = 0;
  bool gemm_cta_per_tile = false;
  std::vector<int> wave_partition;
  // at_end measured best on 2xH200 (bench/results/README.md).
  SignalRestore signal_restore = SignalRestore::at_end;
  // fused ag_gemm: row chunks each peer's shard is pulled in, each raising the tiles that wait for
  // it (0: one per shard); Flux tunes it between one per shard and one per GEMM tile row.
  int comm_chunks = 0;
  // decomposed and fused ag_gemm: pull (the measured default) or push (see AllGatherSource).
  AllGatherSource all_gather_source = AllGatherSource::pull;
  ChunkedOptions chunked;
  TileLinkOptions tilelink;
  // Which ranks can load/store each other (Communicator::topology); empty: every pair can. make_plan
  // refuses a plan that reaches a peer it cannot (the strategy declines, naming the ranks), and auto
  // passes over such strategies.
  std::optional<Topology> topology;
  // auto: measured choices (model/tuning_table.hpp; null: the simulator alone), the gain over
  // sequential a predicted choice must show, and how far (log-space distance of m, n, k) a measured
  // shape may be from the call's to stand for it.
  std::shared_ptr<const TuningTable> tuning;
  double auto_margin = 0.03;
  double auto_table_distance = 0.35;
  // A world of one has nothing to communicate: make_plan then gives the GEMM alone, from the
  // caller's A into C, whatever the strategy (plan_gemm_alone). Set, it keeps the strategy's own plan
  // instead, to exercise that strategy's machinery (copies, signals, waits) on one GPU.
  bool keep_strategy_at_world_one = false;
  // make_plan declines (std::invalid_argument, the reason) a plan the CUDA executor cannot lower for
  // its dtypes with the inputs A and B given by the caller (gpu_lowering_gap, plan/gpu_lowering.hpp):
  // weft::Op sets it, so that an FP8 op declines at construction and auto passes over the strategy.
  bool gpu_lowerable_only = false;
  // sequential's MoE (ag_moe, moe_rs, bf16): every expert's GEMM as one overlap GEMM over a sparse
  // tile table (each expert's rows, starting on the tile grid, against its own rows of B) instead of
  // a library GEMM per expert (faster on every measured MoE row: bench/results). Where the overlap
  // GEMM cannot run it (not bf16, K % 8, N not a multiple of a tile width, one expert), the GEMM per
  // expert.
  bool moe_grouped_gemm = true;
};

struct Strategy {
  std::string name;
  std::string paper;
  std::string description;
  std::vector<OpKind> ops;  // the ops it builds plans for
  std::function<Plan(const Problem&, const PlanOptions&)> build;
  // Its GEMMs carry tile tables that only the overlap GEMM runs (waits, notifies, reordered stores),
  // so their tile must be one that kernel compiles; tools pick it by that kernel's rule.
  bool overlap_gemm = false;
  // Its GEMM shares the GPU with NCCL's kernels for the whole call, on the SMs they leave it
  // (machine.sm_count - machine.collective_sms, or PlanOptions::gemm_sms); otherwise it has all.
  bool gemm_beside_nccl = false;
  // Its GEMM shares the GPU with its companion kernel (TileLinkOptions::comm_sms SMs).
  bool gemm_beside_companion = false;
  // Its GEMM may share the GPU with SM copies (a chunk schedule's choice, per operation), and then
  // keeps its waves: the tiling rule does not give it stream-K.
  bool gemm_beside_copies = false;

  bool supports(OpKind op) const;
};

const std::vector<Strategy>& strategies();
// Throws std::invalid_argument listing the known names when `name` is unknown.
const Strategy& find_strategy(std::string_view name);

// The options `strategy` builds `problem`'s plan with: `base`, with the knobs measured fastest for
// this strategy at the tuning table's nearest shape (within auto_table_distance) where base.tuning
// has them, and the tile and K split of the overlap GEMM chosen by the model (model/tiling.hpp) for
// the SMs the GEMM keeps, where the strategy runs on it (Strategy::overlap_gemm); other strategies
// keep `base`'s tile (their plain tables run on cuBLASLt, which picks its own).
PlanOptions resolve_options(const Strategy& strategy, const Problem& problem, const PlanOptions& base);
// The one way from a problem to a runnable plan: strategy.build(problem, resolve_options(...)), and
// where base.topology is given, require_reachable (std::invalid_argument naming the ranks). At world 1
// (not the MoE ops) the GEMM alone (ag_attention: the attention alone), labelled with the strategy's
// name, unless base.keep_strategy_at_world_one.
Plan make_plan(const Strategy& strategy, const Problem& problem, const PlanOptions& base = {});

// make_plan's decline of a plan that cuts K inside a block of block-scaled FP8 (ficco's 2D K slices):
// throws std::invalid_argument ("strategy 'S' declines block-scaled FP8 here: ...") for callers that
// build plans themselves.
void require_whole_scale_blocks(const std::string& strategy, const Plan& plan);
// make_plan's decline of the MoE choices given on the device (Problem::routing_on_device) by a
// strategy that has no plan for them (all but sequential and auto, so far).
void require_takes_device_routing(const std::string& strategy, const Problem& problem);
// Why `strategy`'s plan of this MoE problem with the choices given on the device (routing_on_device)
// cannot be made: the strategy declines them (require_takes_device_routing), or its grouped GEMM
// does not take the shape (bf16, N a multiple of 96, 128, 192 or 256, K of 8); empty where it can.
// What a caller with the choices on the GPU asks before choosing that path (weft.torch's MoE layer).
std::string device_routing_gap(const std::string& strategy, const Problem& problem, const PlanOptions& options = {});

// Whether make_plan runs `problem` as its GEMM alone: a world of one, an op that is one GEMM there.
bool runs_as_gemm_alone(const Problem& problem);
// One step: C = A B^T from the caller's A into the caller's C, nothing else (a world of one).
Plan plan_gemm_alone(const Problem& problem, const PlanOptions& options, const std::string& strategy);
// ag_attention's counterpart at world 1, which make_plan gives whatever the strategy (unless
// keep_strategy_at_world_one): one attention step from the caller's Q, K and V into O.
Plan plan_attention_alone(const Problem& problem, const PlanOptions& options, const std::string& strategy);

// Library GEMM, then the NCCL collective: the baseline every figure is measured against.
// ag_attention: all_gather of K and of V, then the attention (plan/strategies/attention.cpp).
Plan plan_sequential(const Problem& problem, const PlanOptions& options);
// AsyncTP-style: per-shard GEMMs on one stream, per-shard transfers on another, ordered by signals.
// ag_attention: RingAttention, an attention step per peer's pulled keys, merged by log-sum-exp.
Plan plan_decomposed(const Problem& problem, const PlanOptions& options);

// FiCCO's four schedules (ficco.txt Figure 11(b)) for ag_gemm; plan/strategies/ficco.cpp says what each does.
enum class FiccoSchedule { uniform_fused_1d, hetero_fused_1d, hetero_unfused_1d, uniform_fused_2d };
std::string_view to_string(FiccoSchedule schedule);
Plan plan_ficco(const Problem& problem, const PlanOptions& options, FiccoSchedule schedule);

// FlashOverlap (flashoverlap.txt): one GEMM whose tiles count, per group of waves, into a signal and
// land in execution order, so that each group is one contiguous block; a second stream waits on each
// group's signal and hands the block to a plain NCCL call, then moves its tiles back into place.
// gemm_ar, gemm_rs (plan/strategies/signal.cpp) and gemm_a2a (per-destination pools, plan/strategies/signal_a2a.cpp).
Plan plan_signal(const Problem& problem, const PlanOptions& options);

// Flux (flux.txt): one overlap GEMM with the communication fused in. ag_gemm: copy-engine pulls in
// ring order raise a counter that each tile waits for before loading its rows; gemm_rs: each tile
// is stored straight into its rank's receive slot on that rank, which sums its slots at the end.
// plan/strategies/fused.cpp says the details.
Plan plan_fused(const Problem& problem, const PlanOptions& options);

// AutoOverlap (autooverlap.txt): a chunk schedule (ir/schedule.hpp), from a template or the user,
// lowered to one overlap GEMM whose tiles follow chunk arrival, and the chunks' transfers on their
// backend's streams (plan/chunked.hpp says how).
Plan plan_chunked(const Problem& problem, const PlanOptions& options);

// TileLink (tilelink.txt): the GEMM on sm_count - comm_sms SMs and the communication in a companion
// kernel on the others, tile by tile through device-side notify/wait. ag_gemm: the companion pulls
// peers' A tiles (ring or all-to-all order), GEMM tiles wait per communication tile; gemm_rs: GEMM
// tiles are stored locally and notify their rows' owner, whose companion reduces each communication
// tile from every rank's partials (NVLink loads) as it completes. plan/strategies/tilelink.cpp.
// ag_attention (§5.3): one attention step whose KV tiles wait for the copy-engine pulls of their rows.
Plan plan_tilelink(const Problem& problem, const PlanOptions& options);

// Flux and TileLink across nodes (two_level.cpp): load/store within groups of ranks that reach each
// other (options.topology), NCCL rounds of pairwise exchanges between groups; with no load/store at
// all, a decomposed plan whose transfers are NCCL's. ag_gemm and gemm_rs.
Plan plan_two_level(const Problem& problem, const PlanOptions& options);

// auto: the strategy (and knobs) for this problem, from the tuning table's nearest measured shape,
// else from the simulator's predictions; sequential wherever what would be chosen was measured or is
// predicted no faster than sequential (plan/auto.hpp).
Plan plan_auto(const Problem& problem, const PlanOptions& options);

// How plan_signal cuts the GEMM: tiles, waves, groups, and the predicted time of its partition.
struct SignalLayout {
  int gemm_sms = 0;
  int64_t tiles = 0;
  int waves = 0;
  std::vector<int> partition;     // waves per group
  double predicted_seconds = 0;   // Algorithm 1 with the machine profile, plus prologue and restore
  double predicted_gemm_seconds = 0;
  double prologue_seconds = 0;    // steps before the GEMM (gemm_a2a: tokens grouped by destination)
  double restore_seconds = 0;     // the restore steps after the last collective (memory bound)
  CollectiveKind collective = CollectiveKind::all_reduce;  // what each group's call is
};
// With measured_gemm_seconds > 0 (the signal GEMM timed alone, as the paper's offline stage does)
// the model takes that instead of estimating the GEMM from the machine's peak rate. The partition is
// options.wave_partition, or the searched one when that is empty.
SignalLayout signal_layout(const Problem& problem, const PlanOptions& options, double measured_gemm_seconds = 0);

}  // namespace weft
