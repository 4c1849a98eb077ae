// Text form of a plan: one line per buffer, signal and step; GEMM tile tables one line per tile, an
// attention step's KV tiles one line each.
#include <sstream>
#include <stdexcept>

#include "weft/ir/plan.hpp"

namespace weft {

std::string_view to_string(Engine engine) {
  switch (engine) {
    case Engine::sm: return "sm";
    case Engine::copy_engine: return "copy_engine";
    case Engine::nccl: return "nccl";
    case Engine::gemm_epilogue: return "gemm_epilogue";
  }
  return "?";
}

std::string_view to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::all_to_all: return "all_to_all";
  }
  return "?";
}

std::string_view to_string(BufferRole role) {
  switch (role) {
    case BufferRole::input: return "input";
    case BufferRole::output: return "output";
    case BufferRole::scratch: return "scratch";
  }
  return "?";
}

std::string_view to_string(MemoryOrder order) { return order == MemoryOrder::column_major ? "column-major" : "row-major"; }

BufferId find_buffer(const RankPlan& rank_plan, std::string_view name) {
  for (size_t i = 0; i < rank_plan.buffers.size(); ++i)
    if (rank_plan.buffers[i].name == name) return static_cast<BufferId>(i);
  throw std::out_of_range("rank " + std::to_string(rank_plan.rank) + " has no buffer '" + std::string(name) + "'");
}

namespace {

void sync_text(std::ostream& out, const Plan& plan, const std::vector<Wait>& waits,
               const std::vector<Notify>& notifies) {
  for (const auto& w : waits) out << " wait(" << describe_signal(plan, w.signal) << " >= " << w.value << ")";
  for (const auto& n : notifies) out << " notify(" << describe_signal(plan, n.signal) << " += " << n.increment << ")";
}

std::string body_text(const Plan& plan, const StepBody& body) {
  std::ostringstream out;
  std::visit(
      [&](const auto& b) {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, GemmStep>) {
          out << (b.accumulate ? "gemm+= a=" : "gemm a=") << describe_region(plan, b.a) << " b=" << describe_region(plan, b.b) << " tile=" << b.tile_m
              << "x" << b.tile_n << " tiles=" << b.tiles.size();
          if (b.routed)
            out << " routed by " << describe_region(plan, b.routed->expert_first) << " over " << b.routed->experts << " experts -> "
                << describe_region(plan, b.routed->out);
        } else if constexpr (std::is_same_v<T, CopyStep>) {
          out << "copy " << describe_region(plan, b.src) << " -> " << describe_region(plan, b.dst);
          if (b.sms > 0) out << " on " << b.sms << " SMs";
        } else if constexpr (std::is_same_v<T, ReduceStep>) {
          out << "reduce" << (b.accumulate ? "+=" : "") << " ->" << describe_region(plan, b.dst) << " from";
          for (const auto& s : b.srcs) out << " " << describe_region(plan, s);
          if (b.sms > 0) out << " on " << b.sms << " SMs";
        } else if constexpr (std::is_same_v<T, PermuteRowsStep>) {
          out << "permute_rows " << describe_region(plan, b.src) << " -> " << describe_region(plan, b.dst);
          if (b.index)
            out << " (rows from " << describe_region(plan, *b.index) << ")";
          else
            out << " (" << b.source_rows.size() << " rows)";
        } else if constexpr (std::is_same_v<T, CombineRowsStep>) {
          out << "combine_rows " << describe_region(plan, b.src) << " x " << describe_region(plan, b.weights) << " -> "
              << describe_region(plan, b.dst) << " (top " << b.topk << (b.index ? ", rows from " + describe_region(plan, *b.index) : std::string()) << ")";
        } else if constexpr (std::is_same_v<T, RouteStep>) {
          out << "route " << describe_region(plan, b.choices) << " (" << b.experts << " experts, top " << b.topk << ", align " << b.align
              << ") -> " << (b.source == RouteSource::token ? "tokens " : "layout rows ") << describe_region(plan, b.scratch_source)
              << " first " << describe_region(plan, b.expert_first);
          if (b.layout_scratch) out << " layout->scratch " << describe_region(plan, *b.layout_scratch);
          if (b.pair_scratch) out << " pair->scratch " << describe_region(plan, *b.pair_scratch);
        } else if constexpr (std::is_same_v<T, MoveBoxesStep>) {
          out << "move_boxes " << describe_region(plan, b.src) << " -> " << describe_region(plan, b.dst) << " ("
              << b.moves.size() << " boxes)";
        } else if constexpr (std::is_same_v<T, AttentionStep>) {
          out << (b.merge ? "attention+= q=" : "attention q=") << describe_region(plan, b.q) << " k=" << describe_region(plan, b.k)
              << " v=" << describe_region(plan, b.v) << " -> o=" << describe_region(plan, b.o) << " lse=" << describe_region(plan, b.lse)
              << " head_dim=" << b.head_dim << " positions q@" << b.q_position << " kv@" << b.kv_position << (b.causal ? " causal" : "")
              << " tile_q=" << b.tile_q << " kv_tiles=" << b.kv_tiles.size();
          if (b.sm_limit > 0) out << " on " << b.sm_limit << " SMs";
        } else if constexpr (std::is_same_v<T, CollectiveStep>) {
          out << to_string(b.kind) << "#" << b.id << " " << describe_region(plan, b.src) << " -> "
              << describe_region(plan, b.dst);
        } else {
          out << "join";
        }
      },
      body);
  return out.str();
}

}  // namespace

