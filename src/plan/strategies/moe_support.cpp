#include "moe_support.hpp"

namespace weft::detail {

PermuteRowsStep gather_block(const Problem& p, const MoeRows& rows, int s, const Region& tokens, const Region& block) {
  PermuteRowsStep gather;
  gather.src = tokens;
  gather.dst = block;
  const int64_t first = rows.source_first(s);
  for (int64_t row = first; row < first + rows.source_rows(s); ++row)
    gather.source_rows.push_back(rows.token[static_cast<size_t>(row)] - static_cast<int64_t>(s) * p.m);
  return gather;
}

std::vector<size_t> add_expert_gemms(RankPlanBuilder& b, const Problem& p, const MoeRows& rows, int s, BufferId x, BufferId w, BufferId out,
                                     const PlanOptions& options, int stream) {
  std::vector<size_t> added;
  for (int e = 0; e < p.experts; ++e) {
    const int64_t count = rows.block_rows(s, e);
    if (count == 0) continue;
    const int64_t first = rows.block_first(s, e);
    b.add("gemm rank " + std::to_string(s) + "'s rows of expert " + std::to_string(e), stream, Engine::sm,
          gemm_into(b.rows(x, first, count), b.rows(w, static_cast<int64_t>(e) * p.n, p.n), b.rows(out, first, count), options));
    added.push_back(b.step_count() - 1);
  }
  return added;
}

ExpertMajorRows expert_major(const Problem& p, const MoeRows& rows) {
  const int world = p.world_size;
  ExpertMajorRows order;
  order.position.assign(static_cast<size_t>(rows.rows()), 0);
  order.first.assign(static_cast<size_t>(p.experts) + 1, 0);
  int64_t next = 0;
  for (int e = 0; e < p.experts; ++e) {
    order.first[static_cast<size_t>(e)] = next;
    for (int s = 0; s < world; ++s)
      for (int64_t row = rows.block_first(s, e); row < rows.block_first(s, e) + rows.block_rows(s, e); ++row)
        order.position[static_cast<size_t>(row)] = next++;
  }
  order.first[static_cast<size_t>(p.experts)] = next;
  return order;
}

void add_expert_major_gemms(RankPlanBuilder& b, const Problem& p, const ExpertMajorRows& order, BufferId x, BufferId w, BufferId out,
                            const PlanOptions& options, int stream) {
  for (int e = 0; e < p.experts; ++e) {
    const int64_t count = order.expert_rows(e);
    if (count == 0) continue;
    const int64_t first = order.first[static_cast<size_t>(e)];
    b.add("gemm expert " + std::to_string(e) + " (every rank's rows)", stream, Engine::sm,
          gemm_into(b.rows(x, first, count), b.rows(w, static_cast<int64_t>(e) * p.n, p.n), b.rows(out, first, count), options));
  }
}

CombineRowsStep combine_block(const Problem& p, const MoeRows& rows, int s, const Region& block, const Region& weights, const Region& tokens_out) {
  CombineRowsStep combine;
  combine.src = block;
  combine.weights = weights;
  combine.dst = tokens_out;
  combine.topk = p.topk;
  const int64_t first = rows.source_first(s);
  for (int64_t i = 0; i < p.m; ++i)
    for (int j = 0; j < p.topk; ++j)
      combine.source_rows.push_back(rows.row_of[static_cast<size_t>((static_cast<int64_t>(s) * p.m + i) * p.topk + j)] - first);
  return combine;
}

}  // namespace weft::detail
