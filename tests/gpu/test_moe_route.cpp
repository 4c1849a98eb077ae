// The MoE routing tables computed on the device (kernels/moe_route.hpp) against their host
// specification (plan/moe_route.hpp) on random and skewed routings, with outputs poisoned before
// every call; the same tables from a CUDA graph replayed with new choices in its input; choices out
// of range recorded in the error record.
#include <gtest/gtest.h>

#include <climits>
#include <vector>

#include "measure.hpp"
#include "weft/cuda/check.hpp"
#include "weft/ir/problem.hpp"
#include "weft/kernels/moe_route.hpp"
#include "weft/plan/moe_route.hpp"

namespace weft {
namespace {

std::vector<int32_t> stacked_choices(const MoeRouteShape& s, uint64_t seed, double skew) {
  std::vector<int32_t> all;
  for (const auto& rank : random_choices(s.world, s.m, s.experts, s.topk, seed, skew)) all.insert(all.end(), rank.begin(), rank.end());
  return all;
}

std::vector<int32_t> read(const bench::DeviceBuffer& b, int64_t count) {
  std::vector<int32_t> v(static_cast<size_t>(count));
  WEFT_CUDA_CHECK(cudaMemcpy(v.data(), b.data, v.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
  return v;
}

// Device buffers of one shape's route, poisoned (0x5a5a5a5a) before each call.
struct Route {
  MoeRouteShape s;
  bench::DeviceBuffer choices, layout_row, expert_row, expert_first, bad, workspace;
  bench::DeviceBuffer scratch_token, scratch_layout, layout_scratch, pair_scratch;  // RouteStep's tables
  explicit Route(const MoeRouteShape& shape)
      : s(shape),
        choices(sizeof(int32_t) * static_cast<size_t>(shape.pairs() + 1)),
        layout_row(sizeof(int32_t) * static_cast<size_t>(shape.pairs() + 1)),
        expert_row(sizeof(int32_t) * static_cast<size_t>(shape.capacity())),
        expert_first(sizeof(int32_t) * static_cast<size_t>(shape.experts + 1)),
        bad(sizeof(WaitRecord)),
        workspace(moe_route_workspace_bytes(shape) + 1),
        scratch_token(sizeof(int32_t) * static_cast<size_t>(shape.capacity())),
        scratch_layout(sizeof(int32_t) * static_cast<size_t>(shape.capacity())),
        layout_scratch(sizeof(int32_t) * static_cast<size_t>(shape.pairs() + 1)),
        pair_scratch(sizeof(int32_t) * static_cast<size_t>(shape.pairs() + 1)) {}
  void upload(const std::vector<int32_t>& c, cudaStream_t stream) {
    WEFT_CUDA_CHECK(cudaMemcpyAsync(choices.data, c.data(), c.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  }
  // The tables poisoned (0x5a5a5a5a), the error record clear.
  void poison(cudaStream_t stream) {
    const size_t pairs = sizeof(int32_t) * static_cast<size_t>(s.pairs()), capacity = sizeof(int32_t) * static_cast<size_t>(s.capacity());
    for (const auto& [b, bytes] : std::vector<std::pair<const bench::DeviceBuffer*, size_t>>{
             {&layout_row, pairs}, {&expert_row, capacity}, {&expert_first, sizeof(int32_t) * static_cast<size_t>(s.experts + 1)},
             {&scratch_token, capacity}, {&scratch_layout, capacity}, {&layout_scratch, pairs}, {&pair_scratch, pairs}})
      WEFT_CUDA_CHECK(cudaMemsetAsync(b->data, 0x5a, bytes, stream));
    WEFT_CUDA_CHECK(cudaMemsetAsync(bad.data, 0, sizeof(WaitRecord), stream));
  }
  void run(cudaStream_t stream) {
    MoeRouteOutputs out;
    out.expert_first = expert_first.as<int32_t>();
    out.layout_row = layout_row.as<int32_t>();
    out.expert_row = expert_row.as<int32_t>();
    out.scratch_token = scratch_token.as<int32_t>();
    out.scratch_layout = scratch_layout.as<int32_t>();
    out.layout_scratch = layout_scratch.as<int32_t>();
    out.pair_scratch = pair_scratch.as<int32_t>();
    route_moe_rows_on_device(s, choices.as<int32_t>(), out, bad.as<WaitRecord>(), workspace.data, stream);
  }
  WaitRecord error() const {
    WaitRecord e;
    WEFT_CUDA_CHECK(cudaMemcpy(&e, bad.data, sizeof e, cudaMemcpyDeviceToHost));
    return e;
  }
  void expect_tables(const std::vector<int32_t>& c, const std::string& what) {
    const MoeRouteTables want = route_moe_rows(c, s.world, s.m, s.topk, s.experts, s.align);
    EXPECT_EQ(error().failed, 0u) << what;
    EXPECT_EQ(read(expert_first, s.experts + 1), want.expert_first) << what;
    const std::vector<int32_t> layout = read(layout_row, s.pairs()), expert = read(expert_row, s.capacity());
    int64_t layout_wrong = 0, expert_wrong = 0;
    for (size_t i = 0; i < layout.size(); ++i) layout_wrong += layout[i] != want.layout_row[i];
    for (size_t i = 0; i < expert.size(); ++i) expert_wrong += expert[i] != want.expert_row[i];
    EXPECT_EQ(layout_wrong, 0) << what << ": layout rows differing from the host's";
    EXPECT_EQ(expert_wrong, 0) << what << ": expert-major rows differing from the host's";
    // RouteStep's tables, derived here from the host's: each scratch row's token and layout row (0 on
    // padding), each layout row's scratch row, each (token, choice)'s scratch row.
    std::vector<int32_t> pair_of_layout(static_cast<size_t>(s.pairs())), scratch_of_layout(static_cast<size_t>(s.pairs()));
    for (size_t p = 0; p < want.layout_row.size(); ++p) pair_of_layout[static_cast<size_t>(want.layout_row[p])] = static_cast<int32_t>(p);
    for (size_t x = 0; x < want.expert_row.size(); ++x)
      if (want.expert_row[x] >= 0) scratch_of_layout[static_cast<size_t>(want.expert_row[x])] = static_cast<int32_t>(x);
    const std::vector<int32_t> tokens = read(scratch_token, s.capacity()), layouts = read(scratch_layout, s.capacity()),
                               to_scratch = read(layout_scratch, s.pairs()), pair_to_scratch = read(pair_scratch, s.pairs());
    int64_t wrong = 0;
    for (size_t x = 0; x < want.expert_row.size(); ++x) {
      const int32_t l = want.expert_row[x];
      wrong += tokens[x] != (l >= 0 ? pair_of_layout[static_cast<size_t>(l)] / s.topk : 0);
      wrong += layouts[x] != (l >= 0 ? l : 0);
    }
    for (size_t l = 0; l < to_scratch.size(); ++l) wrong += to_scratch[l] != scratch_of_layout[l];
    for (size_t p = 0; p < pair_to_scratch.size(); ++p) wrong += pair_to_scratch[p] != scratch_of_layout[static_cast<size_t>(want.layout_row[p])];
    EXPECT_EQ(wrong, 0) << what << ": entries of the route step's tables differing from the host's";
  }
};

TEST(MoeRouteOnDevice, MatchesTheHostOnRandomAndSkewedRoutings) {
  uint64_t seed = 7;
  for (const MoeRouteShape& s : std::vector<MoeRouteShape>{{1, 96, 2, 8, 128},
                                                           {2, 1000, 2, 8, 128},
                                                           {4, 3000, 8, 256, 128},  // 96,000 pairs, 1,024 blocks
                                                           {8, 4096, 2, 64, 128},   // 65,536 pairs
                                                           {8, 16, 1, 1, 1},
                                                           {3, 777, 3, 5, 1},
                                                           {1, 5, 4, 1024, 128}})
    for (double skew : {0.0, 0.95}) {
      Route r(s);
      const std::vector<int32_t> c = stacked_choices(s, ++seed, skew);
      r.upload(c, nullptr);
      for (int call = 0; call < 2; ++call) {
        r.poison(nullptr);
        r.run(nullptr);
        WEFT_CUDA_CHECK(cudaDeviceSynchronize());
        r.expect_tables(c, "world " + std::to_string(s.world) + " m " + std::to_string(s.m) + " topk " + std::to_string(s.topk) + " experts " +
                               std::to_string(s.experts) + " skew " + std::to_string(skew) + " call " + std::to_string(call));
      }
    }
}

TEST(MoeRouteOnDevice, ReplaysInACudaGraphWithNewChoices) {
  const MoeRouteShape s{4, 512, 2, 16, 128};
  Route r(s);
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  r.upload(stacked_choices(s, 1, 0.0), stream);
  cudaGraph_t graph;
  WEFT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  r.run(stream);
  WEFT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  WEFT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (uint64_t seed : {11, 12, 13}) {
    const std::vector<int32_t> c = stacked_choices(s, seed, seed == 12 ? 0.9 : 0.0);
    r.upload(c, stream);
    r.poison(stream);
    WEFT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
    r.expect_tables(c, "replay with seed " + std::to_string(seed));
  }
  WEFT_CUDA_CHECK(cudaGraphExecDestroy(exec));
  WEFT_CUDA_CHECK(cudaGraphDestroy(graph));
  WEFT_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(MoeRouteOnDevice, RecordsAChoiceOutOfRangeAndSkipsIt) {
  const MoeRouteShape s{2, 600, 2, 8, 128};
  Route r(s);
  std::vector<int32_t> c = stacked_choices(s, 3, 0.0);
  c[1500] = 8;
  c[2000] = -1;
  c[2001] = 99;
  r.upload(c, nullptr);
  r.poison(nullptr);
  r.run(nullptr);
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
  const WaitRecord e = r.error();
  EXPECT_EQ(e.failed, 1u);
  EXPECT_EQ(e.source, tile::kBadMoeChoice);
  EXPECT_TRUE(e.where == 1500 || e.where == 2000 || e.where == 2001) << e.where;
  EXPECT_EQ(e.expected, 8u);
  const std::vector<int32_t> layout = read(r.layout_row, s.pairs());
  EXPECT_EQ(layout[1500], -1);
  EXPECT_EQ(layout[2000], -1);
  EXPECT_EQ(layout[2001], -1);
  MoeRouteOutputs out;
  out.expert_first = r.expert_first.as<int32_t>();
  EXPECT_THROW(route_moe_rows_on_device(MoeRouteShape{9, 8, 1, 1024, 1}, r.choices.as<int32_t>(), out, nullptr, r.workspace.data, nullptr),
               std::invalid_argument)
      << "9 x 1024 blocks: more than the histogram holds";
}

}  // namespace
}  // namespace weft
