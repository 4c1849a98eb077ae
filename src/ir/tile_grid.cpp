#include "weft/ir/tile_grid.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace weft {

bool overlaps(const Rect& a, const Rect& b) {
  if (a.empty() || b.empty()) return false;
  return a.row < b.row_end() && b.row < a.row_end() && a.col < b.col_end() && b.col < a.col_end();
}

bool contains(const Rect& outer, const Rect& inner) {
  if (inner.empty()) return true;
  return inner.row >= outer.row && inner.row_end() <= outer.row_end() && inner.col >= outer.col &&
         inner.col_end() <= outer.col_end();
}

Rect TileGrid::tile(int64_t index) const {
  const int64_t tile_row = index / tiles_n();
  const int64_t tile_col = index % tiles_n();
  Rect rect;
  rect.row = tile_row * tile_m;
  rect.col = tile_col * tile_n;
  rect.rows = std::min<int64_t>(tile_m, m - rect.row);
  rect.cols = std::min<int64_t>(tile_n, n - rect.col);
  return rect;
}

std::string_view to_string(Raster raster) { return raster == Raster::along_m ? "along_m" : "along_n"; }

Raster parse_raster(std::string_view text) {
  if (text == "along_m") return Raster::along_m;
  if (text == "along_n") return Raster::along_n;
  throw std::invalid_argument("unknown raster '" + std::string(text) + "' (expected along_m or along_n)");
}

std::vector<int64_t> rasterized_order(const TileGrid& grid, Raster raster, int swizzle) {
  if (swizzle < 1) throw std::invalid_argument("swizzle must be >= 1, got " + std::to_string(swizzle));
  const bool walk_m = raster == Raster::along_m;
  // "major" is the dimension cut into strips of `swizzle`; "minor" is walked inside a strip.
  const int64_t major_count = walk_m ? grid.tiles_n() : grid.tiles_m();
  const int64_t minor_count = walk_m ? grid.tiles_m() : grid.tiles_n();
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(grid.count()));
  for (int64_t strip = 0; strip < major_count; strip += swizzle) {
    const int64_t strip_end = std::min<int64_t>(strip + swizzle, major_count);
    for (int64_t minor = 0; minor < minor_count; ++minor)
      for (int64_t major = strip; major < strip_end; ++major)
        order.push_back(walk_m ? grid.index(minor, major) : grid.index(major, minor));
  }
  return order;
}

std::vector<int64_t> rank_shifted_order(const TileGrid& grid, const std::vector<int64_t>& order,
                                        int64_t rows_per_shard, int world, int rank,
                                        int first_offset) {
  if (rows_per_shard < 1 || world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("rank_shifted_order: bad rows_per_shard/world/rank " +
                                std::to_string(rows_per_shard) + "/" + std::to_string(world) + "/" +
                                std::to_string(rank));
  auto visit_position = [&](int64_t tile) {
    const int64_t shard = std::min<int64_t>(grid.tile(tile).row / rows_per_shard, world - 1);
    return ((shard - rank - first_offset) % world + world) % world;
  };
  std::vector<int64_t> shifted = order;
  std::stable_sort(shifted.begin(), shifted.end(),
                   [&](int64_t a, int64_t b) { return visit_position(a) < visit_position(b); });
  return shifted;
}

int64_t PersistentSchedule::wave_count() const {
  return wave_of_position.empty() ? 0 : wave_of_position.back() + 1;
}

std::vector<std::vector<int64_t>> PersistentSchedule::waves() const {
  std::vector<std::vector<int64_t>> result(static_cast<size_t>(wave_count()));
  for (size_t i = 0; i < order.size(); ++i) result[static_cast<size_t>(wave_of_position[i])].push_back(order[i]);
  return result;
}

PersistentSchedule schedule_persistent(const std::vector<int64_t>& order, int num_sms) {
  if (num_sms < 1) throw std::invalid_argument("num_sms must be >= 1, got " + std::to_string(num_sms));
  PersistentSchedule schedule;
  schedule.num_sms = num_sms;
  schedule.order = order;
  for (size_t i = 0; i < order.size(); ++i) {
    schedule.sm_of_position.push_back(static_cast<int>(i % static_cast<size_t>(num_sms)));
    schedule.wave_of_position.push_back(static_cast<int64_t>(i / static_cast<size_t>(num_sms)));
  }
  return schedule;
}

void check_is_permutation(const TileGrid& grid, const std::vector<int64_t>& order) {
  std::vector<char> seen(static_cast<size_t>(grid.count()), 0);
  if (static_cast<int64_t>(order.size()) != grid.count())
    throw std::invalid_argument("tile order has " + std::to_string(order.size()) + " entries for " +
                                std::to_string(grid.count()) + " tiles");
  for (int64_t t : order) {
    if (t < 0 || t >= grid.count() || seen[static_cast<size_t>(t)])
      throw std::invalid_argument("tile order repeats or leaves the grid at tile " + std::to_string(t));
    seen[static_cast<size_t>(t)] = 1;
  }
}

}  // namespace weft
