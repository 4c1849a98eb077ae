// `sequential`: one library GEMM, then one NCCL collective, on one stream (ag_attention: the
// collectives, then the attention; attention.cpp). Every figure weft reports
// is measured against this plan.
#include "attention.hpp"
#include "builder_support.hpp"
#include "moe_support.hpp"

namespace weft {

using detail::RankPlanBuilder;

Plan plan_sequential(const Problem& p, const PlanOptions& options) {
  check_problem(p);
  const int world = p.world_size;
  Plan plan;
  plan.strategy = "sequential";
  plan.problem = p;
  for (int r = 0; r < world; ++r) {
    RankPlanBuilder b(r, 1);
    if (is_attention(p.op)) {  // no A and B: its own operands
      detail::build_attention_gathered(p, options, b);
      plan.ranks.push_back(b.finish());
      continue;
    }
    const BufferId a = b.buffer("A", BufferRole::input, a_rows(p), p.k, p.input_dtype);
    const BufferId w = detail::declare_b(b, p);
    if (p.routing_on_device) {  // the MoE ops with the choices given per call on the device
      detail::add_routed_moe(b, p, a, w, options);
      plan.ranks.push_back(b.finish());
      continue;
    }
    switch (p.op) {
      case OpKind::ag_gemm: {
        const BufferId gathered = b.buffer("A_gathered", BufferRole::scratch, world * p.m, p.k, p.input_dtype);
        const BufferId c = b.buffer("C", BufferRole::output, world * p.m, p.n, p.output_dtype);
        b.add("all_gather A", 0, Engine::nccl,
              CollectiveStep{CollectiveKind::all_gather, 0, b.whole(a), b.whole(gathered), {}, {}});
        b.add("gemm", 0, Engine::sm, detail::gemm_into(b.whole(gathered), b.whole(w), b.whole(c), options));
        b.set_output(b.whole(c));
        b.set_gathered_a({b.whole(gathered)});
        break;
      }
      case OpKind::gemm_rs: {
        const BufferId partial = b.buffer("P", BufferRole::scratch, p.m, p.n, p.output_dtype);
        const BufferId c = b.buffer("C", BufferRole::output, p.m / world, p.n, p.output_dtype);
        b.add("gemm", 0, Engine::sm, detail::gemm_into(b.whole(a), b.whole(w), b.whole(partial), options));
        b.add("reduce_scatter P", 0, Engine::nccl,
              CollectiveStep{CollectiveKind::reduce_scatter, 0, b.whole(partial), b.whole(c), {}, {}});
        b.set_output(b.whole(c));
        break;
      }
      case OpKind::gemm_ar: {
        const BufferId c = b.buffer("C", BufferRole::output, p.m, p.n, p.output_dtype);
        b.add("gemm", 0, Engine::sm, detail::gemm_into(b.whole(a), b.whole(w), b.whole(c), options));
        b.add("all_reduce C", 0, Engine::nccl,
              CollectiveStep{CollectiveKind::all_reduce, 0, b.whole(c), b.whole(c), {}, {}});
        b.set_output(b.whole(c));
        break;
      }
      case OpKind::gemm_a2a: {
        const BufferId partial = b.buffer("P", BufferRole::scratch, p.m, p.n, p.output_dtype);
        const BufferId sorted = b.buffer("P_by_destination", BufferRole::scratch, p.m, p.n, p.output_dtype);
        const BufferId c = b.buffer("C", BufferRole::output, output_rows(p, r), p.n, p.output_dtype);
        b.add("gemm", 0, Engine::sm, detail::gemm_into(b.whole(a), b.whole(w), b.whole(partial), options));
        // NCCL's all-to-all sends contiguous blocks, so rows are first grouped by destination.
        b.add("group rows by destination", 0, Engine::sm, detail::rows_by_destination(p, r, b.whole(partial), b.whole(sorted)));
        b.add("all_to_all rows", 0, Engine::nccl, detail::all_to_all_by_destination(p, r, b.whole(sorted), b.whole(c)));
        b.set_output(b.whole(c));
        break;
      }
      case OpKind::a2a_gemm: {
        const BufferId sorted = b.buffer("A_by_destination", BufferRole::scratch, p.m, p.k, p.input_dtype);
        const BufferId gathered = b.buffer("X", BufferRole::scratch, output_rows(p, r), p.k, p.input_dtype);
        const BufferId c = b.buffer("C", BufferRole::output, output_rows(p, r), p.n, p.output_dtype);
        b.add("group rows by destination", 0, Engine::sm, detail::rows_by_destination(p, r, b.whole(a), b.whole(sorted)));
        b.add("all_to_all tokens", 0, Engine::nccl, detail::all_to_all_by_destination(p, r, b.whole(sorted), b.whole(gathered)));
        b.add("gemm", 0, Engine::sm, detail::gemm_into(b.whole(gathered), b.whole(w), b.whole(c), options));
        b.set_output(b.whole(c));
        break;
      }
      case OpKind::ag_moe: {
        // All tokens gathered, then rows laid out by expert over every source (expert-major), one
        // GEMM per expert, and the results put in the op's layout (by source, then expert). At
        // world 1 both layouts are one: the rows go straight to their place and C takes the GEMMs.
        // With the grouped GEMM (PlanOptions::moe_grouped_gemm) each expert's rows start on its tile
        // grid: the padding rows between experts are gathered from any token (never stored).
        const MoeRows rows = moe_rows(p);
        const int grouped_tile_n = detail::grouped_gemm_tile_n(p, options);
        const int64_t align = grouped_tile_n > 0 ? detail::kGroupedGemmTileM : 1;
        const detail::ExpertMajorRows order = detail::expert_major(p, rows, align);
        const int64_t capacity = detail::padded_capacity(p, rows, align);
        const BufferId gathered = b.buffer("A_gathered", BufferRole::scratch, world * p.m, p.k, p.input_dtype);
        const BufferId x = b.buffer("X", BufferRole::scratch, capacity, p.k, p.input_dtype);
        const BufferId c = b.buffer("C", BufferRole::output, rows.rows(), p.n, p.output_dtype);
        const BufferId y = order.identity() && capacity == rows.rows() ? c : b.buffer("Y_by_expert", BufferRole::scratch, capacity, p.n, p.output_dtype);
        b.add("all_gather tokens", 0, Engine::nccl, CollectiveStep{CollectiveKind::all_gather, 0, b.whole(a), b.whole(gathered), {}, {}});
        PermuteRowsStep by_expert{b.whole(gathered), b.rows(x, 0, order.total()), std::vector<int64_t>(static_cast<size_t>(order.total()), 0), {}};
        for (int64_t row = 0; row < rows.rows(); ++row)
          by_expert.source_rows[static_cast<size_t>(order.position[static_cast<size_t>(row)])] = rows.token[static_cast<size_t>(row)];
        b.add("gather every rank's rows by expert", 0, Engine::sm, std::move(by_expert));
        detail::add_expert_major_gemms(b, p, order, x, w, y, options, 0, grouped_tile_n);
        if (y != c) {
          PermuteRowsStep to_layout{b.whole(y), b.whole(c), order.position, {}};
          b.add("rows back by source", 0, Engine::sm, std::move(to_layout));
        }
        b.set_output(b.whole(c));
        break;
      }
      case OpKind::moe_rs: {
        // A's rows by expert over every source, one GEMM per expert, the top-k reduction of every
        // token (reading its rows where the expert-major GEMMs left them), then ReduceScatter. At
        // world 1 A is in expert order already.
        const MoeRows rows = moe_rows(p);
        const int grouped_tile_n = detail::grouped_gemm_tile_n(p, options);
        const int64_t align = grouped_tile_n > 0 ? detail::kGroupedGemmTileM : 1;
        const detail::ExpertMajorRows order = detail::expert_major(p, rows, align);
        const int64_t capacity = detail::padded_capacity(p, rows, align);
        const BufferId weights = b.buffer("topk_weights", BufferRole::input, world * p.m, p.topk, topk_weights_dtype(p));
        const BufferId partial = b.buffer("P", BufferRole::scratch, capacity, p.n, p.output_dtype);
        const BufferId tokens = b.buffer("Z", BufferRole::scratch, world * p.m, p.n, p.output_dtype);
        const BufferId c = b.buffer("C", BufferRole::output, p.m, p.n, p.output_dtype);
        if (is_fp8(p.input_dtype)) {
          // FP8 rows have no row permutation on the GPU (plan/gpu_lowering.cpp): A is read where it
          // lies, a GEMM per (source, expert), each source's rows reduced to its tokens.
          for (int s = 0; s < world; ++s) {
            detail::add_expert_gemms(b, p, rows, s, a, w, partial, options, 0);
            b.add("top-k reduce rank " + std::to_string(s) + "'s tokens", 0, Engine::sm,
                  detail::combine_block(p, rows, s, b.rows(partial, rows.source_first(s), rows.source_rows(s)), b.rows(weights, s * p.m, p.m),
                                        b.rows(tokens, s * p.m, p.m)));
          }
          b.add("reduce_scatter tokens", 0, Engine::nccl, CollectiveStep{CollectiveKind::reduce_scatter, 0, b.whole(tokens), b.whole(c), {}, {}});
          b.set_output(b.whole(c));
          break;
        }
        const BufferId x = order.identity() && capacity == rows.rows() ? a : b.buffer("A_by_expert", BufferRole::scratch, capacity, p.k, p.input_dtype);
        if (x != a) {
          PermuteRowsStep by_expert{b.whole(a), b.rows(x, 0, order.total()), std::vector<int64_t>(static_cast<size_t>(order.total()), 0), {}};
          for (int64_t row = 0; row < rows.rows(); ++row) by_expert.source_rows[static_cast<size_t>(order.position[static_cast<size_t>(row)])] = row;
          b.add("A's rows by expert", 0, Engine::sm, std::move(by_expert));
        }
        detail::add_expert_major_gemms(b, p, order, x, w, partial, options, 0, grouped_tile_n);
        CombineRowsStep combine{b.whole(partial), b.whole(weights), b.whole(tokens), p.topk, {}, {}};
        combine.source_rows.reserve(rows.row_of.size());
        for (const int64_t row : rows.row_of) combine.source_rows.push_back(order.position[static_cast<size_t>(row)]);
        b.add("top-k reduce every rank's tokens", 0, Engine::sm, std::move(combine));
        b.add("reduce_scatter tokens", 0, Engine::nccl, CollectiveStep{CollectiveKind::reduce_scatter, 0, b.whole(tokens), b.whole(c), {}, {}});
        b.set_output(b.whole(c));
        break;
      }
      case OpKind::ag_attention: break;  // built above
    }
    plan.ranks.push_back(b.finish());
  }
  return plan;
}

}  // namespace weft
