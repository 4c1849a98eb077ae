// FlashOverlap's `signal` plans and the wave-partition search behind them.
#include <gtest/gtest.h>

#include <random>

#include "weft/reference/cpu_proof.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/reference/reference_executor.hpp"
#include "weft/ir/reorder_map.hpp"
#include "weft/model/wave_partition.hpp"

namespace weft {
namespace {

std::vector<std::vector<int>> all_compositions(int waves) {
  std::vector<std::vector<int>> out;
  for (uint32_t cuts = 0; cuts < (1u << (waves - 1)); ++cuts) {
    std::vector<int> parts{1};
    for (int w = 1; w < waves; ++w) {
      if (cuts >> (w - 1) & 1U) parts.push_back(1);
      else ++parts.back();
    }
    out.push_back(parts);
  }
  return out;
}

TEST(WavePartition, CandidatesAreExactlyThePrunedCompositions) {
  for (int waves = 1; waves <= 9; ++waves) {
    size_t expected = 0;
    for (const auto& parts : all_compositions(waves))
      expected += parts.front() <= 2 && parts.back() <= 4;
    const auto candidates = wave_partition_candidates(waves, 2, 4);
    EXPECT_EQ(candidates.size(), expected) << waves << " waves";
    for (const auto& c : candidates) {
      EXPECT_LE(c.front(), 2);
      EXPECT_LE(c.back(), 4);
      EXPECT_NO_THROW(check_wave_partition(c, waves));
    }
  }
  EXPECT_THROW(wave_partition_candidates(30, 2, 4, 1000), std::length_error);
}

TEST(WavePartition, PredictionFollowsAlgorithmOne) {
  // Compute 1 s per wave, groups (1, 2, 2): comm 0.5, 3, 1 -> comm ends 1.5, 6, 7; compute ends 5.
  EXPECT_DOUBLE_EQ(predict_wave_partition({{1, 0.5}, {2, 3}, {2, 1}}), 7.0);
  // Communication hidden except the last group's.
  EXPECT_DOUBLE_EQ(predict_wave_partition({{1, 0.5}, {2, 0.5}, {2, 0.5}}), 5.5);
  EXPECT_DOUBLE_EQ(predict_wave_partition({}), 0.0);
}

TEST(WavePartition, SearchFindsTheBestCandidate) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    WavePartitionModel m;
    m.waves = 1 + static_cast<int>(rng() % 11);
    m.seconds_per_wave = 1.0;
    const double fixed = static_cast<double>(rng() % 100) / 50.0, per_wave = static_cast<double>(rng() % 100) / 60.0;
    m.comm_seconds = [=](int, int count) { return fixed + per_wave * count; };
    double brute = 1e300;
    for (const auto& c : wave_partition_candidates(m.waves, m.first_max, m.last_max)) brute = std::min(brute, m.predict(c));
    const std::vector<int> found = search_wave_partition(m);
    EXPECT_NO_THROW(check_wave_partition(found, m.waves));
    EXPECT_LE(found.front(), m.first_max);
    EXPECT_LE(found.back(), m.last_max);
    EXPECT_NEAR(m.predict(found), brute, 1e-9) << "waves " << m.waves << " fixed " << fixed << " per wave " << per_wave;
  }
}

TEST(WavePartition, ParsesAndChecksPartitions) {
  EXPECT_EQ(parse_wave_partition("1,2,2"), (std::vector<int>{1, 2, 2}));
  EXPECT_EQ(to_string(std::vector<int>{2, 3}), "2,3");
  EXPECT_THROW(parse_wave_partition("1,,2"), std::invalid_argument);
  EXPECT_THROW(parse_wave_partition("0,2"), std::invalid_argument);
  EXPECT_THROW(parse_wave_partition("1,x"), std::invalid_argument);
  EXPECT_THROW(check_wave_partition({1, 2}, 4), std::invalid_argument);
}

