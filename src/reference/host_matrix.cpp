#include "weft/reference/host_matrix.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

#include "weft/ir/plan.hpp"
#include "weft/reference/fp8.hpp"

namespace weft {

float round_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7f800000U) == 0x7f800000U) return value;  // inf and NaN stay as they are
  bits += 0x7fffU + ((bits >> 16) & 1U);                   // round to nearest even
  bits &= 0xffff0000U;
  std::memcpy(&value, &bits, sizeof bits);
  return value;
}

HostMatrix transposed(const HostMatrix& m) {
  HostMatrix t(m.cols, m.rows);
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) t.at(j, i) = m.at(i, j);
  return t;
}

namespace {

// FP8 operands: values uniform in [-1, 1] times 2^e, e in [-4, 4] drawn per row and 128-column block
// (so that row and block scales differ from each other and from a tensor's), quantized per the
// problem's scaling. Tensor scaling's A scale is one for every rank's rows (ir/scaling.hpp).
std::vector<RankTensors> random_fp8_inputs(const Problem& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto draw = [&](int64_t rows, int64_t cols) {
    HostMatrix x(rows, cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t block = 0; block < cols; block += kScaleBlock) {
        const float magnitude = std::ldexp(1.0f, static_cast<int>(rng() % 9) - 4);
        for (int64_t c = block; c < std::min(cols, block + kScaleBlock); ++c) x.at(r, c) = uniform(rng) * magnitude;
      }
    return x;
  };
  const ScaleGrid a_grid = *operand_scale_grid(p, Operand::a), b_grid = *operand_scale_grid(p, Operand::b);
  std::vector<RankTensors> inputs(static_cast<size_t>(p.world_size));
  std::vector<HostMatrix> raw_a;
  for (int r = 0; r < p.world_size; ++r) raw_a.push_back(draw(a_rows(p), p.k));
  float a_amax = 0;  // over every rank's A: tensor scaling's one scale
  for (const HostMatrix& a : raw_a)
    for (float v : a.data) a_amax = std::max(a_amax, std::fabs(v));
  for (int r = 0; r < p.world_size; ++r) {
    RankTensors& rank = inputs[static_cast<size_t>(r)];
    Quantized a = quantize(raw_a[static_cast<size_t>(r)], a_grid, p.input_dtype);
    if (p.scaling == Scaling::tensor) {
      a.scales.data.assign(1, a_amax > 0 ? a_amax / fp8_max(p.input_dtype) : 1.0f);
      a.values = quantize_with(raw_a[static_cast<size_t>(r)], a_grid, a.scales, p.input_dtype);
    }
    Quantized b = quantize(draw(b_rows(p), p.k), b_grid, operand_b_dtype(p));
    rank["A"] = std::move(a.values);
    rank[scale_name("A")] = std::move(a.scales);
    rank["B"] = std::move(b.values);
    rank[scale_name("B")] = std::move(b.scales);
    if (p.op == OpKind::moe_rs) {
      HostMatrix w(p.m * p.world_size, p.topk);
      for (auto& x : w.data) x = round_to_bf16(uniform(rng));
      rank["topk_weights"] = std::move(w);
    }
  }
  return inputs;
}

// The inputs with FP8 operands replaced by what they stand for (values times scales), scales dropped.
std::vector<RankTensors> dequantized(const Problem& p, const std::vector<RankTensors>& inputs) {
  std::vector<RankTensors> out = inputs;
  for (RankTensors& rank : out)
    for (const auto& [name, operand] : {std::pair{"A", Operand::a}, std::pair{"B", Operand::b}}) {
      rank[name] = dequantize(rank.at(name), *operand_scale_grid(p, operand), rank.at(scale_name(name)));
      rank.erase(scale_name(name));
    }
  return out;
}

}  // namespace

