// Every op x strategy on the visible GPUs against an fp32 (double) host reference on random inputs,
// element by element, including shapes that are not multiples of any tile size; and 1,000
// back-to-back calls, sampled calls checked against the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iterator>
#include <mutex>

#include "check_against_host.hpp"
#include "element_check.hpp"
#include "measure.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/ir/reorder_map.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/rmsnorm.hpp"
#include "weft/runtime/device_reorder_map.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/rank_threads.hpp"
#include "weft/runtime/signal_set.hpp"

namespace weft {
namespace {

// RMSNorm's result element by element: each is one product x * s * w rounded to bf16 once, so its
// bound is the bf16 rounding unit (with a factor 2 of margin) of that element's own magnitude.
bench::ElementCheck rmsnorm_check(const HostMatrix& got, const HostMatrix& want) {
  HostMatrix scale = want;
  for (float& v : scale.data) v = std::fabs(v);
  return bench::check_elements(got, want, scale, std::ldexp(1.0, -7));
}

const std::vector<std::unique_ptr<Communicator>>& group() { return bench::test_group(); }

struct Shape {
  int64_t m, n, k;
};

class ExecutorMatchesReference : public testing::TestWithParam<std::tuple<OpKind, std::string>> {};

// Every shape of the op and strategy, B laid out as `layout` says (kn: B^T [K, N] row-major, which
// cuBLASLt reads through its transpose flag and the overlap GEMM as an N-major operand).
void every_shape_against_reference(OpKind op, const std::string& strategy, BLayout layout) {
  const int world = static_cast<int>(group().size());
  // Aligned, ragged against 128-wide tiles, and tiny.
  const Shape shapes[] = {Shape{256, 512, 256}, Shape{200, 136, 72}, Shape{8, 24, 16}};
  for (size_t shape = 0; shape < std::size(shapes); ++shape) {
    const Shape s = shapes[shape];
    Problem p{op, s.m, s.n, s.k, world, DType::bf16, DType::bf16, {}};
    p.b_layout = layout;
    if (op == OpKind::gemm_rs) p.m = (s.m / world + 1) * world;
    PlanOptions options;
    int calls = 1;
    if (strategy == "signal") {
      // Two SMs: several waves and groups even here. Three calls: the group counters must start
      // each call from a new epoch. gemm_rs: the first shape gives every rank whole 128-row tiles
      // (groups interleave the ranks' tiles), the others do not (groups of whole tile columns).
      options.gemm_sms = 2;
      // Each shape with another placement of the restore steps.
      options.signal_restore = static_cast<SignalRestore>(shape % 3);
      if (op == OpKind::gemm_rs && shape == 0) p.m = world * 128 * 2;
      calls = 3;
    }
    if (strategy == "fused") {
      // gemm_rs: whole 128-row tiles per rank (stored straight into the peers' slots) in the first
      // shape, tile rows shared by two ranks (stored locally, pushed) in the others. ag_gemm: chunks
      // of 1, 2 and 3 per shard. Three calls: the counters the copy engine writes start each call
      // from a new epoch.
      if (op == OpKind::gemm_rs && shape == 0) p.m = world * 128 * 2;
      options.comm_chunks = static_cast<int>(shape) + 1;
      calls = 3;
    }
    if (strategy == "tilelink") {
      // Communication tiles of 64 rows (several per rank, ragged against the shapes) or the model's;
      // ring and all-to-all orders; gemm_rs with whole 128-row tiles per rank in the first shape
      // (counters per communication tile), tile rows shared by two ranks (relayed) in the others.
      // Three calls: the companion's counters and the signals start over every call.
      options.tilelink.comm_tile_rows = shape == 1 ? 0 : 64;
      options.tilelink.ring = shape != 2;
      if (op == OpKind::gemm_rs && shape == 0) p.m = world * 128 * 2;
      calls = 3;
    }
    draw_routing(p, static_cast<uint64_t>(s.m));
    if (is_moe(op) && shape == 2) p.choices = random_choices(world, p.m, p.experts, p.topk, 3, /*skew=*/0.9);  // empty and overfull experts
    const Plan plan = find_strategy(strategy).build(p, options);
    std::vector<bench::ElementCheck> checks(static_cast<size_t>(world));
    for_each_rank(group(), [&](Communicator& comm) {
      checks[static_cast<size_t>(comm.rank())] = bench::run_against_host_reference(comm, plan, static_cast<uint64_t>(s.n), calls);
    });
    for (int r = 0; r < world; ++r)
      EXPECT_TRUE(checks[static_cast<size_t>(r)].passed()) << describe(p) << " rank " << r << ": " << checks[static_cast<size_t>(r)].explain();
  }
}

TEST_P(ExecutorMatchesReference, OnRandomInputs) {
  const auto [op, strategy] = GetParam();
  every_shape_against_reference(op, strategy, BLayout::nk);
}

TEST_P(ExecutorMatchesReference, OnRandomInputsWithBStoredKByN) {
  const auto [op, strategy] = GetParam();
  every_shape_against_reference(op, strategy, BLayout::kn);
}

std::string param_name(const testing::TestParamInfo<std::tuple<OpKind, std::string>>& info) {
  return std::string(to_string(std::get<0>(info.param))) + "_" + std::get<1>(info.param);
}

std::vector<std::tuple<OpKind, std::string>> every_op_and_strategy() {
  std::vector<std::tuple<OpKind, std::string>> cases;
  for (OpKind op : all_ops())
    for (const auto& s : strategies())
      if (s.supports(op)) cases.emplace_back(op, s.name);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllOps, ExecutorMatchesReference, testing::ValuesIn(every_op_and_strategy()), param_name);

// Stream-K (PlanOptions::stream_k) through the executor, on the overlap GEMM's tables that wait,
// notify and store to peers: fused ag_gemm (tiles wait for their rows) and fused gemm_rs with rows
// ragged against the tiles (stored locally, notified, pushed), 128x128 tiles, about 1.4 waves of
// them on the GPU's SMs, so that the last wave and the whole one before it are cut into pieces; and
// fused gemm_rs with whole tile rows per rank, whose own tiles add the peers' partial sums, which
// stream_k_tail leaves whole. Three calls each: the split counters start each call from zero.
TEST(Executor, StreamKOnTablesThatWaitAndNotifyMatchesTheReference) {
  const int world = static_cast<int>(group().size());
  int sms = 0;
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, group().front()->device()));
  // Rows of the one GEMM a rank runs (every rank's for ag_gemm, its own for gemm_rs): ~1.4 waves.
  const int64_t n = 1024, k = 264, tiles_n = n / 128;
  const int64_t row_tiles = (int64_t{sms} * 7 / 5 + tiles_n - 1) / tiles_n, rows_per_rank = (row_tiles + world - 1) / world * 128;
  struct Case {
    OpKind op;
    int64_t m;
    const char* what;
  };
  const Case cases[] = {{OpKind::ag_gemm, rows_per_rank - 24, "fused ag_gemm"},
                        {OpKind::gemm_rs, world * (rows_per_rank - 24), "fused gemm_rs, rows ragged against the tiles"},
                        {OpKind::gemm_rs, world * rows_per_rank, "fused gemm_rs, whole tile rows per rank (addends: left whole)"}};
  for (const Case& c : cases) {
    Problem p{c.op, c.m, n, k, world, DType::bf16, DType::bf16, {}};
    PlanOptions options;
    options.stream_k = true;
    const Plan plan = find_strategy("fused").build(p, options);
    bool streamed = false;
    for (const Step& s : plan.ranks.at(0).steps)
      if (const auto* g = std::get_if<GemmStep>(&s.body)) streamed |= g->stream_k;
    EXPECT_TRUE(streamed) << c.what << ": the plan asks for stream-K";
    std::vector<bench::ElementCheck> checks(static_cast<size_t>(world));
    for_each_rank(group(), [&](Communicator& comm) {
      checks[static_cast<size_t>(comm.rank())] = bench::run_against_host_reference(comm, plan, 17, 3);
    });
    for (int r = 0; r < world; ++r)
      EXPECT_TRUE(checks[static_cast<size_t>(r)].passed()) << describe(p) << " " << c.what << " rank " << r << ": " << checks[static_cast<size_t>(r)].explain();
  }
}

