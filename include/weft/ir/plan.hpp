// The plan IR: plain data that says, for every rank, what runs where and when.
//
// Every strategy is a plan builder (plan/strategies.hpp); three executors consume plans: the CUDA
// executor, the reference executor on the CPU (reference_executor.hpp) and the simulator. A plan
// holds one RankPlan per rank. A RankPlan declares buffers and signals and lists steps. Each step
// runs on one of the rank's streams; steps on one stream run in the order they appear in `steps`.
// Order across streams and ranks comes only from signals (a counter per SignalRef: notify adds,
// wait blocks until the counter reaches a value; acquire/release) and from collectives (every
// rank joins collective #id; it completes on all ranks together). A GEMM step carries a tile table:
// its tiles run in table order, each may wait before loading and notify after storing. An attention
// step carries its KV tiles, each of which may wait before its keys and values are loaded.
//
// Conventions the validator (plan/validation.hpp) enforces: a rank only waits on its own signals;
// memory of another rank is touched only through symmetric buffers; every signal is raised exactly as
// often as its highest wait expects, so the next call can start from a new epoch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "weft/ir/problem.hpp"
#include "weft/ir/tile_grid.hpp"

namespace weft {

using BufferId = int32_t;
using SignalId = int32_t;

// input: filled by the caller before the plan starts; output: holds the op's result;
// scratch: the plan's own. A symmetric buffer exists with the same shape on every rank and peers may
// read or write it (load/store, copy engine).
enum class BufferRole { input, output, scratch };

// How a buffer's elements lie in memory. row_major: element (i, j) at i * cols + j (leading
// dimension cols), every buffer but one. column_major: at j * rows + i (leading dimension rows): the
// op's B in layout kn (Problem::b_layout), which the plan addresses as the [N, K] matrix it is while
// its memory is the caller's row-major [K, N]. Regions of such a buffer are boxes of that [N, K]
// matrix like any other. Only a GEMM's b operand may name a column-major buffer (the structure check
// enforces it): the GEMMs read it through their transpose flag (cuBLASLt) or an N-major B operand
// (the overlap GEMM); copies, collectives and the other kernels move row-major boxes only.
enum class MemoryOrder { row_major, column_major };
std::string_view to_string(MemoryOrder order);

struct BufferDecl {
  std::string name;
  BufferRole role = BufferRole::scratch;
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::bf16;
  bool symmetric = false;
  MemoryOrder order = MemoryOrder::row_major;

  bool operator==(const BufferDecl&) const = default;
};

// A box of one buffer on one rank.
struct Region {
  int rank = 0;
  BufferId buffer = 0;
  Rect box;

  bool operator==(const Region&) const = default;
};

struct SignalRef {
  int rank = 0;
  SignalId id = 0;

  bool operator==(const SignalRef&) const = default;
};

// Block until signal >= value (acquire: the notifier's writes are visible afterwards).
struct Wait {
  SignalRef signal;
  uint64_t value = 1;

  bool operator==(const Wait&) const = default;
};

// Add `increment` to the signal once this step's writes are visible to the signal's owner (release).
struct Notify {
  SignalRef signal;
  uint64_t increment = 1;

  bool operator==(const Notify&) const = default;
};

// Who performs a step. The CUDA executor lowers each to its mechanism; the simulator costs each.
enum class Engine { sm, copy_engine, nccl, gemm_epilogue };
std::string_view to_string(Engine engine);

// One entry of a GEMM's tile table: compute `tile` (a box of the GEMM's [M, N] output space) and
// store it with its top-left corner at `store` (a box the tile's size: local C, a remapped position,
// or a peer's symmetric buffer).
//
// `addends` (boxes the tile's size): added to the tile, as rounded to the output type, before it is
// stored, in fp32 — the reduction of partial sums that peers stored for this tile, done in the
// GEMM's epilogue as they arrive (fused gemm_rs) instead of in a pass after the last. A tile with
// addends waits before its epilogue, not before its loads: its `wait` orders the addends only, so
// its A and B rows must not depend on it.
struct GemmTile {
  Rect tile;
  std::optional<Wait> wait;
  Region store;
  std::optional<Notify> notify;
  std::vector<Region> addends;
  // Where the tile's A rows are read ([tile.rows x K]) when not at rows tile.row.. of the step's
  // `a`: rows that are elsewhere, read in place (fused ag_gemm's own shard in the op's input).
  std::optional<Region> a_rows;

