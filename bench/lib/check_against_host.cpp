#include "check_against_host.hpp"

#include "measure.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "weft/kernels/elementwise.hpp"
#include "weft/runtime/cuda_check.hpp"
#include "weft/runtime/signal_set.hpp"

namespace weft::bench {

namespace {

// Runs before main, so before the tests' first CUDA call.
const bool cuda_configured = (configure_cuda_for_waits(), true);
// ctest kills a test that outlives its timeout; a failure message still in a full stdout buffer
// would die with it, and a hang would leave no trace.
const bool stdout_line_buffered = (std::setvbuf(stdout, nullptr, _IOLBF, 0), true);

float bf16_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

}  // namespace

const std::vector<std::unique_ptr<Communicator>>& test_group() {
  static std::vector<std::unique_ptr<Communicator>> group = [] {
    int visible = 0;
    WEFT_CUDA_CHECK(cudaGetDeviceCount(&visible));
    int world = visible;
    if (const char* w = std::getenv("WEFT_TEST_WORLD")) world = std::min(visible, std::atoi(w));
    return first_gpus(world);
  }();
  return group;
}

HostMatrix download(const DeviceRegion& region, cudaStream_t stream) {
  std::vector<uint16_t> raw(static_cast<size_t>(region.rows * region.cols));
  if (!raw.empty())
    WEFT_CUDA_CHECK(cudaMemcpy2DAsync(raw.data(), static_cast<size_t>(region.cols) * 2, region.data,
                                      static_cast<size_t>(region.stride) * 2, static_cast<size_t>(region.cols) * 2,
                                      static_cast<size_t>(region.rows), cudaMemcpyDeviceToHost, stream));
  WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
  HostMatrix m(region.rows, region.cols);
  for (size_t i = 0; i < raw.size(); ++i) m.data[i] = bf16_to_float(raw[i]);
  return m;
}

RankTensors fill_inputs(CudaExecutor& exec, int rank, uint64_t seed, cudaStream_t stream) {
  fill_buffers(exec, rank, seed, stream);
  RankTensors inputs;
  for (const BufferDecl& decl : exec.rank_plan().buffers)
    if (decl.role == BufferRole::input)
      inputs[decl.name] = download(DeviceRegion{exec.buffer(decl.name), decl.rows, decl.cols, decl.cols}, stream);
  return inputs;
}

std::vector<RankTensors> gather_inputs(Communicator& comm, const RankTensors& mine) {
  std::vector<RankTensors> all(static_cast<size_t>(comm.world_size()));
  for (const auto& [name, local] : mine) {
    const auto gathered = comm.all_gather_bytes(local.data.data(), local.data.size() * sizeof(float));
    for (int r = 0; r < comm.world_size(); ++r) {
      HostMatrix m(local.rows, local.cols);
      std::memcpy(m.data.data(), gathered.data() + static_cast<size_t>(r) * local.data.size() * sizeof(float),
                  local.data.size() * sizeof(float));
      all[static_cast<size_t>(r)][name] = std::move(m);
    }
  }
  return all;
}

double run_against_host_reference(Communicator& comm, const Plan& plan, uint64_t seed, int calls) {
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CudaExecutor exec(comm, plan);
  RankTensors mine = fill_inputs(exec, comm.rank(), seed, stream);
  const std::vector<RankTensors> all = gather_inputs(comm, mine);
  const auto expected = expected_outputs(plan.problem, all);
  double worst = 0;
  for (int call = 0; call < calls; ++call) {
    const DeviceRegion out = exec.output();
    if (call > 0) fill_u16(out.data, out.rows * out.stride, kBf16Nan, stream);
    exec.run(stream);
    if (!synchronize_with_timeout(stream, 30000))
      throw std::runtime_error("plan did not finish (call " + std::to_string(call) + "):\n" + exec.diagnose());
    worst = std::max(worst, relative_error(download(out, stream), expected[static_cast<size_t>(comm.rank())]));
  }
  cudaStreamDestroy(stream);
  return worst;
}

bool back_to_back_calls_keep_result(Communicator& comm, const Plan& plan, int calls, const ExecutorOptions& options) {
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CudaExecutor exec(comm, plan, options);
  fill_inputs(exec, comm.rank(), 3, stream);
  exec.run(stream);
  if (!synchronize_with_timeout(stream, 30000)) throw std::runtime_error("the first call did not finish:\n" + exec.diagnose());
  const HostMatrix first = download(exec.output(), stream);
  // No rank starts the loop's collectives while another is still in a driver call of its own.
  comm.host_barrier();
  for (int i = 0; i < calls; ++i) exec.run(stream);
  if (!synchronize_with_timeout(stream, Communicator::timeout_ms()))
    throw std::runtime_error(std::to_string(calls) + " back-to-back calls did not finish:\n" + exec.diagnose());
  const HostMatrix last = download(exec.output(), stream);
  cudaStreamDestroy(stream);
  return first.data == last.data;
}

}  // namespace weft::bench
