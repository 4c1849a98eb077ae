#include "on_gpus.hpp"

#include <cstdio>
#include <stdexcept>

namespace weft::cli {

int no_gpu(const std::string& command, const std::string& verb, const std::string& why, const std::string& csv_path) {
  if (!csv_path.empty())
    throw std::invalid_argument("--csv: weft " + command + " found no GPU (" + why + "); nothing would be written");
  std::printf("weft %s: no GPU found (%s); nothing to %s.\n", command.c_str(), why.c_str(), verb.c_str());
  return kExitNoGpu;
}

}  // namespace weft::cli
