// Runs one function per rank of a single-process group, each on its own thread with its GPU
// selected, and rethrows the first failure after every thread has finished.
//   for_each_rank(group, [&](Communicator& comm) { ... });
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "weft/runtime/communicator.hpp"

namespace weft {

void for_each_rank(const std::vector<std::unique_ptr<Communicator>>& group, const std::function<void(Communicator&)>& body);

}  // namespace weft
