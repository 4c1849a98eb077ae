// Small row-major float matrices on the host: the inputs and results of the reference executor and
// of the direct (mathematical) computation that every plan is compared with.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "weft/ir/problem.hpp"

namespace weft {

struct HostMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> data;

  HostMatrix() = default;
  HostMatrix(int64_t r, int64_t c, float fill = 0.0f) : rows(r), cols(c), data(static_cast<size_t>(r * c), fill) {}
  float& at(int64_t r, int64_t c) { return data[static_cast<size_t>(r * cols + c)]; }
  float at(int64_t r, int64_t c) const { return data[static_cast<size_t>(r * cols + c)]; }
};

// The [cols, rows] matrix with element (j, i) = m(i, j).
HostMatrix transposed(const HostMatrix& m);

// Buffers of one rank by name ("A", "B", "C", ...), each as its memory holds it: "B" is [N, K] in
// layout nk and [K, N] (B^T) in layout kn (Problem::b_layout).
using RankTensors = std::map<std::string, HostMatrix>;

// Fresh random A and B (ag_attention: Q, K and V) for every rank (uniform in [-1, 1], rounded to
// bf16 so that a GPU run on the same values computes the same function), B laid out as the
// problem's b_layout says; the same seed gives the same matrices in either layout. Deterministic in seed.
// FP8 problems: A and B hold FP8 values and "A_scale" and "B_scale" (scale_name) their scales
// (reference/fp8.hpp's quantize; values of varied size per row and 128-column block).
// MoE problems whose choices are given on the device (Problem::routing_on_device) also get each
// rank's "choices" [M, topk] (expert ids as floats, distinct per token), which the direct computation
// reads as the problem's table.
std::vector<RankTensors> random_inputs(const Problem& problem, uint64_t seed);

// The op's result on every rank, computed directly from its definition (problem.hpp) in double; FP8
// operands dequantized first (value times scale), a formula the reference executor's per-block fp32
// sums do not share.
std::vector<HostMatrix> expected_outputs(const Problem& problem, const std::vector<RankTensors>& inputs);

// The size of the terms summed into each element of every rank's result: the op on the inputs'
// absolute values (ag_attention: with |V|, the values weighted by the real softmax). Against it a reordered float sum differs by a few roundings even where the terms
// cancel, while a race or a missing step is off by the size of the terms.
std::vector<HostMatrix> expected_magnitudes(const Problem& problem, std::vector<RankTensors> inputs);

// One rank's result and term sizes alone: what a rank checking its own output needs, at a world-th of
// the work of the functions above for the ops whose outputs differ per rank (each rank of a test
// computing every rank's result is world-squared work: 15 s per MoE case at world 4).
HostMatrix expected_output(const Problem& problem, const std::vector<RankTensors>& inputs, int rank);
HostMatrix expected_magnitude(const Problem& problem, std::vector<RankTensors> inputs, int rank);

// ||got - want|| / ||want|| in the Frobenius norm; infinity when shapes differ, got holds NaN, or
// want is all zero but not empty (random inputs never give that: the inputs or the reference are
// broken, and any result would match).
double relative_error(const HostMatrix& got, const HostMatrix& want);
// ||got - want|| / ||scale||: the error relative to the size of the terms that were summed (`scale`:
// the op on the inputs' absolute values), which a different summation order can only change by a
// few float roundings of it, however much the terms cancel. Infinity where scale is all zero but
// not empty, as above.
double relative_error(const HostMatrix& got, const HostMatrix& want, const HostMatrix& scale);

float round_to_bf16(float value);

}  // namespace weft