PlanOptions small_options(int gemm_sms) {
  PlanOptions o;
  o.tile_m = 8;
  o.tile_n = 8;
  o.swizzle = 2;
  o.gemm_sms = gemm_sms;
  return o;
}

std::vector<const CollectiveStep*> collectives_of(const RankPlan& rp) {
  std::vector<const CollectiveStep*> out;
  for (const Step& s : rp.steps)
    if (const auto* c = std::get_if<CollectiveStep>(&s.body)) out.push_back(c);
  return out;
}

TEST(SignalPlans, OneCollectivePerGroupOnContiguousBlocks) {
  // 64x64 output of 8x8 tiles = 64 tiles; 6 SMs -> 11 waves; groups (2,3,3,3).
  Problem p{OpKind::gemm_ar, 64, 64, 16, 4, DType::bf16, DType::bf16, {}};
  PlanOptions o = small_options(6);
  o.wave_partition = {2, 3, 3, 3};
  const Plan plan = plan_signal(p, o);
  const auto colls = collectives_of(plan.ranks[1]);
  ASSERT_EQ(colls.size(), 4u);
  EXPECT_EQ(colls[0]->src.box.rows, 12 * 8);  // 2 waves of 6 tiles, 8 rows each
  EXPECT_EQ(colls[3]->src.box.rows, (64 - 48) * 8);
  for (size_t g = 0; g + 1 < colls.size(); ++g) EXPECT_EQ(colls[g]->src.box.row_end(), colls[g + 1]->src.box.row);
  const auto* gemm = std::get_if<GemmStep>(&plan.ranks[1].steps[0].body);
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->sm_limit, 6);
  for (const GemmTile& t : gemm->tiles) ASSERT_TRUE(t.notify.has_value());
  const CpuProof proof = prove_on_cpu(plan, 3);
  EXPECT_TRUE(proof.passed()) << proof.explain();
  o.wave_partition = {2, 2};
  EXPECT_THROW(plan_signal(p, o), std::invalid_argument);
}

TEST(SignalPlans, ReduceScatterGroupsCarryAnEqualShareForEveryRank) {
  Problem p{OpKind::gemm_rs, 96, 40, 16, 3, DType::bf16, DType::bf16, {}};  // 32 rows per rank: 4 tile rows
  const PlanOptions o = small_options(5);
  const Plan plan = plan_signal(p, o);
  const auto* gemm = std::get_if<GemmStep>(&plan.ranks[0].steps[0].body);
  ASSERT_NE(gemm, nullptr);
  // Each collective's block is W chunks; chunk k holds tiles of rows [32k, 32k + 32) only.
  int64_t next_row = 0;
  for (const CollectiveStep* c : collectives_of(plan.ranks[0])) {
    if (c->src.box.cols != o.tile_n) continue;  // edge tiles: C_edge in matrix order
    ASSERT_EQ(c->src.box.row, next_row);
    const int64_t chunk = c->src.box.rows / 3;
    ASSERT_EQ(chunk * 3, c->src.box.rows);
    for (const GemmTile& t : gemm->tiles) {
      if (t.store.box.cols != o.tile_n || t.store.box.row < c->src.box.row || t.store.box.row >= c->src.box.row_end()) continue;
      const int64_t k = (t.store.box.row - c->src.box.row) / chunk;
      EXPECT_EQ(t.tile.row / 32, k) << "tile at row " << t.tile.row;
    }
    next_row = c->src.box.row_end();
  }
  const CpuProof proof = prove_on_cpu(plan, 5);
  EXPECT_TRUE(proof.passed()) << proof.explain();
}