std::vector<RankTensors> random_inputs(const Problem& p, uint64_t seed) {
  check_problem(p);
  if (is_fp8(p.input_dtype)) return random_fp8_inputs(p, seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<RankTensors> inputs(static_cast<size_t>(p.world_size));
  if (is_attention(p.op)) {
    for (auto& rank : inputs)
      for (const auto& [name, cols] : {std::pair{"Q", query_cols(p)}, std::pair{"K", key_cols(p)}, std::pair{"V", key_cols(p)}}) {
        HostMatrix x(p.m, cols);
        for (auto& v : x.data) v = round_to_bf16(uniform(rng));
        rank[name] = std::move(x);
      }
    return inputs;
  }
  for (auto& rank : inputs) {
    HostMatrix a(a_rows(p), p.k), b(b_rows(p), p.k);
    for (auto& x : a.data) x = round_to_bf16(uniform(rng));
    for (auto& x : b.data) x = round_to_bf16(uniform(rng));
    rank["A"] = std::move(a);
    rank["B"] = p.b_layout == BLayout::kn ? transposed(b) : std::move(b);
    if (p.op == OpKind::moe_rs) {
      HostMatrix w(p.m * p.world_size, p.topk);
      for (auto& x : w.data) x = round_to_bf16(uniform(rng));
      rank["topk_weights"] = std::move(w);
    }
  }
  if (p.routing_on_device) {  // each rank's own choices, its router's top-k ids (distinct per token)
    const auto choices = random_choices(p.world_size, p.m, p.experts, p.topk, seed ^ 0x5eedc401ce5ULL);
    for (int r = 0; r < p.world_size; ++r) {
      HostMatrix c(p.m, p.topk);
      for (size_t i = 0; i < c.data.size(); ++i) c.data[i] = static_cast<float>(choices[static_cast<size_t>(r)][i]);
      inputs[static_cast<size_t>(r)]["choices"] = std::move(c);
    }
  }
  return inputs;
}

namespace {

// P = A * B^T in double.
std::vector<double> product(const HostMatrix& a, const HostMatrix& b) {
  std::vector<double> out(static_cast<size_t>(a.rows * b.rows), 0.0);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < b.rows; ++j) {
      double sum = 0.0;
      for (int64_t k = 0; k < a.cols; ++k) sum += static_cast<double>(a.at(i, k)) * b.at(j, k);
      out[static_cast<size_t>(i * b.rows + j)] = sum;
    }
  return out;
}

// The MoE ops' row of every (token t, choice j), at t * topk + j, worked out from problem.hpp's
// definition (rows by source rank, then expert, then token, then choice) by sorting those keys, not
// through moe_rows(): the builders lay their rows out with moe_rows, and a reference sharing it
// would agree with a wrong layout.
std::vector<int64_t> moe_row_of(const Problem& p) {
  std::vector<std::pair<std::array<int64_t, 4>, int64_t>> keys;  // (source, expert, token, choice) -> t * topk + j
  for (int s = 0; s < p.world_size; ++s)
    for (int64_t i = 0; i < p.m; ++i)
      for (int j = 0; j < p.topk; ++j)
        keys.push_back({{s, p.choices[static_cast<size_t>(s)][static_cast<size_t>(i * p.topk + j)], i, j}, (s * p.m + i) * p.topk + j});
  std::sort(keys.begin(), keys.end());
  std::vector<int64_t> row_of(keys.size());
  for (size_t row = 0; row < keys.size(); ++row) row_of[static_cast<size_t>(keys[row].second)] = static_cast<int64_t>(row);
  return row_of;
}

// ag_attention from its definition (problem.hpp): every rank's queries against the keys and values of
// all ranks in sequence order, the softmax written out whole (no online rescaling, no blocks: those
// are the plans' business), kv head h / (heads / kv_heads) of the same batch entry.
std::vector<HostMatrix> attention_outputs(const Problem& p, const std::vector<RankTensors>& inputs) {
  const int world = p.world_size;
  const int64_t d = p.head_dim, group = p.heads / p.kv_heads, keys = p.m * world;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<HostMatrix> out;
  std::vector<double> weight(static_cast<size_t>(keys));
  for (int r = 0; r < world; ++r) {
    const HostMatrix& q = inputs.at(static_cast<size_t>(r)).at("Q");
    HostMatrix o(p.m, query_cols(p));
    for (int64_t i = 0; i < p.m; ++i)
      for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.heads; ++h) {
          const int64_t q_col = (int64_t{b} * p.heads + h) * d, kv_col = (int64_t{b} * p.kv_heads + h / group) * d;
          const int64_t position = r * p.m + i;
          const int64_t visible = p.causal ? position + 1 : keys;  // keys 0 .. visible - 1
          double top = -std::numeric_limits<double>::infinity(), total = 0.0;
          for (int64_t t = 0; t < visible; ++t) {
            const HostMatrix& k = inputs.at(static_cast<size_t>(t / p.m)).at("K");
            double score = 0.0;
            for (int64_t e = 0; e < d; ++e) score += static_cast<double>(q.at(i, q_col + e)) * k.at(t % p.m, kv_col + e);
            weight[static_cast<size_t>(t)] = score * scale;
            top = std::max(top, score * scale);
          }
          for (int64_t t = 0; t < visible; ++t) {
            double& w = weight[static_cast<size_t>(t)];
            w = std::exp(w - top);
            total += w;
          }
          for (int64_t e = 0; e < d; ++e) {
            double sum = 0.0;
            for (int64_t t = 0; t < visible; ++t)
              sum += weight[static_cast<size_t>(t)] * inputs.at(static_cast<size_t>(t / p.m)).at("V").at(t % p.m, kv_col + e);
            o.at(i, q_col + e) = static_cast<float>(sum / total);
          }
        }
    out.push_back(std::move(o));
  }
  return out;
}

