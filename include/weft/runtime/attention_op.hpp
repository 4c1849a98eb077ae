// An AttentionOp: sequence-parallel self-attention (ag_attention: the keys and values of every rank,
// the queries of this one) made once per layer and called every step on the caller's buffers and
// stream, as weft::Op is for the GEMM ops (op.hpp says what the two share: the call's timeline, graph
// capture, errors).
//
//   weft::AttentionOp attn(comm, {.shape = {.batch = 1, .heads = 32, .kv_heads = 8, .head_dim = 128,
//                                           .causal = true, .max_tokens = 4096}});
//   attn.run({.q = q, .k = k, .v = v, .o = o, .tokens = tokens_per_rank}, stream);
//
// The buffers, row-major bf16, 16-byte aligned, token-major (Megatron's [s, b, h, d]; ir/problem.hpp):
//   q, o : [tokens, batch * heads * head_dim]     this rank's queries and their result
//   k, v : [tokens, batch * kv_heads * head_dim]  this rank's keys and values
// Rank r holds the tokens r * tokens .. (r + 1) * tokens - 1 of the sequence; o = softmax(q K^T /
// sqrt(head_dim)) V over the keys and values of every rank, query head h reading key/value head
// h / (heads / kv_heads) (GQA), and with `causal` only the keys at or before the query's global
// position. `tokens` may change from call to call up to max_tokens; every rank passes the same.
//
// Its sequential equivalent is the `sequential` strategy: NCCL all_gather of k and of v, then the
// attention kernel over every rank's keys. decomposed (RingAttention) attends to each peer's block as
// it arrives and merges the partial results by their log-sum-exp; tilelink runs one attention kernel
// whose key/value tiles wait for their pulls. "default" is auto (plan/auto.hpp). The GPU kernel
// takes head_dim 64 and 128.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <memory>
#include <string>

#include "weft/plan/op_arguments.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/runtime/communicator.hpp"

namespace weft {

class CudaExecutor;
class Workspace;

struct AttentionSpec {
  AttentionShape shape;
  std::string strategy = "default";
  PlanOptions plan;
  // As OpSpec's: device-side waits and whole calls are bounded (0: the environment's, else 10 s / 120 s).
  int64_t device_wait_timeout_ms = 0;
  int64_t call_timeout_ms = 0;
};

struct AttentionArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  int64_t tokens = 0;  // per rank
};

class AttentionOp {
 public:
  // Collective: every rank constructs its op with the same spec (checked).
  AttentionOp(Communicator& comm, AttentionSpec spec);
  ~AttentionOp();
  AttentionOp(const AttentionOp&) = delete;
  AttentionOp& operator=(const AttentionOp&) = delete;

  const AttentionSpec& spec() const { return spec_; }
  const std::string& strategy() const { return strategy_; }

  // Enqueues one call on `stream`; collective (every rank, the same tokens).
  void run(const AttentionArgs& args, cudaStream_t stream);
  // Plans and lowers for `tokens` now, so that a later run can be captured; collective.
  void prepare(int64_t tokens);
  // The plan a call of `tokens` runs ("auto=..." says what auto chose); collective where it is not
  // cached (the first time, or after the op dropped it: it keeps the 64 most recently used, never the
  // last call's nor one a stream capture ran).
  const Plan& plan(int64_t tokens);
  // Waits (bounded) until `stream` is done, then raises what went wrong in the op's calls.
  void finish(cudaStream_t stream);
  // Raises a device-side error recorded by an earlier call; never waits.
  void check();

 private:
  // touch: a hit becomes the most recently used (run, prepare); plan() only looks.
  CudaExecutor& executor(int64_t tokens, const char* caller, bool touch = true);

  Communicator& comm_;
  AttentionSpec spec_;
  std::string strategy_;
  std::unique_ptr<Workspace> workspace_;
  std::map<int64_t, std::unique_ptr<CudaExecutor>> cache_;  // by tokens
  std::deque<int64_t> order_;                               // cached token counts, least recently used first
  std::set<int64_t> captured_;                              // token counts a capture ran: never dropped
  CudaExecutor* last_ = nullptr;
};

}  // namespace weft
