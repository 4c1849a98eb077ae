// What the GPU tests check plans with: run one plan on this rank's GPU with random inputs and
// compare the result with the op computed on the host in double precision (small shapes), element
// by element (element_check.hpp).
#pragma once

#include "element_check.hpp"
#include "weft/reference/host_matrix.hpp"
#include "weft/ir/plan.hpp"
#include "weft/runtime/communicator.hpp"
#include "weft/runtime/cuda_executor.hpp"

namespace weft::bench {

// The GPU tests' ranks: one communicator per visible GPU of this process (or the first
// WEFT_TEST_WORLD), made once and shared by every test of the process.
const std::vector<std::unique_ptr<Communicator>>& test_group();
// Replaces the test group when a failed call aborted any of its communicators, so that one failure
// does not fail every later test of the process with "the communicator was aborted". Call between
// tests only (tests/gpu/test_group_renewal.cpp), never while a test holds the old communicators.
bool renew_test_group_if_aborted();

// fill_buffers (measure.hpp), then the inputs as host matrices.
RankTensors fill_inputs(CudaExecutor& exec, int rank, uint64_t seed, cudaStream_t stream);
HostMatrix download(const DeviceRegion& region, cudaStream_t stream);

// Every rank's A and B (same shapes on every rank), gathered through the communicator; collective.
std::vector<RankTensors> gather_inputs(Communicator& comm, const RankTensors& mine);

// Runs `plan` once on every rank's thread of `comm` (collective) and checks this rank's result
// against the host reference; the host reference needs every rank's inputs, so they are gathered
// through the communicator. With calls > 1 the plan runs that many times, the output poisoned
// before each, and every call's result is checked (a moving error is a race).
ElementCheck run_against_host_reference(Communicator& comm, const Plan& plan, uint64_t seed, int calls = 1);

struct BackToBackCalls {
  ElementCheck check;  // every sampled call's result against the reference of its inputs
  int sampled = 0;     // calls whose result was checked
};

// How the back-to-back calls are made: each call enqueued by the executor (which replays its own
// captured graph where options.replay_calls allows), or the whole call captured once by the caller
// into a CUDA graph on every rank (as torch.cuda.graphs does) and that graph launched every call.
enum class CallMode { enqueued, graph_launches };

// Runs `plan` `calls` times back to back on one stream, the host waiting only at the 4 points where
// the inputs change (new random values: a call that reads stale inputs shows). Every
// `sample_every`-th call, the first after each change and the last are sampled: the output poisoned
// (NaN) just before the call and copied aside just after, both on the stream, so a sampled call
// that did nothing shows as NaN; each sample is checked against the host reference. A stuck call
// ends in the executor's bounded wait, which throws naming the unmet signals (graph launches: in the
// bounded wait for the last call of each input set).
BackToBackCalls back_to_back_calls_against_reference(Communicator& comm, const Plan& plan, int calls, const ExecutorOptions& options,
                                                     CallMode mode = CallMode::enqueued, int sample_every = 50);

}  // namespace weft::bench