// Every rank's result (only < 0) or rank `only`'s alone (the others left 0 x 0).
std::vector<HostMatrix> outputs_of(const Problem& p, const std::vector<RankTensors>& inputs, int only) {
  check_problem(p);
  if (only >= p.world_size) throw std::invalid_argument("expected_output: rank " + std::to_string(only) + " of a world of " + std::to_string(p.world_size));
  if (is_fp8(p.input_dtype)) {
    Problem plain = p;  // the same op on the dequantized operands, in double
    plain.input_dtype = DType::f32;
    plain.b_dtype.reset();
    plain.output_dtype = DType::f32;
    plain.scaling = Scaling::none;
    return outputs_of(plain, dequantized(p, inputs), only);
  }
  if (is_attention(p.op)) return attention_outputs(p, inputs);
  if (p.routing_on_device) {  // the same op with the choices the inputs hold as its table
    Problem routed = p;
    routed.routing_on_device = false;
    for (int r = 0; r < p.world_size; ++r) {
      const HostMatrix& c = inputs.at(static_cast<size_t>(r)).at("choices");
      routed.choices.emplace_back();
      for (float e : c.data) routed.choices.back().push_back(static_cast<int>(e));
    }
    return outputs_of(routed, inputs, only);
  }
  const int world = p.world_size;
  auto wanted = [&](int r) { return only < 0 || r == only; };
  std::vector<HostMatrix> out;
  for (int r = 0; r < world; ++r) out.emplace_back(wanted(r) ? output_rows(p, r) : 0, wanted(r) ? p.n : 0);
  auto a_of = [&](int r) -> const HostMatrix& { return inputs.at(static_cast<size_t>(r)).at("A"); };
  // B as the [N, K] matrix of the definition, whichever way its memory holds it.
  std::vector<HostMatrix> b_matrices;
  for (int r = 0; r < world; ++r) {
    const HostMatrix& stored = inputs.at(static_cast<size_t>(r)).at("B");
    b_matrices.push_back(p.b_layout == BLayout::kn ? transposed(stored) : stored);
  }
  auto b_of = [&](int r) -> const HostMatrix& { return b_matrices.at(static_cast<size_t>(r)); };
  switch (p.op) {
    case OpKind::ag_gemm:
      for (int r = 0; r < world; ++r)
        for (int s = 0; s < world && wanted(r); ++s) {
          auto block = product(a_of(s), b_of(r));
          for (int64_t i = 0; i < p.m; ++i)
            for (int64_t j = 0; j < p.n; ++j)
              out[static_cast<size_t>(r)].at(s * p.m + i, j) = static_cast<float>(block[static_cast<size_t>(i * p.n + j)]);
        }
      break;
    case OpKind::gemm_rs:
    case OpKind::gemm_ar: {
      std::vector<double> sum(static_cast<size_t>(p.m * p.n), 0.0);
      for (int s = 0; s < world; ++s) {
        auto part = product(a_of(s), b_of(s));
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
      }
      for (int r = 0; r < world; ++r) {
        if (!wanted(r)) continue;
        const int64_t first = p.op == OpKind::gemm_rs ? r * output_rows(p, r) : 0;
        for (int64_t i = 0; i < out[static_cast<size_t>(r)].rows; ++i)
          for (int64_t j = 0; j < p.n; ++j)
            out[static_cast<size_t>(r)].at(i, j) = static_cast<float>(sum[static_cast<size_t>((first + i) * p.n + j)]);
      }
      break;
    }
    case OpKind::gemm_a2a: {
      std::vector<int64_t> filled(static_cast<size_t>(world), 0);
      for (int s = 0; s < world; ++s) {
        auto part = product(a_of(s), b_of(s));
        for (int64_t i = 0; i < p.m; ++i) {
          const int d = p.routing[static_cast<size_t>(s)][static_cast<size_t>(i)];
          const int64_t row = filled[static_cast<size_t>(d)]++;
          if (!wanted(d)) continue;
          for (int64_t j = 0; j < p.n; ++j)
            out[static_cast<size_t>(d)].at(row, j) = static_cast<float>(part[static_cast<size_t>(i * p.n + j)]);
        }
      }
      break;
    }
    case OpKind::a2a_gemm:
      for (int d = 0; d < world; ++d) {
        if (!wanted(d)) continue;
        HostMatrix gathered(output_rows(p, d), p.k);
        int64_t row = 0;
        for (int s = 0; s < world; ++s)
          for (int64_t i = 0; i < p.m; ++i)
            if (p.routing[static_cast<size_t>(s)][static_cast<size_t>(i)] == d) {
              for (int64_t c = 0; c < p.k; ++c) gathered.at(row, c) = a_of(s).at(i, c);
              ++row;
            }
        auto product_d = product(gathered, b_of(d));
        for (int64_t i = 0; i < gathered.rows; ++i)
          for (int64_t j = 0; j < p.n; ++j)
            out[static_cast<size_t>(d)].at(i, j) = static_cast<float>(product_d[static_cast<size_t>(i * p.n + j)]);
      }
      break;
    case OpKind::ag_moe: {
      // Row of (token t, choice j) = A_s[i] * B_e^T with rank r's own B (its shard of every expert).
      const std::vector<int64_t> row_of = moe_row_of(p);
      for (int r = 0; r < world; ++r)
        for (int64_t t = 0; t < p.m * world && wanted(r); ++t)
          for (int j = 0; j < p.topk; ++j) {
            const int s = static_cast<int>(t / p.m);
            const int e = p.choices[static_cast<size_t>(s)][static_cast<size_t>((t % p.m) * p.topk + j)];
            const int64_t row = row_of[static_cast<size_t>(t * p.topk + j)];
            for (int64_t c = 0; c < p.n; ++c) {
              double sum = 0.0;
              for (int64_t k = 0; k < p.k; ++k) sum += static_cast<double>(a_of(s).at(t % p.m, k)) * b_of(r).at(e * p.n + c, k);
              out[static_cast<size_t>(r)].at(row, c) = static_cast<float>(sum);
            }
          }
      break;
    }
    case OpKind::moe_rs: {
      // Z_q[t] = sum_j w_q[t][j] * (A_q[row(t, j)] * B_q,e^T); C_r = rows of rank r's tokens of sum_q Z_q.
      const std::vector<int64_t> row_of = moe_row_of(p);
      const int64_t tokens = p.m * world;
      std::vector<double> z(static_cast<size_t>(tokens * p.n), 0.0);
      // Rank `only` needs its own tokens' sums alone.
      const int64_t first_token = only < 0 ? 0 : only * p.m, end_token = only < 0 ? tokens : first_token + p.m;
      for (int q = 0; q < world; ++q) {
        const HostMatrix& w = inputs.at(static_cast<size_t>(q)).at("topk_weights");
        for (int64_t t = first_token; t < end_token; ++t)
          for (int j = 0; j < p.topk; ++j) {
            const int e = p.choices[static_cast<size_t>(t / p.m)][static_cast<size_t>((t % p.m) * p.topk + j)];
            const int64_t row = row_of[static_cast<size_t>(t * p.topk + j)];
            for (int64_t c = 0; c < p.n; ++c) {
              double sum = 0.0;
              for (int64_t k = 0; k < p.k; ++k) sum += static_cast<double>(a_of(q).at(row, k)) * b_of(q).at(e * p.n + c, k);
              z[static_cast<size_t>(t * p.n + c)] += static_cast<double>(w.at(t, j)) * sum;
            }
          }
      }
      for (int r = 0; r < world; ++r)
        for (int64_t i = 0; i < p.m && wanted(r); ++i)
          for (int64_t c = 0; c < p.n; ++c)
            out[static_cast<size_t>(r)].at(i, c) = static_cast<float>(z[static_cast<size_t>((r * p.m + i) * p.n + c)]);
      break;
    }
    case OpKind::ag_attention: break;  // attention_outputs, above
  }
  return out;
}

