// The GPU commands' common start: run on the GPUs this process sees, or say plainly that there are
// none and why (no device, no driver, a build without CUDA), do nothing and exit kExitNoGpu: a
// command the user asked for that could not run must not look like one that ran (scripts and ctest
// read the exit code).
#pragma once

#include <string>

#include "device_info.hpp"

namespace weft::cli {

// The exit code of a GPU command run where no GPU is visible (0: ran, 1: a result did not check,
// 2: bad input; `weft --help` lists them).
constexpr int kExitNoGpu = 3;

// Prints "weft <command>: no GPU found (<why>); nothing to <verb>." and returns kExitNoGpu, or
// throws std::invalid_argument where `csv_path` asked for a file that would never be written.
int no_gpu(const std::string& command, const std::string& verb, const std::string& why, const std::string& csv_path);

// Returns run(scan) where a GPU is visible, else no_gpu(...). A template, so that a build without
// CUDA never instantiates `run` (the GPU commands' runners are only built with CUDA).
template <class Run>
int on_gpus(const std::string& command, const std::string& verb, Run&& run, const std::string& csv_path = "") {
#ifdef WEFT_HAVE_CUDA
  const DeviceScan scan = scan_devices();
  if (!scan.devices.empty()) return run(scan);
  return no_gpu(command, verb, scan.why_none, csv_path);
#else
  (void)run;
  return no_gpu(command, verb, "weft was built without CUDA", csv_path);
#endif
}

}  // namespace weft::cli
