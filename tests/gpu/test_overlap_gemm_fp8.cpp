// The overlap GEMM's FP8 main loop on one GPU: e4m3 A and B with one scale per operand or one per
// row, on the 128x128 and 64x128 tiles compiled for it (128x128 also in clusters of two), ragged
// shapes, split K, a second A operand with scales of its own, and CTAs that walk many tiles, against
// the double-precision product of the dequantized operands (what the GPU multiplies: the elements are exact in FP8, so the only
// error is fp32 accumulation and the bf16 output); C poisoned (NaN) before each of two calls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "../support/grid_table.hpp"
#include "../support/host_gemm.hpp"
#include "check_against_host.hpp"
#include "element_check.hpp"
#include "weft/cuda/check.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/overlap_gemm.hpp"
#include "weft/reference/fp8.hpp"

namespace weft {
namespace {

using test_support::host_gemm;

struct DeviceBytes {
  void* data = nullptr;
  explicit DeviceBytes(size_t bytes) { WEFT_CUDA_CHECK(cudaMalloc(&data, bytes)); }
  ~DeviceBytes() { cudaFree(data); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
};

// An FP8 operand: random values over a few orders of magnitude per row (so that row scales differ),
// their scales (amax / 448 per row, or over the operand), the e4m3 bytes, and the dequantized values.
struct Fp8Operand {
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
  HostMatrix dequantized, magnitude;  // magnitude: |dequantized|, for the error bound
};

Fp8Operand make_operand(int64_t rows, int64_t cols, bool row_scales, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  HostMatrix x(rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float row_size = std::ldexp(1.0f, static_cast<int>(r % 7) - 3);
    for (int64_t c = 0; c < cols; ++c) x.at(r, c) = normal(random) * row_size;
  }
  Fp8Operand op;
  op.scales.assign(row_scales ? static_cast<size_t>(rows) : 1, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float& s = op.scales[row_scales ? static_cast<size_t>(r) : 0];
      s = std::max(s, std::fabs(x.at(r, c)) / fp8_max(DType::e4m3));
    }
  op.bytes.resize(static_cast<size_t>(rows * cols));
  op.dequantized = HostMatrix(rows, cols);
  op.magnitude = HostMatrix(rows, cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float s = op.scales[row_scales ? static_cast<size_t>(r) : 0];
      const uint8_t bits = fp8_bits(x.at(r, c) / s, DType::e4m3);
      op.bytes[static_cast<size_t>(r * cols + c)] = bits;
      op.dequantized.at(r, c) = fp8_value(bits, DType::e4m3) * s;
      op.magnitude.at(r, c) = std::fabs(op.dequantized.at(r, c));
    }
  return op;
}

void upload(const DeviceBytes& to, const void* from, size_t bytes) { WEFT_CUDA_CHECK(cudaMemcpy(to.data, from, bytes, cudaMemcpyHostToDevice)); }

// Each case twice: on one CTA per tile, and on 3 CTAs (each walks many tiles: the pipeline carried
// from tile to tile, the accumulators cleared between them). K of 96, 256, 272, 528 and 1024 are 1, 2,
// 3, 5 and 8 k-tiles of 128 (the main loop issues them in pairs into alternating partial-sum
// fragments, an odd one last alone). Tiles of even tile rows read their A
// rows from a second operand (the same bytes, scales twice A's), so those rows of C come out doubled.
TEST(OverlapGemmFp8, TensorAndRowScaledProductsMatchTheDequantizedProduct) {
  cudaStream_t stream{};
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const OverlapGemmConfig config : {OverlapGemmConfig::tile_128x128x128_fp8, OverlapGemmConfig::tile_64x128}) {
    const OverlapGemmShape tile = shape_of(config);
    for (const bool row_scales : {false, true})
      for (const auto& [m, n, k, splits] : {std::tuple{256, 512, 1024, 1}, {200, 136, 272, 1}, {300, 700, 528, 1}, {384, 1024, 2048, 3}, {128, 256, 96, 1},
                                                  {256, 384, 256, 1}}) {
        const Fp8Operand a = make_operand(m, k, row_scales, 17 + m), b = make_operand(n, k, row_scales, 29 + n);
        HostMatrix want = host_gemm(a.dequantized, b.dequantized), bound = host_gemm(a.magnitude, b.magnitude);
        for (int64_t i = 0; i < m; ++i)
          if ((i / tile.tile_m) % 2 == 0)
            for (int64_t j = 0; j < n; ++j) {
              want.at(i, j) *= 2;
              bound.at(i, j) *= 2;
            }
        std::vector<float> a2_scales = a.scales;
        for (float& v : a2_scales) v *= 2;
        DeviceBytes da(a.bytes.size()), da2(a.bytes.size()), db(b.bytes.size()), sa(a.scales.size() * 4), sa2(a2_scales.size() * 4),
            sb(b.scales.size() * 4), dc(static_cast<size_t>(m * n) * 2);
        upload(da, a.bytes.data(), a.bytes.size());
        upload(da2, a.bytes.data(), a.bytes.size());
        upload(db, b.bytes.data(), b.bytes.size());
        upload(sa, a.scales.data(), a.scales.size() * 4);
        upload(sa2, a2_scales.data(), a2_scales.size() * 4);
        upload(sb, b.scales.data(), b.scales.size() * 4);
        std::vector<OverlapGemmTile> grid = test_support::grid_table(m, n, tile);
        for (OverlapGemmTile& e : grid)
          if (e.tile_m % 2 == 0) {
            e.a_operand = 1;
            e.a_tile_m = e.tile_m;
          }
        const int64_t tiles_m = (m + tile.tile_m - 1) / tile.tile_m, tiles_n = (n + tile.tile_n - 1) / tile.tile_n;
        // Alone, and in clusters of two where the tiles pair up: 2x1 (a tile column's rows in pairs,
        // sharing B's tile: the pair's A rows from different operands) and 1x2 (sharing A's).
        for (const auto& [cm, cn] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{1, 2}}) {
          if ((cm == 2 && tiles_m % 2 != 0) || (cn == 2 && tiles_n % 2 != 0)) continue;
          if (cm * cn > 1 && config != OverlapGemmConfig::tile_128x128x128_fp8) continue;  // compiled unclustered
          std::vector<OverlapGemmTile> table;
          if (cm == 2) {
            for (int64_t j = 0; j < tiles_n; ++j)
              for (int64_t i = 0; i < tiles_m; ++i) table.push_back(grid[static_cast<size_t>(i * tiles_n + j)]);
          } else {
            table = grid;
          }
          if (splits > 1) table = split_along_k(table, splits, k, config, /*group=*/cm * cn);
          DeviceBytes dtable(table.size() * sizeof(OverlapGemmTile));
          upload(dtable, table.data(), table.size() * sizeof(OverlapGemmTile));
          for (const int ctas : {0, 3}) {
            const std::string what = to_string(config) + ", " + std::string(row_scales ? "row" : "tensor") + " scales, " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                                     std::to_string(k) + ", " + std::to_string(splits) + " splits, clusters of " + std::to_string(cm) + "x" +
                                     std::to_string(cn) + ", " + (ctas ? std::to_string(ctas) + " CTAs" : "a CTA per tile");
            OverlapGemmLaunch l;
            l.a = da.data, l.lda = k, l.b = db.data, l.ldb = k, l.m = m, l.n = n, l.k = k;
            l.a2 = da2.data, l.lda2 = k, l.m2 = m;
            l.fp8 = true;
            l.row_scales = row_scales;
            l.a_scales = static_cast<const float*>(sa.data);
            l.a2_scales = static_cast<const float*>(sa2.data);
            l.b_scales = static_cast<const float*>(sb.data);
            l.targets[0] = OverlapGemmTarget{dc.data, n, m, n};
            l.target_count = 1;
            l.tiles = static_cast<const OverlapGemmTile*>(dtable.data);
            l.tile_count = static_cast<int>(table.size());
            l.k_splits = splits;
            l.cluster_m = cm, l.cluster_n = cn;
            l.max_ctas = ctas;
            l.wait_timeout_ns = 2'000'000'000ull;
            require_valid_table(l, config, table);
            OverlapGemm gemm(l, config);
            for (int call = 0; call < 2; ++call) {
              fill_u16(dc.data, m * n, kBf16Nan, stream);
              gemm.launch(stream);
              ASSERT_TRUE(synchronize_with_timeout(stream, 20000)) << what;
              const HostMatrix got = bench::download(DeviceRegion{dc.data, m, n, n}, stream);
              const Problem gemm_problem{OpKind::gemm_ar, m, n, k, 1, DType::bf16, DType::bf16, {}};
              const bench::ElementCheck check = bench::check_elements(got, want, bound, bench::bf16_error_factor(gemm_problem));
              EXPECT_TRUE(check.passed()) << what << ", call " << call << ": " << check.explain();
            }
          }
        }
      }
  }
  WEFT_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace weft