TEST(SignalPlans, AllToAllGroupsSendEachDestinationsPoolAndAgreeAcrossRanks) {
  // Skewed routing: rank 0 sends most rows to rank 1, rank 2 keeps most of its own; N = 36 leaves
  // 4-column edge tiles. Two SMs: many groups.
  Problem p{OpKind::gemm_a2a, 70, 36, 16, 3, DType::bf16, DType::bf16, {}};
  std::mt19937_64 rng(11);
  p.routing.resize(3);
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 70; ++i) {
      const int favourite = r == 0 ? 1 : r;
      p.routing[static_cast<size_t>(r)].push_back(rng() % 5 ? favourite : static_cast<int>(rng() % 3));
    }
  PlanOptions o = small_options(2);
  o.wave_partition.assign(static_cast<size_t>(signal_layout(p, o).waves), 1);  // a group per wave
  const Plan plan = plan_signal(p, o);
  std::vector<std::vector<const CollectiveStep*>> colls;
  for (const RankPlan& rp : plan.ranks) colls.push_back(collectives_of(rp));
  ASSERT_GT(colls[0].size(), 3u);
  bool some_group_reaches_two_ranks = false;
  for (size_t i = 0; i < colls[0].size(); ++i) {
    int destinations = 0;
    for (int r = 0; r < 3; ++r) {
      ASSERT_EQ(colls[static_cast<size_t>(r)].size(), colls[0].size()) << "rank " << r;
      const CollectiveStep& c = *colls[static_cast<size_t>(r)][i];
      EXPECT_EQ(c.kind, CollectiveKind::all_to_all);
      EXPECT_EQ(c.id, colls[0][i]->id);
      int64_t sent = 0;
      for (int q = 0; q < 3; ++q) {
        sent += c.send_rows[static_cast<size_t>(q)];
        EXPECT_EQ(c.recv_rows[static_cast<size_t>(q)], colls[static_cast<size_t>(q)][i]->send_rows[static_cast<size_t>(r)]);
        if (r == 0 && c.send_rows[static_cast<size_t>(q)] > 0) ++destinations;
      }
      EXPECT_EQ(sent, c.src.box.rows);
    }
    some_group_reaches_two_ranks = some_group_reaches_two_ranks || destinations >= 2;
  }
  EXPECT_TRUE(some_group_reaches_two_ranks);
  // The GEMM runs over A grouped by destination: every tile's rows are bound for one rank.
  const RankPlan& rank0 = plan.ranks[0];
  const GemmStep* gemm = nullptr;
  for (const Step& st : rank0.steps)
    if (const auto* g = std::get_if<GemmStep>(&st.body)) gemm = g;
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(rank0.buffers[static_cast<size_t>(gemm->a.buffer)].name, "A_sorted");
  for (const GemmTile& t : gemm->tiles) EXPECT_EQ(t.tile.row % 8, 0) << "tiles start on tile rows of A_sorted";
  const CpuProof proof = prove_on_cpu(plan, 4);
  EXPECT_TRUE(proof.passed()) << proof.explain();
}

TEST(SignalPlans, ReorderMapReadsTheResultBeforeItsRestoreSteps) {
  // For each op: the map applied to the buffers as the plan left them gives the plan's own result;
  // tile level where tiles stay tiles, token level for the all-to-all. N = 44: 4-column edge tiles.
  struct Case {
    OpKind op;
    int64_t m;
    std::string_view granularity;
  };
  for (const Case c : {Case{OpKind::gemm_ar, 40, "tile"}, Case{OpKind::gemm_rs, 48, "tile"}, Case{OpKind::gemm_a2a, 45, "token"}})
    for (int64_t n : {int64_t{40}, int64_t{44}}) {
      Problem p{c.op, c.m, n, 16, 3, DType::bf16, DType::bf16, {}};
      if (routes_rows(p.op)) p.routing = random_routing(3, p.m, 5);
      const Plan plan = plan_signal(p, small_options(3));
      const auto memory = run_reference(plan, random_inputs(p, 9));
      const auto results = outputs_of(plan, memory);
      for (int r = 0; r < 3; ++r) {
        SCOPED_TRACE(describe(p) + " rank " + std::to_string(r));
        const ReorderMap map = reorder_map(plan, r);
        EXPECT_EQ(map.granularity(), c.granularity);
        EXPECT_EQ(map.edge_cols(), n % 8);
        EXPECT_EQ(map.edge_source.empty(), n % 8 == 0);
        const RankTensors& mine = memory[static_cast<size_t>(r)];
        const HostMatrix* edge = map.edge_source.empty() ? nullptr : &mine.at(map.edge_source);
        const HostMatrix in_place = apply_reorder_map(map, mine.at(map.source), edge);
        EXPECT_EQ(in_place.data, results[static_cast<size_t>(r)].data);
      }
    }
  // A plan that never reorders has no map.
  Problem ar{OpKind::gemm_ar, 16, 16, 8, 2, DType::bf16, DType::bf16, {}};
  EXPECT_THROW(reorder_map(plan_sequential(ar, small_options(2)), 0), std::invalid_argument);
}

