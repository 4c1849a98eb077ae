#include "weft/plan/op_arguments.hpp"

#include <stdexcept>
#include <string>

namespace weft {

void check_op_shape(const OpShape& s, int world_size) {
  if (is_attention(s.op))
    throw std::invalid_argument("weft::Op: " + std::string(to_string(s.op)) +
                                " runs as a plan so far (weft plan, check and simulate; the reference executor): weft has no attention "
                                "kernel yet, and the op API takes GEMM shapes");
  if (is_moe(s.op))
    throw std::invalid_argument("weft::Op: " + std::string(to_string(s.op)) +
                                " runs as a plan so far (weft plan, check and bench; CudaExecutor): the op API does not take "
                                "MoE routing per call yet");
  if (s.n <= 0 || s.k <= 0 || s.max_rows <= 0)
    throw std::invalid_argument("weft::Op: n, k and max_rows must be positive (n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
                                " max_rows=" + std::to_string(s.max_rows) + ")");
  if (s.input_dtype != DType::bf16 || s.output_dtype != DType::bf16)
    throw std::invalid_argument("weft::Op: " + std::string(to_string(s.input_dtype)) + " -> " + std::string(to_string(s.output_dtype)) +
                                " is not supported yet; weft's ops take and give bf16");
  if (s.k % 8 != 0 || s.n % 8 != 0)
    throw std::invalid_argument("weft::Op: n=" + std::to_string(s.n) + " and k=" + std::to_string(s.k) +
                                " must be multiples of 8 (16-byte rows for the GEMMs' loads and stores)");
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
  if (routes_rows(s.op)) {
    if (routing.empty()) throw std::invalid_argument("weft::Op: " + std::string(to_string(s.op)) + " needs the routing of every rank");
    p.routing = routing;
  } else if (!routing.empty()) {
    throw std::invalid_argument("weft::Op: " + std::string(to_string(s.op)) + " takes no routing");
  }
  check_problem(p);  // shapes, divisibility, routing: std::invalid_argument naming the field
  return p;
}

void check_op_pointer(const void* p, const char* name) {
  if (!p) throw std::invalid_argument(std::string("weft::Op::run: ") + name + " is null");
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
    throw std::invalid_argument(std::string("weft::Op::run: ") + name + " at " + std::to_string(reinterpret_cast<uintptr_t>(p)) +
                                " is not 16-byte aligned (the GEMMs' loads and stores need it; a tensor view that starts at an odd "
                                "row or column can cause this)");
}

}  // namespace weft
