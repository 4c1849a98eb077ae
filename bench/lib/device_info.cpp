#include "device_info.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cublasLt.h>
#include <nccl.h>

#include "weft/cuda/check.hpp"

namespace weft {

DeviceScan scan_devices() {
  DeviceScan scan;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error so later calls start clean
    scan.why_none = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
    // The runtime says "driver version is insufficient" also where there is no driver at all.
    if (status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice) {
      void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
      if (!driver) scan.why_none = "no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded)";
      else if (access("/dev/nvidiactl", F_OK) != 0) scan.why_none = "no NVIDIA GPU on this machine (no /dev/nvidiactl)";
      if (driver) dlclose(driver);
    }
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

std::string software_versions() {
  int runtime = 0, driver = 0, nccl = 0;
  WEFT_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  WEFT_CUDA_CHECK(cudaDriverGetVersion(&driver));
  WEFT_NCCL_CHECK(ncclGetVersion(&nccl));
  const size_t lt = cublasLtGetVersion();
  auto cuda = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  return "CUDA runtime " + cuda(runtime) + ", driver " + cuda(driver) + ", NCCL " + std::to_string(nccl / 10000) + "." +
         std::to_string(nccl / 100 % 100) + "." + std::to_string(nccl % 100) + ", cuBLASLt " + std::to_string(lt / 10000) + "." +
         std::to_string(lt / 100 % 100) + "." + std::to_string(lt % 100);
}

}  // namespace weft
