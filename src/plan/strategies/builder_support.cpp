#include "builder_support.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace weft::detail {

BufferId RankPlanBuilder::buffer(std::string name, BufferRole role, int64_t rows, int64_t cols, DType dtype,
                                 bool symmetric, MemoryOrder order) {
  plan_.buffers.push_back(BufferDecl{std::move(name), role, rows, cols, dtype, symmetric, order});
  return static_cast<BufferId>(plan_.buffers.size()) - 1;
}

SignalId RankPlanBuilder::signal(std::string name) {
  plan_.signals.push_back(std::move(name));
  return static_cast<SignalId>(plan_.signals.size()) - 1;
}

Region RankPlanBuilder::whole(BufferId id, std::optional<int> rank) const {
  const auto& decl = plan_.buffers.at(static_cast<size_t>(id));
  return Region{rank.value_or(plan_.rank), id, Rect{0, 0, decl.rows, decl.cols}};
}

Region RankPlanBuilder::rows(BufferId id, int64_t first_row, int64_t row_count, std::optional<int> rank) const {
  const auto& decl = plan_.buffers.at(static_cast<size_t>(id));
  return Region{rank.value_or(plan_.rank), id, Rect{first_row, 0, row_count, decl.cols}};
}

Step& RankPlanBuilder::add(std::string label, int stream, Engine engine, StepBody body) {
  Step step;
  step.label = std::move(label);
  step.stream = stream;
  step.engine = engine;
  step.body = std::move(body);
  plan_.steps.push_back(std::move(step));
  return plan_.steps.back();
}

BufferId declare_b(RankPlanBuilder& b, const Problem& p) {
  return b.buffer("B", BufferRole::input, b_rows(p), p.k, operand_b_dtype(p), /*symmetric=*/false,
                  p.b_layout == BLayout::kn ? MemoryOrder::column_major : MemoryOrder::row_major);
}

AllGatherOperands declare_all_gather_operands(const Problem& p, RankPlanBuilder& b, AllGatherSource source) {
  const bool push = source == AllGatherSource::push;
  AllGatherOperands o{};
  o.a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype, /*symmetric=*/!push);
  o.b = declare_b(b, p);
  o.gathered = b.buffer("A_gathered", BufferRole::scratch, p.world_size * p.m, p.k, p.input_dtype, /*symmetric=*/push);
  o.c = b.buffer("C", BufferRole::output, p.world_size * p.m, p.n, p.output_dtype);
  return o;
}

GemmStep gemm_over(const Region& a, const Region& b, const PlanOptions& options) {
  GemmStep gemm;
  gemm.a = a;
  gemm.b = b;
  gemm.tile_m = options.tile_m;
  gemm.tile_n = options.tile_n;
  gemm.k_splits = options.k_splits;
  gemm.tail_splits = options.k_splits > 1 ? 1 : options.tail_splits;
  gemm.stream_k = options.stream_k && gemm.k_splits == 1 && gemm.tail_splits == 1;
  return gemm;
}

GemmStep gemm_into(const Region& a, const Region& b, const Region& c, const PlanOptions& options) {
  GemmStep gemm = gemm_over(a, b, options);
  const TileGrid grid{a.box.rows, b.box.rows, options.tile_m, options.tile_n};
  if (a.box.rows == 0 || b.box.rows == 0) return gemm;
  for (int64_t index : rasterized_order(grid, options.raster, options.swizzle)) {
    GemmTile tile;
    tile.tile = grid.tile(index);
    tile.store = c;
    tile.store.box = Rect{c.box.row + tile.tile.row, c.box.col + tile.tile.col, tile.tile.rows, tile.tile.cols};
    gemm.tiles.push_back(tile);
  }
  return gemm;
}

PermuteRowsStep rows_by_destination(const Problem& p, int rank, const Region& src, const Region& dst) {
  PermuteRowsStep group;
  group.src = src;
  group.dst = dst;
  const auto& route = p.routing.at(static_cast<size_t>(rank));
  for (int d = 0; d < p.world_size; ++d)
    for (int64_t i = 0; i < static_cast<int64_t>(route.size()); ++i)
      if (route[static_cast<size_t>(i)] == d) group.source_rows.push_back(i);
  return group;
}

RoutedRows::RoutedRows(const Problem& p) : counts_(rows_routed(p)) {}

CollectiveStep all_to_all_by_destination(const Problem& p, int rank, const Region& src, const Region& dst) {
  const RoutedRows routed(p);
  CollectiveStep exchange{CollectiveKind::all_to_all, 0, src, dst, {}, {}};
  for (int q = 0; q < p.world_size; ++q) {
    exchange.send_rows.push_back(routed.count(rank, q));
    exchange.recv_rows.push_back(routed.count(q, rank));
  }
  return exchange;
}

int64_t RoutedRows::received_before(int s, int d) const {
  int64_t rows = 0;
  for (int q = 0; q < s; ++q) rows += count(q, d);
  return rows;
}

int64_t RoutedRows::sent_before(int s, int d) const {
  int64_t rows = 0;
  for (int q = 0; q < d; ++q) rows += count(s, q);
  return rows;
}

int64_t RoutedRows::most_received() const {
  int64_t most = 0;
  for (size_t d = 0; d < counts_.size(); ++d) most = std::max(most, received_before(static_cast<int>(counts_.size()), static_cast<int>(d)));
  return most;
}

std::vector<int64_t> split_rows(int64_t total, int parts) {
  if (parts < 1) throw std::invalid_argument("split_rows: parts must be >= 1");
  std::vector<int64_t> starts;
  for (int p = 0; p <= parts; ++p) starts.push_back(total * p / parts);
  return starts;
}

}  // namespace weft::detail

namespace weft {

std::string_view to_string(AllGatherSource source) { return source == AllGatherSource::push ? "push" : "pull"; }

AllGatherSource parse_all_gather_source(std::string_view text) {
  for (AllGatherSource s : {AllGatherSource::pull, AllGatherSource::push})
    if (text == to_string(s)) return s;
  throw std::invalid_argument("unknown AllGather source '" + std::string(text) + "' (known: pull, push)");
}

}  // namespace weft
