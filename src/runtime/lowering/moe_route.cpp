// The MoE steps of the choices given on the device (Problem::routing_on_device): the route's
// counting sort, and the routed grouped GEMM, whose table a kernel builds from the route's
// expert_first before the overlap GEMM runs it, every call, with nothing read on the host.
#include "lowering.hpp"
#include "weft/cuda/check.hpp"
#include "weft/kernels/moe_route.hpp"
#include "weft/plan/moe_route.hpp"

namespace weft::lowering {

static_assert(kMaxRoutedBlocks == kMaxMoeRouteBlocks, "the plan's limit on routed blocks is the route kernel's");

Lowered lower_route(const RouteStep& route, const std::string& label, const Context& context) {
  const int world = context.world_size;
  const int64_t tokens = route.choices.box.rows;
  if (world < 1 || tokens % world != 0)
    throw std::invalid_argument("route step '" + label + "': " + std::to_string(tokens) + " tokens' choices for a world of " + std::to_string(world));
  const MoeRouteShape shape{world, tokens / world, route.topk, route.experts, route.align};
  require_routable(shape);  // at lowering, not at the first call's enqueue
  const BoundRegion choices = context.region(route.choices), expert_first = context.region(route.expert_first),
                    scratch_source = context.region(route.scratch_source);
  const std::optional<BoundRegion> layout_scratch = route.layout_scratch ? std::optional(context.region(*route.layout_scratch)) : std::nullopt;
  const std::optional<BoundRegion> pair_scratch = route.pair_scratch ? std::optional(context.region(*route.pair_scratch)) : std::nullopt;
  if (choices.stride != route.topk)
    throw std::invalid_argument("route step '" + label + "': the choices must be contiguous rows of topk (" + std::to_string(route.topk) + ")");
  void* memory = nullptr;
  WEFT_CUDA_CHECK(cudaMalloc(&memory, std::max<size_t>(moe_route_workspace_bytes(shape), 1)));
  const std::shared_ptr<void> scratch(memory, [](void* p) { cudaFree(p); });
  const bool tokens_out = route.source == RouteSource::token;
  WaitRecord* error = context.device_error;
  return {[shape, choices, expert_first, scratch_source, layout_scratch, pair_scratch, tokens_out, scratch, error](cudaStream_t stream) {
            auto ptr = [](const BoundRegion& r) { return static_cast<int32_t*>(r.resolve().data); };
            MoeRouteOutputs out;
            out.expert_first = ptr(expert_first);
            (tokens_out ? out.scratch_token : out.scratch_layout) = ptr(scratch_source);
            if (layout_scratch) out.layout_scratch = ptr(*layout_scratch);
            if (pair_scratch) out.pair_scratch = ptr(*pair_scratch);
            route_moe_rows_on_device(shape, ptr(choices), out, error, scratch.get(), stream);
          },
          {}};
}

Lowered lower_routed_gemm(const GemmStep& gemm, const std::string& label, const Context& context) {
  auto reject = [&](const std::string& why) -> void { throw std::invalid_argument("routed grouped GEMM for step '" + label + "': " + why); };
  const RoutedGemm& routed = *gemm.routed;
  const BoundRegion a = context.region(gemm.a), b = context.region(gemm.b), out = context.region(routed.out),
                    expert_first = context.region(routed.expert_first);
  if (b.column_major) reject("B must be stored [N, K] (layout nk)");
  if (a.dtype != DType::bf16 || b.dtype != DType::bf16 || out.dtype != DType::bf16) reject("bf16 operands and result only");
  const OverlapGemmConfig config = config_for(gemm.tile_m, gemm.tile_n);
  const int64_t n = b.rows / routed.experts;
  if (n % gemm.tile_n != 0) reject("each expert's " + std::to_string(n) + " columns must be whole tiles of " + std::to_string(gemm.tile_n));
  OverlapGemmLaunch launch;
  launch.a = a.resolve().data;
  launch.lda = a.stride;
  launch.b = b.resolve().data;
  launch.ldb = b.stride;
  launch.m = a.rows;
  launch.n = b.rows;
  launch.k = a.cols;
  launch.wait_signals = context.own_signals;
  launch.error = context.device_error;
  launch.wait_timeout_ns = context.device_wait_timeout_ns;
  launch.max_ctas = gemm.sm_limit;
  const DeviceRegion target = out.resolve();
  launch.targets[0] = OverlapGemmTarget{target.data, target.stride, target.rows, target.cols};
  launch.target_count = 1;
  // The table's bound: every row tile of the scratch by every column tile of one expert. Its entries
  // start as no-work entries; the table kernel fills them per call.
  const int64_t entries = routed_moe_table_entries(a.rows, n, gemm.tile_m, gemm.tile_n);
  if (entries > INT32_MAX) reject(std::to_string(entries) + " table entries");
  OverlapGemmTile idle;
  idle.k_tiles = kNoWorkKTiles;
  const std::vector<OverlapGemmTile> initial(static_cast<size_t>(entries), idle);
  const std::shared_ptr<void> table = upload(initial.data(), initial.size() * sizeof(OverlapGemmTile));
  launch.tiles = static_cast<const OverlapGemmTile*>(table.get());
  launch.tile_count = static_cast<int>(entries);
  auto prepared = std::make_shared<OverlapGemm>(launch, config);
  const bool follows = a.moves || b.moves || out.moves;
  const int experts = routed.experts, tile_m = gemm.tile_m, tile_n = gemm.tile_n;
  const int64_t capacity = a.rows;
  return {[prepared, table, a, b, out, expert_first, follows, experts, tile_m, tile_n, capacity, n](cudaStream_t stream) {
            if (follows) {
              const DeviceRegion now = out.resolve();
              const OverlapGemmTarget moved[1] = {OverlapGemmTarget{now.data, now.stride, now.rows, now.cols}};
              const OverlapGemmLaunch& was = prepared->arguments();
              if (was.a != a.resolve().data || was.b != b.resolve().data || was.targets[0].data != now.data)
                prepared->retarget(a.resolve().data, b.resolve().data, moved);
            }
            build_routed_moe_table(static_cast<const int32_t*>(expert_first.resolve().data), experts, capacity, n, tile_m, tile_n,
                                   static_cast<OverlapGemmTile*>(table.get()), stream);
            prepared->launch(stream);
          },
          {}};
}

}  // namespace weft::lowering