TEST(Executor, AllToAllWithEmptyAndOverfullDestinations) {
  // Every row to the last rank (the others receive nothing), then every rank keeping its own rows;
  // both directions, every strategy, ragged against 128-row tiles.
  const int world = static_cast<int>(group().size());
  for (OpKind op : {OpKind::gemm_a2a, OpKind::a2a_gemm})
    for (bool keep_own : {false, true})
      for (const Strategy& s : strategies()) {
        if (!s.supports(op)) continue;
        Problem p{op, 200, 136, 72, world, DType::bf16, DType::bf16, {}};
        for (int r = 0; r < world; ++r) p.routing.push_back(std::vector<int>(200, keep_own ? r : world - 1));
        PlanOptions options;
        if (s.name == "signal") options.gemm_sms = 2;
        const Plan plan = s.build(p, options);
        std::vector<bench::ElementCheck> checks(static_cast<size_t>(world));
        for_each_rank(group(), [&](Communicator& comm) {
          checks[static_cast<size_t>(comm.rank())] = bench::run_against_host_reference(comm, plan, 5, 2);
        });
        for (int r = 0; r < world; ++r)
          EXPECT_TRUE(checks[static_cast<size_t>(r)].passed()) << s.name << " " << to_string(op) << (keep_own ? " keep own" : " all to last")
                                                               << " rank " << r << ": " << checks[static_cast<size_t>(r)].explain();
      }
}