TEST(SignalPlans, RestoresRunWhereTheOptionSaysAndTheCollectivesStayBackToBack) {
  for (OpKind op : {OpKind::gemm_ar, OpKind::gemm_rs, OpKind::gemm_a2a}) {
    Problem p{op, 48, 44, 16, 3, DType::bf16, DType::bf16, {}};
    if (routes_rows(op)) p.routing = random_routing(3, p.m, 2);
    for (SignalRestore placement : {SignalRestore::after_each_group, SignalRestore::own_stream, SignalRestore::at_end}) {
      SCOPED_TRACE(std::string(to_string(op)) + " " + std::string(to_string(placement)));
      EXPECT_EQ(parse_signal_restore(to_string(placement)), placement);
      PlanOptions o = small_options(3);
      o.signal_restore = placement;
      const Plan plan = plan_signal(p, o);
      const RankPlan& rp = plan.ranks[1];
      std::vector<const Step*> on_comm_stream, restores;
      for (const Step& s : rp.steps) {
        if (s.stream == 1) on_comm_stream.push_back(&s);
        if (std::holds_alternative<MoveBoxesStep>(s.body)) restores.push_back(&s);
      }
      ASSERT_GE(restores.size(), 2u);
      size_t first_restore = 0;
      while (first_restore < on_comm_stream.size() && std::holds_alternative<CollectiveStep>(on_comm_stream[first_restore]->body)) ++first_restore;
      const size_t collectives = collectives_of(rp).size();
      if (placement == SignalRestore::after_each_group) {
        EXPECT_LT(first_restore, collectives);  // a restore sits between two collectives
      } else {
        EXPECT_EQ(first_restore, collectives);  // every collective before any restore on that stream
      }
      if (placement == SignalRestore::own_stream)
        for (const Step* s : restores) {
          EXPECT_EQ(s->stream, 2);
          EXPECT_EQ(s->waits.size(), 1u);
        }
      if (placement == SignalRestore::at_end) {
        EXPECT_EQ(restores.size(), 2u);  // main tiles and edge tiles: one step each
      }
      const CpuProof proof = prove_on_cpu(plan, 2);
      EXPECT_TRUE(proof.passed()) << proof.explain();
    }
  }
  EXPECT_THROW(parse_signal_restore("later"), std::invalid_argument);
}

TEST(SignalPlans, IsTheStrategyThatNeedsTheOverlapGemm) {
  // The model picks an overlap-GEMM tile for it (and for fused and chunked); library-GEMM strategies keep theirs.
  for (const Strategy& s : strategies()) EXPECT_EQ(s.overlap_gemm, s.name == "signal" || s.name == "fused" || s.name == "chunked" || s.name == "tilelink") << s.name;
}