  bool operator==(const GemmTile&) const = default;
};

// out[i, j] = sum_k a[i, k] * b[j, k] over the boxes `a` ([M, K]) and `b` ([N, K]); with
// `accumulate` the tiles add to what their store targets hold (K split over several GEMMs).
// The most buffers (rank, buffer) one GEMM's tiles store into or read addends from: what the
// overlap GEMM holds (kMaxStoreTargets); the structure check enforces it.
constexpr int kMaxGemmTileTargets = 16;

// A grouped GEMM over experts whose rows a RouteStep placed (its align a multiple of the step's
// tile_m): every tile_m-row tile of `a` whose first row lies in [expert_first[e], expert_first[e + 1])
// is expert e's, its rows up to expert_first[e + 1] multiplied by rows [e * n, (e + 1) * n) of `b`
// (n = b's rows / experts) into the same rows of `out` (columns [0, n)). The route starts each expert
// with rows on the grid, so its rows are all computed; other rows of `out` may be left or hold
// padding's products, and are never read. expert_first is an i32 [experts + 1, 1] region the route wrote.
struct RoutedGemm {
  Region expert_first;
  Region out;
  int experts = 1;

  bool operator==(const RoutedGemm&) const = default;
};

struct GemmStep {
  Region a;
  Region b;
  int tile_m = 128;
  int tile_n = 128;
  std::vector<GemmTile> tiles;
  bool accumulate = false;
  // SMs the GEMM may occupy (0: all). FlashOverlap leaves the rest to the NCCL kernels that run
  // while it computes: a persistent GEMM on every SM would hold them back until it ends.
  int sm_limit = 0;
  // false: one CTA per tile instead of a persistent CTA per SM, so that an SM whose tile is done can
  // go to another kernel (NCCL's, on a higher-priority stream) before the GEMM ends. Tiles still
  // start in table order.
  bool persistent = true;
  // Each tile computed as this many pieces along K whose partial sums add up in a fixed order
  // (the overlap GEMM's split K, for tables too small to fill the GPU); the model decides it
  // (model/tiling.hpp). Only for persistent GEMMs on every SM: a wave-grouped table must keep its
  // waves. Invisible to everything else: a tile still waits, stores and notifies once.
  int k_splits = 1;
  // With k_splits 1: the table's entries after its last whole wave of CTAs (one CTA per SM) are
  // each split this many ways along K, so that a partial last wave (tiles % SMs well under the SM
  // count) fills the GPU with shorter entries instead of leaving SMs idle. Same conditions and
  // invisibility as k_splits; the model decides it.
  int tail_splits = 1;
  // With k_splits 1 and tail_splits 1: stream-K for a partial last wave (kernels/overlap_gemm.hpp's
  // stream_k_tail): the entries after the whole waves, with the last whole wave, cut along K so that
  // every CTA runs the same share of their K-tiles. Same conditions and invisibility as k_splits;
  // asked for by PlanOptions::stream_k (the model's rule does not take it yet).
  bool stream_k = false;
  // The overlap GEMM computes the exchanged product C^T = B A^T and stores each tile transposed:
  // the plan's tile_m x tile_n tiles of C are the kernel's tile_n x tile_m (compiled: C tiles of
  // 96, 112, 128 or 192 rows by 128 columns), so that small m lies in one tile column and B is read once
  // (OverlapGemmLaunch::store_transposed). Invisible to everything but the overlap GEMM's lowering;
  // the tiling rule does not choose it yet (weft bench gemm times it).
  bool exchanged = false;
  // cluster_m x cluster_n C tiles (2x1, 1x2; 2x2, 2x4, 4x2 on 128x128; exchanged, 2x1, 2x2, 2x4 on
  // 112x128): the overlap GEMM runs in clusters of CTAs that load each B tile shared down a cluster
  // column and each A tile shared along a cluster row once from L2 by TMA multicast
  // (OverlapGemmLaunch::cluster_m / cluster_n, the kernel's: exchanged, these swapped). The tiles must
  // come in the clusters' groups (plan/transforms.hpp's order_tiles_in_clusters orders them so),
  // without waits, tail splits or stream-K (k_splits split each group in step).
  // Invisible to everything but the overlap GEMM's lowering; the tiling rule takes it for memory-bound
  // GEMMs of two 128-row tile rows where its caller allows (model/tiling.hpp).
  int cluster_m = 1, cluster_n = 1;
  // Set: the MoE grouped GEMM whose rows per expert a RouteStep computed on the device, so that its
  // tiles are not listed (`tiles` empty) but made per call from expert_first (below).
  std::optional<RoutedGemm> routed;