TEST(Executor, MoePlansWithAndWithoutTheGroupedGemmMatchTheReference) {
  // sequential with PlanOptions::moe_grouped_gemm (the default: every expert's rows in one overlap
  // GEMM over a sparse table, each expert's rows on the 128-row grid against its own N rows of B) and
  // without it (a library GEMM per expert), and decomposed (copy-engine transfers per source beside
  // one grouped GEMM per source, stored into the op's layout); uniform and skewed routing (empty and
  // overfull experts), N of 384 (tiles 192 wide) and 256 (top-1 to one expert there: that expert's
  // GEMM alone), three calls each.
  const int world = static_cast<int>(group().size());
  enum class Kind { grouped, per_expert, decomposed };
  for (Kind kind : {Kind::grouped, Kind::per_expert, Kind::decomposed})
  for (OpKind op : {OpKind::ag_moe, OpKind::moe_rs})
    for (double skew : {0.0, 0.9})
      for (int64_t n : {384, 256}) {
        Problem p{op, 200, n, 136, world, DType::bf16, DType::bf16, {}};
        p.experts = 6;
        p.topk = 2;
        p.choices = random_choices(world, p.m, p.experts, p.topk, 9, skew);
        if (skew > 0 && n == 256) {  // top-1, every token to expert 4: one expert's GEMM
          p.topk = 1;
          p.choices.assign(static_cast<size_t>(world), std::vector<int>(static_cast<size_t>(p.m), 4));
        }
        PlanOptions options;
        options.moe_grouped_gemm = kind != Kind::per_expert;
        const Plan plan = kind == Kind::decomposed ? plan_decomposed(p, options) : plan_sequential(p, options);
        const char* name = kind == Kind::grouped ? " grouped" : kind == Kind::per_expert ? " per expert" : " decomposed";
        int gemms = 0;
        for (const Step& step : plan.ranks[0].steps) gemms += std::holds_alternative<GemmStep>(step.body);
        if (kind == Kind::grouped) ASSERT_EQ(gemms, 1) << describe(p);  // the grouped GEMM, or the single expert's
        else if (kind == Kind::decomposed) ASSERT_EQ(gemms, world) << describe(p) << ": one GEMM per source";
        else ASSERT_GT(gemms, skew > 0 && n == 256 ? 0 : 1) << describe(p);
        std::vector<bench::ElementCheck> checks(static_cast<size_t>(world));
        for_each_rank(group(), [&](Communicator& comm) {
          checks[static_cast<size_t>(comm.rank())] = bench::run_against_host_reference(comm, plan, static_cast<uint64_t>(n), 3);
        });
        for (int r = 0; r < world; ++r)
          EXPECT_TRUE(checks[static_cast<size_t>(r)].passed()) << describe(p) << name << " skew " << skew << " rank " << r << ": "
                                                               << checks[static_cast<size_t>(r)].explain();
      }
}

