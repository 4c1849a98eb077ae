#include "weft/reference/fp8.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace weft {

namespace {

struct Format {
  int mantissa_bits;
  int bias;
  float max;
};

Format format_of(DType format) {
  if (format == DType::e4m3) return {3, 7, 448.0f};
  if (format == DType::e5m2) return {2, 15, 57344.0f};
  throw std::invalid_argument("not an FP8 dtype: " + std::string(to_string(format)));
}

}  // namespace

float fp8_max(DType format) { return format_of(format).max; }

float round_to_fp8(float value, DType format) {
  const Format f = format_of(format);
  if (std::isnan(value)) return value;
  const float magnitude = std::fabs(value);
  if (magnitude == 0.0f) return value;
  if (std::isinf(magnitude)) return std::copysign(f.max, value);
  // The spacing of FP8 values around `magnitude`: 2^(exponent - mantissa bits), the exponent no
  // lower than the smallest normal's (1 - bias), below which values are subnormal and evenly spaced.
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude = m * 2^exponent, m in [0.5, 1)
  exponent = std::max(exponent - 1, 1 - f.bias);
  const float spacing = std::ldexp(1.0f, exponent - f.mantissa_bits);
  // magnitude / spacing is exact (a power of two); nearbyint rounds half to even.
  const float rounded = std::nearbyint(magnitude / spacing) * spacing;
  return std::copysign(std::min(rounded, f.max), value);
}

uint8_t fp8_bits(float value, DType format) {
  const Format f = format_of(format);
  const float v = round_to_fp8(value, format);
  if (std::isnan(v)) return 0x7f;  // a NaN in both formats (E4M3FN's S.1111.111, E5M2's S.11111.11)
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  const float magnitude = std::fabs(v);
  if (magnitude == 0.0f) return sign;
  int exponent = 0;
  const float m = std::frexp(magnitude, &exponent);  // magnitude = m * 2^exponent
  int biased = exponent - 1 + f.bias;
  int mantissa = 0;
  if (biased <= 0) {  // subnormal: magnitude = mantissa * 2^(1 - bias - mantissa bits)
    biased = 0;
    mantissa = static_cast<int>(std::ldexp(magnitude, f.bias - 1 + f.mantissa_bits));
  } else {
    mantissa = static_cast<int>(std::ldexp(2.0f * m - 1.0f, f.mantissa_bits));
  }
  return static_cast<uint8_t>(sign | (biased << f.mantissa_bits) | mantissa);
}

float fp8_value(uint8_t bits, DType format) {
  const Format f = format_of(format);
  const int exponent_bits = 7 - f.mantissa_bits;
  const int biased = (bits >> f.mantissa_bits) & ((1 << exponent_bits) - 1);
  const int mantissa = bits & ((1 << f.mantissa_bits) - 1);
  const float sign = bits & 0x80 ? -1.0f : 1.0f;
  if (format == DType::e4m3 && biased == 15 && mantissa == 7) return std::numeric_limits<float>::quiet_NaN();
  if (format == DType::e5m2 && biased == 31)
    return mantissa ? std::numeric_limits<float>::quiet_NaN() : sign * std::numeric_limits<float>::infinity();
  if (biased == 0) return sign * std::ldexp(static_cast<float>(mantissa), 1 - f.bias - f.mantissa_bits);
  return sign * std::ldexp(1.0f + std::ldexp(static_cast<float>(mantissa), -f.mantissa_bits), biased - f.bias);
}

Quantized quantize(const HostMatrix& x, const ScaleGrid& grid, DType format) {
  HostMatrix amax(scale_rows(grid, x.rows), scale_cols(grid, x.cols), 0.0f);
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t c = 0; c < x.cols; ++c) {
      const ScaleCell cell = scale_cell(grid, r, c);
      amax.at(cell.row, cell.col) = std::max(amax.at(cell.row, cell.col), std::fabs(x.at(r, c)));
    }
  for (float& s : amax.data) s = s > 0 ? s / fp8_max(format) : 1.0f;
  Quantized q;
  q.values = quantize_with(x, grid, amax, format);
  q.scales = std::move(amax);
  return q;
}

HostMatrix quantize_with(const HostMatrix& x, const ScaleGrid& grid, const HostMatrix& scales, DType format) {
  HostMatrix values(x.rows, x.cols);
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t c = 0; c < x.cols; ++c) {
      const ScaleCell cell = scale_cell(grid, r, c);
      values.at(r, c) = round_to_fp8(x.at(r, c) / scales.at(cell.row, cell.col), format);
    }
  return values;
}

HostMatrix dequantize(const HostMatrix& values, const ScaleGrid& grid, const HostMatrix& scales) {
  HostMatrix out(values.rows, values.cols);
  for (int64_t r = 0; r < values.rows; ++r)
    for (int64_t c = 0; c < values.cols; ++c) {
      const ScaleCell cell = scale_cell(grid, r, c);
      out.at(r, c) = static_cast<float>(static_cast<double>(values.at(r, c)) * scales.at(cell.row, cell.col));
    }
  return out;
}

}  // namespace weft
