// The operator a plan computes: which collective follows or precedes the GEMM, the per-rank
// shapes, dtypes, world size and (for all-to-all) the routing of rows to ranks.
//
// A is row-major [rows, K] and C row-major [rows, N]. B is an [N, K] matrix (C = A * B^T), like a
// linear layer's weight, whose memory is laid out as b_layout says (BLayout, below): row-major [N, K]
// (nk, the default) or row-major [K, N] (kn). What "M" means depends on the op; describe_output()
// and the builders agree:
//   ag_gemm : each rank holds an A shard of M rows; C = gather(A) * B^T is [W*M, N] on every rank.
//   gemm_rs : each rank holds A [M, K] (its K shard) and B [N, K]; C = rows [r*M/W, (r+1)*M/W)
//             of sum_r A_r * B_r^T. M must be a multiple of W.
//   gemm_ar : C = sum_r A_r * B_r^T, [M, N] on every rank.
//   gemm_a2a: each rank computes P_r = A_r * B_r^T [M, N]; row i of P_r goes to rank routing[r][i].
//             Rank d's C holds, in order of source rank then row index, every row routed to d.
//   a2a_gemm: MoE token dispatch then expert GEMM (FiCCO's A2A+GEMM): row i of rank r's tokens
//             A_r [M, K] goes to rank routing[r][i]; rank d gathers X_d, every row routed to d in
//             order of source rank then row index, and computes C_d = X_d * B_d^T.
//   ag_moe  : tensor-parallel MoE, first half (TileLink Figure 5): rank s holds M tokens A_s [M, K]
//             and a shard [N, K] of every expert's weight, stacked in B [E*N, K]; token i of rank s
//             picks the experts choices[s][i*topk + j], j < topk. C [W*M*topk, N], the same rows on
//             every rank (with its own B): one row per (token, choice), grouped by source rank, then
//             expert, then token, then choice (moe_rows() says where each lands); row = A_s[i] * B_e^T.
//   moe_rs  : the second half: A [W*M*topk, K] in ag_moe's row layout (K: this rank's shard of the
//             experts' inner dimension), B [E*N, K], topk_weights [W*M, topk]. Z[t] = sum_j
//             w[t][j] * (A[row(t, j)] * B_e^T) for every token t (the top-k reduction of the
//             scattered rows); C_r = rows [r*M, (r+1)*M) of the sum over ranks of Z, [M, N].
//
// ag_attention is sequence-parallel self-attention (TileLink §5.3, RingAttention), not a GEMM: A, B
// and C do not apply, n and k are 0, and batch, heads, kv_heads, head_dim and causal say its shape.
// A sequence of W*M tokens is sharded by sequence: rank r holds tokens [r*M, (r+1)*M). Layouts are
// token-major, sequence first (Megatron's [s, b, h*d]), so that a rank's shard is a row block and
// the row boxes, copies and NCCL's all_gather (which stacks rows) move it as they move A:
//   Q, O [M, batch*heads*head_dim]; K, V [M, batch*kv_heads*head_dim]; column (b*H + h)*D + e is
//   element e of head h (of H) of batch entry b. Rank r's O = softmax(Q K^T / sqrt(D)) V for every
//   (b, h), over the keys and values of all W*M tokens gathered, of the same b and of kv head
//   h / (heads / kv_heads) (GQA; kv_heads == heads is plain multi-head attention). causal: the query
//   at global position r*M + i attends only the keys at global positions <= r*M + i.
//   Since b*H + h over (heads / kv_heads) is b*kv_heads + h / (heads / kv_heads), a step needs no
//   batch: query head block c (of D columns) reads key/value head block c / (heads / kv_heads).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weft/ir/scaling.hpp"

