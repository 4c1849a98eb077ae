// The benchmarks' queue-ahead (measure.hpp): a one-thread kernel that keeps a stream busy for a
// while, so that the host enqueues the timed call before the device reaches it.
#include <cstdint>

#include "measure.hpp"
#include "weft/cuda/check.hpp"

namespace weft::bench {

namespace {

__device__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void sleep_for(uint64_t nanoseconds) {
  const uint64_t start = global_ns();
  while (global_ns() - start < nanoseconds) __nanosleep(1000);
}

}  // namespace

void device_sleep(cudaStream_t stream, double microseconds) {
  if (microseconds <= 0) return;
  sleep_for<<<1, 1, 0, stream>>>(static_cast<uint64_t>(microseconds * 1e3));
  WEFT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace weft::bench
