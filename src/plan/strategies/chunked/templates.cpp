// The schedule templates of `chunked` (plan/strategies.hpp, ScheduleShape, says what each does).
#include <cmath>
#include <stdexcept>

#include "../builder_support.hpp"
#include "weft/plan/chunked.hpp"

namespace weft {

std::string_view to_string(ScheduleShape shape) {
  switch (shape) {
    case ScheduleShape::swizzle: return "swizzle";
    case ScheduleShape::ring: return "ring";
    case ScheduleShape::mesh_2d: return "2d";
    case ScheduleShape::pull: return "pull";
    case ScheduleShape::partition: return "partition";
  }
  return "?";
}

ScheduleShape parse_schedule_shape(std::string_view text) {
  for (ScheduleShape s : {ScheduleShape::swizzle, ScheduleShape::ring, ScheduleShape::mesh_2d, ScheduleShape::pull, ScheduleShape::partition})
    if (to_string(s) == text) return s;
  throw std::invalid_argument("unknown schedule template '" + std::string(text) + "' (swizzle, ring, 2d, pull, partition)");
}

namespace {

// Rows [first, end) cut into `chunks` nearly equal pieces (fewer where there are fewer rows).
std::vector<std::pair<int64_t, int64_t>> pieces(int64_t first, int64_t end, int chunks) {
  const int count = static_cast<int>(std::min<int64_t>(chunks, std::max<int64_t>(end - first, 1)));
  const auto cuts = detail::split_rows(end - first, count);
  std::vector<std::pair<int64_t, int64_t>> out;
  for (size_t i = 0; i + 1 < cuts.size(); ++i)
    if (cuts[i + 1] > cuts[i]) out.push_back({first + cuts[i], first + cuts[i + 1]});
  return out;
}

ChunkOp transfer(ChunkOpKind kind, int peer, std::pair<int64_t, int64_t> rows, ChunkBackend backend) {
  ChunkOp op;
  op.kind = kind;
  op.peer = peer;
  op.row = rows.first;
  op.rows = rows.second - rows.first;
  op.backend = backend;
  return op;
}

int default_group_size(int world) {
  int best = 1;
  for (int g = 1; g * g <= world; ++g)
    if (world % g == 0) best = g;
  return best;
}

}  // namespace

Schedule make_schedule(const Problem& p, const ChunkedOptions& o) {
  check_problem(p);
  const int world = p.world_size;
  const ScheduleShape shape = o.shape.value_or(p.op == OpKind::gemm_ar ? ScheduleShape::partition : ScheduleShape::swizzle);
  const int chunks = o.chunks > 0 ? o.chunks : (p.op == OpKind::gemm_ar ? 4 : 2);
  if (o.backend == ChunkBackend::nccl && p.op != OpKind::gemm_ar)
    throw std::invalid_argument("chunked: pulls and pushes run on the copy engine or SMs, not NCCL");
  Schedule s;
  s.op = p.op;
  s.name = std::string(to_string(shape)) + ", " + std::to_string(chunks) + " chunks, " + std::string(to_string(o.backend));
  s.ranks.resize(static_cast<size_t>(world));
  auto reject = [&](const char* why) {
    throw std::invalid_argument("chunked: template '" + std::string(to_string(shape)) + "' " + why + " (" + std::string(to_string(p.op)) + ")");
  };
  switch (p.op) {
    case OpKind::ag_gemm:
      for (int r = 0; r < world; ++r) {
        auto& ops = s.ranks[static_cast<size_t>(r)];
        if (shape == ScheduleShape::swizzle) {
          for (int i = 1; i < world; ++i) {
            const int src = (r + i) % world;
            for (const auto& rows : pieces(src * p.m, (src + 1) * p.m, chunks)) ops.push_back(transfer(ChunkOpKind::pull, src, rows, o.backend));
          }
        } else if (shape == ScheduleShape::ring) {
          // Step i pulls shard (r + i) from rank r + 1, which holds it as its own (i = 1) or got it
          // at its step i - 1, chunk by chunk.
          const int next = (r + 1) % world;
          const auto first_pieces = pieces(0, p.m, chunks);
          const int per_step = static_cast<int>(first_pieces.size());
          for (int i = 1; i < world; ++i) {
            const int shard = (r + i) % world;
            int j = 0;
            for (const auto& rows : pieces(shard * p.m, (shard + 1) * p.m, chunks)) {
              ChunkOp op = transfer(ChunkOpKind::pull, next, rows, o.backend);
              if (i > 1) op.after.push_back({next, (i - 2) * per_step + j});
              ops.push_back(op);
              ++j;
            }
          }
        } else if (shape == ScheduleShape::mesh_2d) {
          const int group = o.group_size > 0 ? o.group_size : default_group_size(world);
          if (world % group != 0) reject(("needs a group size that divides the world size (" + std::to_string(group) + ")").c_str());
          const int my_group = r / group, lane = r % group, groups = world / group;
          const int per_shard = static_cast<int>(pieces(0, p.m, chunks).size());
          // Stage 1: the shards of the own group, from each of its ranks.
          for (int i = 1; i < group; ++i) {
            const int src = my_group * group + (lane + i) % group;
            for (const auto& rows : pieces(src * p.m, (src + 1) * p.m, chunks)) ops.push_back(transfer(ChunkOpKind::pull, src, rows, o.backend));
          }
          // Stage 2: every other group's shards, from the rank of that group in this rank's lane,
          // which has its own and has pulled its group's others in its stage 1 (step i there).
          for (int gi = 1; gi < groups; ++gi) {
            const int other = (my_group + gi) % groups;
            const int relay = other * group + lane;
            for (int i = 0; i < group; ++i) {
              const int shard = other * group + (lane + i) % group;
              int j = 0;
              for (const auto& rows : pieces(shard * p.m, (shard + 1) * p.m, chunks)) {
                ChunkOp op = transfer(ChunkOpKind::pull, relay, rows, o.backend);
                // The relay's stage-1 pull of this chunk: step i - 1 of its own group's pulls.
                if (i > 0) op.after.push_back({relay, (i - 1) * per_shard + j});
                ops.push_back(op);
                ++j;
              }
            }
          }
        } else {
          reject("does not apply");
        }
      }
      break;
    case OpKind::gemm_rs: {
      const int64_t block = p.m / world;
      for (int r = 0; r < world; ++r) {
        auto& ops = s.ranks[static_cast<size_t>(r)];
        if (shape != ScheduleShape::swizzle && shape != ScheduleShape::pull) reject("does not apply");
        for (int i = 1; i < world; ++i) {
          // swizzle: push this rank's rows of block (r + i); pull: take rank (r + i)'s rows of the own block.
          const int peer = (r + i) % world;
          const int owner = shape == ScheduleShape::swizzle ? peer : r;
          for (const auto& rows : pieces(owner * block, (owner + 1) * block, chunks))
            ops.push_back(transfer(shape == ScheduleShape::swizzle ? ChunkOpKind::push : ChunkOpKind::pull, peer, rows, o.backend));
        }
      }
      break;
    }
    case OpKind::gemm_ar:
      if (shape != ScheduleShape::partition) reject("does not apply");
      for (int r = 0; r < world; ++r)
        for (const auto& rows : pieces(0, p.m, chunks)) {
          ChunkOp op;
          op.kind = ChunkOpKind::collective;
          op.collective = CollectiveKind::all_reduce;
          op.backend = ChunkBackend::nccl;
          op.row = rows.first;
          op.rows = rows.second - rows.first;
          s.ranks[static_cast<size_t>(r)].push_back(op);
        }
      break;
    default:
      throw std::invalid_argument("chunked: no schedule template for " + std::string(to_string(p.op)) + " yet (ag_gemm, gemm_rs, gemm_ar)");
  }
  return s;
}

}  // namespace weft
