// FP8 on the host, rounded as the GPU rounds (cvt.rn.satfinite: round to nearest even, saturating):
// the conversions, and the quantization of a matrix into FP8 values and their fp32 scales
// (ir/scaling.hpp) that the reference executor's inputs and the GPU tests' are made of.
//   e4m3 (OCP E4M3FN): bias 7, 3 mantissa bits, largest 448, smallest subnormal 2^-9, no infinity,
//                      NaN = S.1111.111.
//   e5m2 (OCP E5M2)  : bias 15, 2 mantissa bits, largest 57344, smallest subnormal 2^-16.
// Saturating: a finite value beyond the largest, or an infinity, becomes the largest of its sign;
// NaN stays NaN.
#pragma once

#include <cstdint>

#include "weft/ir/scaling.hpp"
#include "weft/reference/host_matrix.hpp"

namespace weft {

float fp8_max(DType format);                    // 448 (e4m3) or 57344 (e5m2)
float round_to_fp8(float value, DType format);  // the FP8 value nearest `value`, as a float
uint8_t fp8_bits(float value, DType format);    // round_to_fp8's value, encoded
float fp8_value(uint8_t bits, DType format);    // decodes (every NaN encoding gives NaN)

// An operand quantized: values (FP8 values held in floats) and scales (scale_rows x scale_cols).
struct Quantized {
  HostMatrix values;
  HostMatrix scales;
};
// Each cell's scale is its amax / fp8_max (1 for a cell of zeros), each value round_to_fp8(x / scale)
// with the division in fp32.
Quantized quantize(const HostMatrix& x, const ScaleGrid& grid, DType format);
// The same with scales given (tensor scaling's A: one scale for every rank's rows).
HostMatrix quantize_with(const HostMatrix& x, const ScaleGrid& grid, const HostMatrix& scales, DType format);
// values * scale, element by element, in double before the float: what the operand stands for.
HostMatrix dequantize(const HostMatrix& values, const ScaleGrid& grid, const HostMatrix& scales);

}  // namespace weft