namespace weft {

// e4m3 and e5m2 are FP8 (OCP's E4M3FN: max 448, no infinity; E5M2: max 57344): operands only, each
// with fp32 scales (Scaling, ir/scaling.hpp); products accumulate in fp32 and results are bf16 or f32.
// i32 holds indices only (the MoE choices given on the device and the tables a RouteStep computes
// from them): no problem's operand or result, never multiplied or reduced.
enum class DType { bf16, f16, f32, e4m3, e5m2, i32 };
bool is_fp8(DType dtype);
// How B's memory is laid out. Either way B is the [N, K] matrix of C = A * B^T ([E*N, K] for the MoE
// ops), element (n, k) at:
//   nk: n * K + k  row-major [N, K]: a linear layer's weight W [out, in] as nn.Linear holds it, so
//                  that the op computes x * W^T (the layer's forward);
//   kn: k * N + n  row-major [K, N], i.e. B^T stored row-major: the right operand X of C = A * X as
//                  torch.mm takes it (B = X^T). From PyTorch it is the view X.t() (shape [N, K],
//                  strides (1, N)); for the weight W [out, in] of a linear layer, W.t() is B = W^T
//                  with N = in and K = out, so the op computes dy * W (the input gradient of
//                  y = x W^T) on W's own memory, with no transposed copy.
enum class BLayout { nk, kn };
enum class OpKind { ag_gemm, gemm_rs, gemm_ar, gemm_a2a, a2a_gemm, ag_moe, moe_rs, ag_attention };
// The GEMM-family ops, in declaration order: defaults of --op and the sweeps of the GPU tests and
// tools, which run every op they list on GPUs. ag_attention is not among them: its problem has a
// shape of its own (heads, head dimension, causal) and its GPU path is weft's attention kernel
// (attention_ops()).
const std::vector<OpKind>& all_ops();
// The attention ops (ag_attention): planned, proved on the CPU and simulated like the others.
const std::vector<OpKind>& attention_ops();
bool is_attention(OpKind op);
// The ops whose rows travel by a routing table (all-to-all): gemm_a2a and a2a_gemm.
bool routes_rows(OpKind op);
// The MoE ops: ag_moe and moe_rs (experts, topk and choices).
bool is_moe(OpKind op);

std::string_view to_string(DType dtype);
std::string_view to_string(OpKind op);
std::string_view to_string(BLayout layout);
BLayout parse_b_layout(std::string_view text);  // throws std::invalid_argument naming the text
DType parse_dtype(std::string_view text);   // throws std::invalid_argument naming the text
std::string_view to_string(Scaling scaling);
Scaling parse_scaling(std::string_view text);  // throws std::invalid_argument naming the text
OpKind parse_op(std::string_view text);     // throws std::invalid_argument naming the text
int dtype_bytes(DType dtype);  // 1 for FP8 (its scales are counted apart: scale_bytes, ir/scaling.hpp)

// The largest values weft's files (suites, schedules, tuning tables, recorded results) may give, so
// that a reader range-checks each into its field: far beyond any real layer (2^32 rows), world
// sizes and experts as the command line bounds them.
constexpr int64_t kMaxFileDimension = int64_t{1} << 32;
constexpr int kMaxFileWorld = 1024;
constexpr int kMaxFileExperts = 1024;
// ag_attention's heads, head dimension and batch as the command line bounds them (--heads, --kv-heads,
// --head-dim, --batch).
constexpr int kMaxFileHeads = 1024;
constexpr int kMaxFileHeadDim = 1024;
constexpr int kMaxFileBatch = 1 << 24;

struct Problem {
  OpKind op = OpKind::gemm_ar;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int world_size = 1;
  DType input_dtype = DType::bf16;   // A's (and B's, unless b_dtype says otherwise)
  DType output_dtype = DType::bf16;
  // gemm_a2a and a2a_gemm only: routing[r][i] is the destination rank of row i of rank r.
  std::vector<std::vector<int>> routing;
  // ag_moe and moe_rs only: experts, choices per token, and choices[s][i * topk + j], the expert of
  // rank s's token i's j-th choice (distinct within a token).
  int experts = 0;
  int topk = 0;
  std::vector<std::vector<int>> choices = {};
  // ag_moe and moe_rs: the choices are given per call on the device (each rank's [M, topk] i32 input
  // "choices", the router's top-k ids), not in `choices` (then empty): the plan computes the rows'
  // places from them with a RouteStep, so that it serves every routing (docs/design/
  // moe_device_routing.md). bf16 only so far.
  bool routing_on_device = false;
  // ag_attention only (its layout is above; m is tokens per rank): batch entries, query heads,
  // key/value heads (heads a multiple of kv_heads), head dimension, and causal masking by global
  // token position.
  int batch = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  bool causal = false;
  // The GEMM ops: how B's memory is laid out (above). ag_attention has no B: nk.
  BLayout b_layout = BLayout::nk;
  // B's dtype where it differs from A's: FP8 backward GEMMs multiply e5m2 gradients by e4m3 weights.
  // Empty: input_dtype. Only FP8 with FP8.
  std::optional<DType> b_dtype = std::nullopt;
  // How FP8 operands are scaled (ir/scaling.hpp); none for the other dtypes.
  Scaling scaling = Scaling::none;

