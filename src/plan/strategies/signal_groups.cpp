#include "signal_groups.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "weft/model/wave_partition.hpp"

namespace weft {

std::string_view to_string(SignalRestore restore) {
  switch (restore) {
    case SignalRestore::after_each_group: return "after_each_group";
    case SignalRestore::own_stream: return "own_stream";
    case SignalRestore::at_end: return "at_end";
  }
  return "?";
}

SignalRestore parse_signal_restore(std::string_view text) {
  for (SignalRestore r : {SignalRestore::after_each_group, SignalRestore::own_stream, SignalRestore::at_end})
    if (text == to_string(r)) return r;
  throw std::invalid_argument("unknown signal restore placement '" + std::string(text) + "' (known: after_each_group, own_stream, at_end)");
}

}  // namespace weft

namespace weft::detail {

int signal_gemm_sms(const PlanOptions& o) {
  const int sms = o.gemm_sms > 0 ? o.gemm_sms : o.machine.sm_count - o.machine.collective_sms;
  if (sms < 1) throw std::invalid_argument("signal: the GEMM needs at least one SM (gemm_sms " + std::to_string(o.gemm_sms) + ")");
  return sms;
}

SignalLayout choose_wave_groups(const Problem& p, const PlanOptions& o, const std::vector<SignalTile>& order, CollectiveKind kind,
                                double measured_gemm_seconds, int max_groups) {
  const auto count = static_cast<int64_t>(order.size());
  const int sms = signal_gemm_sms(o);
  const int waves = std::max(1, static_cast<int>((count + sms - 1) / sms));
  const int bytes_per_element = dtype_bytes(p.output_dtype);

  std::vector<double> bytes_before(static_cast<size_t>(count) + 1, 0.0);
  for (int64_t i = 0; i < count; ++i) {
    const SignalTile& t = order[static_cast<size_t>(i)];
    bytes_before[static_cast<size_t>(i) + 1] =
        bytes_before[static_cast<size_t>(i)] + (t.edge ? 0.0 : static_cast<double>(t.tile.rows) * o.tile_n * bytes_per_element);
  }
  const MachineProfile& machine = o.machine;
  const double tile_flops = 2.0 * o.tile_m * o.tile_n * static_cast<double>(p.k);
  WavePartitionModel model;
  model.waves = waves;
  // Operands mostly come from L2 (neighbouring tiles share them), so a wave is bound by the math.
  model.seconds_per_wave = measured_gemm_seconds > 0 ? measured_gemm_seconds / waves : tile_flops / (machine.peak_flops / machine.sm_count);
  const double slowdown = machine.overlapped_slowdown(kind, p.world_size);
  model.comm_seconds = [&, kind, slowdown](int first_wave, int wave_count) {
    const int64_t begin = std::min<int64_t>(int64_t{first_wave} * sms, count);
    const int64_t end = std::min<int64_t>(int64_t{first_wave + wave_count} * sms, count);
    return machine.overlapped_call_seconds +
           slowdown * machine.collective_seconds(kind, p.world_size, bytes_before[static_cast<size_t>(end)] - bytes_before[static_cast<size_t>(begin)]);
  };
  std::vector<int> partition = o.wave_partition;
  if (partition.empty()) {
    partition = search_wave_partition(model);
    while (max_groups > 0 && static_cast<int>(partition.size()) > max_groups) {
      partition[1] += partition[0];
      partition.erase(partition.begin());
    }
  } else {
    check_wave_partition(partition, waves);
    if (max_groups > 0 && static_cast<int>(partition.size()) > max_groups)
      throw std::invalid_argument("signal: this layout allows at most " + std::to_string(max_groups) + " wave groups; the partition " +
                                  to_string(partition) + " has " + std::to_string(partition.size()));
  }
  SignalLayout layout;
  layout.gemm_sms = sms;
  layout.tiles = count;
  layout.waves = waves;
  layout.partition = partition;
  layout.collective = kind;
  // The tiles put back in place after the last collective: all of them (at_end) or the last group's;
  // a box move reads and writes each byte once.
  const std::vector<int64_t> starts = group_starts(count, layout, 1, false);
  const double tail_bytes = o.signal_restore == SignalRestore::at_end || starts.size() < 2
                                ? bytes_before.back()
                                : bytes_before.back() - bytes_before[static_cast<size_t>(starts[starts.size() - 2])];
  layout.restore_seconds = 2.0 * tail_bytes / machine.memory_bytes_per_s;
  // gemm_a2a groups A's rows by destination before the GEMM (plan/strategies/signal_a2a.cpp): A read and written.
  if (p.op == OpKind::gemm_a2a)
    layout.prologue_seconds = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.k) * dtype_bytes(p.input_dtype) / machine.memory_bytes_per_s;
  layout.predicted_seconds = layout.prologue_seconds + model.predict(partition) + layout.restore_seconds;
  layout.predicted_gemm_seconds = model.seconds_per_wave * waves;
  return layout;
}

GemmStep signal_gemm(const Region& a, const Region& b, const PlanOptions& o, const SignalLayout& layout) {
  GemmStep gemm = gemm_over(a, b, o);
  gemm.persistent = !o.gemm_cta_per_tile;
  gemm.sm_limit = gemm.persistent ? layout.gemm_sms : 0;
  gemm.tail_splits = 1;  // its waves are its groups
  gemm.stream_k = false;
  return gemm;
}

std::vector<int64_t> group_starts(int64_t tiles, const SignalLayout& layout, int64_t unit, bool keep_empty) {
  std::vector<int64_t> starts{0};
  int64_t wave_end = 0;
  for (int size : layout.partition) {
    wave_end += size;
    int64_t end = std::min<int64_t>(wave_end * layout.gemm_sms, tiles);
    end = std::min<int64_t>((end + unit - 1) / unit * unit, tiles);
    if (keep_empty || end > starts.back()) starts.push_back(end);
  }
  return starts;
}

void RestoreSteps::add(std::string label, MoveBoxesStep restore) {
  switch (placement_) {
    case SignalRestore::after_each_group:
      builder_.add(std::move(label), 1, Engine::sm, std::move(restore));
      return;
    case SignalRestore::own_stream: {
      const SignalId done = builder_.signal("before " + label);
      builder_.last_step().notifies.push_back(Notify{builder_.own(done), 1});
      Step& step = builder_.add(std::move(label), 2, Engine::sm, std::move(restore));
      step.waits.push_back(Wait{builder_.own(done), 1});
      return;
    }
    case SignalRestore::at_end:
      // Moves from one source merge into one step (one kernel).
      for (auto& [name, step] : pending_)
        if (step.src == restore.src && step.dst == restore.dst) {
          step.moves.insert(step.moves.end(), restore.moves.begin(), restore.moves.end());
          return;
        }
      pending_.emplace_back(std::move(label), std::move(restore));
      return;
  }
}

void RestoreSteps::finish() {
  for (auto& [label, step] : pending_) builder_.add(label + " (after the last collective)", 1, Engine::sm, std::move(step));
  pending_.clear();
}

}  // namespace weft::detail
