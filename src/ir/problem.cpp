#include "weft/ir/problem.hpp"

#include <algorithm>
#include <random>
#include <sstream>
#include <stdexcept>

namespace weft {

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f32: return "f32";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
    case DType::i32: return "i32";
  }
  return "?";
}

bool is_fp8(DType dtype) { return dtype == DType::e4m3 || dtype == DType::e5m2; }

std::string_view to_string(Scaling scaling) {
  switch (scaling) {
    case Scaling::none: return "none";
    case Scaling::tensor: return "tensor";
    case Scaling::row: return "row";
    case Scaling::block: return "block";
  }
  return "?";
}

Scaling parse_scaling(std::string_view text) {
  for (Scaling s : {Scaling::none, Scaling::tensor, Scaling::row, Scaling::block})
    if (to_string(s) == text) return s;
  throw std::invalid_argument("unknown scaling '" + std::string(text) + "' (expected tensor, row, block or none)");
}

std::string_view to_string(OpKind op) {
  switch (op) {
    case OpKind::ag_gemm: return "ag_gemm";
    case OpKind::gemm_rs: return "gemm_rs";
    case OpKind::gemm_ar: return "gemm_ar";
    case OpKind::gemm_a2a: return "gemm_a2a";
    case OpKind::a2a_gemm: return "a2a_gemm";
    case OpKind::ag_moe: return "ag_moe";
    case OpKind::moe_rs: return "moe_rs";
    case OpKind::ag_attention: return "ag_attention";
  }
  return "?";
}

std::string_view to_string(BLayout layout) { return layout == BLayout::kn ? "kn" : "nk"; }

BLayout parse_b_layout(std::string_view text) {
  for (BLayout l : {BLayout::nk, BLayout::kn})
    if (to_string(l) == text) return l;
  throw std::invalid_argument("unknown B layout '" + std::string(text) + "' (expected nk: row-major [N, K], or kn: row-major [K, N])");
}

DType parse_dtype(std::string_view text) {
  for (DType d : {DType::bf16, DType::f16, DType::f32, DType::e4m3, DType::e5m2})
    if (to_string(d) == text) return d;
  throw std::invalid_argument("unknown dtype '" + std::string(text) + "' (expected bf16, f16, f32, e4m3 or e5m2)");
}

const std::vector<OpKind>& all_ops() {
  static const std::vector<OpKind> ops{OpKind::ag_gemm,  OpKind::gemm_rs, OpKind::gemm_ar, OpKind::gemm_a2a,
                                       OpKind::a2a_gemm, OpKind::ag_moe,  OpKind::moe_rs};
  return ops;
}

const std::vector<OpKind>& attention_ops() {
  static const std::vector<OpKind> ops{OpKind::ag_attention};
  return ops;
}

bool is_attention(OpKind op) { return op == OpKind::ag_attention; }

OpKind parse_op(std::string_view text) {
  std::string known;
  for (const auto* ops : {&all_ops(), &attention_ops()})
    for (OpKind o : *ops) {
      if (to_string(o) == text) return o;
      known += (known.empty() ? "" : ", ") + std::string(to_string(o));
    }
  throw std::invalid_argument("unknown op '" + std::string(text) + "' (expected one of " + known + ")");
}

int dtype_bytes(DType dtype) { return dtype == DType::f32 || dtype == DType::i32 ? 4 : is_fp8(dtype) ? 1 : 2; }

DType operand_b_dtype(const Problem& p) { return p.b_dtype.value_or(p.input_dtype); }

DType topk_weights_dtype(const Problem& p) { return is_fp8(p.input_dtype) ? p.output_dtype : p.input_dtype; }

std::optional<ScaleGrid> operand_scale_grid(const Problem& p, Operand operand) {
  const bool b = operand == Operand::b;
  if (!is_fp8(b ? operand_b_dtype(p) : p.input_dtype)) return std::nullopt;
  switch (p.scaling) {
    case Scaling::none: return std::nullopt;
    case Scaling::tensor: return ScaleGrid{0, 0, 0};
    case Scaling::row: return ScaleGrid{1, 0, 0};
    case Scaling::block: return b ? ScaleGrid{kScaleBlock, kScaleBlock, p.n} : ScaleGrid{1, kScaleBlock, 0};
  }
  return std::nullopt;
}

