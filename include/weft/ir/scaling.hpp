// FP8 scaling: how the fp32 scales of an FP8 operand cover its elements.
//
// An FP8 operand holds x = round(x_real / s) (saturating, round to nearest even); s is its
// dequantization scale, so that the GEMM computes C[i, j] = sum_k (s_a a[i, k]) (s_b b[j, k]), as
// cuBLASLt's A/B scale pointers and torch._scaled_mm mean it. The modes:
//   tensor: one scale per operand. A's is the scale of the whole logical A, the same on every rank
//           (the caller's amax over all ranks' rows, as torch's fused_all_gather_scaled_matmul
//           assumes), so rows gathered from peers share it; B's is each rank's own. Applied in the
//           GEMM's epilogue.
//   row   : one scale per row of A (per token; MoE: per token and choice) and one per row of B
//           [N, K] (per output column); applied in the epilogue.
//   block : DeepSeek-V3's: A 1x128 (a scale per row and 128-column block of K), B 128x128; the GEMM
//           scales each 128-wide K block's fp32 partial sum before adding it to the fp32 total (the
//           promotion DeepSeek's recipe makes), so a GEMM's K range must start on a block boundary.
// Scales travel with their rows: every step that moves rows of an FP8 buffer moves their scales too
// (a gathered A carries the gathered rows' scales). Reductions never see FP8: partial sums are bf16
// or f32. The scales of a buffer are a row-major fp32 array of scale_rows x scale_cols.
#pragma once

#include <cstdint>

namespace weft {

enum class Scaling { none, tensor, row, block };
enum class Operand { a, b };

// The K block of block scaling, and B's row block (DeepSeek-V3's 128x128 weight blocks).
constexpr int64_t kScaleBlock = 128;

// How scales tile a buffer: one per block of block_rows x block_cols elements.
struct ScaleGrid {
  int64_t block_rows = 0;  // rows per scale; 0: every row of the buffer (one scale down it)
  int64_t block_cols = 0;  // columns per scale; 0: every column
  // Row blocks restart every group_rows rows (each expert's slab of a MoE B is blocked on its own);
  // 0: they never restart.
  int64_t group_rows = 0;

  bool operator==(const ScaleGrid&) const = default;
};

struct ScaleCell {
  int64_t row = 0;
  int64_t col = 0;

  bool operator==(const ScaleCell&) const = default;
};

// The scale array of a buffer of `rows` x `cols` elements: its rows and columns.
int64_t scale_rows(const ScaleGrid& grid, int64_t rows);
int64_t scale_cols(const ScaleGrid& grid, int64_t cols);
// The scale of element (row, col).
ScaleCell scale_cell(const ScaleGrid& grid, int64_t row, int64_t col);
// Whether one scale covers several rows (tensor scaling, B's blocks): rows gathered from several
// places must then agree on it.
bool spans_rows(const ScaleGrid& grid);
// Scales a box of `rows` x `cols` elements at (row, col) touches (what moving the box moves besides
// its elements).
int64_t scales_touched(const ScaleGrid& grid, int64_t row, int64_t col, int64_t rows, int64_t cols);

// Where the CUDA executor keeps scale (row cell, col cell) of an FP8 buffer of rows x cols with
// `grid`, as an index into its fp32 scale array (and where weft::Op's caller gives them):
// cuBLASLt's layouts. tensor: 0; row: the row; block, A's 1x128: K-block-major with the rows padded
// to a multiple of 4, K block b of row i at b * pad4(rows) + i (VEC128_32F); B's 128x128:
// row-block-major with the K blocks padded to a multiple of 4, at row block * pad4(K blocks) + K
// block (BLK128x128_32F). And how many floats it holds.
int64_t device_scale_index(const ScaleGrid& grid, int64_t rows, int64_t cols, ScaleCell cell);
int64_t device_scale_count(const ScaleGrid& grid, int64_t rows, int64_t cols);

}  // namespace weft