TEST(Executor, RoutedMoePlansMatchTheReferenceAndReplayInAGraphWithNewChoices) {
  // The MoE ops with the choices given on the device (Problem::routing_on_device): sequential's routed
  // plan (every rank's choices all-gathered, the route on the device, the rows gathered by expert by
  // its table, the grouped GEMM whose table a kernel builds per call, the rows put back or the top-k
  // reduction by its tables) against the host reference on three routings (each seed's inputs hold
  // other choices), then as one CUDA graph captured once and launched on four sets of inputs, new
  // choices in each: one plan, one graph, every routing. N of 384 (tiles 192 wide) and 256.
  const int world = static_cast<int>(group().size());
  for (OpKind op : {OpKind::ag_moe, OpKind::moe_rs})
    for (int64_t n : {384, 256}) {
      Problem p{op, 200, n, 136, world, DType::bf16, DType::bf16, {}};
      p.experts = 6;
      p.topk = 2;
      p.routing_on_device = true;
      const Plan plan = plan_sequential(p, PlanOptions{});
      std::vector<bench::ElementCheck> checks(static_cast<size_t>(world));
      std::vector<bench::BackToBackCalls> replays(static_cast<size_t>(world));
      for_each_rank(group(), [&](Communicator& comm) {
        bench::ElementCheck& c = checks[static_cast<size_t>(comm.rank())];
        for (uint64_t seed = 1; seed <= 3; ++seed) c.add(bench::run_against_host_reference(comm, plan, seed * 101 + static_cast<uint64_t>(n), 2));
        replays[static_cast<size_t>(comm.rank())] =
            bench::back_to_back_calls_against_reference(comm, plan, 8, ExecutorOptions{}, bench::CallMode::graph_launches, 1);
      });
      for (int r = 0; r < world; ++r) {
        EXPECT_TRUE(checks[static_cast<size_t>(r)].passed()) << describe(p) << " rank " << r << ": " << checks[static_cast<size_t>(r)].explain();
        EXPECT_TRUE(replays[static_cast<size_t>(r)].check.passed()) << describe(p) << " graph, rank " << r << ": "
                                                                   << replays[static_cast<size_t>(r)].check.explain();
        EXPECT_EQ(replays[static_cast<size_t>(r)].sampled, 8) << describe(p);
      }
    }
}

