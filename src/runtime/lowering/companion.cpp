// A companion group (Step::companion): consecutive SM copies and reductions of one stream, lowered
// to one launch of the companion kernel (weft/kernels/tile_program.hpp) whose items carry the
// steps' waits and notifies.
#include <algorithm>
#include <map>

#include "lowering.hpp"
#include "weft/kernels/tile_program.hpp"
#include "weft/cuda/check.hpp"

namespace weft::lowering {

Lowered lower_companion(const RankPlan& plan, const std::vector<int>& step_indices, const Context& context) {
  auto reject = [&](const std::string& why) -> void {
    throw std::invalid_argument("companion #" + std::to_string(plan.steps[static_cast<size_t>(step_indices.front())].companion) + ": " + why);
  };
  std::vector<void* const*> slots;  // each distinct base address slot, read at enqueue time
  auto bind = [&](const Region& r) {
    const BoundRegion b = context.region(r);
    auto it = std::find(slots.begin(), slots.end(), b.base);
    if (it == slots.end()) {
      if (slots.size() == static_cast<size_t>(kTileProgramMaxBases)) reject("more than " + std::to_string(kTileProgramMaxBases) + " buffers");
      slots.push_back(b.base);
      it = slots.end() - 1;
    }
    TileProgramRegion out;
    out.base = static_cast<int32_t>(it - slots.begin());
    out.offset = b.offset;
    out.rows = b.rows;
    out.cols = b.cols;
    out.stride = b.stride;
    return out;
  };
  std::vector<TileProgramItem> items;
  int ctas = 0;
  for (int index : step_indices) {
    const Step& step = plan.steps[static_cast<size_t>(index)];
    TileProgramItem item;
    item.step = index;
    if (const auto* copy = std::get_if<CopyStep>(&step.body)) {
      item.kind = TileProgramItem::copy;
      item.dst = bind(copy->dst);
      item.srcs[0] = bind(copy->src);
      ctas = std::max(ctas, copy->sms);
    } else if (const auto* reduce = std::get_if<ReduceStep>(&step.body)) {
      if (reduce->srcs.size() > static_cast<size_t>(kMaxReduceSources))
        reject("step '" + step.label + "' reduces " + std::to_string(reduce->srcs.size()) + " sources, at most " + std::to_string(kMaxReduceSources));
      item.kind = TileProgramItem::reduce;
      item.dst = bind(reduce->dst);
      item.source_count = static_cast<int32_t>(reduce->srcs.size());
      item.accumulate = reduce->accumulate;
      for (size_t s = 0; s < reduce->srcs.size(); ++s) item.srcs[s] = bind(reduce->srcs[s]);
      ctas = std::max(ctas, reduce->sms);
    } else if (std::holds_alternative<JoinStep>(step.body)) {
      item.kind = TileProgramItem::sync;
      item.source_count = 0;
    } else {
      reject("step '" + step.label + "' is neither a copy, a reduction nor a join");
    }
    if (step.waits.size() > static_cast<size_t>(kTileProgramMaxWaits)) reject("step '" + step.label + "' has more than 4 waits");
    if (step.notifies.size() > static_cast<size_t>(kTileProgramMaxNotifies)) reject("step '" + step.label + "' has more than 4 notifies");
    for (const Wait& w : step.waits) {
      if (w.signal.rank != context.rank) reject("step '" + step.label + "' waits on another rank's signal");
      item.wait_signal[item.wait_count] = w.signal.id;
      item.wait_value[item.wait_count++] = w.value;
    }
    for (const Notify& n : step.notifies) {
      item.notify[item.notify_count] = context.signals_of(n.signal.rank) + n.signal.id;
      item.notify_increment[item.notify_count++] = n.increment;
    }
    items.push_back(item);
  }
  TileProgramLaunch launch;
  launch.item_count = static_cast<int>(items.size());
  launch.ctas = ctas > 0 ? ctas : 32;
  order_tile_program_items(items);
  launch.unit_count = plan_tile_program_pieces(items, launch.ctas);
  launch.wait_signals = context.own_signals;
  launch.error = context.device_error;
  launch.wait_timeout_ns = context.device_wait_timeout_ns;
  std::shared_ptr<void> table = upload(items.data(), items.size() * sizeof(TileProgramItem));
  void* counters = nullptr;
  WEFT_CUDA_CHECK(cudaMalloc(&counters, (items.size() + 1) * sizeof(uint64_t)));
  std::shared_ptr<void> counter_memory(counters, [](void* p) { cudaFree(p); });
  launch.items = static_cast<const TileProgramItem*>(table.get());
  launch.counters = static_cast<uint64_t*>(counters);
  return {[launch, table, counter_memory, slots](cudaStream_t stream) mutable {
            for (size_t i = 0; i < slots.size(); ++i) launch.bases[i] = *slots[i];
            launch_tile_program(launch, stream);
          },
          {}};
}

}  // namespace weft::lowering