  bool operator==(const Problem&) const = default;
};

// Throws std::invalid_argument with the offending field and value when the problem is not one
// the ops can compute (non-positive sizes, M not divisible by W for gemm_rs, bad routing, ...).
void check_problem(const Problem& problem);

// B's dtype (b_dtype, else input_dtype).
DType operand_b_dtype(const Problem& problem);
// The MoE router's top-k weights (moe_rs): the input dtype, or with FP8 operands the output dtype
// (weights are not quantized).
DType topk_weights_dtype(const Problem& problem);
// How the scales of an FP8 operand cover it (ir/scaling.hpp): of A's rows (every buffer holding rows of
// A: gathered, sorted, staged) or of B's; empty where the problem is not FP8. B's 128x128 blocks
// restart at each expert's slab (MoE: B is [experts * n, K]).
std::optional<ScaleGrid> operand_scale_grid(const Problem& problem, Operand operand);

// Rows of A and of B on each rank, rows of each rank's result.
int64_t a_rows(const Problem& problem);
int64_t b_rows(const Problem& problem);
int64_t output_rows(const Problem& problem, int rank);
// ag_attention's column counts: of Q and O (batch*heads*head_dim), of K and V
// (batch*kv_heads*head_dim), and of the log-sum-exp a partial result carries (batch*heads, one per
// query head).
int64_t query_cols(const Problem& problem);
int64_t key_cols(const Problem& problem);
int64_t lse_cols(const Problem& problem);
// For the routed ops: rows_routed[s][d] = how many rows rank s sends to rank d.
std::vector<std::vector<int64_t>> rows_routed(const Problem& problem);

std::string describe(const Problem& problem);

// A routing table with every destination drawn uniformly at random (deterministic in seed).
std::vector<std::vector<int>> random_routing(int world_size, int64_t rows, uint64_t seed);
// MoE choices: `topk` distinct experts per token, drawn uniformly (deterministic in seed). With
// skew > 0, expert 0 is picked first with probability skew (an overfull expert) and the upper
// half of the experts never (empty ones).
std::vector<std::vector<int>> random_choices(int world_size, int64_t tokens, int experts, int topk, uint64_t seed, double skew = 0.0);

// What a problem needs beyond its shape, drawn from `seed`: the routing of gemm_a2a and a2a_gemm;
// for the MoE ops, experts (8) and topk (2, at most experts) where zero, and the choices.
void draw_routing(Problem& problem, uint64_t seed);

// Where the MoE ops' rows lie: grouped by source rank, then expert, then token, then choice.
struct MoeRows {
  int experts = 0;
  std::vector<int64_t> first;   // first[s * experts + e]: the first row of (source s, expert e); one more at the end
  std::vector<int64_t> token;   // token[row]: the global token, s * M + i
  std::vector<int64_t> row_of;  // row_of[t * topk + j]: the row of token t's j-th choice

  int64_t rows() const { return static_cast<int64_t>(token.size()); }
  int64_t block_first(int s, int e) const { return first[static_cast<size_t>(s * experts + e)]; }
  int64_t block_rows(int s, int e) const { return first[static_cast<size_t>(s * experts + e) + 1] - block_first(s, e); }
  int64_t source_first(int s) const { return block_first(s, 0); }
  int64_t source_rows(int s) const { return first[static_cast<size_t>((s + 1) * experts)] - source_first(s); }
};
// Throws std::invalid_argument for a problem whose choices are given on the device (routing_on_device).
MoeRows moe_rows(const Problem& problem);

}  // namespace weft
