#include "weft/runtime/rank_threads.hpp"

#include <exception>
#include <thread>

#include "weft/runtime/cuda_check.hpp"

namespace weft {

void for_each_rank(const std::vector<std::unique_ptr<Communicator>>& group, const std::function<void(Communicator&)>& body) {
  std::vector<std::exception_ptr> errors(group.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < group.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        WEFT_CUDA_CHECK(cudaSetDevice(group[r]->device()));
        body(*group[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace weft
