// The inputs' generator (fill_random_bf16): the op tests' device reference regenerates the inputs
// with it (bench/lib/reference_gemm.hpp), so a generator gone wrong (zeros, a constant, the same
// values for every seed) would agree with itself there; here it must give values spread over
// [-1, 1), the same for a seed and others for another seed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "measure.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/cuda/check.hpp"

namespace weft {
namespace {

std::vector<float> random_values(uint64_t seed, int64_t count) {
  bench::DeviceBuffer buffer(static_cast<size_t>(count) * 2);
  fill_u16(buffer.data, count, kBf16Nan, nullptr);
  fill_random_bf16(buffer.data, count, seed, nullptr);
  std::vector<uint16_t> raw(static_cast<size_t>(count));
  WEFT_CUDA_CHECK(cudaMemcpy(raw.data(), buffer.data, raw.size() * 2, cudaMemcpyDeviceToHost));
  std::vector<float> values;
  for (uint16_t bits : raw) {
    const uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &wide, sizeof f);
    values.push_back(f);
  }
  return values;
}

TEST(Fills, RandomValuesAreSpreadAndDifferPerSeed) {
  constexpr int64_t kCount = 1 << 16;
  const std::vector<float> one = random_values(1, kCount), again = random_values(1, kCount), other = random_values(2, kCount);
  double sum = 0, squares = 0;
  int64_t zeros = 0, differ = 0;
  std::set<float> distinct;
  for (int64_t i = 0; i < kCount; ++i) {
    const float v = one[static_cast<size_t>(i)];
    ASSERT_TRUE(v >= -1.0f && v <= 1.0f) << "element " << i << " is " << v;
    sum += v;
    squares += static_cast<double>(v) * v;
    zeros += v == 0.0f;
    differ += v != other[static_cast<size_t>(i)];
    distinct.insert(v);
  }
  // Uniform on [-1, 1): mean 0, mean square 1/3 (the standard errors here are about 0.002).
  EXPECT_LT(std::fabs(sum / kCount), 0.02);
  EXPECT_NEAR(squares / kCount, 1.0 / 3.0, 0.02);
  EXPECT_LT(zeros, kCount / 100);
  EXPECT_GT(distinct.size(), 1000u) << "bf16 has thousands of values in [-1, 1)";
  EXPECT_EQ(one, again) << "a seed gives the same values (the references regenerate them)";
  EXPECT_GT(differ, kCount * 9 / 10) << "another seed gives other values";
  EXPECT_NE(std::vector<float>(one.begin(), one.begin() + kCount / 2), std::vector<float>(one.begin() + kCount / 2, one.end()))
      << "values depend on the index";
}

}  // namespace
}  // namespace weft
