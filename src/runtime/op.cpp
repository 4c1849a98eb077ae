#include "weft/runtime/op.hpp"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <optional>

#include "weft/plan/auto.hpp"
#include "weft/model/tuning_table.hpp"
#include "weft/plan/op_arguments.hpp"
#include "current_device.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/cuda_executor.hpp"
#include "weft/runtime/workspace.hpp"

namespace weft {

namespace {

// Plans kept, the least recently used dropped beyond these (every rank drops the same ones: ranks
// make the same calls): a routed or MoE op's depend on its per-call table, which may change every
// call; the others' on the row count, which a caller may vary (inference) without bound.
constexpr size_t kMaxRoutedPlans = 8;
constexpr size_t kMaxPlans = 64;

OpShape shape_of(const OpSpec& spec) {
  return {spec.op, spec.n, spec.k, spec.max_rows, spec.input_dtype, spec.output_dtype, spec.b_layout, spec.b_dtype, spec.scaling,
          spec.experts, spec.topk, spec.routing_on_device};
}

bool fp8_spec(const OpSpec& spec) { return is_fp8(spec.input_dtype); }

// Ops whose plan depends on a per-call table (the routed ops' destinations, the MoE ops' choices):
// planned per table, the oldest dropped.
bool planned_per_table(const OpSpec& spec) { return routes_rows(spec.op) || (is_moe(spec.op) && !spec.routing_on_device); }

// The caller's inputs: A and B, moe_rs's top-k weights, and the choices where given on the device.
std::vector<std::string> caller_inputs(const OpSpec& spec) {
  std::vector<std::string> names{"A", "B"};
  if (spec.op == OpKind::moe_rs) names.push_back("topk_weights");
  if (spec.routing_on_device) names.push_back("choices");
  return names;
}

}  // namespace

std::string default_strategy(OpKind, int) { return "auto"; }

struct Op::Lowered {
  std::unique_ptr<CudaExecutor> executor;
  bool a_symmetric = false;  // the plan reads A from symmetric memory (peers pull it)
  bool in_place = false;     // ... and the caller's producer writes it there
  bool captured = false;     // a call of it was enqueued while its stream was captured (a graph uses it)
};

Op::Op(Communicator& comm, OpSpec spec) : comm_(comm), spec_(std::move(spec)) {
  // Shape, dtypes, MoE and divisibility (plan/op_arguments.hpp, tested on the CPU).
  check_op_shape(shape_of(spec_), comm_.world_size());
  strategy_ = spec_.strategy == "default" ? default_strategy(spec_.op, comm_.world_size()) : spec_.strategy;
  // What auto chooses by, where the spec does not say: the shipped (measured) machine profile and
  // tuning table, or the environment's (model/shipped_defaults.hpp; read on every rank alike, and
  // the plans' agreement check catches ranks that read others).
  use_default_auto_inputs(spec_.plan);
  if (const char* keep = std::getenv("WEFT_KEEP_STRATEGY_AT_WORLD_ONE"); keep && std::string(keep) == "1")
    spec_.plan.keep_strategy_at_world_one = true;
  // Plans that reach a peer this machine cannot reach are refused (auto passes over them).
  if (!spec_.plan.topology) spec_.plan.topology = comm_.topology();
  // An FP8 plan the CUDA executor cannot lower yet is declined (make_plan names why; auto passes over
  // the strategy): plan/gpu_lowering.hpp.
  if (fp8_spec(spec_)) spec_.plan.gpu_lowerable_only = true;
  // So is a routed MoE plan the GPU cannot run (B laid out kn); more (source, expert) blocks than the
  // route takes are refused with the shape (check_op_shape).
  if (spec_.routing_on_device) spec_.plan.gpu_lowerable_only = true;
  const Strategy& strategy = find_strategy(strategy_);  // throws listing the known names
  if (!strategy.supports(spec_.op))
    throw std::invalid_argument("weft::Op: strategy '" + strategy_ + "' does not implement " + std::string(to_string(spec_.op)));
  const std::string fingerprint = std::string(to_string(spec_.op)) + " n=" + std::to_string(spec_.n) + " k=" + std::to_string(spec_.k) +
                                  " b_layout=" + std::string(to_string(spec_.b_layout)) + " max_rows=" + std::to_string(spec_.max_rows) +
                                  " strategy=" + strategy_ + " " + std::string(to_string(spec_.input_dtype)) + "x" +
                                  std::string(to_string(spec_.b_dtype.value_or(spec_.input_dtype))) + "->" +
                                  std::string(to_string(spec_.output_dtype)) + " scaling=" + std::string(to_string(spec_.scaling)) +
                                  " experts=" + std::to_string(spec_.experts) + " topk=" + std::to_string(spec_.topk) +
                                  (spec_.routing_on_device ? " routing_on_device" : "");
  comm_.require_agreement(std::hash<std::string>{}(fingerprint), "the op (" + fingerprint + " on rank " + std::to_string(comm_.rank()) + ")");
  // The plan of the largest call, before any memory: a strategy that declines (an FP8 plan the
  // executor cannot lower) fails here alike on every rank.
  std::optional<Plan> largest;
  std::vector<Plan> alternatives;  // MoE under auto: the other candidates' plans of the largest call
  if (!planned_per_table(spec_)) {
    largest = make_plan(strategy, problem_for(spec_.max_rows, {}), spec_.plan);
  } else if (is_moe(spec_.op)) {
    // The MoE ops' buffers follow the rows (every token picks topk experts), not the choices: any
    // valid table sizes the largest call (token i's j-th expert (i * topk + j) mod experts).
    std::vector<std::vector<int>> choices(static_cast<size_t>(comm_.world_size()));
    for (auto& rank_choices : choices)
      for (int64_t i = 0; i < spec_.max_rows * spec_.topk; ++i) rank_choices.push_back(static_cast<int>(i % spec_.experts));
    const Problem problem = problem_for(spec_.max_rows, choices);
    largest = make_plan(strategy, problem, spec_.plan);
    // auto chooses again for every call's choices, and its candidates' scratch differs (sequential's
    // expert-major rows, tilelink's symmetric blocks): reserve for each candidate that runs here, so
    // that no call grows the arena (nor allocates while a graph is captured).
    if (strategy_ == "auto")
      for (const std::string& name : auto_candidates(spec_.op)) try {
          alternatives.push_back(make_plan(find_strategy(name), problem, spec_.plan));
        } catch (const std::invalid_argument&) {
          // declines here (another topology, a dtype it cannot lower): auto never picks it
        }
  }
  const OnDevice on(comm_.device());
  workspace_ = std::make_unique<Workspace>(comm_);
  // Symmetric memory for the largest call, once (routed ops: sized by their first plans instead).
  if (largest) {
    ExecutorOptions options;
    options.caller_buffers = caller_inputs(spec_);
    options.caller_output = true;
    WorkspaceSize size = workspace_size(*largest, options);
    for (const Plan& plan : alternatives) {
      const WorkspaceSize other = workspace_size(plan, options);
      size.symmetric_bytes = std::max(size.symmetric_bytes, other.symmetric_bytes);
      size.local_bytes = std::max(size.local_bytes, other.local_bytes);
      size.signals = std::max(size.signals, other.signals);
      size.peers = size.peers || other.peers;
    }
    workspace_->reserve(size);
  }
}

Op::~Op() {
  // Executors first: they may wait for their streams and meet their peers before freeing.
  cache_.clear();
  // Then the symmetric memory, and where peers share the process nobody leaves before all have
  // freed it (a freeing rank waits for the GPUs that map it to go idle: ~CudaExecutor says why).
  workspace_.reset();
  if (comm_.other_gpus_in_this_process()) comm_.meet_after_freeing("the op");
}

Problem Op::problem_for(int64_t rows, const std::vector<std::vector<int>>& routing) const {
  return op_call_problem(shape_of(spec_), comm_.world_size(), rows, routing);  // plan/op_arguments.hpp
}

Op::Lowered& Op::lowered(int64_t rows, const std::vector<std::vector<int>>& routing, bool in_place, bool gathered_a, const char* caller,
                         bool touch) {
  if (const auto it = cache_.find(PlanKeyView{rows, in_place, gathered_a, &routing}); it != cache_.end()) {
    if (touch) {  // now the most recently used
      plan_order_.erase(std::find(plan_order_.begin(), plan_order_.end(), it));
      plan_order_.push_back(it);
    }
    return *it->second;
  }
  const Problem problem = problem_for(rows, routing);
  Plan plan = make_plan(find_strategy(strategy_), problem, spec_.plan);
  auto entry = std::make_unique<Lowered>();
  const RankPlan& mine = plan.ranks.at(static_cast<size_t>(comm_.rank()));
  entry->a_symmetric = mine.buffers.at(static_cast<size_t>(find_buffer(mine, "A"))).symmetric;
  entry->in_place = in_place && entry->a_symmetric;
  ExecutorOptions options;
  options.caller_buffers = caller_inputs(spec_);
  options.caller_output = true;
  options.symmetric_inputs_in_place = entry->in_place;
  options.caller_gathered_a = gathered_a;
  options.workspace = workspace_.get();
  options.device_wait_timeout_ms = spec_.device_wait_timeout_ms;
  options.call_timeout_ms = spec_.call_timeout_ms;
  try {
    entry->executor = std::make_unique<CudaExecutor>(comm_, std::move(plan), options);
  } catch (const CudaError& e) {
    throw CudaError(std::string(caller) + ": planning and lowering rows=" + std::to_string(rows) + " failed (" + e.what() +
                    "). If a CUDA graph was being captured: run or prepare this row count once before capturing");
  }
  // The least recently used plan beyond the limit goes (its executor waits for its calls as it is
  // destroyed), but never the last call's (finish and check report through it), one whose A a
  // producer writes in place (it holds that buffer's address), nor one a capture ran (a graph uses
  // its memory). Every rank drops the same one: ranks make the same calls.
  if (plan_order_.size() >= (planned_per_table(spec_) ? kMaxRoutedPlans : kMaxPlans)) {
    const auto victim = std::find_if(plan_order_.begin(), plan_order_.end(), [&](Cache::iterator c) {
      return !c->second->in_place && !c->second->captured && c->second.get() != last_;
    });
    if (victim != plan_order_.end()) {
      cache_.erase(*victim);
      plan_order_.erase(victim);
    }
  }
  const auto placed = cache_.emplace(PlanKey{rows, in_place, gathered_a, routing}, std::move(entry)).first;
  plan_order_.push_back(placed);
  return *placed->second;
}

const Plan& Op::plan(int64_t rows, const std::vector<std::vector<int>>& routing) {
  return lowered(rows, routing, false, false, "weft::Op::plan", /*touch=*/false).executor->plan();
}

void Op::prepare(int64_t rows, const std::vector<std::vector<int>>& routing) { (void)lowered(rows, routing, false, false, "weft::Op::prepare"); }

void* Op::a_in_workspace(int64_t rows, const std::vector<std::vector<int>>& routing) {
  Lowered& entry = lowered(rows, routing, true, false, "weft::Op::a_in_workspace");
  return entry.in_place ? entry.executor->buffer("A") : nullptr;
}

namespace {

// A call's per-call table: the routed ops' routing, the MoE ops' choices (the other one must be empty);
// none where the choices are given on the device.
const std::vector<std::vector<int>>& table_of(const OpSpec& spec, const RunArgs& args) {
  const OpKind op = spec.op;
  if (spec.routing_on_device) {
    if (!args.choices.empty() || !args.routing.empty())
      throw std::invalid_argument("weft::Op::run: " + std::string(to_string(op)) +
                                  " takes its choices on the device (OpSpec::routing_on_device): RunArgs::choices_device, not a host table");
    return args.choices;  // empty
  }
  if (args.choices_device)
    throw std::invalid_argument("weft::Op::run: choices_device is for an op made with OpSpec::routing_on_device; this " + std::string(to_string(op)) +
                                (is_moe(op) ? " takes its choices in RunArgs::choices" : " takes none"));
  if (is_moe(op)) {
    if (!args.routing.empty())
      throw std::invalid_argument("weft::Op::run: " + std::string(to_string(op)) + " takes its experts in RunArgs::choices, not routing");
    return args.choices;
  }
  if (!args.choices.empty())
    throw std::invalid_argument("weft::Op::run: choices are the MoE ops' (ag_moe, moe_rs), not " + std::string(to_string(op)) + "'s");
  return args.routing;
}

}  // namespace

int64_t Op::output_rows(const RunArgs& args) const {
  const Problem p = problem_for(args.rows, table_of(spec_, args));
  return weft::output_rows(p, comm_.rank());
}

void Op::run(const RunArgs& args, cudaStream_t stream) {
  check_op_pointer(args.a, "a");
  check_op_pointer(args.b, "b");
  check_op_pointer(args.c, "c");
  const std::vector<std::vector<int>>& table = table_of(spec_, args);
  if (spec_.routing_on_device) check_op_pointer(args.choices_device, "choices_device");
  if (spec_.op == OpKind::moe_rs) check_op_pointer(args.topk_weights, "topk_weights");
  else if (args.topk_weights)
    throw std::invalid_argument("weft::Op::run: topk_weights are moe_rs's, not " + std::string(to_string(spec_.op)) + "'s");
  check_op_scales(shape_of(spec_), args.rows, args.scale_a, args.scale_a_count, args.scale_b, args.scale_b_count);
  const bool gathered_a = args.gathered_a != nullptr;
  if (gathered_a && fp8_spec(spec_))
    throw std::invalid_argument("weft::Op::run: gathered_a is not taken with FP8 operands yet (the gathered rows' scales are not handed back)");
  if (gathered_a) {
    if (spec_.op != OpKind::ag_gemm)
      throw std::invalid_argument("weft::Op::run: gathered_a is ag_gemm's (the gathered input); " + std::string(to_string(spec_.op)) +
                                  " gathers no A");
    check_op_pointer(args.gathered_a, "gathered_a");
  }
  // The producer wrote the shard in place when a is the in-place plan's own buffer.
  bool in_place = false;
  if (const auto it = cache_.find(PlanKeyView{args.rows, true, false, &table}); it != cache_.end() && it->second->in_place)
    in_place = it->second->executor->buffer("A") == args.a;
  Lowered& entry = lowered(args.rows, table, in_place, gathered_a, "weft::Op::run");
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  WEFT_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
  if (capturing != cudaStreamCaptureStatusNone) entry.captured = true;  // kept while the op lives: a graph uses it
  CudaExecutor& exec = *entry.executor;
  exec.bind("A", entry.in_place ? nullptr : args.a, args.scale_a);
  exec.bind("B", args.b, args.scale_b);
  if (spec_.op == OpKind::moe_rs) exec.bind("topk_weights", args.topk_weights);
  if (spec_.routing_on_device) exec.bind("choices", args.choices_device);
  exec.bind_output(args.c);
  if (gathered_a) exec.bind_gathered_a(args.gathered_a);
  exec.run(stream);
  last_ = &entry;
}

void Op::finish(cudaStream_t stream) {
  if (last_) last_->executor->finish(stream);
}

void Op::check() {
  if (last_) last_->executor->check();
}

std::string Op::diagnose() const { return last_ ? last_->executor->diagnose() : "no call yet\n"; }

size_t Op::copies_in_last_call() const { return last_ ? last_->executor->copies_in_per_call() : 0; }

}  // namespace weft