namespace {

template <class Fail>
void check_attention(const Problem& p, Fail fail) {
  if (p.m < 1) fail("ag_attention needs m (tokens per rank) >= 1, got " + std::to_string(p.m));
  if (p.n != 0 || p.k != 0)
    fail("n and k are the GEMM ops' sizes; ag_attention's columns come from batch, heads and head_dim (leave n and k 0, got n=" +
         std::to_string(p.n) + " k=" + std::to_string(p.k) + ")");
  if (p.batch < 1 || p.heads < 1 || p.kv_heads < 1 || p.head_dim < 1)
    fail("ag_attention needs batch, heads, kv_heads and head_dim >= 1, got " + std::to_string(p.batch) + ", " + std::to_string(p.heads) + ", " +
         std::to_string(p.kv_heads) + ", " + std::to_string(p.head_dim));
  if (p.heads % p.kv_heads != 0)
    fail("heads (" + std::to_string(p.heads) + ") must be a multiple of kv_heads (" + std::to_string(p.kv_heads) +
         "): each key/value head serves the same number of query heads");
}

// FP8 operands come with a scaling mode and give bf16 or f32; other dtypes have no scaling.
template <class Fail>
void check_dtypes(const Problem& p, Fail fail) {
  const DType b = operand_b_dtype(p);
  for (DType d : {p.input_dtype, b, p.output_dtype})
    if (d == DType::i32) fail("i32 holds indices (the MoE choices given on the device), not an operand or a result");
  const bool fp8 = is_fp8(p.input_dtype);
  if (fp8 != is_fp8(b))
    fail("A is " + std::string(to_string(p.input_dtype)) + " but B is " + std::string(to_string(b)) + ": FP8 multiplies only FP8");
  if (p.b_dtype && !fp8 && *p.b_dtype != p.input_dtype)
    fail("b_dtype differs from input_dtype only between the FP8 dtypes (e4m3, e5m2)");
  if (!fp8) {
    if (p.scaling != Scaling::none)
      fail("scaling " + std::string(to_string(p.scaling)) + " is for FP8 operands (e4m3, e5m2), not " + std::string(to_string(p.input_dtype)));
    if (is_fp8(p.output_dtype)) fail("the output is bf16, f16 or f32, not " + std::string(to_string(p.output_dtype)));
    return;
  }
  if (p.scaling == Scaling::none) fail("FP8 operands need a scaling mode (tensor, row or block)");
  if (p.input_dtype == DType::e5m2 && b == DType::e5m2)
    fail("e5m2 x e5m2 is not an FP8 GEMM (cuBLASLt and WGMMA take e4m3 x e4m3 and e4m3 x e5m2 either way round): "
         "e5m2 holds gradients, which multiply e4m3 weights or activations");
  if (p.output_dtype != DType::bf16 && p.output_dtype != DType::f32)
    fail("an FP8 GEMM gives bf16 or f32 (partial sums are reduced in it, never in FP8), not " + std::string(to_string(p.output_dtype)));
  if (is_attention(p.op)) fail("ag_attention has no FP8 form (its operands are bf16)");
  if (p.b_layout != BLayout::nk)
    fail("an FP8 B is laid out nk (row-major [N, K]), not " + std::string(to_string(p.b_layout)) +
         ": cuBLASLt's FP8 matmul and FP8 WGMMA read both operands K-major (TN)");
}

}  // namespace

void check_problem(const Problem& p) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("invalid problem " + describe(p) + ": " + what);
  };
  if (p.world_size < 1) fail("world_size must be >= 1");
  check_dtypes(p, fail);
  if (is_attention(p.op)) {
    check_attention(p, fail);
    if (p.b_layout != BLayout::nk) fail("ag_attention has no B operand; leave b_layout nk");
  } else {
    if (p.m < 1 || p.n < 1 || p.k < 1) fail("m, n and k must be >= 1");
    if (p.batch != 0 || p.heads != 0 || p.kv_heads != 0 || p.head_dim != 0 || p.causal)
      fail("batch, heads, kv_heads, head_dim and causal are only meaningful for ag_attention (leave them 0 and false)");
  }
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
  if (is_moe(p.op)) {
    if (p.experts < 1) fail("experts must be >= 1, got " + std::to_string(p.experts));
    if (p.topk < 1 || p.topk > p.experts)
      fail("topk must be between 1 and experts (" + std::to_string(p.experts) + "), got " + std::to_string(p.topk));
    if (p.routing_on_device) {
      if (!p.choices.empty()) fail("the choices are given on the device (routing_on_device): leave choices empty");
      if (p.input_dtype != DType::bf16 || p.output_dtype != DType::bf16)
        fail("choices given on the device take bf16 operands and results so far, not " + std::string(to_string(p.input_dtype)) + "->" +
             std::string(to_string(p.output_dtype)));
      return;
    }
    if (static_cast<int>(p.choices.size()) != p.world_size)
      fail("choices has " + std::to_string(p.choices.size()) + " rows, expected one per rank");
    for (int r = 0; r < p.world_size; ++r) {
      const auto& c = p.choices[static_cast<size_t>(r)];
      if (static_cast<int64_t>(c.size()) != p.m * p.topk)
        fail("choices[" + std::to_string(r) + "] has " + std::to_string(c.size()) + " entries, expected m * topk = " +
             std::to_string(p.m * p.topk));
      for (int64_t i = 0; i < p.m; ++i)
        for (int j = 0; j < p.topk; ++j) {
          const int e = c[static_cast<size_t>(i * p.topk + j)];
          if (e < 0 || e >= p.experts)
            fail("choices[" + std::to_string(r) + "] names expert " + std::to_string(e) + " of " + std::to_string(p.experts));
          for (int earlier = 0; earlier < j; ++earlier)
            if (c[static_cast<size_t>(i * p.topk + earlier)] == e)
              fail("token " + std::to_string(i) + " of rank " + std::to_string(r) + " picks expert " + std::to_string(e) + " twice");
        }
    }
  } else if (p.experts != 0 || p.topk != 0 || !p.choices.empty() || p.routing_on_device) {
    fail("experts, topk, choices and routing_on_device are only meaningful for ag_moe and moe_rs");
  }
}

