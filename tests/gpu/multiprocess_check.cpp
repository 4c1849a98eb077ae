// Started once per GPU by torchrun (or mpirun): builds its communicator from the launcher's
// environment, runs every op x strategy on small random shapes, and compares with the host reference;
// then 1,000 back-to-back calls of decomposed gemm_rs and ag_gemm must neither hang nor drift.
// Exits non-zero on any mismatch; prints one line per case from rank 0.
#include <cstdio>

#include "check_against_host.hpp"
#include "weft/plan/strategies.hpp"

int main() {
  using namespace weft;
  try {
    auto comm = Communicator::from_environment();
    int failures = 0;
    for (OpKind op : all_ops())
      for (const Strategy& s : strategies()) {
        if (!s.supports(op)) continue;
        const char* strategy = s.name.c_str();
        // 96 rows per rank are ragged against 128-row tiles.
        Problem p{op, 96 * comm->world_size(), 136, 72, comm->world_size(), DType::bf16, DType::bf16, {}};
        draw_routing(p, 11);
        const double error = bench::run_against_host_reference(*comm, find_strategy(strategy).build(p, {}), 5);
        const bool ok = error < 1e-2;
        failures += !ok;
        std::printf("rank %d: %s %s relative error %.2e %s\n", comm->rank(), std::string(to_string(op)).c_str(), strategy,
                    error, ok ? "ok" : "MISMATCH");
      }
    // 1,000 back-to-back calls with peer copies and a barrier each, one process per GPU.
    for (OpKind op : {OpKind::gemm_rs, OpKind::ag_gemm}) {
      const Problem p{op, 64 * comm->world_size(), 256, 128, comm->world_size(), DType::bf16, DType::bf16, {}};
      const bool kept = bench::back_to_back_calls_keep_result(*comm, plan_decomposed(p, {}), 1000, {});
      failures += !kept;
      std::printf("rank %d: %s decomposed, 1,000 back-to-back calls: %s\n", comm->rank(), std::string(to_string(op)).c_str(),
                  kept ? "last result equals the first" : "DRIFTED");
    }
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "multiprocess check failed: %s\n", e.what());
    return 2;
  }
}
