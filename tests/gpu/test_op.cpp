// The op API on the caller's buffers: every strategy of ag_gemm, gemm_rs and gemm_ar with row
// counts that change from call to call (B in either layout; ag_gemm handing back its gathered A); a call captured in a CUDA graph and replayed 1,000 times
// with new inputs, every result checked; a producer writing A in place; argument errors raised
// before anything is launched; a device-side wait that gives up, and a call that cannot finish.
// Results are compared on the device with an fp32 reference, element by element (bench/lib/reference_gemm.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>

#include "check_against_host.hpp"
#include "measure.hpp"
#include "reference_gemm.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/cuda_executor.hpp"
#include "weft/runtime/op.hpp"
#include "weft/runtime/rank_threads.hpp"

namespace weft {
namespace {

const std::vector<std::unique_ptr<Communicator>>& group() { return bench::test_group(); }

using bench::DeviceBuffer;

// A rank's caller buffers for an op of at most max_rows rows, and what checking them needs.
struct CallerBuffers {
  int world;
  DeviceBuffer a, b, c, want, scale, scratch, counters;
  CallerBuffers(const OpSpec& s, int world_size)
      : world(world_size),
        a(static_cast<size_t>(s.max_rows * s.k) * 2),
        b(static_cast<size_t>(s.n * s.k) * 2),
        c(static_cast<size_t>(world * s.max_rows * s.n) * 2),
        want(static_cast<size_t>(world * s.max_rows * s.n) * 4),
        scale(static_cast<size_t>(world * s.max_rows * s.n) * 4),
        scratch(static_cast<size_t>(world * s.max_rows * s.k + s.n * s.k) * 2),
        counters(bench::kCheckCounterBytes) {}
  // New inputs for a call of `rows` rows from `seed`; the output poisoned.
  void fill(const OpSpec& s, int rank, int64_t rows, uint64_t seed, void* a_target, cudaStream_t stream) {
    fill_random_bf16(a_target, rows * s.k, bench::seed_a(seed, rank), stream);
    fill_random_bf16(b.data, s.n * s.k, bench::seed_b(seed, rank), stream);
    fill_u16(c.data, world * s.max_rows * s.n, kBf16Nan, stream);
  }
  // This rank's result against the fp32 reference, element by element.
  bench::ElementCheck check(const Op& op, int rank, int64_t rows, uint64_t seed, cudaStream_t stream) {
    const Problem p{op.spec().op, rows, op.spec().n, op.spec().k, op.communicator().world_size(), DType::bf16, DType::bf16, {}};
    bench::expected_op_result(p, rank, seed, want.as<float>(), scale.as<float>(), scratch.data, stream);
    return bench::check_elements_on_device(c.data, want.as<float>(), scale.as<float>(), output_rows(p, rank), p.n, bench::bf16_error_factor(p),
                                           counters.data, stream);
  }
};

struct Case {
  OpKind op;
  std::string strategy;
  // At world 1 an op runs its GEMM alone; kept, the strategy's own plan runs (its copies, signals
  // and waits exercised on one GPU). No effect at world > 1.
  bool keep_strategy_at_world_one = true;
};

std::vector<Case> op_cases() {
  std::vector<Case> cases;
  for (OpKind op : {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar})
    for (const Strategy& s : strategies())
      if (s.supports(op)) cases.push_back({op, s.name});
  for (OpKind op : {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar}) cases.push_back({op, "default"});
  // What a caller gets at world 1: the GEMM alone, whatever the strategy (an overlap GEMM strategy here).
  cases.push_back({OpKind::ag_gemm, "fused", false});
  cases.push_back({OpKind::gemm_rs, "fused", false});
  cases.push_back({OpKind::gemm_ar, "signal", false});
  return cases;
}

class OpOnCallerBuffers : public testing::TestWithParam<Case> {};

// An op of the case's kind and strategy, N = 264 and K = 136 (ragged against every tile), for up
// to max_rows rows.
OpSpec spec_for(const Case& c, int64_t max_rows) {
  OpSpec spec;
  spec.op = c.op;
  spec.n = 264;
  spec.k = 136;
  spec.max_rows = max_rows;
  spec.strategy = c.strategy;
  spec.plan.keep_strategy_at_world_one = c.keep_strategy_at_world_one;
  return spec;
}

TEST_P(OpOnCallerBuffers, MatchesTheReferenceAsRowsChange) {
  const Case c = GetParam();
  const int world = static_cast<int>(group().size());
  OpSpec spec = spec_for(c, 256 * world);
  spec.plan.gemm_sms = 4;  // signal: several waves and groups even on these shapes
  // The largest, a ragged count, the largest again (cached), a small one; multiples of W for gemm_rs.
  const std::vector<int64_t> rows = {256 * world, 200 * world, 256 * world, 8 * world};
  std::vector<std::vector<bench::ElementCheck>> checks(static_cast<size_t>(world));
  for_each_rank(group(), [&](Communicator& comm) {
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    {
      Op op(comm, spec);
      CallerBuffers buffers(spec, world);
      for (size_t call = 0; call < rows.size(); ++call) {
        const uint64_t seed = 100 + call;
        buffers.fill(spec, comm.rank(), rows[call], seed, buffers.a.data, stream);
        op.run({buffers.a.data, buffers.b.data, buffers.c.data, rows[call], {}}, stream);
        op.finish(stream);
        checks[static_cast<size_t>(comm.rank())].push_back(buffers.check(op, comm.rank(), rows[call], seed, stream));
      }
    }
    cudaStreamDestroy(stream);
  });
  for (int r = 0; r < world; ++r)
    for (size_t call = 0; call < rows.size(); ++call) {
      const bench::ElementCheck& check = checks[static_cast<size_t>(r)][call];
      EXPECT_TRUE(check.passed()) << "rank " << r << " rows " << rows[call] << ": " << check.explain();
    }
}

// The raw bf16 of a device [rows, cols] row-major matrix.
std::vector<uint16_t> download_raw(const void* data, int64_t rows, int64_t cols, cudaStream_t stream) {
  std::vector<uint16_t> raw(static_cast<size_t>(rows * cols));
  WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
  WEFT_CUDA_CHECK(cudaMemcpy(raw.data(), data, raw.size() * 2, cudaMemcpyDeviceToHost));
  return raw;
}

// B given as the transpose of a row-major [k, n] (OpSpec::b_layout kn: what weft.torch passes for
// weight.t(), read in place by cuBLASLt's transpose flag or the overlap GEMM's N-major operand), and,
// for ag_gemm, gather(A) handed back into the caller's buffer (RunArgs::gathered_a), bit for bit.
TEST_P(OpOnCallerBuffers, TakesBStoredKByNAndHandsBackTheGatheredA) {
  const Case c = GetParam();
  const int world = static_cast<int>(group().size());
  OpSpec spec = spec_for(c, 256 * world);
  spec.plan.gemm_sms = 4;
  spec.b_layout = BLayout::kn;
  const bool gathers = c.op == OpKind::ag_gemm;
  const std::vector<int64_t> rows = {256 * world, 200 * world, 8 * world};
  std::vector<std::vector<bench::ElementCheck>> checks(static_cast<size_t>(world));
  std::vector<std::string> gathered_errors(static_cast<size_t>(world));
  for_each_rank(group(), [&](Communicator& comm) {
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    {
      Op op(comm, spec);
      CallerBuffers buffers(spec, world);
      DeviceBuffer bt(static_cast<size_t>(spec.n * spec.k) * 2), gathered(static_cast<size_t>(world * spec.max_rows * spec.k) * 2),
          shard(static_cast<size_t>(spec.max_rows * spec.k) * 2);
      for (size_t call = 0; call < rows.size(); ++call) {
        const uint64_t seed = 300 + call;
        buffers.fill(spec, comm.rank(), rows[call], seed, buffers.a.data, stream);
        // B's memory in layout kn: the transpose of the [n, k] the reference reads.
        const std::vector<uint16_t> b = download_raw(buffers.b.data, spec.n, spec.k, stream);
        std::vector<uint16_t> b_t(b.size());
        for (int64_t i = 0; i < spec.n; ++i)
          for (int64_t j = 0; j < spec.k; ++j) b_t[static_cast<size_t>(j * spec.n + i)] = b[static_cast<size_t>(i * spec.k + j)];
        WEFT_CUDA_CHECK(cudaMemcpyAsync(bt.data, b_t.data(), b_t.size() * 2, cudaMemcpyHostToDevice, stream));  // ordered before the call
        if (gathers) fill_u16(gathered.data, world * rows[call] * spec.k, kBf16Nan, stream);
        op.run({buffers.a.data, bt.data, buffers.c.data, rows[call], {}, gathers ? gathered.data : nullptr}, stream);
        op.finish(stream);
        checks[static_cast<size_t>(comm.rank())].push_back(buffers.check(op, comm.rank(), rows[call], seed, stream));
        if (!gathers) continue;
        const std::vector<uint16_t> got = download_raw(gathered.data, world * rows[call], spec.k, stream);
        for (int s = 0; s < world && gathered_errors[static_cast<size_t>(comm.rank())].empty(); ++s) {
          fill_random_bf16(shard.data, rows[call] * spec.k, bench::seed_a(seed, s), stream);
          const std::vector<uint16_t> want = download_raw(shard.data, rows[call], spec.k, stream);
          if (!std::equal(want.begin(), want.end(), got.begin() + static_cast<std::ptrdiff_t>(s * rows[call] * spec.k)))
            gathered_errors[static_cast<size_t>(comm.rank())] = "rows " + std::to_string(rows[call]) + ": shard of rank " + std::to_string(s) + " differs";
        }
      }
    }
    cudaStreamDestroy(stream);
  });
  for (int r = 0; r < world; ++r) {
    for (size_t call = 0; call < rows.size(); ++call) {
      const bench::ElementCheck& check = checks[static_cast<size_t>(r)][call];
      EXPECT_TRUE(check.passed()) << "rank " << r << " rows " << rows[call] << ": " << check.explain();
    }
    EXPECT_EQ(gathered_errors[static_cast<size_t>(r)], "") << "rank " << r << "'s gathered A";
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, OpOnCallerBuffers, testing::ValuesIn(op_cases()),
                         [](const testing::TestParamInfo<Case>& param) {
                           return std::string(to_string(param.param.op)) + "_" + param.param.strategy +
                                  (param.param.keep_strategy_at_world_one ? "" : "_gemm_alone_at_world_1");
                         });

// One call captured, 1,000 replays; before each, new inputs are written into the captured buffers
// (outside the graph, on the same stream) and after it the result is checked.
void thousand_graph_replays(OpKind kind, const std::string& strategy) {
  const int world = static_cast<int>(group().size());
  OpSpec spec;
  spec.op = kind;
  spec.n = 256;
  spec.k = 128;
  spec.max_rows = 128 * world;
  spec.strategy = strategy;
  spec.plan.keep_strategy_at_world_one = true;  // the strategy's machinery under replay, at world 1 too
  const int64_t rows = 96 * world;
  std::vector<bench::ElementCheck> checks(static_cast<size_t>(world));
  std::vector<int> checked(static_cast<size_t>(world), 0);
  for_each_rank(group(), [&](Communicator& comm) {
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    {
      Op op(comm, spec);
      CallerBuffers buffers(spec, world);
      const RunArgs args{buffers.a.data, buffers.b.data, buffers.c.data, rows, {}};
      // One eager call plans and lowers this row count; capturing allocates nothing.
      buffers.fill(spec, comm.rank(), rows, 1, buffers.a.data, stream);
      op.run(args, stream);
      op.finish(stream);
      comm.host_barrier();
      cudaGraph_t graph;
      cudaGraphExec_t replay;
      WEFT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      op.run(args, stream);
      WEFT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      WEFT_CUDA_CHECK(cudaGraphInstantiate(&replay, graph, 0));
      comm.host_barrier();
      for (int i = 0; i < 1000; ++i) {
        const uint64_t seed = 1000 + static_cast<uint64_t>(i);
        buffers.fill(spec, comm.rank(), rows, seed, buffers.a.data, stream);
        WEFT_CUDA_CHECK(cudaGraphLaunch(replay, stream));
        if (!synchronize_with_timeout(stream, 30000)) throw std::runtime_error("replay " + std::to_string(i) + " did not finish");
        op.check();
        checks[static_cast<size_t>(comm.rank())].add(buffers.check(op, comm.rank(), rows, seed, stream));
        ++checked[static_cast<size_t>(comm.rank())];
      }
      WEFT_CUDA_CHECK(cudaGraphExecDestroy(replay));
      WEFT_CUDA_CHECK(cudaGraphDestroy(graph));
    }
    cudaStreamDestroy(stream);
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(checked[static_cast<size_t>(r)], 1000) << "rank " << r;
    EXPECT_TRUE(checks[static_cast<size_t>(r)].passed()) << "rank " << r << ", 1,000 replays: " << checks[static_cast<size_t>(r)].explain();
  }
}

TEST(OpGraph, AgGemmReplaysAThousandTimesWithNewInputs) { thousand_graph_replays(OpKind::ag_gemm, "default"); }
TEST(OpGraph, GemmRsReplaysAThousandTimesWithNewInputs) { thousand_graph_replays(OpKind::gemm_rs, "default"); }
// The strategies whose calls hold the most that a replay must reproduce: signal waits on its own
// epilogue's counters, fused on copy-engine counters written without kernels.
TEST(OpGraph, FusedAgGemmReplaysAThousandTimesWithNewInputs) { thousand_graph_replays(OpKind::ag_gemm, "fused"); }
TEST(OpGraph, SignalGemmRsReplaysAThousandTimesWithNewInputs) { thousand_graph_replays(OpKind::gemm_rs, "signal"); }

// Calls alternating between two sets of caller buffers, new inputs each call: each set's calls are
// replayed from their own graph once they repeat, and every result is checked.
TEST(Op, ReplayedCallsFollowTheirBuffers) {
  const int world = static_cast<int>(group().size());
  for (const Case& c : {Case{OpKind::gemm_rs, "fused"}, Case{OpKind::ag_gemm, "decomposed"}, Case{OpKind::gemm_ar, "default"}}) {
    const OpSpec spec = spec_for(c, 128 * world);
    const int64_t rows = 128 * world;
    const int order[] = {0, 0, 0, 1, 1, 0, 0, 1, 1, 0};
    std::vector<std::vector<bench::ElementCheck>> checks(static_cast<size_t>(world));
    for_each_rank(group(), [&](Communicator& comm) {
      cudaStream_t stream;
      WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      {
        Op op(comm, spec);
        CallerBuffers first(spec, world), second(spec, world);
        CallerBuffers* sets[] = {&first, &second};
        for (size_t call = 0; call < std::size(order); ++call) {
          CallerBuffers& buffers = *sets[order[call]];
          const uint64_t seed = 500 + call;
          buffers.fill(spec, comm.rank(), rows, seed, buffers.a.data, stream);
          op.run({buffers.a.data, buffers.b.data, buffers.c.data, rows, {}}, stream);
          op.finish(stream);
          checks[static_cast<size_t>(comm.rank())].push_back(buffers.check(op, comm.rank(), rows, seed, stream));
        }
      }
      cudaStreamDestroy(stream);
    });
    for (int r = 0; r < world; ++r)
      for (size_t call = 0; call < std::size(order); ++call) {
        const bench::ElementCheck& check = checks[static_cast<size_t>(r)][call];
        EXPECT_TRUE(check.passed()) << c.strategy << " rank " << r << " call " << call << ": " << check.explain();
      }
  }
}

TEST(Op, AProducerWritesAInPlace) {
  // ag_gemm gathers A from symmetric memory: the producer writes the shard there and no copy is made.
  const int world = static_cast<int>(group().size());
  OpSpec spec{OpKind::ag_gemm, 256, 128, 128 * world, DType::bf16, DType::bf16, "decomposed", {}, 0, 0};
  spec.plan.keep_strategy_at_world_one = true;  // at world 1 the GEMM alone reads the caller's A: nothing symmetric
  std::vector<bench::ElementCheck> checks(static_cast<size_t>(world));
  std::vector<int> in_workspace(static_cast<size_t>(world), 0), copies_in(static_cast<size_t>(world), 0),
      copies_from_caller(static_cast<size_t>(world), 0), checked(static_cast<size_t>(world), 0);
  for_each_rank(group(), [&](Communicator& comm) {
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    {
      Op op(comm, spec);
      CallerBuffers buffers(spec, world);
      const int64_t rows = 64 * world;
      void* shard = op.a_in_workspace(rows);
      in_workspace[static_cast<size_t>(comm.rank())] = shard != nullptr;
      if (shard) {
        for (uint64_t seed = 7; seed < 10; ++seed) {
          buffers.fill(spec, comm.rank(), rows, seed, shard, stream);
          op.run({shard, buffers.b.data, buffers.c.data, rows, {}}, stream);
          op.finish(stream);
          checks[static_cast<size_t>(comm.rank())].add(buffers.check(op, comm.rank(), rows, seed, stream));
          ++checked[static_cast<size_t>(comm.rank())];
          copies_in[static_cast<size_t>(comm.rank())] += static_cast<int>(op.copies_in_last_call());
        }
        // The same op given the shard in the caller's memory copies it in.
        buffers.fill(spec, comm.rank(), rows, 11, buffers.a.data, stream);
        op.run({buffers.a.data, buffers.b.data, buffers.c.data, rows, {}}, stream);
        op.finish(stream);
        copies_from_caller[static_cast<size_t>(comm.rank())] = static_cast<int>(op.copies_in_last_call());
        checks[static_cast<size_t>(comm.rank())].add(buffers.check(op, comm.rank(), rows, 11, stream));
        ++checked[static_cast<size_t>(comm.rank())];
      }
    }
    cudaStreamDestroy(stream);
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(in_workspace[static_cast<size_t>(r)], 1) << "decomposed ag_gemm pulls A from symmetric memory";
    EXPECT_EQ(copies_in[static_cast<size_t>(r)], 0) << "rank " << r << ": written in place, nothing copied in";
    EXPECT_EQ(copies_from_caller[static_cast<size_t>(r)], 1) << "rank " << r << ": from the caller's memory, copied in once";
    EXPECT_EQ(checked[static_cast<size_t>(r)], 4) << "rank " << r << ": three calls in place, one from the caller's memory";
    EXPECT_TRUE(checks[static_cast<size_t>(r)].passed()) << "rank " << r << ": " << checks[static_cast<size_t>(r)].explain();
  }
}

TEST(Op, RejectsBadArgumentsBeforeLaunching) {
  // Every rank at once: each check throws before any collective, so no rank waits for another.
  const int world = static_cast<int>(group().size());
  for_each_rank(group(), [&](Communicator& comm) {
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    {
      OpSpec spec{OpKind::gemm_ar, 256, 128, 128, DType::bf16, DType::bf16, "default", {}, 0, 0};
      Op op(comm, spec);
      CallerBuffers buffers(spec, world);
      const RunArgs good{buffers.a.data, buffers.b.data, buffers.c.data, 64, {}};
      auto with = [&](auto change) {
        RunArgs args = good;
        change(args);
        return args;
      };
      EXPECT_THROW(op.run(with([](RunArgs& a) { a.a = nullptr; }), stream), std::invalid_argument);
      EXPECT_THROW(op.run(with([](RunArgs& a) { a.b = static_cast<const char*>(a.b) + 2; }), stream), std::invalid_argument);
      EXPECT_THROW(op.run(with([](RunArgs& a) { a.c = static_cast<char*>(a.c) + 8; }), stream), std::invalid_argument);
      EXPECT_THROW(op.run(with([](RunArgs& a) { a.rows = 129; }), stream), std::invalid_argument) << "above max_rows";
      EXPECT_THROW(op.run(with([](RunArgs& a) { a.rows = 0; }), stream), std::invalid_argument);
      EXPECT_THROW(op.run(with([&](RunArgs& a) { a.routing = std::vector<std::vector<int>>(static_cast<size_t>(world), std::vector<int>(64, 0)); }),
                          stream),
                   std::invalid_argument)
          << "gemm_ar takes no routing";
      EXPECT_EQ(cudaStreamQuery(stream), cudaSuccess) << "nothing was launched";
      op.run(good, stream);
      op.finish(stream);
    }
    EXPECT_THROW(Op(comm, OpSpec{OpKind::gemm_ar, 256, 128, 128, DType::f16, DType::f16, "default", {}, 0, 0}), std::invalid_argument);
    EXPECT_THROW(Op(comm, OpSpec{OpKind::gemm_ar, 256, 100, 128, DType::bf16, DType::bf16, "default", {}, 0, 0}), std::invalid_argument)
        << "k not a multiple of 8";
    EXPECT_THROW(Op(comm, OpSpec{OpKind::gemm_ar, 256, 128, 128, DType::bf16, DType::bf16, "nonsense", {}, 0, 0}), std::invalid_argument);
    EXPECT_THROW(Op(comm, OpSpec{OpKind::gemm_ar, 256, 128, 128, DType::bf16, DType::bf16, "fused", {}, 0, 0}), std::invalid_argument)
        << "fused has no gemm_ar";
    EXPECT_THROW(Op(comm, OpSpec{OpKind::ag_moe, 256, 128, 128, DType::bf16, DType::bf16, "default", {}, 0, 0}), std::invalid_argument)
        << "MoE ops run as plans only";
    if (world > 1) {
      EXPECT_THROW(Op(comm, OpSpec{OpKind::gemm_rs, 256, 128, 128 * world + 1, DType::bf16, DType::bf16, "default", {}, 0, 0}), std::invalid_argument)
          << "gemm_rs max_rows not a multiple of the world size";
    }
    cudaStreamDestroy(stream);
  });
}

// What Op::plan, prepare and output_rows say, per op: the plan of a row count is made once (the same
// object while cached) for that problem; a prepared row count is captured in a graph with no eager
// call first, and its replay matches the reference.
TEST(Op, PlanPrepareAndOutputRows) {
  const int world = static_cast<int>(group().size());
  for (OpKind kind : {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar}) {
    const OpSpec spec = spec_for(Case{kind, "default"}, 128 * world);
    const int64_t rows = 64 * world;
    std::vector<bench::ElementCheck> checks(static_cast<size_t>(world));
    for_each_rank(group(), [&](Communicator& comm) {
      cudaStream_t stream;
      WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      {
        Op op(comm, spec);
        CallerBuffers buffers(spec, world);
        const RunArgs args{buffers.a.data, buffers.b.data, buffers.c.data, rows, {}};
        const int64_t want_rows = kind == OpKind::ag_gemm ? world * rows : kind == OpKind::gemm_rs ? rows / world : rows;
        EXPECT_EQ(op.output_rows(args), want_rows) << to_string(kind);
        const Plan& plan = op.plan(rows);
        EXPECT_EQ(plan.problem, (Problem{kind, rows, spec.n, spec.k, world, DType::bf16, DType::bf16, {}})) << to_string(kind);
        EXPECT_EQ(plan.strategy.rfind("auto=", 0), 0u) << plan.strategy << ": default is auto, and the plan says what it chose";
        EXPECT_EQ(&op.plan(rows), &plan) << "a row count is planned once";
        // Prepared, then captured straight away: capturing may not plan or allocate.
        const int64_t other = 32 * world;
        op.prepare(other);
        buffers.fill(spec, comm.rank(), other, 21, buffers.a.data, stream);
        comm.host_barrier();
        cudaGraph_t graph;
        cudaGraphExec_t replay;
        WEFT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        op.run({buffers.a.data, buffers.b.data, buffers.c.data, other, {}}, stream);
        WEFT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        WEFT_CUDA_CHECK(cudaGraphInstantiate(&replay, graph, 0));
        comm.host_barrier();
        WEFT_CUDA_CHECK(cudaGraphLaunch(replay, stream));
        if (!synchronize_with_timeout(stream, 30000)) throw std::runtime_error("the replay did not finish");
        op.check();
        checks[static_cast<size_t>(comm.rank())] = buffers.check(op, comm.rank(), other, 21, stream);
        WEFT_CUDA_CHECK(cudaGraphExecDestroy(replay));
        WEFT_CUDA_CHECK(cudaGraphDestroy(graph));
        comm.host_barrier();
      }
      cudaStreamDestroy(stream);
    });
    for (int r = 0; r < world; ++r)
      EXPECT_TRUE(checks[static_cast<size_t>(r)].passed()) << to_string(kind) << " rank " << r << ": " << checks[static_cast<size_t>(r)].explain();
  }
}

// gemm_a2a and a2a_gemm through the Op (the routing given per call): checked on the host against
// the op's definition, element by element.
class RoutedOp : public testing::TestWithParam<Case> {};

std::vector<Case> routed_cases() {
  std::vector<Case> cases;
  for (OpKind op : {OpKind::gemm_a2a, OpKind::a2a_gemm}) {
    for (const Strategy& s : strategies())
      if (s.supports(op)) cases.push_back({op, s.name});
    cases.push_back({op, "default"});
  }
  return cases;
}

// Rows routed to `rank` by `routing`, counted here from the table itself.
int64_t rows_routed_to(const std::vector<std::vector<int>>& routing, int rank) {
  int64_t count = 0;
  for (const auto& from : routing)
    for (int d : from) count += d == rank;
  return count;
}

// One call with `routing` on caller buffers, inputs from `seed`; this rank's result checked on the host.
bench::ElementCheck routed_call(Op& op, Communicator& comm, CallerBuffers& buffers, int64_t rows, const std::vector<std::vector<int>>& routing,
                                uint64_t seed, cudaStream_t stream) {
  const OpSpec& spec = op.spec();
  buffers.fill(spec, comm.rank(), rows, seed, buffers.a.data, stream);
  const RunArgs args{buffers.a.data, buffers.b.data, buffers.c.data, rows, routing};
  op.run(args, stream);
  op.finish(stream);
  const Problem& problem = op.plan(rows, routing).problem;  // cached: the plan the call ran
  const int64_t out_rows = op.output_rows(args);
  EXPECT_EQ(out_rows, rows_routed_to(routing, comm.rank()));
  RankTensors mine;
  mine["A"] = bench::download(DeviceRegion{buffers.a.data, rows, spec.k, spec.k}, stream);
  mine["B"] = bench::download(DeviceRegion{buffers.b.data, spec.n, spec.k, spec.k}, stream);
  const std::vector<RankTensors> all = bench::gather_inputs(comm, mine);
  return bench::check_elements(bench::download(DeviceRegion{buffers.c.data, out_rows, spec.n, spec.n}, stream), expected_output(problem, all, comm.rank()),
                               expected_magnitude(problem, all, comm.rank()), bench::bf16_error_factor(problem));
}

TEST_P(RoutedOp, MatchesTheReferenceAsRoutingsChange) {
  const Case c = GetParam();
  const int world = static_cast<int>(group().size());
  const OpSpec spec = spec_for(c, 200);
  // Ten routings (more than the op keeps plans for: the oldest are dropped), then the first again
  // (planned anew), with a ragged and a full row count.
  std::vector<std::pair<int64_t, std::vector<std::vector<int>>>> calls;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    const int64_t rows = seed % 2 ? 200 : 136;
    calls.emplace_back(rows, random_routing(world, rows, 40 + seed));
  }
  calls.push_back(calls.front());
  std::vector<std::vector<bench::ElementCheck>> checks(static_cast<size_t>(world));
  for_each_rank(group(), [&](Communicator& comm) {
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    {
      Op op(comm, spec);
      CallerBuffers buffers(spec, world);
      for (size_t call = 0; call < calls.size(); ++call)
        checks[static_cast<size_t>(comm.rank())].push_back(routed_call(op, comm, buffers, calls[call].first, calls[call].second, 60 + call, stream));
    }
    cudaStreamDestroy(stream);
  });
  for (int r = 0; r < world; ++r)
    for (size_t call = 0; call < calls.size(); ++call) {
      const bench::ElementCheck& check = checks[static_cast<size_t>(r)][call];
      EXPECT_TRUE(check.passed()) << "rank " << r << " call " << call << ": " << check.explain();
    }
}

INSTANTIATE_TEST_SUITE_P(Strategies, RoutedOp, testing::ValuesIn(routed_cases()), [](const testing::TestParamInfo<Case>& param) {
  return std::string(to_string(param.param.op)) + "_" + param.param.strategy;
});

// The MoE ops through the op API: ag_moe and moe_rs with every strategy that has them, experts
// chosen anew per call (a ragged and a full token count), on the caller's buffers (moe_rs's top-k
// weights too), the output poisoned; each rank's result against the host reference of every rank's
// inputs.
class MoeOp : public testing::TestWithParam<Case> {};

TEST_P(MoeOp, MatchesTheReferenceAsChoicesChange) {
  const Case c = GetParam();
  const int world = static_cast<int>(group().size());
  OpSpec spec = spec_for(c, 96);
  // N per expert: 136, ragged against every tile (a library GEMM per expert); 256, where the
  // strategies' grouped GEMMs run (tiles 256 wide).
  spec.k = 64;
  spec.experts = 4;
  spec.topk = 2;
  const int64_t max_rows = spec.max_rows, a_rows = c.op == OpKind::moe_rs ? world * max_rows * spec.topk : max_rows;
  const int64_t out_rows = c.op == OpKind::ag_moe ? world * max_rows * spec.topk : max_rows;
  std::vector<std::vector<bench::ElementCheck>> checks(static_cast<size_t>(world));
  for (int64_t n : {136, 256}) {
  spec.n = n;
  for_each_rank(group(), [&](Communicator& comm) {
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    {
      Op op(comm, spec);
      DeviceBuffer a(static_cast<size_t>(a_rows * spec.k) * 2), b(static_cast<size_t>(spec.experts * spec.n * spec.k) * 2),
          weights(static_cast<size_t>(world * max_rows * spec.topk) * 2), out(static_cast<size_t>(out_rows * spec.n) * 2);
      for (uint64_t call = 0; call < 3; ++call) {
        const int64_t rows = call == 1 ? 40 : max_rows;
        const auto choices = random_choices(world, rows, spec.experts, spec.topk, 90 + call);  // the same on every rank
        const uint64_t seed = 300 + call;
        const int64_t rows_of_a = c.op == OpKind::moe_rs ? world * rows * spec.topk : rows;
        fill_random_bf16(a.data, rows_of_a * spec.k, bench::seed_a(seed, comm.rank()), stream);
        fill_random_bf16(b.data, spec.experts * spec.n * spec.k, bench::seed_b(seed, comm.rank()), stream);
        fill_random_bf16(weights.data, world * rows * spec.topk, seed + 7, stream);  // every rank's tokens' weights: the same everywhere
        fill_u16(out.data, out_rows * spec.n, kBf16Nan, stream);
        RunArgs args{a.data, b.data, out.data, rows, {}};
        args.choices = choices;
        if (c.op == OpKind::moe_rs) args.topk_weights = weights.data;
        op.run(args, stream);
        op.finish(stream);
        const Problem& problem = op.plan(rows, choices).problem;
        const int64_t result_rows = op.output_rows(args);
        RankTensors mine;
        mine["A"] = bench::download(DeviceRegion{a.data, rows_of_a, spec.k, spec.k}, stream);
        mine["B"] = bench::download(DeviceRegion{b.data, spec.experts * spec.n, spec.k, spec.k}, stream);
        if (c.op == OpKind::moe_rs) mine["topk_weights"] = bench::download(DeviceRegion{weights.data, world * rows, spec.topk, spec.topk}, stream);
        const std::vector<RankTensors> all = bench::gather_inputs(comm, mine);
        const size_t rank = static_cast<size_t>(comm.rank());
        checks[rank].push_back(bench::check_elements(bench::download(DeviceRegion{out.data, result_rows, spec.n, spec.n}, stream),
                                                     expected_output(problem, all, comm.rank()), expected_magnitude(problem, all, comm.rank()),
                                                     bench::bf16_error_factor(problem)));
      }
    }
    cudaStreamDestroy(stream);
  });
  }
  for (int r = 0; r < world; ++r)
    for (size_t call = 0; call < checks[static_cast<size_t>(r)].size(); ++call) {
      const bench::ElementCheck& check = checks[static_cast<size_t>(r)][call];
      EXPECT_TRUE(check.passed()) << "rank " << r << " call " << call << ": " << check.explain();
    }
}

std::vector<Case> moe_cases() {
  std::vector<Case> cases;
  for (OpKind op : {OpKind::ag_moe, OpKind::moe_rs})
    for (const Strategy& s : strategies())
      if (s.supports(op)) cases.push_back({op, s.name});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Strategies, MoeOp, testing::ValuesIn(moe_cases()), [](const testing::TestParamInfo<Case>& param) {
  return std::string(to_string(param.param.op)) + "_" + param.param.strategy;
});

// The MoE ops with the choices given on the device (OpSpec::routing_on_device): each rank passes its
// own [rows, topk] int32 choices on the device, new ones every call (a ragged and a full token count,
// a repeated call's pointers and another choices buffer), then as a CUDA graph captured on the
// caller's stream and launched again after the choices' memory was rewritten; each result against
// the host reference of every rank's inputs and choices.
TEST(MoeOpWithChoicesOnTheDevice, MatchesTheReferenceAsChoicesChangeAlsoInAGraph) {
  const int world = static_cast<int>(group().size());
  for (OpKind op_kind : {OpKind::ag_moe, OpKind::moe_rs}) {
    OpSpec spec = spec_for(Case{op_kind, "default"}, 96);
    spec.n = 256;
    spec.k = 64;
    spec.experts = 4;
    spec.topk = 2;
    spec.routing_on_device = true;
    const int64_t max_rows = spec.max_rows, a_rows = op_kind == OpKind::moe_rs ? world * max_rows * spec.topk : max_rows;
    const int64_t out_rows = op_kind == OpKind::ag_moe ? world * max_rows * spec.topk : max_rows;
    std::vector<std::vector<bench::ElementCheck>> checks(static_cast<size_t>(world));
    for_each_rank(group(), [&](Communicator& comm) {
      cudaStream_t stream;
      WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      {
        Op op(comm, spec);
        DeviceBuffer a(static_cast<size_t>(a_rows * spec.k) * 2), b(static_cast<size_t>(spec.experts * spec.n * spec.k) * 2),
            weights(static_cast<size_t>(world * max_rows * spec.topk) * 2), out(static_cast<size_t>(out_rows * spec.n) * 2),
            choices0(static_cast<size_t>(max_rows * spec.topk) * sizeof(int32_t)), choices1(static_cast<size_t>(max_rows * spec.topk) * sizeof(int32_t));
        // Destroyed before the op whose memory the graph names, also when a call throws.
        std::unique_ptr<CUgraphExec_st, decltype(&cudaGraphExecDestroy)> graph(nullptr, &cudaGraphExecDestroy);
        // Calls 0-3 eager: rows 96, 40, 96 on the first call's pointers (the op may replay its own graph),
        // 96 on the other choices buffer; call 4 a graph captured by the caller, call 5 that graph
        // launched again after the choices' memory was rewritten.
        for (uint64_t call = 0; call < 6; ++call) {
          const int64_t rows = call == 1 ? 40 : max_rows;
          void* choices = (call == 1 || call == 3) ? choices1.data : choices0.data;
          const auto table = random_choices(world, rows, spec.experts, spec.topk, 190 + call);  // every rank's; each passes its own
          const std::vector<int32_t> mine_choices(table[static_cast<size_t>(comm.rank())].begin(), table[static_cast<size_t>(comm.rank())].end());
          WEFT_CUDA_CHECK(cudaMemcpyAsync(choices, mine_choices.data(), mine_choices.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
          const uint64_t seed = 400 + call;
          const int64_t rows_of_a = op_kind == OpKind::moe_rs ? world * rows * spec.topk : rows;
          fill_random_bf16(a.data, rows_of_a * spec.k, bench::seed_a(seed, comm.rank()), stream);
          fill_random_bf16(b.data, spec.experts * spec.n * spec.k, bench::seed_b(seed, comm.rank()), stream);
          fill_random_bf16(weights.data, world * rows * spec.topk, seed + 7, stream);
          fill_u16(out.data, out_rows * spec.n, kBf16Nan, stream);
          RunArgs args{a.data, b.data, out.data, rows, {}};
          args.choices_device = choices;
          if (op_kind == OpKind::moe_rs) args.topk_weights = weights.data;
          if (call == 4) {
            // One capture on every rank, instantiated and uploaded before any rank launches it (the
            // graph holds NCCL calls, and an allocation may wait for the peers' GPUs to go idle).
            WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
            comm.host_barrier();
            cudaGraph_t captured = nullptr;
            WEFT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            try {
              op.run(args, stream);
            } catch (...) {
              cudaStreamEndCapture(stream, &captured);
              if (captured) cudaGraphDestroy(captured);
              throw;
            }
            WEFT_CUDA_CHECK(cudaStreamEndCapture(stream, &captured));
            cudaGraphExec_t exec = nullptr;
            const cudaError_t instantiated = cudaGraphInstantiate(&exec, captured, 0);
            WEFT_CUDA_CHECK(cudaGraphDestroy(captured));
            WEFT_CUDA_CHECK(instantiated);
            graph.reset(exec);
            WEFT_CUDA_CHECK(cudaGraphUpload(graph.get(), stream));
            WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
          }
          WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
          comm.host_barrier();  // no rank starts the call's collectives while another is still in a driver call
          if (graph) {
            WEFT_CUDA_CHECK(cudaGraphLaunch(graph.get(), stream));
          } else {
            op.run(args, stream);
          }
          op.finish(stream);
          Problem problem = op.plan(rows, {}).problem;
          EXPECT_TRUE(problem.routing_on_device);
          problem.routing_on_device = false;  // the reference's problem: the same op with this call's table
          problem.choices = table;
          RankTensors mine;
          mine["A"] = bench::download(DeviceRegion{a.data, rows_of_a, spec.k, spec.k}, stream);
          mine["B"] = bench::download(DeviceRegion{b.data, spec.experts * spec.n, spec.k, spec.k}, stream);
          if (op_kind == OpKind::moe_rs) mine["topk_weights"] = bench::download(DeviceRegion{weights.data, world * rows, spec.topk, spec.topk}, stream);
          const std::vector<RankTensors> all = bench::gather_inputs(comm, mine);
          const int64_t result_rows = output_rows(problem, comm.rank());
          checks[static_cast<size_t>(comm.rank())].push_back(
              bench::check_elements(bench::download(DeviceRegion{out.data, result_rows, spec.n, spec.n}, stream), expected_output(problem, all, comm.rank()),
                                    expected_magnitude(problem, all, comm.rank()), bench::bf16_error_factor(problem)));
        }
      }
      cudaStreamDestroy(stream);
    });
    for (int r = 0; r < world; ++r)
      for (size_t call = 0; call < checks[static_cast<size_t>(r)].size(); ++call) {
        const bench::ElementCheck& check = checks[static_cast<size_t>(r)][call];
        EXPECT_TRUE(check.passed()) << to_string(op_kind) << " rank " << r << " call " << call << (call >= 4 ? " (the caller's graph)" : "") << ": "
                                    << check.explain();
      }
  }
}

TEST(Op, TheLastCallsRoutedPlanStaysInTheCache) {
  // A call, then 8 more routed plans prepared: the op keeps 8 routed plans, but never drops the one
  // the last call ran (finish and check report through it): diagnose still describes that call, and
  // the first routing runs again from the cache, right.
  const int world = static_cast<int>(group().size());
  const OpSpec spec = spec_for(Case{OpKind::gemm_a2a, "default"}, 128);
  std::vector<std::string> diagnosis(static_cast<size_t>(world));
  std::vector<bench::ElementCheck> first(static_cast<size_t>(world)), again(static_cast<size_t>(world));
  for_each_rank(group(), [&](Communicator& comm) {
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    {
      Op op(comm, spec);
      CallerBuffers buffers(spec, world);
      const auto routing = random_routing(world, 128, 7);
      first[static_cast<size_t>(comm.rank())] = routed_call(op, comm, buffers, 128, routing, 1, stream);
      // Row counts of their own as well, so that the 8 plans differ at world 1 too (one rank: one routing).
      for (int64_t rows = 100; rows < 108; ++rows) op.prepare(rows, random_routing(world, rows, static_cast<uint64_t>(rows)));
      diagnosis[static_cast<size_t>(comm.rank())] = op.diagnose();
      op.finish(stream);  // the last call's plan, still cached
      again[static_cast<size_t>(comm.rank())] = routed_call(op, comm, buffers, 128, routing, 2, stream);
    }
    cudaStreamDestroy(stream);
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_NE(diagnosis[static_cast<size_t>(r)].find("all_to_all"), std::string::npos) << "rank " << r << ": the last call's plan was dropped:\n"
                                                                                        << diagnosis[static_cast<size_t>(r)];
    EXPECT_TRUE(first[static_cast<size_t>(r)].passed()) << "rank " << r << ": " << first[static_cast<size_t>(r)].explain();
    EXPECT_TRUE(again[static_cast<size_t>(r)].passed()) << "rank " << r << ": " << again[static_cast<size_t>(r)].explain();
  }
}

// A call a peer never joins: the op's call_timeout_ms bounds it, finish raises CallTimeout and the
// communicator is aborted. On a group of its own: an aborted communicator stays unusable.
TEST(Op, ACallAPeerNeverJoinsFailsWithinTheCallTimeout) {
  if (group().size() < 2) GTEST_SKIP() << "needs 2 GPUs: a call of one rank has no peer to wait for";
  auto own = Communicator::local_group({0, 1});
  OpSpec spec{OpKind::gemm_ar, 256, 128, 128, DType::bf16, DType::bf16, "sequential", {}, 0, 0};
  spec.call_timeout_ms = 1000;
  std::barrier done(2);
  std::vector<int> timed_out(2, 0), aborted(2, 0);
  std::string other_error;
  double seconds = 0;  // from the call to the error
  for_each_rank(own, [&](Communicator& comm) {
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    {
      Op op(comm, spec);
      CallerBuffers buffers(spec, 2);
      op.prepare(64);  // collective: both ranks lower; only rank 0 then calls
      if (comm.rank() == 0) {
        // Whatever happens, rank 0 reaches the barrier below (rank 1 waits there).
        const auto start = std::chrono::steady_clock::now();
        try {
          buffers.fill(spec, 0, 64, 1, buffers.a.data, stream);
          op.run({buffers.a.data, buffers.b.data, buffers.c.data, 64, {}}, stream);
          op.finish(stream);
        } catch (const CallTimeout&) {
          timed_out[0] = 1;
          seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        } catch (const std::exception& e) {
          other_error = e.what();
        }
      }
      done.arrive_and_wait();
      if (comm.rank() == 1) comm.abort("the test: rank 0 gave up on its call");
      aborted[static_cast<size_t>(comm.rank())] = comm.aborted();
      EXPECT_TRUE(synchronize_with_timeout(stream, 10000)) << "rank " << comm.rank() << ": the released call drains";
    }
    cudaStreamDestroy(stream);
  });
  EXPECT_EQ(timed_out[0], 1) << "finish raises CallTimeout; raised instead: " << other_error;
  EXPECT_EQ(aborted[0], 1) << "the call's communicator is aborted";
  EXPECT_LT(seconds, 10.0) << "the spec's call_timeout_ms (1 s) bounds the call, not the 120 s default";
}

// One rank calls with other rows than its peers (each row count prepared by every rank, so no
// collective set-up catches it): the call's device barrier compares the ranks' call signatures, and
// every rank raises naming the one in the other call, with its communicator aborted, instead of
// exchanging buffers laid out for another shape.
TEST(Op, RanksCallingWithOtherRowsFailNamingThePeer) {
  if (group().size() < 2) GTEST_SKIP() << "needs 2 GPUs";
  auto own = Communicator::local_group({0, 1});
  OpSpec spec{OpKind::ag_gemm, 256, 128, 128, DType::bf16, DType::bf16, "decomposed", {}, 0, 0};
  std::vector<std::string> errors(2);
  std::vector<int> aborted(2, 0);
  for_each_rank(own, [&](Communicator& comm) {
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    {
      Op op(comm, spec);
      CallerBuffers buffers(spec, 2);
      op.prepare(128);
      op.prepare(64);
      const int64_t rows = comm.rank() == 1 ? 64 : 128;
      buffers.fill(spec, comm.rank(), rows, 3, buffers.a.data, stream);
      try {
        op.run({buffers.a.data, buffers.b.data, buffers.c.data, rows, {}}, stream);
        op.finish(stream);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(comm.rank())] = e.what();
      }
      aborted[static_cast<size_t>(comm.rank())] = comm.aborted();
    }
    cudaStreamDestroy(stream);
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& what = errors[static_cast<size_t>(r)];
    EXPECT_NE(what.find("rank " + std::to_string(1 - r) + " is making another call"), std::string::npos) << "rank " << r << ": " << what;
    EXPECT_NE(what.find("ag_gemm m="), std::string::npos) << "rank " << r << ": the error names the op: " << what;
    EXPECT_EQ(aborted[static_cast<size_t>(r)], 1) << "rank " << r << "'s communicator is aborted";
  }
}

TEST(Op, RanksThatDisagreeOnTheSpecFailBeforeLaunching) {
  const int world = static_cast<int>(group().size());
  if (world < 2) GTEST_SKIP() << "needs 2 GPUs";
  std::vector<int> rejected(static_cast<size_t>(world), 0);
  for_each_rank(group(), [&](Communicator& comm) {
    OpSpec spec{OpKind::gemm_ar, comm.rank() == 0 ? 256 : 512, 128, 128, DType::bf16, DType::bf16, "default", {}, 0, 0};
    try {
      Op op(comm, spec);
    } catch (const std::invalid_argument&) {
      rejected[static_cast<size_t>(comm.rank())] = 1;
    }
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(rejected[static_cast<size_t>(r)], 1) << "rank " << r;
}

// A plan of one rank whose GEMM's last tile waits for a signal that nothing raises.
Plan plan_with_an_unmet_tile_wait() {
  Problem p{OpKind::gemm_ar, 256, 256, 128, 1, DType::bf16, DType::bf16, {}};
  Plan plan = plan_sequential(p, PlanOptions{});
  RankPlan& rp = plan.ranks[0];
  rp.steps.pop_back();  // the all-reduce
  rp.signals.push_back("never_raised");
  auto& gemm = std::get<GemmStep>(rp.steps[0].body);
  gemm.tiles.back().wait = Wait{SignalRef{0, 0}, 1};
  return plan;
}

TEST(Executor, ADeviceWaitThatGivesUpFailsTheCallWithItsSignal) {
  auto own = Communicator::local_group({0});
  Communicator& comm = *own.front();
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    ExecutorOptions options;
    options.validate = false;  // the plan is broken on purpose
    options.device_wait_timeout_ms = 50;
    CudaExecutor exec(comm, plan_with_an_unmet_tile_wait(), options);
    bench::fill_buffers(exec, 0, 1, stream);
    exec.run(stream);
    try {
      exec.finish(stream);
      ADD_FAILURE() << "the call must fail";
    } catch (const DeviceWaitTimeout& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("never_raised"), std::string::npos) << what;
      EXPECT_NE(what.find(">= 1"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
      EXPECT_NE(what.find("gemm_ar m="), std::string::npos) << what << ": the error names the op";
    }
    // Reported once: the next call starts clean, fails again the same way, and is raised by run.
    exec.run(stream);
    ASSERT_TRUE(synchronize_with_timeout(stream, 10000));
    EXPECT_THROW(exec.run(stream), DeviceWaitTimeout);
    ASSERT_TRUE(synchronize_with_timeout(stream, 10000));
  }
  cudaStreamDestroy(stream);
}

TEST(Executor, ACallThatCannotFinishRaisesAbortsAndReleasesTheDevice) {
  // A GEMM that waits (a stream wait, no SM) for a signal nothing raises: the call never ends on its
  // own. finish() gives up after 500 ms, releases the wait, aborts the communicator, and the device
  // drains; later calls say the communicator is gone.
  auto own = Communicator::local_group({0});
  Communicator& comm = *own.front();
  Problem p{OpKind::gemm_ar, 128, 128, 64, 1, DType::bf16, DType::bf16, {}};
  Plan plan = plan_sequential(p, PlanOptions{});
  RankPlan& rp = plan.ranks[0];
  rp.steps.pop_back();  // the all-reduce
  rp.signals.push_back("never_raised");
  rp.steps.back().waits.push_back(Wait{SignalRef{0, 0}, 1});
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    ExecutorOptions options;
    options.validate = false;
    options.call_timeout_ms = 500;
    CudaExecutor exec(comm, plan, options);
    bench::fill_buffers(exec, 0, 1, stream);
    exec.run(stream);
    try {
      exec.finish(stream);
      ADD_FAILURE() << "the call must time out";
    } catch (const CallTimeout& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("never_raised"), std::string::npos) << what;
      EXPECT_NE(what.find("aborted"), std::string::npos) << what;
      EXPECT_NE(what.find("gemm_ar m=128 n=128 k=64"), std::string::npos) << what << ": the error names the op";
      EXPECT_NE(what.find("raised by nobody"), std::string::npos) << what << ": and who raises the unmet wait";
    }
    EXPECT_TRUE(comm.aborted());
    EXPECT_TRUE(synchronize_with_timeout(stream, 10000)) << "the released call drains";
    EXPECT_THROW(exec.run(stream), CommunicatorAborted);
  }
  cudaStreamDestroy(stream);
}


// weft works on its communicator's GPU and hands the caller's current device back as it found it:
// a thread whose current device is another GPU creates a communicator, an op and calls it, and its
// current device is the same after each (a library that moved it would send the caller's next
// allocations and launches to weft's GPU).
TEST(Op, LeavesTheCallersCurrentDeviceAsItWas) {
  int visible = 0;
  WEFT_CUDA_CHECK(cudaGetDeviceCount(&visible));
  if (visible < 2) GTEST_SKIP() << "needs 2 GPUs: the caller's device and weft's";
  auto current = [] {
    int d = -1;
    WEFT_CUDA_CHECK(cudaGetDevice(&d));
    return d;
  };
  WEFT_CUDA_CHECK(cudaSetDevice(1));
  auto own = Communicator::local_group({0});
  EXPECT_EQ(current(), 1) << "after Communicator::local_group({0})";
  OpSpec spec{OpKind::ag_gemm, 256, 128, 128, DType::bf16, DType::bf16, "sequential", {}, 0, 0};
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaSetDevice(0));  // the call's buffers and stream live on weft's GPU
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    CallerBuffers buffers(spec, 1);
    buffers.fill(spec, 0, 64, 5, buffers.a.data, stream);
    WEFT_CUDA_CHECK(cudaSetDevice(1));
    Op op(*own.front(), spec);
    EXPECT_EQ(current(), 1) << "after Op's constructor";
    op.run({buffers.a.data, buffers.b.data, buffers.c.data, 64, {}}, stream);
    EXPECT_EQ(current(), 1) << "after Op::run";
    op.finish(stream);
    EXPECT_EQ(current(), 1) << "after Op::finish";
    {
      Op another(*own.front(), spec);  // destroyed with GPU 1 current: its executors, workspace and signals free on GPU 0
    }
    EXPECT_EQ(current(), 1) << "after Op's destructor";
    WEFT_CUDA_CHECK(cudaSetDevice(0));
  }
  WEFT_CUDA_CHECK(cudaStreamDestroy(stream));
  WEFT_CUDA_CHECK(cudaSetDevice(1));
  own.clear();
  EXPECT_EQ(current(), 1) << "after the communicator's destructor";
  WEFT_CUDA_CHECK(cudaSetDevice(0));
}

}  // namespace
}  // namespace weft
