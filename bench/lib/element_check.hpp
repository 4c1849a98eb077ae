// How the GPU tests judge a bf16 result against a reference computed in higher precision: element by
// element, each within a bound scaled by the size of the terms summed into it (the op on the inputs'
// absolute values, as prove_on_cpu does). One relative error over a whole output lets a wrong block
// of a few elements through; a bound per element does not. A reference of zeros is refused: it
// means the inputs or the reference are broken, and any result would match it.
//   ElementCheck c = check_elements(got, want, scale, bf16_error_factor(problem));
//   EXPECT_TRUE(c.passed()) << c.explain();
// The device-side check of the same kind is check_elements_on_device (reference_gemm.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/reference/host_matrix.hpp"

namespace weft::bench {

struct ElementCheck {
  int64_t elements = 0;        // compared
  int64_t cols = 1;            // of the output, to name an element by row and column
  int64_t outside = 0;         // beyond their bound (NaN included)
  int64_t nans = 0;
  bool zero_reference = false;  // a non-empty reference of zeros (refused)
  double worst_ratio = 0;      // max |got - want| / bound (infinite where the bound is 0 and they differ)
  int64_t first_outside = -1;  // the first element beyond its bound, and its values
  double got = 0, want = 0, bound = 0;

  // Nothing outside its bound, and a reference that is not all zero (an empty output passes).
  bool passed() const { return outside == 0 && !zero_reference; }
  // What failed, with the first offending element's row, column and values; "" when passed.
  std::string explain() const;
  // The two checks together (several calls or ranks): counts add, the first failure is kept.
  void add(const ElementCheck& other);
};

// The bound of |got - want| as a multiple of an element's scale, for bf16 results of `problem`.
double bf16_error_factor(const Problem& problem);

// got against want, element by element: |got - want| <= factor * scale. Shapes must agree.
ElementCheck check_elements(const HostMatrix& got, const HostMatrix& want, const HostMatrix& scale, double factor);

}  // namespace weft::bench
