// The operator a plan computes: which collective follows or precedes the GEMM, the per-rank
// shapes, dtypes, world size and (for all-to-all) the routing of rows to ranks.
//
// Layouts are fixed: A is row-major [rows, K], B is [N, K] like a linear layer's weight, C is
// row-major [rows, N]. What "M" means depends on the op; describe_output() and the builders agree:
//   ag_gemm : each rank holds an A shard of M rows; C = gather(A) * B^T is [W*M, N] on every rank.
//   gemm_rs : each rank holds A [M, K] (its K shard) and B [N, K]; C = rows [r*M/W, (r+1)*M/W)
//             of sum_r A_r * B_r^T. M must be a multiple of W.
//   gemm_ar : C = sum_r A_r * B_r^T, [M, N] on every rank.
//   gemm_a2a: each rank computes P_r = A_r * B_r^T [M, N]; row i of P_r goes to rank routing[r][i].
//             Rank d's C holds, in order of source rank then row index, every row routed to d.
//   a2a_gemm: MoE token dispatch then expert GEMM (FiCCO's A2A+GEMM): row i of rank r's tokens
//             A_r [M, K] goes to rank routing[r][i]; rank d gathers X_d, every row routed to d in
//             order of source rank then row index, and computes C_d = X_d * B_d^T.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

enum class DType { bf16, f16, f32 };
enum class OpKind { ag_gemm, gemm_rs, gemm_ar, gemm_a2a, a2a_gemm };
// Every op, in declaration order (defaults of --op, test sweeps).
const std::vector<OpKind>& all_ops();
// The ops whose rows travel by a routing table (all-to-all): gemm_a2a and a2a_gemm.
bool routes_rows(OpKind op);

std::string_view to_string(DType dtype);
std::string_view to_string(OpKind op);
DType parse_dtype(std::string_view text);   // throws std::invalid_argument naming the text
OpKind parse_op(std::string_view text);     // throws std::invalid_argument naming the text
int dtype_bytes(DType dtype);

struct Problem {
  OpKind op = OpKind::gemm_ar;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int world_size = 1;
  DType input_dtype = DType::bf16;
  DType output_dtype = DType::bf16;
  // gemm_a2a and a2a_gemm only: routing[r][i] is the destination rank of row i of rank r.
  std::vector<std::vector<int>> routing;

  bool operator==(const Problem&) const = default;
};

// Throws std::invalid_argument with the offending field and value when the problem is not one
// the ops can compute (non-positive sizes, M not divisible by W for gemm_rs, bad routing, ...).
void check_problem(const Problem& problem);

// Rows of A on each rank, rows and columns of each rank's result.
int64_t a_rows(const Problem& problem);
int64_t output_rows(const Problem& problem, int rank);
// For the routed ops: rows_routed[s][d] = how many rows rank s sends to rank d.
std::vector<std::vector<int64_t>> rows_routed(const Problem& problem);

std::string describe(const Problem& problem);

// A routing table with every destination drawn uniformly at random (deterministic in seed).
std::vector<std::vector<int>> random_routing(int world_size, int64_t rows, uint64_t seed);

}  // namespace weft
