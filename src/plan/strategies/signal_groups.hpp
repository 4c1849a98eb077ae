// Internal to the `signal` builders (plan/strategies/signal.cpp, plan/strategies/signal_a2a.cpp): how a GEMM whose tiles
// run in a given order is cut into groups of waves (flashoverlap.txt Algorithm 1).
#pragma once

#include <vector>

#include "builder_support.hpp"
#include "weft/plan/strategies.hpp"

namespace weft::detail {

// One tile of the signal GEMM's table, in execution order.
struct SignalTile {
  Rect tile;
  int block = 0;      // gemm_rs: the rank whose rows it holds (-1: several); gemm_a2a: the rank its rows go to
  bool edge = false;  // gemm_ar/gemm_rs: narrower than tile_n, stored in C_edge
};

// SMs the signal GEMM keeps: options.gemm_sms, else all but the machine's collective_sms.
int signal_gemm_sms(const PlanOptions& options);

// The partition of `order` into wave groups: options.wave_partition, or the one the predictor finds
// with a wave costing what one SM needs for one tile (or measured_gemm_seconds / waves) and a
// group's `kind` collective costing what the machine's curve says for its tiles' bytes.
// max_groups > 0 caps the number of groups: a searched partition merges its first groups until it
// fits; a given one that does not fit is rejected.
SignalLayout choose_wave_groups(const Problem& problem, const PlanOptions& options, const std::vector<SignalTile>& order,
                                CollectiveKind kind, double measured_gemm_seconds, int max_groups = 0);

// The signal GEMM over a and b with an empty table: persistent on layout.gemm_sms SMs (the rest left
// to NCCL for the whole call), or with gemm_cta_per_tile a CTA per tile, whose SMs NCCL's kernels
// (higher-priority stream) take as tiles end. On 2xH200 the first was faster (bench/results/README.md).
GemmStep signal_gemm(const Region& a, const Region& b, const PlanOptions& options, const SignalLayout& layout);

// Where each group starts in a table of `tiles` entries cut by `layout` (waves of layout.gemm_sms
// tiles), plus `tiles` at the end. Group ends are rounded up to multiples of `unit`. With
// keep_empty, groups that hold no tile stay (ranks whose tables differ in length still agree on
// the number of groups); otherwise they are dropped.
std::vector<int64_t> group_starts(int64_t tiles, const SignalLayout& layout, int64_t unit, bool keep_empty);

// Places each group's restore step (a box move into the result) as options.signal_restore says.
// Call add() right after adding the group's collective (the last step added), finish() at the end.
class RestoreSteps {
 public:
  RestoreSteps(RankPlanBuilder& builder, SignalRestore placement) : builder_(builder), placement_(placement) {}
  static int stream_count(SignalRestore placement) { return placement == SignalRestore::own_stream ? 3 : 2; }
  void add(std::string label, MoveBoxesStep restore);
  void finish();

 private:
  RankPlanBuilder& builder_;
  SignalRestore placement_;
  std::vector<std::pair<std::string, MoveBoxesStep>> pending_;  // at_end
};

// gemm_a2a's builder and layout (plan/strategies/signal_a2a.cpp); plan_signal and signal_layout dispatch to them.
Plan plan_signal_all_to_all(const Problem& problem, const PlanOptions& options);
SignalLayout signal_layout_all_to_all(const Problem& problem, const PlanOptions& options, double measured_gemm_seconds);

}  // namespace weft::detail
