// Fills device buffers with a constant: how tests and benchmarks poison outputs before a run, so that
// an element no kernel wrote is caught (bf16 NaN by default).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace weft {

// Writes the 16-bit pattern `bits` into `count` elements at `data` on `stream`. 0x7fc0 is bf16 NaN.
void fill_u16(void* data, int64_t count, uint16_t bits, cudaStream_t stream);

constexpr uint16_t kBf16Nan = 0x7fc0;

}  // namespace weft
