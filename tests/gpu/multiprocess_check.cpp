// Started once per GPU by torchrun (or mpirun): builds its communicator from the launcher's
// environment, runs every op x strategy on small random shapes, and compares with the host reference.
// Exits non-zero on any mismatch; prints one line per case from rank 0.
#include <cstdio>

#include "gpu_test_support.hpp"
#include "weft/core/plan_builders.hpp"

int main() {
  using namespace weft;
  try {
    auto comm = Communicator::from_environment();
    int failures = 0;
    for (OpKind op : all_ops())
      for (const Strategy& s : strategies()) {
        if (!s.supports(op)) continue;
        const char* strategy = s.name.c_str();
        // 96 rows per rank are ragged against 128-row tiles; signal's gemm_rs needs whole tile rows per rank.
        const int64_t rows_per_rank = s.name == "signal" ? 128 : 96;
        Problem p{op, rows_per_rank * comm->world_size(), 136, 72, comm->world_size(), DType::bf16, DType::bf16, {}};
        if (routes_rows(op)) p.routing = random_routing(p.world_size, p.m, 11);
        const double error = testing_support::run_and_compare(*comm, find_strategy(strategy).build(p, {}), 5);
        const bool ok = error < 1e-2;
        failures += !ok;
        std::printf("rank %d: %s %s relative error %.2e %s\n", comm->rank(), std::string(to_string(op)).c_str(), strategy,
                    error, ok ? "ok" : "MISMATCH");
      }
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "multiprocess check failed: %s\n", e.what());
    return 2;
  }
}
