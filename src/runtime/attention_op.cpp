#include "weft/runtime/attention_op.hpp"

#include <algorithm>
#include <cstdlib>
#include <functional>

#include "current_device.hpp"
#include "weft/kernels/attention.hpp"
#include "weft/plan/auto.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/cuda_executor.hpp"
#include "weft/runtime/workspace.hpp"

namespace weft {

namespace {

// Plans kept, the least recently used dropped beyond this (a caller may vary the token count
// without bound; every rank drops the same ones, making the same calls).
constexpr size_t kMaxPlans = 64;

// The caller's memory: queries, keys and values in, the result out (the plans' buffer names).
ExecutorOptions caller_options() {
  ExecutorOptions options;
  options.caller_buffers = {"Q", "K", "V"};
  options.caller_output = true;
  return options;
}

}  // namespace

AttentionOp::AttentionOp(Communicator& comm, AttentionSpec spec) : comm_(comm), spec_(std::move(spec)) {
  check_attention_shape(spec_.shape, comm_.world_size());  // plan/op_arguments.hpp, tested on the CPU
  const std::vector<int> dims = attention_head_dims();
  if (std::find(dims.begin(), dims.end(), spec_.shape.head_dim) == dims.end()) {
    std::string list;
    for (int d : dims) list += (list.empty() ? "" : ", ") + std::to_string(d);
    throw std::invalid_argument("weft::AttentionOp: head_dim=" + std::to_string(spec_.shape.head_dim) + " has no GPU kernel; the attention kernel "
                                "is compiled for head_dim " + list);
  }
  if (spec_.shape.kv_heads == 0) spec_.shape.kv_heads = spec_.shape.heads;
  strategy_ = spec_.strategy == "default" ? "auto" : spec_.strategy;
  use_default_auto_inputs(spec_.plan);
  if (const char* keep = std::getenv("WEFT_KEEP_STRATEGY_AT_WORLD_ONE"); keep && std::string(keep) == "1")
    spec_.plan.keep_strategy_at_world_one = true;
  if (!spec_.plan.topology) spec_.plan.topology = comm_.topology();
  const Strategy& strategy = find_strategy(strategy_);  // throws listing the known names
  if (!strategy.supports(OpKind::ag_attention))
    throw std::invalid_argument("weft::AttentionOp: strategy '" + strategy_ + "' does not implement ag_attention (sequential, decomposed, tilelink "
                                "and auto do)");
  const AttentionShape& s = spec_.shape;
  const std::string fingerprint = "ag_attention batch=" + std::to_string(s.batch) + " heads=" + std::to_string(s.heads) + " kv_heads=" +
                                  std::to_string(s.kv_heads) + " head_dim=" + std::to_string(s.head_dim) + (s.causal ? " causal" : "") +
                                  " max_tokens=" + std::to_string(s.max_tokens) + " strategy=" + strategy_;
  comm_.require_agreement(std::hash<std::string>{}(fingerprint), "the attention op (" + fingerprint + " on rank " + std::to_string(comm_.rank()) + ")");
  // The plan of the largest call, before any memory; its symmetric memory, once.
  const Plan largest = make_plan(strategy, attention_call_problem(s, comm_.world_size(), s.max_tokens), spec_.plan);
  const OnDevice on(comm_.device());
  workspace_ = std::make_unique<Workspace>(comm_);
  workspace_->reserve(workspace_size(largest, caller_options()));
}

AttentionOp::~AttentionOp() {
  cache_.clear();  // executors first: they may wait for their streams and meet their peers
  workspace_.reset();  // then the symmetric memory, met after as weft::Op's (op.cpp)
  if (comm_.other_gpus_in_this_process()) comm_.meet_after_freeing("the attention op");
}

CudaExecutor& AttentionOp::executor(int64_t tokens, const char* caller, bool touch) {
  if (const auto it = cache_.find(tokens); it != cache_.end()) {
    if (touch) {  // now the most recently used
      order_.erase(std::find(order_.begin(), order_.end(), tokens));
      order_.push_back(tokens);
    }
    return *it->second;
  }
  Plan plan = make_plan(find_strategy(strategy_), attention_call_problem(spec_.shape, comm_.world_size(), tokens), spec_.plan);
  ExecutorOptions options = caller_options();
  options.workspace = workspace_.get();
  options.device_wait_timeout_ms = spec_.device_wait_timeout_ms;
  options.call_timeout_ms = spec_.call_timeout_ms;
  try {
    auto made = std::make_unique<CudaExecutor>(comm_, std::move(plan), options);
    // The least recently used goes (its executor waits for its calls as it is destroyed), never the
    // last call's (finish and check report through it) nor one a capture ran (a graph uses it).
    if (order_.size() >= kMaxPlans) {
      const auto victim = std::find_if(order_.begin(), order_.end(), [&](int64_t t) {
        return !captured_.count(t) && cache_.at(t).get() != last_;
      });
      if (victim != order_.end()) {
        cache_.erase(*victim);
        order_.erase(victim);
      }
    }
    order_.push_back(tokens);
    return *cache_.emplace(tokens, std::move(made)).first->second;
  } catch (const CudaError& e) {
    throw CudaError(std::string(caller) + ": planning and lowering tokens=" + std::to_string(tokens) + " failed (" + e.what() +
                    "). If a CUDA graph was being captured: run or prepare this token count once before capturing");
  }
}

void AttentionOp::run(const AttentionArgs& args, cudaStream_t stream) {
  check_op_pointer(args.q, "q");
  check_op_pointer(args.k, "k");
  check_op_pointer(args.v, "v");
  check_op_pointer(args.o, "o");
  CudaExecutor& exec = executor(args.tokens, "weft::AttentionOp::run");
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  WEFT_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
  if (capturing != cudaStreamCaptureStatusNone) captured_.insert(args.tokens);  // kept while the op lives: a graph uses it
  exec.bind("Q", args.q);
  exec.bind("K", args.k);
  exec.bind("V", args.v);
  exec.bind_output(args.o);
  exec.run(stream);
  last_ = &exec;
}

void AttentionOp::prepare(int64_t tokens) { (void)executor(tokens, "weft::AttentionOp::prepare"); }

const Plan& AttentionOp::plan(int64_t tokens) { return executor(tokens, "weft::AttentionOp::plan", /*touch=*/false).plan(); }

void AttentionOp::finish(cudaStream_t stream) {
  if (last_) last_->finish(stream);
}

void AttentionOp::check() {
  if (last_) last_->check();
}

}  // namespace weft