std::vector<RankTensors> absolute(const Problem& p, std::vector<RankTensors> inputs) {
  // Attention's terms are the values weighted by the softmax of the real scores: their sizes are the
  // op with |V| (the absolute scores would weigh other keys).
  for (RankTensors& rank : inputs)
    for (auto& [name, matrix] : rank)
      if (!is_attention(p.op) || name == "V")
        for (float& v : matrix.data) v = std::fabs(v);
  return inputs;
}

}  // namespace

std::vector<HostMatrix> expected_outputs(const Problem& p, const std::vector<RankTensors>& inputs) { return outputs_of(p, inputs, -1); }

std::vector<HostMatrix> expected_magnitudes(const Problem& p, std::vector<RankTensors> inputs) {
  return outputs_of(p, absolute(p, std::move(inputs)), -1);
}

HostMatrix expected_output(const Problem& p, const std::vector<RankTensors>& inputs, int rank) {
  if (rank < 0) throw std::invalid_argument("expected_output: rank " + std::to_string(rank) + " is negative");
  return std::move(outputs_of(p, inputs, rank).at(static_cast<size_t>(rank)));
}

HostMatrix expected_magnitude(const Problem& p, std::vector<RankTensors> inputs, int rank) {
  if (rank < 0) throw std::invalid_argument("expected_magnitude: rank " + std::to_string(rank) + " is negative");
  return std::move(outputs_of(p, absolute(p, std::move(inputs)), rank).at(static_cast<size_t>(rank)));
}

