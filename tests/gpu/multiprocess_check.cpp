// Started once per GPU by torchrun (or mpirun): builds its communicator from the launcher's
// environment, runs every op x strategy on small random shapes, and compares with the host reference;
// then 1,000 back-to-back calls of decomposed gemm_rs and ag_gemm must neither hang nor drift (sampled
// calls, poisoned before, checked against the reference; the inputs change 4 times).
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
        const bench::ElementCheck check = bench::run_against_host_reference(*comm, find_strategy(strategy).build(p, {}), 5);
        failures += !check.passed();
        std::printf("rank %d: %s %s worst error / bound %.2e %s%s\n", comm->rank(), std::string(to_string(op)).c_str(), strategy,
                    check.worst_ratio, check.passed() ? "ok" : "MISMATCH: ", check.explain().c_str());
      }
    // 1,000 back-to-back calls with peer copies and a barrier each, one process per GPU.
    for (OpKind op : {OpKind::gemm_rs, OpKind::ag_gemm}) {
      const Problem p{op, 64 * comm->world_size(), 256, 128, comm->world_size(), DType::bf16, DType::bf16, {}};
      const bench::BackToBackCalls b = bench::back_to_back_calls_against_reference(*comm, plan_decomposed(p, {}), 1000, {});
      const bool ok = b.check.passed() && b.sampled == 21;
      failures += !ok;
      std::printf("rank %d: %s decomposed, 1,000 back-to-back calls: %d sampled %s%s\n", comm->rank(), std::string(to_string(op)).c_str(),
                  b.sampled, ok ? "match the reference" : "MISMATCH: ", b.check.explain().c_str());
    }
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "multiprocess check failed: %s\n", e.what());
    return 2;
  }
}
