#include "plan_summary.hpp"

#include <cstdio>
#include <type_traits>

namespace weft::cli {

namespace {

struct Counts {
  int64_t gemms = 0, tiles = 0, attentions = 0, kv_tiles = 0, copies = 0, reduces = 0, row_moves = 0, collectives = 0, joins = 0;
  int64_t waits = 0, notifies = 0;
  double bytes_to_peers = 0, bytes_local = 0, collective_bytes = 0;

  void add(const Counts& o) {
    gemms += o.gemms, tiles += o.tiles, attentions += o.attentions, kv_tiles += o.kv_tiles, copies += o.copies, reduces += o.reduces, row_moves += o.row_moves;
    collectives += o.collectives, joins += o.joins, waits += o.waits, notifies += o.notifies;
    bytes_to_peers += o.bytes_to_peers, bytes_local += o.bytes_local, collective_bytes += o.collective_bytes;
  }
};

// The bytes of a region: its box in the element size of the buffer it lies in (on its own rank), and
// for FP8 the fp32 scales that move with it.
double region_bytes(const Plan& plan, const Region& r) {
  const BufferDecl& decl = plan.ranks[static_cast<size_t>(r.rank)].buffers[static_cast<size_t>(r.buffer)];
  double bytes = static_cast<double>(r.box.rows) * static_cast<double>(r.box.cols) * dtype_bytes(decl.dtype);
  if (const auto grid = scale_grid(plan.problem, decl)) bytes += 4.0 * static_cast<double>(scales_touched(*grid, r.box.row, r.box.col, r.box.rows, r.box.cols));
  return bytes;
}

Counts count(const Plan& plan, const RankPlan& rank) {
  Counts c;
  for (const Step& step : rank.steps) {
    c.waits += static_cast<int64_t>(step.waits.size());
    c.notifies += static_cast<int64_t>(step.notifies.size());
    std::visit(
        [&](const auto& body) {
          using T = std::decay_t<decltype(body)>;
          // Moves that read or write another rank's memory are peer traffic; the rest stays local.
          auto moved = [&](const Region& src, const Region& dst) {
            (src.rank != dst.rank ? c.bytes_to_peers : c.bytes_local) += region_bytes(plan, dst);
          };
          if constexpr (std::is_same_v<T, GemmStep>) {
            ++c.gemms;
            c.tiles += static_cast<int64_t>(body.tiles.size());
            for (const GemmTile& t : body.tiles) {
              c.waits += t.wait.has_value();
              c.notifies += t.notify.has_value();
            }
          } else if constexpr (std::is_same_v<T, AttentionStep>) {
            ++c.attentions;
            c.kv_tiles += static_cast<int64_t>(body.kv_tiles.size());
            for (const KvTile& t : body.kv_tiles) c.waits += t.wait.has_value();
          } else if constexpr (std::is_same_v<T, CopyStep>) {
            ++c.copies;
            moved(body.src, body.dst);
          } else if constexpr (std::is_same_v<T, ReduceStep>) {
            ++c.reduces;
            for (const Region& src : body.srcs) moved(src, body.dst);
          } else if constexpr (std::is_same_v<T, PermuteRowsStep> || std::is_same_v<T, CombineRowsStep> || std::is_same_v<T, MoveBoxesStep>) {
            ++c.row_moves;
            moved(body.src, body.dst);
          } else if constexpr (std::is_same_v<T, CollectiveStep>) {
            ++c.collectives;
            c.collective_bytes += region_bytes(plan, body.src);
          } else if constexpr (std::is_same_v<T, RouteStep>) {
            ++c.row_moves;  // a counting sort of the choices into index tables
          } else {
            ++c.joins;
          }
        },
        step.body);
  }
  return c;
}

std::string line(const char* who, size_t steps, const Counts& c) {
  // Attention steps only where the plan has them (an attention plan has no GEMM).
  char attention[64] = "";
  if (c.attentions > 0)
    std::snprintf(attention, sizeof attention, "%lld attention (%lld KV tiles), ", static_cast<long long>(c.attentions),
                  static_cast<long long>(c.kv_tiles));
  char buf[576];
  std::snprintf(buf, sizeof buf,
                "%-8s %7zu steps: %lld gemm (%lld tiles), %s%lld copy, %lld reduce, %lld row move, %lld collective, %lld join; "
                "%lld waits, %lld notifies; %.3g MB to/from peers, %.3g MB local, %.3g MB into collectives\n",
                who, steps, static_cast<long long>(c.gemms), static_cast<long long>(c.tiles), attention, static_cast<long long>(c.copies),
                static_cast<long long>(c.reduces), static_cast<long long>(c.row_moves), static_cast<long long>(c.collectives),
                static_cast<long long>(c.joins), static_cast<long long>(c.waits), static_cast<long long>(c.notifies), c.bytes_to_peers * 1e-6,
                c.bytes_local * 1e-6, c.collective_bytes * 1e-6);
  return buf;
}

}  // namespace

std::string plan_summary(const Plan& plan) {
  std::string out = "plan '" + plan.strategy + "', " + std::to_string(plan.world_size()) + " rank(s):\n";
  Counts total;
  size_t total_steps = 0;
  for (const RankPlan& rank : plan.ranks) {
    const Counts c = count(plan, rank);
    total.add(c);
    total_steps += rank.steps.size();
    out += line(("rank " + std::to_string(rank.rank)).c_str(), rank.steps.size(), c);
  }
  out += line("all", total_steps, total);
  return out;
}

}  // namespace weft::cli
