#include "weft/ir/reorder_map.hpp"

#include <stdexcept>

namespace weft {

namespace {

[[noreturn]] void fail(int rank, const std::string& why) {
  throw std::invalid_argument("reorder_map (rank " + std::to_string(rank) + "): " + why);
}

}  // namespace

ReorderMap reorder_map(const Plan& plan, int rank) {
  if (rank < 0 || rank >= plan.world_size()) fail(rank, "no such rank in a plan of world size " + std::to_string(plan.world_size()));
  const RankPlan& rp = plan.ranks[static_cast<size_t>(rank)];
  const Region& out = rp.output;
  ReorderMap map;
  map.rows = out.box.rows;
  map.cols = out.box.cols;
  int tile_m = 0;
  for (const Step& step : rp.steps)
    if (const auto* gemm = std::get_if<GemmStep>(&step.body)) {
      tile_m = gemm->tile_m;
      map.segment_cols = gemm->tile_n;
    }
  if (map.segment_cols == 0) fail(rank, "the plan has no GEMM");
  map.segments_per_row = map.cols / map.segment_cols;

  // Token level first (an entry per row and segment); -1: not covered yet.
  std::vector<int64_t> token(static_cast<size_t>(map.rows * map.segments_per_row), -1);
  bool edge_seen = false;
  for (const Step& step : rp.steps) {
    const auto* move = std::get_if<MoveBoxesStep>(&step.body);
    if (move == nullptr || move->dst.buffer != out.buffer) continue;
    const BufferDecl& src = rp.buffers[static_cast<size_t>(move->src.buffer)];
    for (const BoxMove& m : move->moves) {
      const int64_t to_row = move->dst.box.row + m.to.row - out.box.row, to_col = move->dst.box.col + m.to.col - out.box.col;
      const int64_t from_row = move->src.box.row + m.from.row, from_col = move->src.box.col + m.from.col;
      if (to_col >= map.segment_cols * map.segments_per_row) {
        // The edge columns: one buffer holding them in result row order.
        if (edge_seen || to_col != map.segment_cols * map.segments_per_row || to_row != 0 || m.to.rows != map.rows ||
            m.to.cols != map.edge_cols() || from_row != 0 || from_col != 0 || src.cols != map.edge_cols())
          fail(rank, "the edge columns do not come from one buffer in result row order (step '" + step.label + "')");
        map.edge_source = src.name;
        edge_seen = true;
        continue;
      }
      if (to_col % map.segment_cols != 0 || m.to.cols != map.segment_cols || from_col != 0 || src.cols != map.segment_cols)
        fail(rank, "a move of step '" + step.label + "' is not a whole segment of a [*, " + std::to_string(map.segment_cols) + "] buffer");
      if (map.source.empty()) map.source = src.name;
      if (src.name != map.source) fail(rank, "main tiles come from two buffers, " + map.source + " and " + src.name);
      for (int64_t r = 0; r < m.to.rows; ++r) {
        int64_t& entry = token[static_cast<size_t>((to_row + r) * map.segments_per_row + to_col / map.segment_cols)];
        if (entry >= 0) fail(rank, "row " + std::to_string(to_row + r) + " segment " + std::to_string(to_col / map.segment_cols) + " is moved twice");
        entry = from_row + r;
      }
    }
  }
  for (size_t i = 0; i < token.size(); ++i)
    if (token[i] < 0)
      fail(rank, "row " + std::to_string(static_cast<int64_t>(i) / map.segments_per_row) + " segment " +
                     std::to_string(static_cast<int64_t>(i) % map.segments_per_row) + " is never moved into the result");
  if (map.edge_cols() > 0 && !edge_seen && map.rows > 0) fail(rank, "the edge columns are never moved into the result");

  // Tile level when every aligned block of tile_m rows of a segment comes from consecutive rows.
  bool tiles_stay_whole = tile_m > 1;
  for (int64_t r = 0; tiles_stay_whole && r < map.rows; ++r)
    for (int64_t s = 0; tiles_stay_whole && s < map.segments_per_row; ++s) {
      const int64_t first = r - r % tile_m;
      tiles_stay_whole = token[static_cast<size_t>(r * map.segments_per_row + s)] ==
                         token[static_cast<size_t>(first * map.segments_per_row + s)] + r % tile_m;
    }
  if (tiles_stay_whole) {
    map.rows_per_entry = tile_m;
    for (int64_t r = 0; r < map.rows; r += tile_m)
      for (int64_t s = 0; s < map.segments_per_row; ++s) map.first_row.push_back(token[static_cast<size_t>(r * map.segments_per_row + s)]);
  } else {
    map.first_row = std::move(token);
  }
  return map;
}

HostMatrix apply_reorder_map(const ReorderMap& map, const HostMatrix& source, const HostMatrix* edge_source) {
  HostMatrix out(map.rows, map.cols);
  const int64_t main_cols = map.segment_cols * map.segments_per_row;
  for (int64_t i = 0; i < map.rows; ++i)
    for (int64_t j = 0; j < map.cols; ++j)
      out.at(i, j) = j < main_cols ? source.at(map.source_row(i, j / map.segment_cols), j % map.segment_cols) : edge_source->at(i, j - main_cols);
  return out;
}

}  // namespace weft
