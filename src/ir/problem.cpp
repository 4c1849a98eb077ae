#include "weft/ir/problem.hpp"

#include <random>
#include <sstream>
#include <stdexcept>

namespace weft {

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f32: return "f32";
  }
  return "?";
}

std::string_view to_string(OpKind op) {
  switch (op) {
    case OpKind::ag_gemm: return "ag_gemm";
    case OpKind::gemm_rs: return "gemm_rs";
    case OpKind::gemm_ar: return "gemm_ar";
    case OpKind::gemm_a2a: return "gemm_a2a";
    case OpKind::a2a_gemm: return "a2a_gemm";
  }
  return "?";
}

DType parse_dtype(std::string_view text) {
  for (DType d : {DType::bf16, DType::f16, DType::f32})
    if (to_string(d) == text) return d;
  throw std::invalid_argument("unknown dtype '" + std::string(text) + "' (expected bf16, f16 or f32)");
}

const std::vector<OpKind>& all_ops() {
  static const std::vector<OpKind> ops{OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar, OpKind::gemm_a2a, OpKind::a2a_gemm};
  return ops;
}

OpKind parse_op(std::string_view text) {
  std::string known;
  for (OpKind o : all_ops()) {
    if (to_string(o) == text) return o;
    known += (known.empty() ? "" : ", ") + std::string(to_string(o));
  }
  throw std::invalid_argument("unknown op '" + std::string(text) + "' (expected one of " + known + ")");
}

int dtype_bytes(DType dtype) { return dtype == DType::f32 ? 4 : 2; }

void check_problem(const Problem& p) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("invalid problem " + describe(p) + ": " + what);
  };
  if (p.world_size < 1) fail("world_size must be >= 1");
  if (p.m < 1 || p.n < 1 || p.k < 1) fail("m, n and k must be >= 1");
  if (p.op == OpKind::gemm_rs && p.m % p.world_size != 0)
    fail("gemm_rs needs m (" + std::to_string(p.m) + ") divisible by world_size (" +
         std::to_string(p.world_size) + ") so every rank gets an equal block of rows");
  if (routes_rows(p.op)) {
    if (static_cast<int>(p.routing.size()) != p.world_size)
      fail("routing has " + std::to_string(p.routing.size()) + " rows, expected one per rank");
    for (int r = 0; r < p.world_size; ++r) {
      if (static_cast<int64_t>(p.routing[r].size()) != p.m)
        fail("routing[" + std::to_string(r) + "] has " + std::to_string(p.routing[r].size()) +
             " entries, expected m = " + std::to_string(p.m));
      for (int d : p.routing[r])
        if (d < 0 || d >= p.world_size)
          fail("routing[" + std::to_string(r) + "] names rank " + std::to_string(d));
    }
  } else if (!p.routing.empty()) {
    fail("routing is only meaningful for gemm_a2a and a2a_gemm");
  }
}

int64_t a_rows(const Problem& p) { return p.m; }

bool routes_rows(OpKind op) { return op == OpKind::gemm_a2a || op == OpKind::a2a_gemm; }

std::vector<std::vector<int64_t>> rows_routed(const Problem& p) {
  std::vector<std::vector<int64_t>> counts(p.world_size, std::vector<int64_t>(p.world_size, 0));
  for (int s = 0; s < static_cast<int>(p.routing.size()); ++s)
    for (int d : p.routing[s]) ++counts[s][d];
  return counts;
}

int64_t output_rows(const Problem& p, int rank) {
  switch (p.op) {
    case OpKind::ag_gemm: return p.m * p.world_size;
    case OpKind::gemm_rs: return p.m / p.world_size;
    case OpKind::gemm_ar: return p.m;
    case OpKind::gemm_a2a:
    case OpKind::a2a_gemm: {
      int64_t rows = 0;
      for (const auto& route : p.routing)
        for (int d : route) rows += (d == rank);
      return rows;
    }
  }
  return 0;
}

std::string describe(const Problem& p) {
  std::ostringstream out;
  out << to_string(p.op) << " m=" << p.m << " n=" << p.n << " k=" << p.k << " world=" << p.world_size
      << " " << to_string(p.input_dtype) << "->" << to_string(p.output_dtype);
  return out.str();
}

std::vector<std::vector<int>> random_routing(int world_size, int64_t rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pick(0, world_size - 1);
  std::vector<std::vector<int>> routing(world_size, std::vector<int>(rows));
  for (auto& route : routing)
    for (auto& d : route) d = pick(rng);
  return routing;
}

}  // namespace weft
