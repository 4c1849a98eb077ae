// Output tiles of a GEMM and the orders they run in.
//
// A TileGrid cuts an [m, n] output into tile_m x tile_n tiles (ragged at the far edges). Tiles are
// named by their row-major index in the grid. An order is a permutation of those indices: the
// sequence a persistent kernel hands tiles to its CTAs. Builders make orders with
// rasterized_order() (CUTLASS-style raster with swizzle) and rank_shifted_order() (Flux: each rank
// starts on a different shard), then schedule_persistent() says which SM runs each tile and in which
// wave; tiles of one wave finish at about the same time (FlashOverlap, Section 2.1.1).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace weft {

// A box of a row-major matrix: rows [row, row + rows), columns [col, col + cols).
struct Rect {
  int64_t row = 0;
  int64_t col = 0;
  int64_t rows = 0;
  int64_t cols = 0;

  bool empty() const { return rows <= 0 || cols <= 0; }
  int64_t row_end() const { return row + rows; }
  int64_t col_end() const { return col + cols; }
  bool operator==(const Rect&) const = default;
};

bool overlaps(const Rect& a, const Rect& b);
bool contains(const Rect& outer, const Rect& inner);

struct TileGrid {
  int64_t m = 0;
  int64_t n = 0;
  int tile_m = 128;
  int tile_n = 128;

  int64_t tiles_m() const { return (m + tile_m - 1) / tile_m; }
  int64_t tiles_n() const { return (n + tile_n - 1) / tile_n; }
  int64_t count() const { return tiles_m() * tiles_n(); }
  int64_t index(int64_t tile_row, int64_t tile_col) const { return tile_row * tiles_n() + tile_col; }
  // The output rectangle of tile `index`, clipped to [m, n].
  Rect tile(int64_t index) const;
};

// along_m: consecutive tiles walk down M (the next column strip starts when M is exhausted);
// along_n: consecutive tiles walk across N. swizzle >= 1 is the strip width: with along_m and
// swizzle s, tiles of s adjacent tile columns are visited row by row before moving on, which keeps
// s columns of B hot in L2 (the same idea as CUTLASS's threadblock swizzle).
enum class Raster { along_m, along_n };
std::string_view to_string(Raster raster);
Raster parse_raster(std::string_view text);

std::vector<int64_t> rasterized_order(const TileGrid& grid, Raster raster, int swizzle);

// Reorders `order` (stably) so that rank `rank` visits the tiles of row shard
// (rank + first_offset) % world first, then the next shard, and so on. A tile belongs to the shard
// that holds its first row; shards are `rows_per_shard` rows. Flux uses first_offset = 1 for
// GEMM+ReduceScatter (write to the next rank first, so ranks never hit one peer together) and
// first_offset = 0 for AllGather+GEMM (local shard first, then peers in arrival order).
std::vector<int64_t> rank_shifted_order(const TileGrid& grid, const std::vector<int64_t>& order,
                                        int64_t rows_per_shard, int world, int rank,
                                        int first_offset);

// A persistent kernel on `num_sms` CTAs takes tiles in order: the i-th tile runs on SM i % num_sms
// in wave i / num_sms.
struct PersistentSchedule {
  int num_sms = 1;
  std::vector<int64_t> order;        // tile indices in execution order
  std::vector<int> sm_of_position;   // per position in `order`
  std::vector<int64_t> wave_of_position;

  int64_t wave_count() const;
  // waves()[w] lists the tile indices of wave w in execution order.
  std::vector<std::vector<int64_t>> waves() const;
};

PersistentSchedule schedule_persistent(const std::vector<int64_t>& order, int num_sms);

// Throws std::invalid_argument unless `order` is a permutation of [0, grid.count()).
void check_is_permutation(const TileGrid& grid, const std::vector<int64_t>& order);

}  // namespace weft