TEST(SignalPlans, ReduceScatterWhereRanksShareTilesGroupsWholeColumns) {
  // Rows per rank not a whole number of 8-row tiles: 12 (world 3), 4 (world 8, as GPT-3 RS m = 512
  // at world 8 with 128-row tiles), 6 with a ragged last tile row (world 5, M = 30); N = 44 leaves
  // 4-column edge tiles. Every group's buffer splits into W chunks holding only rank k's rows.
  struct Case {
    int64_t m, n;
    int world, sms;
  };
  for (const Case c : {Case{36, 40, 3, 4}, Case{32, 44, 8, 3}, Case{30, 44, 5, 2}, Case{36, 44, 3, 1}}) {
    Problem p{OpKind::gemm_rs, c.m, c.n, 16, c.world, DType::bf16, DType::bf16, {}};
    SCOPED_TRACE(describe(p));
    PlanOptions o = small_options(c.sms);
    o.wave_partition.assign(static_cast<size_t>(signal_layout(p, o).waves), 1);  // a group per wave, if it may
    const int waves = signal_layout(p, PlanOptions(small_options(c.sms))).waves;
    if (waves > 7) {
      EXPECT_THROW(plan_signal(p, o), std::invalid_argument) << "more groups than the overlap GEMM has store targets";
      o.wave_partition.clear();
    }
    const Plan plan = plan_signal(p, o);
    const int64_t rows_per_rank = c.m / c.world;
    for (const RankPlan& rp : plan.ranks) {
      const GemmStep* gemm = std::get_if<GemmStep>(&rp.steps[0].body);
      ASSERT_NE(gemm, nullptr);
      const auto colls = collectives_of(rp);
      EXPECT_LE(colls.size(), 8u);  // at most 7 groups and the edge tiles
      for (const CollectiveStep* coll : colls) {
        EXPECT_EQ(coll->kind, CollectiveKind::reduce_scatter);
        const BufferDecl& block = rp.buffers[static_cast<size_t>(coll->src.buffer)];
        ASSERT_EQ(coll->src.box.rows, c.m) << block.name;
        for (const GemmTile& t : gemm->tiles) {
          if (t.store.buffer != coll->src.buffer) continue;
          // Row-major [M, width]: row i of the buffer is in chunk i / rows_per_rank; it must be
          // that rank's row of the result, i.e. the same row of the full matrix.
          EXPECT_EQ(t.store.box.row, t.tile.row) << block.name;
          EXPECT_EQ(t.store.box.col % 8, 0);
        }
      }
      EXPECT_EQ(rows_per_rank, rp.buffers[static_cast<size_t>(rp.output.buffer)].rows);
    }
    const CpuProof proof = prove_on_cpu(plan, 6);
    EXPECT_TRUE(proof.passed()) << proof.explain();
    EXPECT_THROW(reorder_map(plan, 0), std::invalid_argument) << "groups in several buffers have no single-source map";
  }
}

TEST(SignalPlans, RejectsWhatItCannotLayOut) {
  Problem ag{OpKind::ag_gemm, 16, 16, 8, 2, DType::bf16, DType::bf16, {}};
  EXPECT_THROW(plan_signal(ag, small_options(4)), std::invalid_argument);
  Problem dispatch{OpKind::a2a_gemm, 16, 16, 8, 2, DType::bf16, DType::bf16, {{0, 1}, {1, 0}}};
  dispatch.routing = {std::vector<int>(16, 1), std::vector<int>(16, 0)};
  EXPECT_THROW(plan_signal(dispatch, small_options(4)), std::invalid_argument);
}

