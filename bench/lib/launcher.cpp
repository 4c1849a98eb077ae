#include "launcher.hpp"

#include <cstdlib>
#include <initializer_list>

namespace weft::bench {

namespace {

// The first of `names` set in the environment, as an integer; `otherwise` where none is.
int first_set(std::initializer_list<const char*> names, int otherwise) {
  for (const char* name : names)
    if (const char* value = std::getenv(name); value && *value) return std::atoi(value);
  return otherwise;
}

}  // namespace

bool launched_one_rank_per_process() { return first_set({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, 1) > 1; }

bool prints_for_every_rank() {
  return !launched_one_rank_per_process() || first_set({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, 0) == 0;
}

}  // namespace weft::bench
