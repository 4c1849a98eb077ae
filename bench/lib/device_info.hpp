// What GPUs this process can see. `weft bench` uses it to decide between running on GPUs and saying
// plainly that there are none; the tuner later reads SM counts and memory sizes from it.
#pragma once

#include <string>
#include <vector>

namespace weft {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int sm_count = 0;
  size_t memory_bytes = 0;
  size_t l2_bytes = 0;
};

struct DeviceScan {
  std::vector<DeviceInfo> devices;
  std::string why_none;  // set when devices is empty: what the runtime said
};

// Never throws for "no GPU" (no device, no driver): that is an answer, reported in why_none.
DeviceScan scan_devices();

// "CUDA runtime 13.0, driver 13.0, NCCL 2.28.9, cuBLASLt 13.0.0": what a figure was measured with.
std::string software_versions();

}  // namespace weft
