// A kernel that holds every SM while it waits inside: what raises its waits must not need an SM.
//
// A persistent GEMM or attention kernel with sm_limit 0 fills every SM with CTAs that spin on their
// tiles' counters. A step of the same rank on another stream that must run on SMs to raise one of
// those counters finds none free once the kernel is resident, and the call hangs until the device
// wait gives up. Steps that need SMs: kernels of every kind, NCCL's collectives, a companion kernel,
// box moves, and a copy within one GPU even on the copy engine (the runtime runs a device-to-device
// copy as a kernel). A copy to or from a peer on the copy engine and a join do not, and nor does
// their raise of a counter they alone write (a stream memory operation); a counter several steps
// raise is raised by a one-thread kernel, which needs an SM. The abstract execution of
// check_liveness cannot see this: it has no notion of SMs. Not modelled: ordering (a raiser that
// is done before the kernel starts is still refused; no shipped plan has one) and raises on peers.
#include <optional>
#include <sstream>

#include "checks.hpp"
#include "weft/plan/analysis.hpp"

namespace weft::detail {

namespace {

// Whether `step` of rank `rank` occupies SMs while it runs.
bool needs_sms(const Step& step, int rank) {
  if (step.companion >= 0) return true;
  if (std::holds_alternative<JoinStep>(step.body)) return false;
  if (step.engine == Engine::copy_engine)
    if (const auto* copy = std::get_if<CopyStep>(&step.body)) return copy->src.rank == rank && copy->dst.rank == rank;
  return true;  // box moves are a kernel whatever the engine (lower_move_boxes)
}

// The in-kernel waits of a kernel that may occupy every SM (none where it leaves SMs to others).
std::vector<Wait> waits_holding_every_sm(const Step& step) {
  std::vector<Wait> waits;
  if (step.companion >= 0) return waits;
  if (const auto* gemm = std::get_if<GemmStep>(&step.body); gemm && gemm->sm_limit == 0) {
    for (const GemmTile& t : gemm->tiles)
      if (t.wait) waits.push_back(*t.wait);
  } else if (const auto* attention = std::get_if<AttentionStep>(&step.body); attention && attention->sm_limit == 0) {
    for (const KvTile& t : attention->kv_tiles)
      if (t.wait) waits.push_back(*t.wait);
  }
  return waits;
}

}  // namespace

void check_sm_holding_waits(const Plan& plan, ValidationReport& report) {
  for (int r = 0; r < plan.world_size(); ++r) {
    const RankPlan& rp = plan.ranks[static_cast<size_t>(r)];
    const std::vector<std::vector<uint64_t>> written = single_writer_values(plan, r);  // 0: raised by a kernel
    // Whether step s raises `signal`, and whether that raise needs an SM.
    auto raise_of = [&](size_t s, const SignalRef& signal) -> std::optional<bool> {
      const Step& step = rp.steps[s];
      std::optional<bool> needs;
      for (size_t n = 0; n < step.notifies.size(); ++n)
        if (step.notifies[n].signal == signal) needs = needs.value_or(false) || needs_sms(step, r) || written[s][n] == 0;
      if (const auto* gemm = std::get_if<GemmStep>(&step.body))
        for (const GemmTile& t : gemm->tiles)
          if (t.notify && t.notify->signal == signal) needs = true;
      return needs;
    };
    for (size_t k = 0; k < rp.steps.size(); ++k) {
      const Step& kernel = rp.steps[k];
      const std::vector<Wait> waits = waits_holding_every_sm(kernel);
      if (waits.empty()) continue;
      bool reported = false;
      for (const Wait& w : waits) {
        if (w.signal.rank != r || reported) continue;  // a peer's counter is raised by the peer's steps
        for (size_t s = 0; s < rp.steps.size() && !reported; ++s) {
          const Step& raiser = rp.steps[s];
          // Earlier on the kernel's own stream: done before the kernel starts.
          if (s == k || (raiser.stream == kernel.stream && s < k)) continue;
          const std::optional<bool> needs = raise_of(s, w.signal);
          if (!needs || !*needs) continue;
          std::ostringstream why;
          why << "rank " << r << " step '" << kernel.label << "' (stream " << kernel.stream << ") holds every SM while its tiles wait for "
              << describe_signal(plan, w.signal) << ", which step '" << raiser.label << "' (stream " << raiser.stream << ") raises on SMs of its own"
              << (!needs_sms(raiser, r) ? " (a counter several steps raise is raised by a kernel)"
                  : std::holds_alternative<CopyStep>(raiser.body) ? " (a copy within one GPU runs as a kernel)"
                                                                     : "")
              << ": it may find none free and the call hangs; run it on the kernel's stream before it, or leave it SMs (sm_limit)";
          report.errors.push_back({"sm_holding", why.str()});
          reported = true;
        }
      }
    }
  }
}

}  // namespace weft::detail
