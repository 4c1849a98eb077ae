// What the GPU tests check plans with: run one plan on this rank's GPU with random inputs and
// compare the result with the op computed on the host in double precision (small shapes).
#pragma once

#include "weft/reference/host_matrix.hpp"
#include "weft/ir/plan.hpp"
#include "weft/runtime/communicator.hpp"
#include "weft/runtime/cuda_executor.hpp"

namespace weft::bench {

// The GPU tests' ranks: one communicator per visible GPU of this process (or the first
// WEFT_TEST_WORLD), made once and shared by every test of the process.
const std::vector<std::unique_ptr<Communicator>>& test_group();

// fill_buffers (measure.hpp), then the inputs as host matrices.
RankTensors fill_inputs(CudaExecutor& exec, int rank, uint64_t seed, cudaStream_t stream);
HostMatrix download(const DeviceRegion& region, cudaStream_t stream);

// Every rank's A and B (same shapes on every rank), gathered through the communicator; collective.
std::vector<RankTensors> gather_inputs(Communicator& comm, const RankTensors& mine);

// Runs `plan` once on every rank's thread of `comm` (collective) and returns this rank's relative
// error against the host reference; the host reference needs every rank's inputs, so they are
// gathered through the communicator. With calls > 1 the plan runs that many times, the output
// poisoned before each, and the worst error is returned (a moving error is a race).
double run_against_host_reference(Communicator& comm, const Plan& plan, uint64_t seed, int calls = 1);

// Runs `plan` once, then `calls` times back to back on one stream without waiting on the host, and
// says whether this rank's last result equals its first bit for bit. A stuck call ends in the
// executor's bounded wait, which throws naming the unmet signals.
bool back_to_back_calls_keep_result(Communicator& comm, const Plan& plan, int calls, const ExecutorOptions& options);

}  // namespace weft::bench
