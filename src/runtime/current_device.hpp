// The caller's current CUDA device is the caller's: weft switches to a communicator's device for
// the work it does and switches back when it returns, so that creating a communicator for another
// GPU, or calling from a thread that works on several, leaves torch's and the caller's device as it
// was (a bare cudaSetDevice would move the caller's later allocations and launches to weft's GPU).
#pragma once

#include <cuda_runtime_api.h>

#include "weft/cuda/check.hpp"

namespace weft {

class OnDevice {
 public:
  explicit OnDevice(int device) {
    WEFT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) WEFT_CUDA_CHECK(cudaSetDevice(device));
  }
  // Destructors and cleanup paths: never throws; a failure to switch leaves the device as it is.
  struct NoThrow {};
  OnDevice(int device, NoThrow) {
    if (cudaGetDevice(&previous_) != cudaSuccess) { cudaGetLastError(); previous_ = -1; return; }
    if (previous_ != device && cudaSetDevice(device) != cudaSuccess) cudaGetLastError();
  }
  ~OnDevice() {
    if (previous_ < 0) return;
    int now = -1;
    if (cudaGetDevice(&now) != cudaSuccess || (now != previous_ && cudaSetDevice(previous_) != cudaSuccess)) cudaGetLastError();
  }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace weft