  bool operator==(const GemmStep&) const = default;
};

// dst = src (same shape). A copy whose src or dst is on another rank is a pull or a push. The step's
// engine says who moves it: the copy engine, or SMs (a copy kernel on at most `sms` CTAs, 0: as
// many as it fills; a peer's memory through NVLink loads and stores).
struct CopyStep {
  Region src;
  Region dst;
  int sms = 0;

  bool operator==(const CopyStep&) const = default;
};

// dst = sum of srcs (+ dst itself when accumulate). A source on another rank is read through
// NVLink by the reducing SMs (TileLink's pull-mode reduce-scatter); `sms` bounds their CTAs (0: as
// many as the reduction fills).
struct ReduceStep {
  std::vector<Region> srcs;
  Region dst;
  bool accumulate = false;
  int sms = 0;

  bool operator==(const ReduceStep&) const = default;
};

// dst row i = src row source_rows[i] (rows relative to the boxes).
struct PermuteRowsStep {
  Region src;
  Region dst;
  std::vector<int64_t> source_rows;
  // Set: the source rows are read per call from this i32 [dst rows, 1] region (a RouteStep's
  // table), each in [0, src rows), and source_rows is empty.
  std::optional<Region> index;

  bool operator==(const PermuteRowsStep&) const = default;
};

// dst row i = sum over j < topk of weights[i, j] * src row source_rows[i * topk + j] (rows relative
// to the boxes; weights is a [dst rows, topk] box): MoE's top-k reduction of the rows its experts
// computed for each token (TileLink's scatter + top-k reduce).
struct CombineRowsStep {
  Region src;
  Region weights;
  Region dst;
  int topk = 1;
  std::vector<int64_t> source_rows;
  // Set: the source rows are read per call from this i32 [dst rows * topk, 1] region (a RouteStep's
  // table), each in [0, src rows), and source_rows is empty.
  std::optional<Region> index;

  bool operator==(const CombineRowsStep&) const = default;
};

// The MoE routing tables from the choices given on the device (plan/moe_route.hpp's
// route_moe_rows is its meaning): `choices` is every rank's [M, topk] stacked, [W*M, topk] i32. It
// writes, all i32 [rows, 1]: scratch_source [capacity] (for each row of the expert-major scratch,
// its token, i.e. its row of the gathered tokens, when source is token, or its row of the op layout
// when layout_row; 0 on padding rows, so that a permute by it reads a row that exists),
// expert_first [experts + 1], and where set layout_scratch [W*M*topk] (each op-layout row's scratch
// row) and pair_scratch [W*M*topk] (each (token, choice)'s scratch row, at token * topk + choice).
// Each expert's first scratch row on a multiple of `align` where it has rows.
enum class RouteSource { token, layout_row };
struct RouteStep {
  Region choices;
  int experts = 1;
  int topk = 1;
  int64_t align = 1;
  RouteSource source = RouteSource::token;
  Region scratch_source;
  Region expert_first;
  std::optional<Region> layout_scratch;
  std::optional<Region> pair_scratch;

  bool operator==(const RouteStep&) const = default;
};

// dst box `to` = src box `from` (same shape); both relative to the step's src / dst boxes.
struct BoxMove {
  Rect from;
  Rect to;

  bool operator==(const BoxMove&) const = default;
};

// Many boxes moved between two buffers of one rank by one kernel: FlashOverlap's reorders, which put
// tiles stored in execution order (so that each wave group is one contiguous block for NCCL) back
// in matrix order.
struct MoveBoxesStep {
  Region src;
  Region dst;
  std::vector<BoxMove> moves;