TEST(Executor, RmsnormFusedWithTheRemapReadsSignalsResultInPlace) {
  // The round trip of FlashOverlap's reorder: RMSNorm reading where `signal` left the result (tile
  // level for AR/RS, token level for A2A; N = 264: two 128-wide segments and an 8-column edge) is
  // bit-identical to RMSNorm of the restored result, which matches a host RMSNorm.
  const int world = static_cast<int>(group().size());
  for (OpKind op : {OpKind::gemm_ar, OpKind::gemm_rs, OpKind::gemm_a2a}) {
    Problem p{op, op == OpKind::gemm_rs ? int64_t{world} * 256 : 200, 264, 72, world, DType::bf16, DType::bf16, {}};
    if (routes_rows(op)) p.routing = random_routing(world, p.m, 3);
    PlanOptions options;
    options.gemm_sms = 2;
    const Plan plan = plan_signal(p, options);
    std::vector<int> identical(static_cast<size_t>(world), 0);
    std::vector<bench::ElementCheck> checks(static_cast<size_t>(world));
    for_each_rank(group(), [&](Communicator& comm) {
      cudaStream_t stream;
      WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      CudaExecutor exec(comm, plan);
      bench::fill_inputs(exec, comm.rank(), 7, stream);
      exec.run(stream);
      ASSERT_TRUE(synchronize_with_timeout(stream, 30000)) << exec.diagnose();
      const DeviceRegion x = exec.output();
      void* memory = nullptr;
      WEFT_CUDA_CHECK(cudaMalloc(&memory, static_cast<size_t>(x.cols + 2 * x.rows * x.cols) * 2));
      void* weight = memory;
      const DeviceRegion plain{static_cast<uint16_t*>(memory) + x.cols, x.rows, x.cols, x.cols};
      const DeviceRegion fused{static_cast<uint16_t*>(memory) + x.cols + x.rows * x.cols, x.rows, x.cols, x.cols};
      fill_random_bf16(weight, x.cols, 11, stream);
      fill_u16(plain.data, 2 * x.rows * x.cols, kBf16Nan, stream);
      const DeviceReorderMapTable table(reorder_map(plan, comm.rank()));
      rmsnorm_bf16(x, weight, plain, 1e-6f, stream);
      rmsnorm_reordered_bf16(table.view(exec), weight, fused, 1e-6f, stream);
      const HostMatrix in = bench::download(x, stream);
      const HostMatrix w = bench::download(DeviceRegion{weight, 1, x.cols, x.cols}, stream);
      const HostMatrix got = bench::download(plain, stream);
      identical[static_cast<size_t>(comm.rank())] = got.data == bench::download(fused, stream).data;
      HostMatrix want(x.rows, x.cols);
      for (int64_t i = 0; i < x.rows; ++i) {
        double squares = 0;
        for (int64_t j = 0; j < x.cols; ++j) squares += static_cast<double>(in.at(i, j)) * in.at(i, j);
        const double scale = 1.0 / std::sqrt(squares / static_cast<double>(x.cols) + 1e-6);
        for (int64_t j = 0; j < x.cols; ++j) want.at(i, j) = static_cast<float>(in.at(i, j) * scale * w.at(0, j));
      }
      checks[static_cast<size_t>(comm.rank())] = rmsnorm_check(got, want);
      cudaFree(memory);
      cudaStreamDestroy(stream);
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(identical[static_cast<size_t>(r)], 1) << to_string(op) << " rank " << r;
      EXPECT_TRUE(checks[static_cast<size_t>(r)].passed()) << to_string(op) << " rank " << r << ": " << checks[static_cast<size_t>(r)].explain();
    }
  }
}

TEST(Executor, RmsnormOfFewWideAndManyNarrowRowsMatchesTheHost) {
  // Few wide rows (several passes of 4 vectors per thread) and many narrow ones (threads with less
  // than a pass); the remapped read of the same rows, from 128-wide segments stored one block after
  // another, must be bit-identical.
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{4, 12288}, {256, 12288}, {300, 4096}, {1500, 1024}}) {
    constexpr int64_t kSegment = 128;
    const int64_t segments = cols / kSegment, elements = rows * cols;
    void* memory = nullptr;
    WEFT_CUDA_CHECK(cudaMalloc(&memory, static_cast<size_t>(cols + 4 * elements) * 2 + static_cast<size_t>(segments) * sizeof(int64_t)));
    auto* base = static_cast<uint16_t*>(memory);
    void* weight = base;
    const DeviceRegion x{base + cols, rows, cols, cols}, plain{base + cols + elements, rows, cols, cols},
        remapped{base + cols + 2 * elements, rows, cols, cols};
    uint16_t* pool = base + cols + 3 * elements;
    auto* first_row = reinterpret_cast<int64_t*>(base + cols + 4 * elements);
    fill_random_bf16(weight, cols, 5, stream);
    fill_random_bf16(x.data, elements, static_cast<uint64_t>(rows + cols), stream);
    fill_u16(plain.data, 2 * elements, kBf16Nan, stream);
    std::vector<int64_t> firsts(static_cast<size_t>(segments));
    for (int64_t s = 0; s < segments; ++s) {
      firsts[static_cast<size_t>(s)] = s * rows;
      WEFT_CUDA_CHECK(cudaMemcpy2DAsync(pool + s * rows * kSegment, kSegment * 2, static_cast<uint16_t*>(x.data) + s * kSegment, cols * 2,
                                        kSegment * 2, static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream));
    }
    WEFT_CUDA_CHECK(cudaMemcpyAsync(first_row, firsts.data(), firsts.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream));
    DeviceReorderMap map;
    map.source = pool;
    map.first_row = first_row;
    map.segment_cols = kSegment;
    map.segments_per_row = segments;
    map.rows_per_entry = static_cast<int>(rows);
    rmsnorm_bf16(x, weight, plain, 1e-6f, stream);
    rmsnorm_reordered_bf16(map, weight, remapped, 1e-6f, stream);
    const HostMatrix in = bench::download(x, stream), w = bench::download(DeviceRegion{weight, 1, cols, cols}, stream);
    const HostMatrix got = bench::download(plain, stream);
    EXPECT_EQ(got.data, bench::download(remapped, stream).data) << rows << "x" << cols << ": the remapped read differs";
    HostMatrix want(rows, cols);
    for (int64_t i = 0; i < rows; ++i) {
      double squares = 0;
      for (int64_t j = 0; j < cols; ++j) squares += static_cast<double>(in.at(i, j)) * in.at(i, j);
      const double scale = 1.0 / std::sqrt(squares / static_cast<double>(cols) + 1e-6);
      for (int64_t j = 0; j < cols; ++j) want.at(i, j) = static_cast<float>(in.at(i, j) * scale * w.at(0, j));
    }
    const bench::ElementCheck check = rmsnorm_check(got, want);
    EXPECT_TRUE(check.passed()) << rows << "x" << cols << ": " << check.explain();
    cudaFree(memory);
  }
  cudaStreamDestroy(stream);
}

