// FP8 scale grids (ir/scaling.hpp) and which grid a plan's buffer has (ir/plan.hpp).
#include <algorithm>

#include "weft/ir/plan.hpp"

namespace weft {

namespace {

int64_t blocks(int64_t count, int64_t block) { return block == 0 ? 1 : (count + block - 1) / block; }

}  // namespace

int64_t scale_rows(const ScaleGrid& g, int64_t rows) {
  if (g.group_rows == 0 || g.block_rows == 0) return std::max<int64_t>(blocks(rows, g.block_rows), 1);
  return std::max<int64_t>((rows / g.group_rows) * blocks(g.group_rows, g.block_rows), 1);
}

int64_t scale_cols(const ScaleGrid& g, int64_t cols) { return std::max<int64_t>(blocks(cols, g.block_cols), 1); }

ScaleCell scale_cell(const ScaleGrid& g, int64_t row, int64_t col) {
  ScaleCell cell;
  if (g.block_rows > 0) {
    cell.row = g.group_rows > 0 ? (row / g.group_rows) * blocks(g.group_rows, g.block_rows) + (row % g.group_rows) / g.block_rows
                                : row / g.block_rows;
  }
  if (g.block_cols > 0) cell.col = col / g.block_cols;
  return cell;
}

bool spans_rows(const ScaleGrid& g) { return g.block_rows != 1; }

int64_t scales_touched(const ScaleGrid& g, int64_t row, int64_t col, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  // Cells are ordered like the elements (a later row or column never has an earlier cell), so the
  // first and last element bound them.
  const ScaleCell first = scale_cell(g, row, col), last = scale_cell(g, row + rows - 1, col + cols - 1);
  return (last.row - first.row + 1) * (last.col - first.col + 1);
}

std::optional<ScaleGrid> scale_grid(const Problem& problem, const BufferDecl& decl) {
  if (!is_fp8(decl.dtype)) return std::nullopt;
  return operand_scale_grid(problem, decl.role == BufferRole::input && decl.name == "B" ? Operand::b : Operand::a);
}

std::string scale_name(std::string_view buffer) { return std::string(buffer) + "_scale"; }

std::string scale_block_misalignment(const Plan& plan, const Region& operand) {
  const BufferDecl& decl = plan.ranks.at(static_cast<size_t>(operand.rank)).buffers.at(static_cast<size_t>(operand.buffer));
  const auto grid = scale_grid(plan.problem, decl);
  if (!grid) return {};
  const Rect& box = operand.box;
  if (grid->block_cols > 0 && box.col % grid->block_cols != 0)
    return "reads '" + decl.name + "' from K column " + std::to_string(box.col) + ", inside a " + std::to_string(grid->block_cols) +
           "-column scale block (block scaling scales whole blocks of K)";
  if (grid->block_rows > 1) {
    const int64_t row = grid->group_rows > 0 ? box.row % grid->group_rows : box.row;
    if (row % grid->block_rows != 0)
      return "reads '" + decl.name + "' from row " + std::to_string(box.row) + ", inside a " + std::to_string(grid->block_rows) + "-row scale block";
  }
  return {};
}

std::string first_scale_block_misalignment(const Plan& plan) {
  if (plan.problem.scaling != Scaling::block) return {};
  for (const RankPlan& rp : plan.ranks)
    for (const Step& step : rp.steps)
      if (const auto* g = std::get_if<GemmStep>(&step.body)) {
        std::vector<Region> operands{g->a, g->b};
        for (const GemmTile& t : g->tiles)
          if (t.a_rows) operands.push_back(*t.a_rows);
        for (const Region& r : operands)
          if (std::string why = scale_block_misalignment(plan, r); !why.empty())
            return "rank " + std::to_string(rp.rank) + " step '" + step.label + "' " + why;
      }
  return {};
}

}  // namespace weft
