#include "weft/runtime/signal_set.hpp"

#include <cuda.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/moe_route.hpp"
#include "weft/kernels/tile_program.hpp"
#include "current_device.hpp"
#include "weft/cuda/check.hpp"

namespace weft {

namespace {

// cuStreamWaitValue64 and cuStreamWriteValue64 share this signature.
using StreamValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

// Stream memory operations are driver entry points; fetching them through the runtime keeps libcuda
// out of the link, so the tool still starts (and says "no GPU") on machines without a driver.
StreamValue64 driver_entry_point(const char* name) {
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found{};
  WEFT_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &entry, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || !entry)
    throw CudaError(std::string("the driver has no ") + name + "; weft needs a CUDA 12 or newer driver");
  return reinterpret_cast<StreamValue64>(entry);
}

StreamValue64 wait_value_64() {
  static StreamValue64 function = driver_entry_point("cuStreamWaitValue64");
  return function;
}

StreamValue64 write_value_64() {
  static StreamValue64 function = driver_entry_point("cuStreamWriteValue64");
  return function;
}

}  // namespace

SignalSet::SignalSet(Communicator& comm, int count, bool shared)
    : comm_(comm), count_(count), memory_(comm, (static_cast<size_t>(count) + 3 * static_cast<size_t>(comm.world_size()) + 1) * sizeof(uint64_t), shared) {
  const OnDevice on_device(comm.device());
  WEFT_CUDA_CHECK(cudaMallocHost(&host_copy_, memory_.bytes()));
  if (shared) {
    const int world = comm.world_size();
    std::vector<uint64_t*> words_on;  // every rank's arrival words, then every rank's signature words
    for (int r = 0; r < world; ++r) words_on.push_back(on(r) + count_);
    for (int r = 0; r < world; ++r) words_on.push_back(on(r) + count_ + world + 1);
    WEFT_CUDA_CHECK(cudaMalloc(&arrivals_on_, words_on.size() * sizeof(uint64_t*)));
    WEFT_CUDA_CHECK(cudaMemcpy(arrivals_on_, words_on.data(), words_on.size() * sizeof(uint64_t*), cudaMemcpyHostToDevice));
  }
  preload_step_kernels();
  preload_moe_route_kernels();
  preload_tile_program_kernel();  // even under lazy loading, no step kernel's first launch may wait for an idle device
  WEFT_CUDA_CHECK(cudaMemset(memory_.local(), 0, memory_.bytes()));
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
  if (shared) comm.host_barrier();  // nobody notifies a peer before the peer's counters are zero
}

SignalSet::~SignalSet() {
  const OnDevice on_device(comm_.device(), OnDevice::NoThrow{});
  cudaFreeHost(host_copy_);
  if (arrivals_on_) cudaFree(arrivals_on_);
}

size_t SignalSet::words() const { return static_cast<size_t>(count_) + 3 * static_cast<size_t>(comm_.world_size()) + 1; }

void SignalSet::barrier(cudaStream_t stream, WaitRecord* error, uint64_t timeout_ns, uint64_t signature) const {
  if (!shared()) throw std::logic_error("SignalSet::barrier: a set of this rank's alone has no peers to meet");
  DeviceBarrier b;
  b.arrivals_on = arrivals_on_;
  b.signatures_on = arrivals_on_ + comm_.world_size();
  b.signature = signature;
  b.epoch = local() + count_ + comm_.world_size();
  b.rank = comm_.rank();
  b.world = comm_.world_size();
  b.error = error;
  b.timeout_ns = timeout_ns;
  device_barrier(b, stream);
}

void configure_cuda_for_waits() {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
}

void SignalSet::notify(cudaStream_t stream, int rank, int signal, uint64_t increment) const {
  signal_add(on(rank) + signal, increment, stream);
}

void SignalSet::set(cudaStream_t stream, int rank, int signal, uint64_t value) const {
  // The default flags put a memory barrier before the write: the stream's earlier writes (a copy's
  // data) are visible before the counter moves, as for notify().
  const CUresult status = write_value_64()(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(on(rank) + signal),
                                           value, CU_STREAM_WRITE_VALUE_DEFAULT);
  if (status != CUDA_SUCCESS)
    throw CudaError("cuStreamWriteValue64 of signal " + std::to_string(signal) + " on rank " + std::to_string(rank) + " := " +
                    std::to_string(value) + " failed with CUresult " + std::to_string(static_cast<int>(status)));
}

void SignalSet::wait(cudaStream_t stream, int signal, uint64_t at_least) const {
  const CUresult status = wait_value_64()(reinterpret_cast<CUstream>(stream),
                                          reinterpret_cast<CUdeviceptr>(local() + signal), at_least, CU_STREAM_WAIT_VALUE_GEQ);
  if (status != CUDA_SUCCESS)
    throw CudaError("cuStreamWaitValue64 on signal " + std::to_string(signal) + " >= " + std::to_string(at_least) +
                    " failed with CUresult " + std::to_string(static_cast<int>(status)));
}

void SignalSet::reset(cudaStream_t stream) const {
  if (count_ > 0) WEFT_CUDA_CHECK(cudaMemsetAsync(local(), 0, static_cast<size_t>(count_) * sizeof(uint64_t), stream));
}

void SignalSet::release_every_wait() const {
  // The counters and the arrival words (a barrier waiting for a peer that is gone), not the count
  // or the signatures after it.
  std::vector<uint64_t> released(static_cast<size_t>(count_) + static_cast<size_t>(comm_.world_size()), uint64_t{1} << 62);
  std::memcpy(host_copy_, released.data(), released.size() * sizeof(uint64_t));
  const OnDevice on_device(comm_.device());
  cudaStream_t writer;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&writer, cudaStreamNonBlocking));
  WEFT_CUDA_CHECK(cudaMemcpyAsync(local(), host_copy_, released.size() * sizeof(uint64_t), cudaMemcpyHostToDevice, writer));
  synchronize_with_timeout(writer, 2000);
  cudaStreamDestroy(writer);
}

std::vector<uint64_t> SignalSet::read_values() const {
  const OnDevice on_device(comm_.device());
  cudaStream_t reader;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking));
  WEFT_CUDA_CHECK(cudaMemcpyAsync(host_copy_, local(), static_cast<size_t>(count_) * sizeof(uint64_t), cudaMemcpyDeviceToHost, reader));
  const bool done = synchronize_with_timeout(reader, 2000);
  cudaStreamDestroy(reader);
  if (!done) throw CudaError("could not read signal values within 2 s: the device is not responding");
  return std::vector<uint64_t>(host_copy_, host_copy_ + count_);
}

}  // namespace weft