std::string describe_region(const Plan& plan, const Region& r) {
  std::string name = "<bad buffer>";
  if (r.rank >= 0 && r.rank < plan.world_size()) {
    const auto& buffers = plan.ranks[static_cast<size_t>(r.rank)].buffers;
    if (r.buffer >= 0 && r.buffer < static_cast<BufferId>(buffers.size())) name = buffers[static_cast<size_t>(r.buffer)].name;
  }
  std::ostringstream out;
  out << name << "@" << r.rank << "[" << r.box.row << ":" << r.box.row_end() << "," << r.box.col << ":" << r.box.col_end()
      << "]";
  return out.str();
}

std::string describe_signal(const Plan& plan, const SignalRef& ref) {
  std::string name = "?";
  if (ref.rank >= 0 && ref.rank < plan.world_size()) {
    const auto& signals = plan.ranks[static_cast<size_t>(ref.rank)].signals;
    if (ref.id >= 0 && ref.id < static_cast<SignalId>(signals.size())) name = signals[static_cast<size_t>(ref.id)];
  }
  return "signal '" + name + "' (#" + std::to_string(ref.id) + " on rank " + std::to_string(ref.rank) + ")";
}

std::string describe_step(const Plan& plan, int rank, const Step& step) {
  std::ostringstream out;
  out << "rank " << rank << " stream " << step.stream << " step '" << step.label << "' (" << body_text(plan, step.body)
      << ")";
  return out.str();
}

std::string to_string(const Plan& plan) {
  std::ostringstream out;
  out << "plan " << plan.strategy << " for " << describe(plan.problem) << "\n";
  for (const auto& rp : plan.ranks) {
    out << "rank " << rp.rank << ": " << rp.stream_count << " stream(s), output " << describe_region(plan, rp.output)
        << "\n";
    for (size_t i = 0; i < rp.buffers.size(); ++i) {
      const auto& b = rp.buffers[i];
      out << "  buffer " << i << " " << b.name << " " << to_string(b.role) << " [" << b.rows << "x" << b.cols << "] "
          << to_string(b.dtype) << (b.symmetric ? " symmetric" : "")
          << (b.order == MemoryOrder::column_major ? " column-major" : "");
      if (const auto grid = scale_grid(plan.problem, b))
        out << " + f32 scales [" << scale_rows(*grid, b.rows) << "x" << scale_cols(*grid, b.cols) << "] (" << to_string(plan.problem.scaling) << ")";
      out << "\n";
    }
    if (!rp.gathered_a.empty()) {
      out << "  gathered A at the end:";
      for (const Region& piece : rp.gathered_a) out << " " << describe_region(plan, piece);
      out << "\n";
    }
    for (size_t i = 0; i < rp.signals.size(); ++i) out << "  signal " << i << " " << rp.signals[i] << "\n";
    for (const auto& step : rp.steps) {
      out << "  [s" << step.stream << " " << to_string(step.engine) << (step.companion >= 0 ? " companion#" + std::to_string(step.companion) : "")
          << "] " << step.label << ": " << body_text(plan, step.body);
      sync_text(out, plan, step.waits, step.notifies);
      out << "\n";
      if (const auto* gemm = std::get_if<GemmStep>(&step.body)) {
        for (const auto& t : gemm->tiles) {
          out << "      tile [" << t.tile.row << ":" << t.tile.row_end() << "," << t.tile.col << ":" << t.tile.col_end()
              << "] -> " << describe_region(plan, t.store);
          for (const Region& addend : t.addends) out << " + " << describe_region(plan, addend);
          if (t.a_rows) out << " (A rows from " << describe_region(plan, *t.a_rows) << ")";
          std::vector<Wait> waits;
          std::vector<Notify> notifies;
          if (t.wait) waits.push_back(*t.wait);
          if (t.notify) notifies.push_back(*t.notify);
          sync_text(out, plan, waits, notifies);
          out << "\n";
        }
      }
      if (const auto* attention = std::get_if<AttentionStep>(&step.body)) {
        for (const KvTile& t : attention->kv_tiles) {
          out << "      kv [" << t.row << ":" << t.row + t.rows << "]";
          std::vector<Wait> waits;
          if (t.wait) waits.push_back(*t.wait);
          sync_text(out, plan, waits, {});
          out << "\n";
        }
      }
    }
  }
  return out.str();
}

}  // namespace weft