// 1,000 calls of decomposed gemm_rs and ag_gemm with `options`, back to back; the inputs change 4
// times and sampled calls' results (poisoned before the call) must match the reference.
void thousand_back_to_back_calls(const ExecutorOptions& options) {
  const int world = static_cast<int>(group().size());
  for (OpKind op : {OpKind::gemm_rs, OpKind::ag_gemm}) {
    Problem p{op, 64 * world, 256, 128, world, DType::bf16, DType::bf16, {}};
    const Plan plan = plan_decomposed(p, PlanOptions{});
    std::vector<bench::BackToBackCalls> results(static_cast<size_t>(world));
    for_each_rank(group(), [&](Communicator& comm) {
      results[static_cast<size_t>(comm.rank())] = bench::back_to_back_calls_against_reference(comm, plan, 1000, options);
    });
    for (int r = 0; r < world; ++r) {
      const bench::BackToBackCalls& b = results[static_cast<size_t>(r)];
      EXPECT_EQ(b.sampled, 21) << to_string(op) << " rank " << r << ": every 50th call and the last";
      EXPECT_TRUE(b.check.passed()) << to_string(op) << " rank " << r << ": " << b.check.explain();
    }
  }
}

TEST(Executor, ThousandBackToBackCallsNeitherHangNorDrift) { thousand_back_to_back_calls(ExecutorOptions{}); }

// The same with every call waiting for the previous one on the host: no device queue can fill. If
// this passes where the test above hangs, the hang is back-pressure on the host (see run()).
TEST(Executor, ThousandCallsOneAtATimeNeitherHangNorDrift) {
  ExecutorOptions one_at_a_time;
  one_at_a_time.max_calls_in_flight = 1;
  thousand_back_to_back_calls(one_at_a_time);
}

// The second call with the same buffers is captured and every later one replayed; the results are
// bit for bit those of the calls enqueued op by op. Every strategy of gemm_rs; at world > 1 only
// the plans without NCCL operations are replayed (not counted here).
TEST(Executor, CallsWithRepeatedBindingsAreReplayedAndMatchEagerCalls) {
  const int world = static_cast<int>(group().size());
  for (const Strategy& strategy : strategies()) {
    if (!strategy.supports(OpKind::gemm_rs)) continue;
    const Problem p{OpKind::gemm_rs, 128 * world, 264, 136, world, DType::bf16, DType::bf16, {}};
    const Plan plan = strategy.build(p, PlanOptions{});
    std::vector<int> same(static_cast<size_t>(world), 0), replayed(static_cast<size_t>(world), -1), eager_replayed(static_cast<size_t>(world), -1);
    for_each_rank(group(), [&](Communicator& comm) {
      cudaStream_t stream;
      WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      {
        CudaExecutor replaying(comm, plan);
        ExecutorOptions op_by_op;
        op_by_op.replay_calls = false;
        CudaExecutor eager(comm, plan, op_by_op);
        bench::fill_buffers(replaying, comm.rank(), 7, stream);
        bench::fill_buffers(eager, comm.rank(), 7, stream);
        comm.host_barrier();
        for (int call = 0; call < 4; ++call) {
          replaying.run(stream);
          replaying.finish(stream);
          eager.run(stream);
          eager.finish(stream);
        }
        same[static_cast<size_t>(comm.rank())] =
            bench::download(replaying.output(), stream).data == bench::download(eager.output(), stream).data;
        replayed[static_cast<size_t>(comm.rank())] = static_cast<int>(replaying.replayed_calls());
        eager_replayed[static_cast<size_t>(comm.rank())] = static_cast<int>(eager.replayed_calls());
        comm.host_barrier();
      }
      cudaStreamDestroy(stream);
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(same[static_cast<size_t>(r)], 1) << strategy.name << " rank " << r;
      if (world == 1 && std::getenv("WEFT_REPLAY_CALLS") == nullptr) {
        // A call that is one operation (one step, no signals, no peers: fused gemm_rs and auto's
        // GEMM alone at world 1) is launched as it is: a graph launch would be no cheaper.
        const RankPlan& rp = plan.ranks[0];
        const bool one_operation = rp.steps.size() == 1 && rp.signals.empty();
        EXPECT_EQ(replayed[static_cast<size_t>(r)], one_operation ? 0 : 3) << strategy.name << ": calls 2-4 replayed unless one operation";
      }
      EXPECT_EQ(eager_replayed[static_cast<size_t>(r)], 0) << strategy.name;
    }
  }
}

TEST(Executor, RejectsAPlanForAnotherWorldSize) {
  const int world = static_cast<int>(group().size());
  Problem p{OpKind::gemm_ar, 64, 64, 64, world + 1, DType::bf16, DType::bf16, {}};
  const Plan plan = plan_sequential(p, {});
  EXPECT_THROW(CudaExecutor(*group()[0], plan), std::invalid_argument);
}

}  // namespace
}  // namespace weft