double relative_error(const HostMatrix& got, const HostMatrix& want, const HostMatrix& scale) {
  if (got.rows != want.rows || got.cols != want.cols || scale.data.size() != want.data.size()) return std::numeric_limits<double>::infinity();
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < want.data.size(); ++i) {
    if (std::isnan(got.data[i])) return std::numeric_limits<double>::infinity();
    const double d = static_cast<double>(got.data[i]) - want.data[i];
    diff += d * d;
    norm += static_cast<double>(scale.data[i]) * scale.data[i];
  }
  if (want.data.empty()) return 0.0;
  if (norm == 0.0) return std::numeric_limits<double>::infinity();  // nothing to tell results apart by
  return std::sqrt(diff / norm);
}

double relative_error(const HostMatrix& got, const HostMatrix& want) {
  if (got.rows != want.rows || got.cols != want.cols) return std::numeric_limits<double>::infinity();
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < want.data.size(); ++i) {
    if (std::isnan(got.data[i])) return std::numeric_limits<double>::infinity();
    const double d = static_cast<double>(got.data[i]) - want.data[i];
    diff += d * d;
    norm += static_cast<double>(want.data[i]) * want.data[i];
  }
  if (want.data.empty()) return 0.0;
  if (norm == 0.0) return std::numeric_limits<double>::infinity();  // nothing to tell results apart by
  return std::sqrt(diff / norm);
}

}  // namespace weft
