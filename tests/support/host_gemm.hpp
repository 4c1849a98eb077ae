// C = A B^T in double on the host (A [m, k], B [n, k]): the GPU GEMM tests' reference.
#pragma once

#include <cstdint>

#include "weft/reference/host_matrix.hpp"

namespace weft::test_support {

inline HostMatrix host_gemm(const HostMatrix& a, const HostMatrix& b) {
  HostMatrix c(a.rows, b.rows);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < b.rows; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < a.cols; ++p) sum += static_cast<double>(a.at(i, p)) * b.at(j, p);
      c.at(i, j) = static_cast<float>(sum);
    }
  return c;
}

}  // namespace weft::test_support
