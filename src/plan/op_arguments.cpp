#include "weft/plan/op_arguments.hpp"

#include "weft/plan/moe_route.hpp"
#include "weft/plan/plan_bounds.hpp"

#include <stdexcept>
#include <string>

namespace weft {

void check_op_shape(const OpShape& s, int world_size) {
  if (is_attention(s.op))
    throw std::invalid_argument("weft::Op: " + std::string(to_string(s.op)) +
                                " is not a GEMM: weft::AttentionOp takes it (runtime/attention_op.hpp), with its batch, heads and head dim");
  if (is_moe(s.op)) {
    if (s.experts < 1 || s.topk < 1 || s.topk > s.experts)
      throw std::invalid_argument("weft::Op: " + std::string(to_string(s.op)) + " needs experts >= 1 and topk in 1..experts (experts=" +
                                  std::to_string(s.experts) + " topk=" + std::to_string(s.topk) + ")");
    if (is_fp8(s.input_dtype) || (s.b_dtype && is_fp8(*s.b_dtype)))
      throw std::invalid_argument("weft::Op: " + std::string(to_string(s.op)) + " takes bf16 so far (FP8 MoE tokens and their scales are not "
                                  "moved on the GPU yet)");
    if (s.routing_on_device && int64_t{world_size} * s.experts > kMaxRoutedBlocks)
      throw std::invalid_argument("weft::Op: " + std::string(to_string(s.op)) + " with the choices on the device routes at most " +
                                  std::to_string(kMaxRoutedBlocks) + " (rank, expert) blocks (the route's shared-memory histogram); world " +
                                  std::to_string(world_size) + " x experts " + std::to_string(s.experts) + " is more");
  } else if (s.experts != 0 || s.topk != 0 || s.routing_on_device) {
    throw std::invalid_argument("weft::Op: experts, topk and routing_on_device are the MoE ops' (ag_moe, moe_rs), not " + std::string(to_string(s.op)));
  }
  if (s.n <= 0 || s.k <= 0 || s.max_rows <= 0)
    throw std::invalid_argument("weft::Op: n, k and max_rows must be positive (n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
                                " max_rows=" + std::to_string(s.max_rows) + ")");
  const bool fp8 = is_fp8(s.input_dtype) || (s.b_dtype && is_fp8(*s.b_dtype));
  if (!fp8 && (s.input_dtype != DType::bf16 || s.output_dtype != DType::bf16 || (s.b_dtype && *s.b_dtype != DType::bf16)))
    throw std::invalid_argument("weft::Op: " + std::string(to_string(s.input_dtype)) + " -> " + std::string(to_string(s.output_dtype)) +
                                " is not supported yet; weft's ops take bf16 and give bf16, or take FP8 (e4m3, e5m2) with scales and give "
                                "bf16 or f32");
  if (!fp8 && s.scaling != Scaling::none)
    throw std::invalid_argument("weft::Op: scaling " + std::string(to_string(s.scaling)) + " is for FP8 operands (e4m3, e5m2), not " +
                                std::string(to_string(s.input_dtype)));
  if (fp8) {
    // The dtypes, the scaling mode and B's layout as every FP8 problem is checked (check_problem).
    // (A routed op's check takes a routing: every row to rank 0 stands for any.)
    const std::vector<std::vector<int>> routing =
        routes_rows(s.op) ? std::vector<std::vector<int>>(static_cast<size_t>(world_size), std::vector<int>(static_cast<size_t>(s.max_rows), 0))
                          : std::vector<std::vector<int>>{};
    try {
      (void)op_call_problem(s, world_size, s.max_rows, routing);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("weft::Op: ") + e.what());
    }
  }
  const int64_t multiple = fp8 ? 16 : 8;
  if (s.k % multiple != 0 || s.n % multiple != 0)
    throw std::invalid_argument("weft::Op: n=" + std::to_string(s.n) + " and k=" + std::to_string(s.k) + " must be multiples of " +
                                std::to_string(multiple) + " (16-byte rows for the GEMMs' loads and stores" +
                                (fp8 ? std::string(", and cuBLASLt's FP8 matmul") : std::string()) + ")");
  if (s.op == OpKind::gemm_rs && s.max_rows % world_size != 0)
    throw std::invalid_argument("weft::Op: gemm_rs needs max_rows a multiple of the world size " + std::to_string(world_size) + " (got " +
                                std::to_string(s.max_rows) + ")");
}

Problem op_call_problem(const OpShape& s, int world_size, int64_t rows, const std::vector<std::vector<int>>& routing) {
  if (rows <= 0 || rows > s.max_rows)
    throw std::invalid_argument("weft::Op: rows=" + std::to_string(rows) + " is outside 1..max_rows=" + std::to_string(s.max_rows));
  Problem p;
  p.op = s.op;
  p.m = rows;
  p.n = s.n;
  p.k = s.k;
  p.world_size = world_size;
  p.input_dtype = s.input_dtype;
  p.output_dtype = s.output_dtype;
  p.b_layout = s.b_layout;
  p.b_dtype = s.b_dtype;
  p.scaling = s.scaling;
  if (routes_rows(s.op)) {
    if (routing.empty()) throw std::invalid_argument("weft::Op: " + std::string(to_string(s.op)) + " needs the routing of every rank");
    p.routing = routing;
  } else if (is_moe(s.op)) {
    p.experts = s.experts;
    p.topk = s.topk;
    if (s.routing_on_device) {
      if (!routing.empty())
        throw std::invalid_argument("weft::Op: " + std::string(to_string(s.op)) + " takes its choices on the device (OpSpec::routing_on_device), "
                                    "not as a host table");
      p.routing_on_device = true;
    } else {
      if (routing.empty()) throw std::invalid_argument("weft::Op: " + std::string(to_string(s.op)) + " needs every rank's expert choices");
      p.choices = routing;
    }
  } else if (!routing.empty()) {
    throw std::invalid_argument("weft::Op: " + std::string(to_string(s.op)) + " takes no routing");
  }
  check_problem(p);  // shapes, divisibility, routing: std::invalid_argument naming the field
  return p;
}