  bool operator==(const MoveBoxesStep&) const = default;
};

enum class CollectiveKind { all_gather, reduce_scatter, all_reduce, all_to_all };
std::string_view to_string(CollectiveKind kind);

// One rank's part of a collective; every rank of the plan joins collective `id` with the same kind.
//   all_gather    : dst (W * src.rows rows) holds every rank's src, rank order.
//   reduce_scatter: src has W * dst.rows rows; dst = sum over ranks of src block `rank`.
//   all_reduce    : dst = sum over ranks of src (src == dst is in place).
//   all_to_all    : src holds send_rows[d] rows for each rank d in rank order; dst receives
//                   recv_rows[s] rows from each rank s in rank order.
struct CollectiveStep {
  CollectiveKind kind = CollectiveKind::all_reduce;
  int id = 0;
  Region src;
  Region dst;
  std::vector<int64_t> send_rows;
  std::vector<int64_t> recv_rows;

  bool operator==(const CollectiveStep&) const = default;
};

// Rows [row, row + rows) of an attention step's k and v boxes, read as one unit: the step loads them
// only once `wait` is met (acquire), as a GEMM tile loads its rows after its wait. The kernel walks a
// KV tile in pieces of its own KV tile height where it is taller.
struct KvTile {
  int64_t row = 0;
  int64_t rows = 0;
  std::optional<Wait> wait;

  bool operator==(const KvTile&) const = default;
};

// Self-attention of the queries in `q` over the keys and values of the KV tiles, FlashAttention's
// online softmax (ag_attention's layout, ir/problem.hpp): q and o are [T, C * head_dim] boxes of C
// query heads (a batch's heads side by side), k and v [S, G * head_dim] boxes of G key/value heads,
// C a multiple of G; query head c reads key/value head c / (C / G). For query row i and head c:
//   s_j = q[i, c] . k[j, c / (C/G)] / sqrt(head_dim) over the keys j of `kv_tiles` that are visible:
//         all of them, or with `causal` those with kv_position + j <= q_position + i (global token
//         positions of the rows, so that a block of a sequence masks as the whole sequence would);
//   o[i, c] = sum_j softmax(s)_j v[j, c / (C/G)],  lse[i, c] = log sum_j exp(s_j)  (natural log);
//   a row that sees no key gets o = 0 and lse = -infinity (it adds nothing to a merge).
// lse is a [T, C] box of an f32 buffer: the log-sum-exp each partial result carries, so that partial
// results over disjoint key sets combine exactly (RingAttention's combine). With `merge`, the step's
// result is combined into what o and lse hold: lse' = log(e^lse + e^lse_step), o' = e^(lse - lse') o +
// e^(lse_step - lse') o_step. Keys of the boxes in no KV tile are not read: a key may be left out
// only where it is masked for every query of the step (the structure check enforces it), which is
// how causal plans skip the blocks a query never needs.
struct AttentionStep {
  Region q;
  Region k;
  Region v;
  Region o;
  Region lse;
  int head_dim = 64;
  // Query rows per CTA tile: the kernel's, which the simulator costs (a CTA per query tile and head,
  // each skipping the KV tiles its causal mask hides).
  int tile_q = 128;
  int64_t q_position = 0;   // global token position of q's first row
  int64_t kv_position = 0;  // global token position of k's (and v's) first row
  bool causal = false;
  bool merge = false;
  // In the order every query tile reads them (the online softmax's order; the own keys first, so that
  // the first tiles need no transfer).
  std::vector<KvTile> kv_tiles;
  // SMs the kernel may occupy (0: all), as GemmStep::sm_limit.
  int sm_limit = 0;

