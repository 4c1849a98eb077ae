// Fuzz target: problem -> plan -> validation -> reference run, on small random problems. The bytes
// choose the op, shape, world size, strategy, tile, routing seed and a few knobs; every plan a
// strategy builds must validate and compute the op (the CPU proof). A strategy may decline a
// problem only with std::invalid_argument; anything else, an invalid plan or a wrong result is a
// finding (reported by aborting, so that libFuzzer keeps the input).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "fuzz_rejection.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/reference/cpu_proof.hpp"

namespace {

struct Bytes {
  const uint8_t* data;
  size_t size;
  size_t at = 0;
  int next(int lo, int hi) {  // in [lo, hi]
    const uint8_t b = at < size ? data[at++] : 0;
    return lo + b % (hi - lo + 1);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in{data, size};
  using namespace weft;
  Problem p;
  p.op = all_ops()[static_cast<size_t>(in.next(0, static_cast<int>(all_ops().size()) - 1))];
  p.world_size = in.next(1, 5);
  p.m = in.next(1, 24);
  p.n = in.next(1, 24);
  p.k = in.next(1, 16);
  if (p.op == OpKind::gemm_rs) p.m *= p.world_size;
  if (is_moe(p.op)) {
    p.experts = in.next(1, 6);
    p.topk = in.next(1, p.experts);
  }
  const uint64_t seed = static_cast<uint64_t>(in.next(0, 255));
  draw_routing(p, seed);
  if (is_moe(p.op) && in.next(0, 1)) p.choices = random_choices(p.world_size, p.m, p.experts, p.topk, seed, 0.9);
  const auto& all = strategies();
  const Strategy& s = all[static_cast<size_t>(in.next(0, static_cast<int>(all.size()) - 1))];
  if (!s.supports(p.op) || s.name == "auto") {  // auto reads the tuning table; its picks are the others
    if (weft::fuzz::must_accept) throw weft::fuzz::ValidInputRefused("the seed picks " + s.name + ", which builds no plan here");
    return 0;
  }
  PlanOptions o;
  const int tiles[] = {4, 8, 16, 32};
  o.tile_m = tiles[in.next(0, 3)];
  o.tile_n = tiles[in.next(0, 3)];
  o.raster = in.next(0, 1) ? Raster::along_m : Raster::along_n;
  o.swizzle = in.next(1, 3);
  o.machine.sm_count = 8;
  o.gemm_sms = in.next(1, 4);
  o.comm_chunks = in.next(0, 3);
  o.tilelink.comm_sms = in.next(1, 4);
  o.tilelink.comm_tile_rows = in.next(0, 12);
  o.tilelink.ring = in.next(0, 1);
  Plan plan;
  try {
    plan = s.build(p, o);
  } catch (const std::invalid_argument& e) {
    weft::fuzz::rejected(e);  // a valid seed is a problem its strategy must build
    return 0;  // declined, with a reason
  }
  const CpuProof proof = prove_on_cpu(plan, seed);
  if (!proof.passed()) {
    std::fprintf(stderr, "%s on %s: %s", s.name.c_str(), describe(p).c_str(), proof.explain().c_str());
    std::abort();
  }
  return 0;
}
