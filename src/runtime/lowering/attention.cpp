// An attention step on weft's attention kernel (kernels/attention.hpp): its boxes as the kernel's
// operands, its KV tiles (with their waits on this rank's counters) as the kernel's device table,
// merging in place where the step merges. The kernel's query tile is its own compiled tiling's
// (attention_tiling); the step's tile_q is the plan's costing of it and does not change the result.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "lowering.hpp"

namespace weft::lowering {

Lowered lower_attention(const AttentionStep& step, const std::string& label, const Context& context) {
  auto reject = [&](const std::string& why) -> void { throw std::invalid_argument("attention step '" + label + "': " + why); };
  const BoundRegion q = context.region(step.q), k = context.region(step.k), v = context.region(step.v), o = context.region(step.o),
                    lse = context.region(step.lse);
  const std::pair<const char*, const BoundRegion*> operands[] = {{"q", &q}, {"k", &k}, {"v", &v}, {"o", &o}};
  for (const auto& [name, region] : operands)
    if (region->dtype != DType::bf16) reject(std::string(name) + " is " + std::string(to_string(region->dtype)) + "; the kernel takes bf16");
  if (lse.dtype != DType::f32) reject("lse is " + std::string(to_string(lse.dtype)) + "; the kernel writes f32");
  const int d = step.head_dim;
  (void)attention_tiling(d);  // names the compiled head dims
  if (q.cols % d != 0 || k.cols % d != 0)
    reject("q's " + std::to_string(q.cols) + " or k's " + std::to_string(k.cols) + " columns are not whole heads of " + std::to_string(d));
  if (o.rows != q.rows || o.cols != q.cols || v.rows != k.rows || v.cols != k.cols)
    reject("o must be q's shape and v k's (q " + std::to_string(q.rows) + "x" + std::to_string(q.cols) + ", o " + std::to_string(o.rows) + "x" +
           std::to_string(o.cols) + ", k " + std::to_string(k.rows) + "x" + std::to_string(k.cols) + ", v " + std::to_string(v.rows) + "x" +
           std::to_string(v.cols) + ")");
  if (lse.rows != q.rows || lse.cols != q.cols / d)
    reject("lse is " + std::to_string(lse.rows) + "x" + std::to_string(lse.cols) + "; q's rows by its " + std::to_string(q.cols / d) +
           " heads expected");

  AttentionLaunch launch;
  launch.q = q.resolve().data;
  launch.k = k.resolve().data;
  launch.v = v.resolve().data;
  launch.o = o.resolve().data;
  launch.lse = static_cast<float*>(lse.resolve().data);
  launch.ldq = q.stride;
  launch.ldk = k.stride;
  launch.ldv = v.stride;
  launch.ldo = o.stride;
  launch.ldlse = lse.stride;
  launch.q_rows = q.rows;
  launch.kv_rows = k.rows;
  launch.heads = static_cast<int>(q.cols / d);
  launch.kv_heads = static_cast<int>(k.cols / d);
  launch.head_dim = d;
  launch.q_position = step.q_position;
  launch.kv_position = step.kv_position;
  launch.causal = step.causal;
  launch.merge = step.merge;
  launch.wait_signals = context.own_signals;
  launch.error = context.device_error;
  launch.wait_timeout_ns = context.device_wait_timeout_ns;
  launch.max_ctas = step.sm_limit;

  std::vector<AttentionKvTile> table;
  table.reserve(step.kv_tiles.size());
  for (const KvTile& t : step.kv_tiles) {
    AttentionKvTile e;
    e.row = t.row;
    e.rows = t.rows;
    if (t.wait) {
      if (t.wait->signal.rank != context.rank) reject("a KV tile waits on another rank's signal");
      e.wait_signal = t.wait->signal.id;
      e.wait_value = t.wait->value;
    }
    table.push_back(e);
  }
  table = merge_adjacent_kv_tiles(table);
  launch.kv_tile_count = static_cast<int>(table.size());
  if (context.peer_copies_on_sms && std::any_of(step.kv_tiles.begin(), step.kv_tiles.end(), [](const KvTile& t) { return t.wait.has_value(); }))
    launch.max_ctas = leave_sms_for_peer_copies(launch.max_ctas);
  // The table is checked on the host, then uploaded: the launch is checked with its device copy in
  // place (a launch with KV tiles and no table is refused).
  std::shared_ptr<void> device_table;
  try {
    require_valid_kv_tiles(launch, table);
    device_table = table.empty() ? nullptr : upload(table.data(), table.size() * sizeof(AttentionKvTile));
    launch.kv_tiles = static_cast<const AttentionKvTile*>(device_table.get());
    require_launchable(launch);
  } catch (const std::invalid_argument& e) {
    reject(e.what());
  }
  auto prepared = std::make_shared<Attention>(launch);
  // A caller's buffer may have moved since the last call: the launch follows it.
  const bool follows = q.moves || k.moves || v.moves || o.moves || lse.moves;
  return {[prepared, device_table, q, k, v, o, lse, follows](cudaStream_t stream) {
            if (follows) {
              const AttentionLaunch& now = prepared->arguments();
              const void *q_now = q.resolve().data, *k_now = k.resolve().data, *v_now = v.resolve().data;
              void* o_now = o.resolve().data;
              auto* lse_now = static_cast<float*>(lse.resolve().data);
              if (now.q != q_now || now.k != k_now || now.v != v_now || now.o != o_now || now.lse != lse_now)
                prepared->retarget(q_now, k_now, v_now, o_now, lse_now);
            }
            prepared->launch(stream);
          },
          {}};
}

}  // namespace weft::lowering
