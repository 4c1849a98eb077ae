#include "element_check.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace weft::bench {

std::string ElementCheck::explain() const {
  if (passed()) return "";
  std::ostringstream out;
  if (zero_reference)
    out << "the reference is all zero (over " << elements << " elements): the inputs or the reference are broken (any result would match)\n";
  if (outside > 0) {
    out << outside << " of " << elements << " elements outside their bound (" << nans << " NaN); worst |got - want| / bound " << worst_ratio
        << "; first at row " << first_outside / cols << " column " << first_outside % cols << ": got " << got << ", want " << want
        << ", bound " << bound << "\n";
  }
  return out.str();
}

void ElementCheck::add(const ElementCheck& other) {
  if (first_outside < 0 && other.first_outside >= 0) {
    first_outside = other.first_outside;
    cols = other.cols;
    got = other.got;
    want = other.want;
    bound = other.bound;
  }
  zero_reference = zero_reference || other.zero_reference;
  elements += other.elements;
  outside += other.outside;
  nans += other.nans;
  worst_ratio = std::max(worst_ratio, other.worst_ratio);
}

double bf16_error_factor(const Problem& p) {
  // Rounding to the nearest bf16 is off by at most 2^-9 of the value rounded, and every value a
  // strategy rounds on an element's way is at most the element's scale: the result itself, each
  // rank's partial product and each addition of a reduction over the W ranks, each weighted top-k
  // term (moe_rs). The fp32 accumulation over K adds K 2^-24 of the scale, the reference's as much.
  const double roundings = 2.0 + 2.0 * p.world_size + (is_moe(p.op) ? p.topk : 0);
  return roundings * std::ldexp(1.0, -9) + static_cast<double>(p.k) * std::ldexp(1.0, -23);
}

ElementCheck check_elements(const HostMatrix& got, const HostMatrix& want, const HostMatrix& scale, double factor) {
  if (got.rows != want.rows || got.cols != want.cols || scale.rows != want.rows || scale.cols != want.cols)
    throw std::invalid_argument("check_elements: got " + std::to_string(got.rows) + "x" + std::to_string(got.cols) + ", want " +
                                std::to_string(want.rows) + "x" + std::to_string(want.cols) + ", scale " + std::to_string(scale.rows) + "x" +
                                std::to_string(scale.cols) + ": the shapes must agree");
  ElementCheck c;
  c.elements = static_cast<int64_t>(want.data.size());
  c.cols = std::max<int64_t>(want.cols, 1);
  bool any_nonzero = false;
  for (size_t i = 0; i < want.data.size(); ++i) {
    const double g = got.data[i], w = want.data[i], bound = factor * scale.data[i], d = std::fabs(g - w);
    any_nonzero = any_nonzero || w != 0.0;
    const bool nan = std::isnan(g);
    c.nans += nan;
    const double ratio = nan ? std::numeric_limits<double>::infinity() : bound > 0 ? d / bound : d > 0 ? std::numeric_limits<double>::infinity() : 0.0;
    c.worst_ratio = std::max(c.worst_ratio, ratio);
    if (nan || d > bound) {
      if (c.outside++ == 0) {
        c.first_outside = static_cast<int64_t>(i);
        c.got = g;
        c.want = w;
        c.bound = bound;
      }
    }
  }
  c.zero_reference = c.elements > 0 && !any_nonzero;
  return c;
}

}  // namespace weft::bench