  bool operator==(const AttentionStep&) const = default;
};

// Does nothing but wait: makes a rank's end depend on signals raised by peers.
struct JoinStep {
  bool operator==(const JoinStep&) const = default;
};

using StepBody = std::variant<GemmStep, CopyStep, ReduceStep, PermuteRowsStep, CombineRowsStep, MoveBoxesStep, CollectiveStep, JoinStep,
                              AttentionStep, RouteStep>;

struct Step {
  std::string label;  // names the step in messages and traces
  int stream = 0;
  Engine engine = Engine::sm;
  std::vector<Wait> waits;       // before the step starts
  std::vector<Notify> notifies;  // after all of its writes are visible
  StepBody body;
  // Steps with the same companion id (>= 0), consecutive on one stream, copies, reductions and
  // joins (a join with notifies relays signals) on SMs, run as one resident launch of the companion kernel (TileLink): its waits spin on the
  // device and its notifies are made by the kernel, so they cost no launch and no stream operation.
  // The semantics are the stream's: each step still starts after the one before it has finished.
  // The kernel holds max(sms) CTAs of the group's steps while it runs, waits included.
  int companion = -1;

  bool operator==(const Step&) const = default;
};

struct RankPlan {
  int rank = 0;
  int stream_count = 1;
  std::vector<BufferDecl> buffers;
  std::vector<std::string> signals;  // names; the index is the SignalId
  std::vector<Step> steps;
  Region output;  // where this rank's result lies when the plan ends
  // ag_gemm: where every rank's A shard lies on this rank once the plan ends, as boxes of whole rows
  // ([rows, K]) whose rows, stacked in order, are the gathered A [W*M, K]: what a caller may take
  // back for the weight gradient instead of gathering again (AsyncTP's return_A; ExecutorOptions::
  // gathered_a_out). Empty for the other ops, and where a plan keeps no such copy.
  std::vector<Region> gathered_a;

  bool operator==(const RankPlan&) const = default;
};

struct Plan {
  std::string strategy;
  Problem problem;
  std::vector<RankPlan> ranks;

  int world_size() const { return static_cast<int>(ranks.size()); }
  bool operator==(const Plan&) const = default;
};

std::string_view to_string(BufferRole role);
std::string to_string(const Plan& plan);
std::string describe_step(const Plan& plan, int rank, const Step& step);
// "C@1[0:64,0:128]": buffer name, owning rank, rows and columns.
std::string describe_region(const Plan& plan, const Region& region);
// "signal 'shard1_arrived' (#1 on rank 0)".
std::string describe_signal(const Plan& plan, const SignalRef& ref);

// Whether any rank's step reads or writes another rank's memory or raises another rank's signal.
// Executors barrier between calls (and before freeing) exactly when this holds; it is a property of
// the whole plan, so every rank agrees on it.
bool reaches_across_ranks(const Plan& plan);
// Every region a step's body names, read or written (a GEMM's tiles' stores, addends and A rows, a
// routed GEMM's expert_first and out, index regions, a route's tables); a join names none.
std::vector<Region> regions_of(const StepBody& body);

// Whether a GEMM's tile table is what one library GEMM computes: tiles covering the whole a x b
// product, every tile at its own place in one output box that starts inside its buffer, no waits,
// no notifies, no addends, A rows where the step's `a` has them. Executors run such tables on a
// library GEMM, others on the overlap GEMM.
bool is_plain_tile_table(const GemmStep& gemm);

// The scales of an FP8 buffer (ir/scaling.hpp), from the problem: the input "B" holds B's rows, every
// other FP8 buffer rows of A (the op's A, or A's rows gathered, sorted or staged). Empty for the
// other dtypes.
std::optional<ScaleGrid> scale_grid(const Problem& problem, const BufferDecl& decl);
// Where the executors keep a buffer's scales, an fp32 array beside it: "A" -> "A_scale" (the name of
// the inputs' scales in random_inputs and of the caller's scale buffers).
std::string scale_name(std::string_view buffer);

// Why a GEMM cannot read `operand` (its a, b or a tile's A rows) where it is block-scaled FP8 and its
// box starts inside a scale block: K at a column that is not a multiple of 128 (the GEMM scales whole
// 128-column blocks), or B at a row inside a 128-row block. Empty where it can.
std::string scale_block_misalignment(const Plan& plan, const Region& operand);
// The first GEMM step of the plan that reads an operand so ("rank R step 'LABEL': ..."); empty: none.
std::string first_scale_block_misalignment(const Plan& plan);

// Looks a buffer up by name on a rank; throws std::out_of_range naming it when absent.
BufferId find_buffer(const RankPlan& rank_plan, std::string_view name);

}  // namespace weft