int64_t op_scale_count(const OpShape& s, int64_t rows, Operand operand) {
  Problem p;
  p.n = s.n;
  p.input_dtype = s.input_dtype;
  p.b_dtype = s.b_dtype;
  p.scaling = s.scaling;
  const std::optional<ScaleGrid> grid = operand_scale_grid(p, operand);
  if (!grid) return 0;
  return operand == Operand::a ? device_scale_count(*grid, rows, s.k) : device_scale_count(*grid, s.n, s.k);
}

void check_op_scales(const OpShape& s, int64_t rows, const void* scale_a, int64_t a_count, const void* scale_b, int64_t b_count) {
  const struct {
    const char* name;
    Operand operand;
    const void* pointer;
    int64_t count;
  } scales[] = {{"scale_a", Operand::a, scale_a, a_count}, {"scale_b", Operand::b, scale_b, b_count}};
  for (const auto& given : scales) {
    const int64_t expected = op_scale_count(s, rows, given.operand);
    const std::string what = std::string("weft::Op::run: ") + given.name;
    if (expected == 0) {
      if (given.pointer || given.count)
        throw std::invalid_argument(what + " is given, but the op's operands are " + std::string(to_string(s.input_dtype)) +
                                    ", which carry no scales");
      continue;
    }
    const std::string layout = s.scaling == Scaling::tensor ? "one fp32 for the whole operand"
                               : s.scaling == Scaling::row  ? (given.operand == Operand::a ? "one fp32 per row of A" : "one fp32 per row of B [n, k] (per output column)")
                               : given.operand == Operand::a
                                   ? "fp32 1x128 block scales of A, K-block-major with the rows padded to a multiple of 4"
                                   : "fp32 128x128 block scales of B, row-block-major with the K blocks padded to a multiple of 4";
    if (!given.pointer)
      throw std::invalid_argument(what + " is null; " + std::string(to_string(s.scaling)) + " scaling needs " + std::to_string(expected) + " scales (" +
                                  layout + ")");
    if (reinterpret_cast<uintptr_t>(given.pointer) % 16 != 0)
      throw std::invalid_argument(what + " at " + std::to_string(reinterpret_cast<uintptr_t>(given.pointer)) +
                                  " is not 16-byte aligned (cuBLASLt's scale vectors need it)");
    if (given.count != expected)
      throw std::invalid_argument(what + " holds " + std::to_string(given.count) + " scales; " + std::string(to_string(s.scaling)) +
                                  " scaling of this call (rows=" + std::to_string(rows) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
                                  ") needs " + std::to_string(expected) + " (" + layout + ")");
  }
}

void check_op_pointer(const void* p, const char* name) {
  if (!p) throw std::invalid_argument(std::string("weft::Op::run: ") + name + " is null");
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
    throw std::invalid_argument(std::string("weft::Op::run: ") + name + " at " + std::to_string(reinterpret_cast<uintptr_t>(p)) +
                                " is not 16-byte aligned (the GEMMs' loads and stores need it; a tensor view that starts at an odd "
                                "row or column can cause this)");
}

void check_attention_shape(const AttentionShape& s, int world_size) {
  const int kv_heads = s.kv_heads ? s.kv_heads : s.heads;
  if (s.batch < 1 || s.heads < 1 || kv_heads < 1 || s.head_dim < 1 || s.max_tokens < 1)
    throw std::invalid_argument("weft::AttentionOp: batch, heads, kv_heads, head_dim and max_tokens must be positive (batch=" +
                                std::to_string(s.batch) + " heads=" + std::to_string(s.heads) + " kv_heads=" + std::to_string(kv_heads) +
                                " head_dim=" + std::to_string(s.head_dim) + " max_tokens=" + std::to_string(s.max_tokens) + ")");
  if (s.head_dim % 8 != 0)
    throw std::invalid_argument("weft::AttentionOp: head_dim=" + std::to_string(s.head_dim) +
                                " must be a multiple of 8 (16-byte rows of bf16 for the TMA loads)");
  try {
    (void)attention_call_problem(s, world_size, s.max_tokens);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("weft::AttentionOp: ") + e.what());
  }
}

Problem attention_call_problem(const AttentionShape& s, int world_size, int64_t tokens) {
  if (tokens < 1 || tokens > s.max_tokens)
    throw std::invalid_argument("weft::AttentionOp: tokens=" + std::to_string(tokens) + " per rank is outside 1..max_tokens=" +
                                std::to_string(s.max_tokens));
  Problem p;
  p.op = OpKind::ag_attention;
  p.m = tokens;
  p.n = 0;
  p.k = 0;
  p.world_size = world_size;
  p.batch = s.batch;
  p.heads = s.heads;
  p.kv_heads = s.kv_heads ? s.kv_heads : s.heads;
  p.head_dim = s.head_dim;
  p.causal = s.causal;
  p.input_dtype = DType::bf16;
  p.output_dtype = DType::bf16;
  check_problem(p);
  require_problem_fits(p);
  return p;
}

}  // namespace weft
