// The op API's (runtime/op.hpp) argument checks that need no GPU: weft::Op runs them before anything
// is launched or any rank is waited for, and the CPU tests run them directly. Each throws
// std::invalid_argument naming the call, the values and what is allowed.
#pragma once

#include <cstdint>
#include <vector>

#include "weft/ir/problem.hpp"

namespace weft {

// What an Op is made for (OpSpec's shape and dtypes).
struct OpShape {
  OpKind op = OpKind::gemm_ar;
  int64_t n = 0;
  int64_t k = 0;
  int64_t max_rows = 0;
  DType input_dtype = DType::bf16;
  DType output_dtype = DType::bf16;
  BLayout b_layout = BLayout::nk;
};

// An op the API takes at this world size: not MoE (yet), positive sizes, bf16, n and k multiples of
// 8, and for gemm_rs max_rows a multiple of the world size.
void check_op_shape(const OpShape& shape, int world_size);

// The problem of one call of `rows` rows (1..max_rows) with `routing` (the routed ops need it, the
// others take none), checked (check_problem).
Problem op_call_problem(const OpShape& shape, int world_size, int64_t rows, const std::vector<std::vector<int>>& routing);

// A caller's buffer: not null, 16-byte aligned (`name`: "a", "b", "c" or "gathered_a").
void check_op_pointer(const void* pointer, const char* name);

}  // namespace weft
