#include "device_info.hpp"

#include "weft/runtime/cuda_check.hpp"

namespace weft {

DeviceScan scan_devices() {
  DeviceScan scan;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error so later calls start clean
    scan.why_none = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
    return scan;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    WEFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
    scan.devices.push_back(DeviceInfo{i, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                                      prop.totalGlobalMem, static_cast<size_t>(prop.l2CacheSize)});
  }
  if (scan.devices.empty()) scan.why_none = "the CUDA runtime reports 0 devices";
  return scan;
}

}  // namespace weft
