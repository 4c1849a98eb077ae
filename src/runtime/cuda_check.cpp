#include "weft/runtime/cuda_check.hpp"

namespace weft {

namespace {

const char* hint_for(cudaError_t status) {
  switch (status) {
    case cudaErrorNoDevice: return "no CUDA GPU is visible (check CUDA_VISIBLE_DEVICES and the driver)";
    case cudaErrorInsufficientDriver: return "the driver is older than the CUDA runtime weft was built with, or absent";
    case cudaErrorMemoryAllocation: return "the GPU is out of memory; use smaller shapes or free other allocations";
    case cudaErrorPeerAccessUnsupported: return "these GPUs cannot reach each other by load/store (no NVLink or PCIe P2P)";
    case cudaErrorInvalidValue: return "an argument is out of range; check sizes, pointers and alignment";
    default: return "see the CUDA runtime documentation for this error";
  }
}

}  // namespace

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + "); hint: " + hint_for(status));
}

}  // namespace weft
