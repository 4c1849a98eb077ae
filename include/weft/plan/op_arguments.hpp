// The op API's (runtime/op.hpp) argument checks that need no GPU: weft::Op runs them before anything
// is launched or any rank is waited for, and the CPU tests run them directly. Each throws
// std::invalid_argument naming the call, the values and what is allowed.
#pragma once

#include <cstdint>
#include <optional>
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
  std::optional<DType> b_dtype = std::nullopt;  // B's where it differs from A's (FP8 only)
  Scaling scaling = Scaling::none;              // FP8 operands' (ir/scaling.hpp)
  int experts = 0;                              // ag_moe and moe_rs: experts, and choices per token
  int topk = 0;
  bool routing_on_device = false;               // ag_moe and moe_rs: the choices are an input on the device (Problem::routing_on_device)
};

// An op the API takes at this world size: positive sizes, bf16 -> bf16 or FP8 (e4m3/e5m2 A and B
// with a scaling mode, B laid out nk) -> bf16 or f32, n and k multiples of 8 (of 16 for FP8: 16-byte
// rows either way), for gemm_rs max_rows a multiple of the world size, and for the MoE ops (ag_moe,
// moe_rs; bf16) experts >= 1 and topk in 1..experts.
void check_op_shape(const OpShape& shape, int world_size);

// How many fp32 scales an FP8 op's call of `rows` rows takes for `operand` (RunArgs::scale_a: this
// rank's A [rows, k]; scale_b: B [n, k]), in device_scale_index's layout (ir/scaling.hpp); 0 for a
// bf16 op.
int64_t op_scale_count(const OpShape& shape, int64_t rows, Operand operand);

// A call's scales: none for a bf16 op; for an FP8 op both, not null, 16-byte aligned, each holding
// op_scale_count floats (`a_count`, `b_count`: what the caller says it passes).
void check_op_scales(const OpShape& shape, int64_t rows, const void* scale_a, int64_t a_count, const void* scale_b, int64_t b_count);

// The problem of one call of `rows` rows (1..max_rows) with `routing` (the routed ops' destinations,
// the MoE ops' expert choices: choices[s][i * topk + j]; the others take none), checked (check_problem).
Problem op_call_problem(const OpShape& shape, int world_size, int64_t rows, const std::vector<std::vector<int>>& routing);

// A caller's buffer: not null, 16-byte aligned (`name`: "a", "b", "c" or "gathered_a").
void check_op_pointer(const void* pointer, const char* name);

// What an AttentionOp is made for (runtime/attention_op.hpp): ag_attention's shape, bf16 in and out.
struct AttentionShape {
  int batch = 1;
  int heads = 0;
  int kv_heads = 0;  // 0: heads (multi-head attention)
  int head_dim = 0;
  bool causal = false;
  int64_t max_tokens = 0;  // the most tokens per rank a call will pass
};

// An attention op the API takes: positive sizes, heads a multiple of kv_heads, head_dim a multiple
// of 8 (16-byte rows; the GPU kernel's head dims are checked where it is lowered), and Q's and K's
// columns (batch x heads x head_dim) within what the plans lay out.
void check_attention_shape(const AttentionShape& shape, int world_size);

// The problem of one call of `tokens` tokens per rank (1..max_tokens), checked (check_problem).
Problem attention_call_problem(const AttentionShape& shape, int world_size, int64_t tokens);

}  // namespace weft
