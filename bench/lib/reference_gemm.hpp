// A device-side reference for the GPU tests of the ops: every rank regenerates any rank's inputs
// (fill_random_bf16 is a pure function of seed and index) and computes its own expected result in
// fp32 with a plain kernel, so that results too large or too many to check on the host (1,000
// graph replays) are compared with a higher-precision reference on the device, element by element
// (element_check.hpp). Sharing the inputs' generator, it would agree with a generator gone wrong:
// the check refuses a reference of zeros, and Fills.RandomValuesAreSpreadAndDifferPerSeed tests the
// generator itself.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "element_check.hpp"
#include "weft/ir/problem.hpp"

namespace weft::bench {

// c[i, j] (+)= sum_p a[i, p] * b[j, p] in fp32; a [m, k], b [n, k] bf16 row-major, c [m, n] fp32.
void reference_gemm_f32(const void* a, const void* b, float* c, int64_t m, int64_t n, int64_t k, bool accumulate, cudaStream_t stream);
// The same over the absolute values |a| and |b|: the size of the terms summed into each element.
void reference_gemm_abs_f32(const void* a, const void* b, float* c, int64_t m, int64_t n, int64_t k, bool accumulate, cudaStream_t stream);

// The seeds of rank r's inputs in op tests: A from seed_a(seed, r), B from seed_b(seed, r).
inline uint64_t seed_a(uint64_t seed, int rank) { return seed * 7919u + static_cast<uint64_t>(rank) * 2u + 1u; }
inline uint64_t seed_b(uint64_t seed, int rank) { return seed * 7919u + static_cast<uint64_t>(rank) * 2u + 2u; }

// Rank `rank`'s expected result of `problem` (ag_gemm, gemm_rs or gemm_ar) when every rank r's A and
// B were filled from seed_a/seed_b(seed, r): [output_rows, n] fp32 in `want`, and the same op on the
// inputs' absolute values in `scale`. `scratch` holds at least (W * m * k + n * k) bf16 elements.
void expected_op_result(const Problem& problem, int rank, uint64_t seed, float* want, float* scale, void* scratch, cudaStream_t stream);

// Device memory check_elements_on_device counts in.
constexpr size_t kCheckCounterBytes = 64;

// check_elements (element_check.hpp) on the device: got [rows, cols] bf16 against want and scale
// [rows, cols] fp32, |got - want| <= factor * scale per element. `counters` is kCheckCounterBytes
// of device memory; the stream is synchronized.
ElementCheck check_elements_on_device(const void* got, const float* want, const float* scale, int64_t rows, int64_t cols, double factor,
                                      void* counters, cudaStream_t stream);

}  // namespace weft::bench
