#include "check_against_host.hpp"

#include "measure.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>

#include "weft/kernels/elementwise.hpp"
#include "weft/cuda/check.hpp"
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

namespace {

std::vector<std::unique_ptr<Communicator>>& test_group_storage() {
  static std::vector<std::unique_ptr<Communicator>> group;
  return group;
}

std::vector<std::unique_ptr<Communicator>> new_test_group() {
  int visible = 0;
  WEFT_CUDA_CHECK(cudaGetDeviceCount(&visible));
  int world = visible;
  if (const char* w = std::getenv("WEFT_TEST_WORLD")) world = std::min(visible, std::atoi(w));
  return first_gpus(world);
}

}  // namespace

const std::vector<std::unique_ptr<Communicator>>& test_group() {
  auto& group = test_group_storage();
  if (group.empty()) group = new_test_group();
  return group;
}

bool renew_test_group_if_aborted() {
  auto& group = test_group_storage();
  const bool aborted = std::any_of(group.begin(), group.end(), [](const std::unique_ptr<Communicator>& c) { return c->aborted(); });
  if (!aborted) return false;
  std::fprintf(stderr, "weft tests: a failed call aborted the shared test group's communicators; the next test gets a new group\n");
  group.clear();
  group = new_test_group();
  return true;
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
  // Each as its memory holds it (a column-major B: its [cols, rows] transpose), as RankTensors do.
  for (const BufferDecl& decl : exec.rank_plan().buffers)
    if (decl.role == BufferRole::input) {
      const bool transposed = decl.order == MemoryOrder::column_major;
      const int64_t rows = transposed ? decl.cols : decl.rows, cols = transposed ? decl.rows : decl.cols;
      if (decl.dtype == DType::i32) {  // indices (the MoE choices given on the device), as floats
        std::vector<int32_t> raw(static_cast<size_t>(rows * cols));
        WEFT_CUDA_CHECK(cudaMemcpyAsync(raw.data(), exec.buffer(decl.name), raw.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
        WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
        HostMatrix m(rows, cols);
        for (size_t i = 0; i < raw.size(); ++i) m.data[i] = static_cast<float>(raw[i]);
        inputs[decl.name] = std::move(m);
        continue;
      }
      inputs[decl.name] = download(DeviceRegion{exec.buffer(decl.name), rows, cols, cols}, stream);
    }
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

ElementCheck run_against_host_reference(Communicator& comm, const Plan& plan, uint64_t seed, int calls) {
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CudaExecutor exec(comm, plan);
  RankTensors mine = fill_inputs(exec, comm.rank(), seed, stream);
  const std::vector<RankTensors> all = gather_inputs(comm, mine);
  const size_t rank = static_cast<size_t>(comm.rank());
  const HostMatrix want = expected_output(plan.problem, all, static_cast<int>(rank)), scale = expected_magnitude(plan.problem, all, static_cast<int>(rank));
  ElementCheck check;
  for (int call = 0; call < calls; ++call) {
    const DeviceRegion out = exec.output();
    if (call > 0) fill_u16(out.data, out.rows * out.stride, kBf16Nan, stream);
    exec.run(stream);
    if (!synchronize_with_timeout(stream, 30000))
      throw std::runtime_error("plan did not finish (call " + std::to_string(call) + "):\n" + exec.diagnose());
    check.add(check_elements(download(out, stream), want, scale, bf16_error_factor(plan.problem)));
  }
  cudaStreamDestroy(stream);
  return check;
}

BackToBackCalls back_to_back_calls_against_reference(Communicator& comm, const Plan& plan, int calls, const ExecutorOptions& options,
                                                     CallMode mode, int sample_every) {
  constexpr int kInputSets = 4;
  if (calls < 1 || sample_every < 1)
    throw std::invalid_argument("back_to_back_calls_against_reference: calls (" + std::to_string(calls) + ") and sample_every (" +
                                std::to_string(sample_every) + ") must be at least 1");
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  BackToBackCalls result;
  {
    CudaExecutor exec(comm, plan, options);
    // Destroyed before the executor whose buffers it names, also when a call throws.
    std::unique_ptr<CUgraphExec_st, decltype(&cudaGraphExecDestroy)> owned_graph(nullptr, &cudaGraphExecDestroy);
    cudaGraphExec_t graph = nullptr;
    const DeviceRegion out = exec.output();
    const size_t rank = static_cast<size_t>(comm.rank()), sample_bytes = static_cast<size_t>(out.rows * out.cols) * 2;
    for (int set = 0; set < kInputSets; ++set) {
      const int first = calls * set / kInputSets, end = calls * (set + 1) / kInputSets;
      if (first == end) continue;
      std::vector<int> sampled;
      for (int i = first; i < end; ++i)
        if (i == first || i % sample_every == 0 || i == calls - 1) sampled.push_back(i);
      // Every rank's calls of the last set are done before any rank overwrites inputs a peer reads.
      comm.host_barrier();
      const std::vector<RankTensors> all = gather_inputs(comm, fill_inputs(exec, comm.rank(), 3 + static_cast<uint64_t>(set), stream));
      const HostMatrix want = expected_output(plan.problem, all, static_cast<int>(rank)), scale = expected_magnitude(plan.problem, all, static_cast<int>(rank));
      DeviceBuffer samples(std::max<size_t>(sample_bytes * sampled.size(), 16));
      if (mode == CallMode::graph_launches && !graph) {
        // One capture of the whole call on every rank (collective: NCCL operations are captured
        // alike everywhere), instantiated before any rank launches it.
        WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
        comm.host_barrier();
        cudaGraph_t captured = nullptr;
        WEFT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        exec.run(stream);
        WEFT_CUDA_CHECK(cudaStreamEndCapture(stream, &captured));
        const cudaError_t instantiated = cudaGraphInstantiate(&graph, captured, 0);
        WEFT_CUDA_CHECK(cudaGraphDestroy(captured));
        WEFT_CUDA_CHECK(instantiated);
        owned_graph.reset(graph);
        WEFT_CUDA_CHECK(cudaGraphUpload(graph, stream));
        WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
      }
      // No rank starts the calls' collectives while another is still in a driver call of its own.
      comm.host_barrier();
      size_t next = 0;
      for (int i = first; i < end; ++i) {
        const bool sample = next < sampled.size() && sampled[next] == i;
        if (sample) fill_u16(out.data, out.rows * out.stride, kBf16Nan, stream);
        if (graph) WEFT_CUDA_CHECK(cudaGraphLaunch(graph, stream));
        else exec.run(stream);
        if (sample && sample_bytes > 0)
          WEFT_CUDA_CHECK(cudaMemcpy2DAsync(samples.as<uint16_t>() + next * static_cast<size_t>(out.rows * out.cols), static_cast<size_t>(out.cols) * 2,
                                            out.data, static_cast<size_t>(out.stride) * 2, static_cast<size_t>(out.cols) * 2,
                                            static_cast<size_t>(out.rows), cudaMemcpyDeviceToDevice, stream));
        next += sample;
      }
      if (!synchronize_with_timeout(stream, Communicator::timeout_ms()))
        throw std::runtime_error("calls " + std::to_string(first) + ".." + std::to_string(end - 1) + " of " + std::to_string(calls) +
                                 (graph ? " (graph launches)" : "") + " back to back did not finish:\n" + exec.diagnose());
      exec.check();
      for (size_t s = 0; s < sampled.size(); ++s) {
        const DeviceRegion copy{samples.as<uint16_t>() + s * static_cast<size_t>(out.rows * out.cols), out.rows, out.cols, out.cols};
        result.check.add(check_elements(download(copy, stream), want, scale, bf16_error_factor(plan.problem)));
        ++result.sampled;
      }
    }
    comm.host_barrier();
  }
  cudaStreamDestroy(stream);
  return result;
}

}  // namespace weft::bench
