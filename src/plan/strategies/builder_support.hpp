// Internal helpers shared by the plan builders: declaring buffers and signals the same way on every
// rank, adding steps, and cutting a GEMM into its tile table.
#pragma once

#include <optional>

#include "weft/plan/strategies.hpp"

namespace weft::detail {

class RankPlanBuilder {
 public:
  RankPlanBuilder(int rank, int stream_count) {
    plan_.rank = rank;
    plan_.stream_count = stream_count;
  }
  BufferId buffer(std::string name, BufferRole role, int64_t rows, int64_t cols, DType dtype, bool symmetric = false,
                  MemoryOrder order = MemoryOrder::row_major);
  SignalId signal(std::string name);
  // Region of the whole of buffer `id` on `rank` (this rank unless given).
  Region whole(BufferId id, std::optional<int> rank = std::nullopt) const;
  Region rows(BufferId id, int64_t first_row, int64_t row_count, std::optional<int> rank = std::nullopt) const;
  // Region `box` of buffer `id` on `rank` (this rank unless given): a GEMM tile stored at its own place.
  Region at(BufferId id, const Rect& box, std::optional<int> rank = std::nullopt) const { return Region{rank.value_or(plan_.rank), id, box}; }
  SignalRef signal_on(SignalId id, int rank) const { return SignalRef{rank, id}; }
  SignalRef own(SignalId id) const { return SignalRef{plan_.rank, id}; }
  Step& add(std::string label, int stream, Engine engine, StepBody body);
  Step& last_step() { return plan_.steps.back(); }
  Step& step(size_t index) { return plan_.steps.at(index); }
  size_t step_count() const { return plan_.steps.size(); }
  void set_output(Region output) { plan_.output = output; }
  // ag_gemm: where the W shards of A lie once the plan ends, in rank order (RankPlan::gathered_a).
  void set_gathered_a(std::vector<Region> pieces) { plan_.gathered_a = std::move(pieces); }
  int rank() const { return plan_.rank; }
  RankPlan finish() { return std::move(plan_); }

 private:
  RankPlan plan_;
};

// The op's B input, "B" [b_rows, K] (ir/problem.hpp), laid out as the problem's b_layout says
// (column-major for kn): every builder declares B through it.
BufferId declare_b(RankPlanBuilder& builder, const Problem& problem);

// The operands of AllGather+GEMM on one rank: the local A shard, the weight, the gathered A and the
// output, declared in that order. pull: A symmetric (peers pull it), the gathered A local; push: A
// where the caller has it, the gathered A symmetric (peers push into it).
struct AllGatherOperands {
  BufferId a, b, gathered, c;
};
AllGatherOperands declare_all_gather_operands(const Problem& problem, RankPlanBuilder& builder,
                                              AllGatherSource source = AllGatherSource::pull);

// A GEMM over a ([M, K] box) and b ([N, K] box) with the options' tile and an empty table.
GemmStep gemm_over(const Region& a, const Region& b, const PlanOptions& options);
// A GEMM over a ([M, K] box) and b ([N, K] box) whose tile at (i, j) of the output space is stored at
// (c.row + i, c.col + j) of c's buffer on c's rank; tiles in the options' raster order.
GemmStep gemm_into(const Region& a, const Region& b, const Region& c, const PlanOptions& options);

// Rank r's rows of `src` regrouped by destination rank (routing of a routed op), keeping row order
// within a destination, into `dst`: NCCL's all-to-all and block copies move contiguous blocks.
PermuteRowsStep rows_by_destination(const Problem& problem, int rank, const Region& src, const Region& dst);
// NCCL's all-to-all of rank r's rows grouped by destination (`src`) into its share (`dst`).
CollectiveStep all_to_all_by_destination(const Problem& problem, int rank, const Region& src, const Region& dst);

// Row bookkeeping of a routed op (gemm_a2a, a2a_gemm): how many rows rank s sends to rank d, where
// they land at d (blocks in source-rank order) and where they sit in s's rows grouped by destination.
class RoutedRows {
 public:
  explicit RoutedRows(const Problem& problem);
  int64_t count(int s, int d) const { return counts_[static_cast<size_t>(s)][static_cast<size_t>(d)]; }
  int64_t received_before(int s, int d) const;  // first row, at d, of the rows from s
  int64_t sent_before(int s, int d) const;      // first row, in s's grouped rows, of the rows for d
  int64_t most_received() const;                // the largest share of any rank

 private:
  std::vector<std::vector<int64_t>> counts_;
};

// Splits `total` rows into `parts` nearly equal consecutive pieces; returns the first row of each
// piece plus `total` at the end.
std::vector<int64_t> split_rows(int64_t total, int parts);

}  // namespace weft::detail
