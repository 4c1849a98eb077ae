// Random problems and plan options for the plan property tests: tiny shapes ragged against the
// tiles, routed and MoE ops with random routings (every other seed skewed), ag_attention's shapes,
// and each strategy's own knobs. One draw for every property test, so that they cover alike.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>

#include "weft/ir/problem.hpp"
#include "weft/plan/strategies.hpp"

namespace weft::testing_support {

// ag_attention's shapes: a few tokens per rank, 1 or 2 batch entries, head dim 8 or 16; causal on odd
// seeds; on every other pair of seeds grouped-query (2 or 4 query heads per key/value head), else
// multi-head.
inline Problem random_attention_problem(int world, uint64_t seed, std::mt19937_64& rng) {
  auto pick = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1)); };
  Problem p;
  p.op = OpKind::ag_attention;
  p.world_size = world;
  p.m = pick(1, 13);
  p.batch = pick(1, 2);
  p.kv_heads = pick(1, 2);
  p.heads = p.kv_heads * ((seed / 2) % 2 ? 2 * pick(1, 2) : 1);
  p.head_dim = rng() % 2 ? 8 : 16;
  p.causal = seed % 2 == 1;
  return p;
}

inline Problem random_problem(OpKind op, int world, std::mt19937_64& rng, uint64_t seed = 0) {
  if (is_attention(op)) return random_attention_problem(world, seed, rng);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1)); };
  Problem p;
  p.op = op;
  p.world_size = world;
  p.m = op == OpKind::gemm_rs ? world * pick(1, 9) : pick(1, 70);
  p.n = pick(1, 70);
  p.k = pick(1, 33);
  if (routes_rows(op)) p.routing = random_routing(world, p.m, rng());
  if (is_moe(op)) {
    // Few tokens, up to 6 experts; every other seed skewed: one overfull expert, half of them empty.
    p.m = pick(1, 24);
    p.experts = static_cast<int>(pick(1, 6));
    p.topk = static_cast<int>(pick(1, std::min(3, p.experts)));
    p.choices = random_choices(world, p.m, p.experts, p.topk, rng(), rng() % 2 ? 0.7 : 0.0);
  }
  return p;
}

// Random plan options for `strategy`: tile, raster and swizzle, and each strategy's own knobs; some
// of them need the problem's rows adjusted (gemm_rs with whole tile rows per rank).
inline PlanOptions random_options(const std::string& strategy, Problem& p, std::mt19937_64& rng) {
  PlanOptions o;
  const int tiles[] = {4, 8, 16, 32};
  o.tile_m = tiles[rng() % 4];
  o.tile_n = tiles[rng() % 4];
  o.raster = rng() % 2 ? Raster::along_m : Raster::along_n;
  o.swizzle = 1 + static_cast<int>(rng() % 3);
  const int world = p.world_size;
  if (strategy == "signal") {
    // Few SMs, so that even these tiny GEMMs have several waves and groups; gemm_rs needs whole
    // tile rows per rank.
    o.gemm_sms = 1 + static_cast<int>(rng() % 5);
    o.signal_restore = static_cast<SignalRestore>(rng() % 3);
    if (p.op == OpKind::gemm_rs) p.m = int64_t{world} * o.tile_m * (1 + static_cast<int64_t>(rng() % 3));
  }
  if (strategy == "tilelink") {
    // Random communication tiles (ragged against the GEMM tile and the shard) and orders; gemm_rs
    // needs whole GEMM tile rows per rank.
    o.tilelink.comm_tile_rows = rng() % 3 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % 40);
    o.tilelink.ring = rng() % 2;
    o.machine.sm_count = 8;
    o.tilelink.comm_sms = 1 + static_cast<int>(rng() % 4);
    if (p.op == OpKind::gemm_rs) p.m = int64_t{world} * o.tile_m * (1 + static_cast<int64_t>(rng() % 3));
  }
  if ((strategy == "decomposed" || strategy == "fused") && !is_attention(p.op) && !is_moe(p.op))  // attention and MoE pull
    o.all_gather_source = rng() % 2 ? AllGatherSource::push : AllGatherSource::pull;
  return o;
}

}  // namespace weft::testing_support