TEST(SignalPlans, SearchedPartitionUsesTheMachineCurves) {
  // A collective with a large fixed cost makes one big group best; a free one, many small groups.
  Problem p{OpKind::gemm_ar, 8192, 8192, 4096, 4, DType::bf16, DType::bf16, {}};
  PlanOptions o;
  o.machine.collectives.push_back({CollectiveKind::all_reduce, 4, {1e3, 1e9}, {5e-3, 5.001e-3}});
  const SignalLayout slow = signal_layout(p, o);
  o.machine.collectives[0].seconds = {1e-6, 1e-3};
  const SignalLayout fast = signal_layout(p, o);
  EXPECT_EQ(slow.waves, fast.waves);
  // A collective slowed beside the GEMM costs more in the prediction of the same partition.
  PlanOptions slowed = o;
  slowed.wave_partition = fast.partition;
  const double unslowed_seconds = signal_layout(p, slowed).predicted_seconds;
  slowed.machine.collectives[0].overlapped_slowdown = 2.0;
  EXPECT_GT(signal_layout(p, slowed).predicted_seconds, unslowed_seconds);
  EXPECT_EQ(slow.tiles, 64 * 64);
  EXPECT_EQ(slow.gemm_sms, 132 - 32);
  EXPECT_LT(slow.partition.size(), fast.partition.size());
  EXPECT_LE(fast.partition.front(), 2);
  EXPECT_LE(fast.partition.back(), 4);
  // The GEMM is persistent on the SMs NCCL leaves it, or a CTA per tile when asked.
  Problem small{OpKind::gemm_ar, 256, 256, 64, 2, DType::bf16, DType::bf16, {}};
  const auto gemm_of = [](const Plan& plan) { return std::get<GemmStep>(plan.ranks[0].steps[0].body); };
  PlanOptions defaults;
  EXPECT_TRUE(gemm_of(plan_signal(small, defaults)).persistent);
  EXPECT_EQ(gemm_of(plan_signal(small, defaults)).sm_limit, defaults.machine.sm_count - defaults.machine.collective_sms);
  PlanOptions kept;
  kept.gemm_sms = 100;
  EXPECT_EQ(gemm_of(plan_signal(small, kept)).sm_limit, 100);
  PlanOptions per_tile;
  per_tile.gemm_cta_per_tile = true;
  EXPECT_FALSE(gemm_of(plan_signal(small, per_tile)).persistent);
  EXPECT_EQ(gemm_of(plan_signal(small, per_tile)).sm_limit, 0);
}

TEST(MachineProfile, CurvesRoundTripAndInterpolate) {
  MachineProfile p;
  p.sm_count = 132;
  p.collective_sms = 20;
  p.overlapped_call_seconds = 15e-6;
  p.collectives.push_back({CollectiveKind::reduce_scatter, 2, {1e6, 2e6, 4e6}, {1e-5, 2e-5, 3e-5}, 1.25});
  const MachineProfile back = parse_machine_profile(machine_profile_json(p));
  EXPECT_DOUBLE_EQ(back.overlapped_slowdown(CollectiveKind::reduce_scatter, 2), 1.25);
  EXPECT_DOUBLE_EQ(back.overlapped_slowdown(CollectiveKind::all_reduce, 2), 1.0);  // no curve
  EXPECT_EQ(back.collectives, p.collectives);
  EXPECT_EQ(back.collective_sms, 20);
  EXPECT_DOUBLE_EQ(back.overlapped_call_seconds, 15e-6);
  EXPECT_DOUBLE_EQ(back.collective_seconds(CollectiveKind::reduce_scatter, 2, 1.5e6), 1.5e-5);
  EXPECT_DOUBLE_EQ(back.collective_seconds(CollectiveKind::reduce_scatter, 2, 1e3), 1e-5);   // below: first sample
  EXPECT_DOUBLE_EQ(back.collective_seconds(CollectiveKind::reduce_scatter, 2, 6e6), 4e-5);   // above: last slope
  EXPECT_GT(back.collective_seconds(CollectiveKind::all_reduce, 4, 1e6), 0.0);               // no curve: defaults
  // Plausible rates, so that the refusal is the curve's (its bytes must increase).
  EXPECT_THROW(parse_machine_profile(R"({"device": "x", "peak_flops": 1e15, "memory_bytes_per_s": 1e12, "collectives": [{"kind": "all_reduce", "world_size": 2, "bytes": [2, 1], "seconds": [1, 2]}]})"),
               std::invalid_argument);
}

}  // namespace
}  // namespace weft
