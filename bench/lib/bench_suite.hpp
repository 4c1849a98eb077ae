// Benchmark suites: named lists of GEMM shapes taken from the papers, stored as JSON under bench/.
//
// A row gives the op and (m, n, k). With "split": "tensor" (the default) they are the layer's shapes
// before tensor parallelism, as Flux and TileLink quote them, and problem_for() cuts them for W ranks:
//   ag_gemm : A's rows and B's rows (column-parallel weight) are split: m/W, n/W, k per rank;
//   gemm_rs, gemm_ar: K is split (row-parallel weight): m, n, k/W per rank;
//   gemm_a2a: tokens are split: m/W, n, k per rank.
//   ag_moe  : tokens and every expert's output columns are split: m/W, n/W, k (TileLink's MoE
//             first half: m = S tokens, n = I, k = H); moe_rs: tokens and the inner dimension are
//             split: m/W, n, k/W (second half: n = H, k = I). Rows give "experts" and "topk".
//   ag_attention: no n and k; m is the sequence's tokens over every rank (split: m/W per rank), with
//             "heads", "head_dim" and optionally "kv_heads" (default: heads), "batch" (1), "causal".
// With "split": "none" they are per-rank shapes already (FlashOverlap's Table 3 is given per GPU).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/json.hpp"
#include "weft/ir/problem.hpp"

namespace weft {

struct SuiteRow {
  std::string name;
  OpKind op = OpKind::gemm_ar;
  int64_t m = 0, n = 0, k = 0;
  bool tensor_split = true;
  int experts = 0, topk = 0;  // the MoE ops
  int batch = 0, heads = 0, kv_heads = 0, head_dim = 0;  // ag_attention
  bool causal = false;
  std::string source;
};

struct BenchSuite {
  std::string name;
  std::string description;
  std::vector<SuiteRow> rows;
};

// A suite holds at most this many rows: enough for every paper's table many times over, few enough
// that `weft bench` without GPUs checks them in minutes.
constexpr size_t kMaxSuiteRows = 4096;

// Throws std::invalid_argument "NAME: byte N: rows[3].m: ..." for anything json.hpp or the suite's
// rules refuse (unknown members, shapes out of range, MoE fields on other ops).
BenchSuite parse_suite(std::string_view text, const std::string& name = "suite");
BenchSuite load_suite(const std::string& path);  // a regular file of bounded size (common/text_file.hpp)

// The per-rank problem of `row` at world size `world` (routing drawn from `seed` for gemm_a2a), its
// operands of `dtype` with `scaling` (FP8). Throws std::invalid_argument when a split dimension is
// not divisible by `world`, or the op does not take that dtype (check_problem).
Problem problem_for(const SuiteRow& row, int world, uint64_t seed, DType dtype = DType::bf16, Scaling scaling = Scaling::none);

}  // namespace weft
