#include "weft/runtime/rank_threads.hpp"

#include <cstdio>
#include <exception>
#include <thread>

#include "weft/cuda/check.hpp"

namespace weft {

void for_each_rank(const std::vector<std::unique_ptr<Communicator>>& group, const std::function<void(Communicator&)>& body) {
  std::vector<std::exception_ptr> errors(group.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < group.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        WEFT_CUDA_CHECK(cudaSetDevice(group[r]->device()));
        body(*group[r]);
      } catch (const std::exception& e) {
        // Said now, not after the join: the other ranks may be stuck waiting for this one until
        // their own bounded waits give up, and this message is what explains it.
        std::fprintf(stderr, "weft: rank %zu failed: %s\n", r, e.what());
        errors[r] = std::current_exception();
      } catch (...) {
        std::fprintf(stderr, "weft: rank %zu failed with a non-standard exception\n", r);
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace weft