bool is_moe(OpKind op) { return op == OpKind::ag_moe || op == OpKind::moe_rs; }

int64_t b_rows(const Problem& p) { return is_moe(p.op) ? static_cast<int64_t>(p.experts) * p.n : p.n; }

MoeRows moe_rows(const Problem& p) {
  if (p.routing_on_device)
    throw std::invalid_argument("moe_rows: " + describe(p) + " takes its choices on the device; its rows' places are a RouteStep's (plan/moe_route.hpp)");
  MoeRows rows;
  rows.experts = p.experts;
  const int64_t tokens = p.m * p.world_size;
  rows.row_of.assign(static_cast<size_t>(tokens * p.topk), -1);
  for (int s = 0; s < p.world_size; ++s) {
    const auto& c = p.choices[static_cast<size_t>(s)];
    for (int e = 0; e < p.experts; ++e) {
      rows.first.push_back(rows.rows());
      for (int64_t i = 0; i < p.m; ++i)
        for (int j = 0; j < p.topk; ++j)
          if (c[static_cast<size_t>(i * p.topk + j)] == e) {
            const int64_t t = static_cast<int64_t>(s) * p.m + i;
            rows.row_of[static_cast<size_t>(t * p.topk + j)] = rows.rows();
            rows.token.push_back(t);
          }
    }
  }
  rows.first.push_back(rows.rows());
  return rows;
}

int64_t a_rows(const Problem& p) { return p.op == OpKind::moe_rs ? p.m * p.world_size * p.topk : p.m; }

int64_t query_cols(const Problem& p) { return int64_t{p.batch} * p.heads * p.head_dim; }
int64_t key_cols(const Problem& p) { return int64_t{p.batch} * p.kv_heads * p.head_dim; }
int64_t lse_cols(const Problem& p) { return int64_t{p.batch} * p.heads; }

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
    case OpKind::ag_moe: return p.m * p.world_size * p.topk;
    case OpKind::moe_rs: return p.m;
    case OpKind::ag_attention: return p.m;
  }
  return 0;
}

std::string describe(const Problem& p) {
  std::ostringstream out;
  if (is_attention(p.op)) {
    out << to_string(p.op) << " m=" << p.m << " batch=" << p.batch << " heads=" << p.heads << " kv_heads=" << p.kv_heads
        << " head_dim=" << p.head_dim << (p.causal ? " causal" : "") << " world=" << p.world_size << " " << to_string(p.input_dtype) << "->"
        << to_string(p.output_dtype);
    return out.str();
  }
  out << to_string(p.op) << " m=" << p.m << " n=" << p.n << " k=" << p.k << " world=" << p.world_size
      << " " << to_string(p.input_dtype);
  if (p.b_dtype && *p.b_dtype != p.input_dtype) out << "x" << to_string(*p.b_dtype);
  out << "->" << to_string(p.output_dtype);
  if (p.scaling != Scaling::none) out << " scaling=" << to_string(p.scaling);
  if (is_moe(p.op)) out << " experts=" << p.experts << " topk=" << p.topk << (p.routing_on_device ? " routing_on_device" : "");
  if (p.b_layout != BLayout::nk) out << " b_layout=" << to_string(p.b_layout);
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

std::vector<std::vector<int>> random_choices(int world_size, int64_t tokens, int experts, int topk, uint64_t seed, double skew) {
  if (experts < 1 || topk < 1 || topk > experts)
    throw std::invalid_argument("topk must be between 1 and experts (" + std::to_string(experts) + "), got " + std::to_string(topk));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  // With skew, the upper half of the experts is never picked (empty); it must leave topk to pick from.
  const int open = skew > 0 ? std::max(topk, (experts + 1) / 2) : experts;
  std::vector<std::vector<int>> choices(static_cast<size_t>(world_size));
  for (auto& c : choices) {
    c.reserve(static_cast<size_t>(tokens * topk));
    for (int64_t i = 0; i < tokens; ++i) {
      std::vector<int> pool(static_cast<size_t>(open));
      for (int e = 0; e < open; ++e) pool[static_cast<size_t>(e)] = e;
      for (int j = 0; j < topk; ++j) {
        size_t pick = static_cast<size_t>(rng() % pool.size());
        if (j == 0 && skew > 0 && unit(rng) < skew) pick = 0;  // expert 0 is pool[0] until picked
        c.push_back(pool[pick]);
        pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(pick));
      }
    }
  }
  return choices;
}

void draw_routing(Problem& p, uint64_t seed) {
  if (routes_rows(p.op)) p.routing = random_routing(p.world_size, p.m, seed);
  if (is_moe(p.op)) {
    if (p.experts == 0) p.experts = 8;
    if (p.topk == 0) p.topk = std::min(2, p.experts);
    if (!p.routing_on_device) p.choices = random_choices(p.world_size, p.m, p.experts, p.topk, seed);  // else the plan's input
  }
}

}  // namespace weft
