#include "weft/ir/schedule.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <stdexcept>

namespace weft {

std::string_view to_string(ChunkOpKind kind) {
  switch (kind) {
    case ChunkOpKind::pull: return "pull";
    case ChunkOpKind::push: return "push";
    case ChunkOpKind::collective: return "collective";
  }
  return "?";
}

std::string_view to_string(ChunkBackend backend) {
  switch (backend) {
    case ChunkBackend::copy_engine: return "copy_engine";
    case ChunkBackend::sm: return "sm";
    case ChunkBackend::nccl: return "nccl";
  }
  return "?";
}

ChunkOpKind parse_chunk_op_kind(std::string_view text) {
  for (ChunkOpKind k : {ChunkOpKind::pull, ChunkOpKind::push, ChunkOpKind::collective})
    if (to_string(k) == text) return k;
  throw std::invalid_argument("unknown chunk operation '" + std::string(text) + "' (pull, push, collective)");
}

ChunkBackend parse_chunk_backend(std::string_view text) {
  for (ChunkBackend b : {ChunkBackend::copy_engine, ChunkBackend::sm, ChunkBackend::nccl})
    if (to_string(b) == text) return b;
  throw std::invalid_argument("unknown chunk backend '" + std::string(text) + "' (copy_engine, sm, nccl)");
}

int64_t schedule_rows(const Problem& p) { return p.op == OpKind::ag_gemm ? p.world_size * p.m : p.m; }

std::string describe_chunk_op(const Schedule& s, const ChunkRef& ref) {
  std::string text = "op " + std::to_string(ref.index) + " of rank " + std::to_string(ref.rank);
  if (ref.rank < 0 || ref.rank >= static_cast<int>(s.ranks.size()) || ref.index < 0 ||
      ref.index >= static_cast<int>(s.ranks[static_cast<size_t>(ref.rank)].size()))
    return text + " (no such operation)";
  const ChunkOp& op = s.ranks[static_cast<size_t>(ref.rank)][static_cast<size_t>(ref.index)];
  const std::string rows = "rows " + std::to_string(op.row) + ".." + std::to_string(op.row + op.rows);
  switch (op.kind) {
    case ChunkOpKind::pull: return text + " (pull " + rows + " from rank " + std::to_string(op.peer) + ")";
    case ChunkOpKind::push: return text + " (push " + rows + " to rank " + std::to_string(op.peer) + ")";
    case ChunkOpKind::collective: return text + " (" + std::string(to_string(op.collective)) + " of " + rows + ")";
  }
  return text;
}

void check_schedule(const Problem& p, const Schedule& s) {
  const int world = p.world_size;
  const int64_t total = schedule_rows(p);
  auto fail = [&](const std::string& why) { throw std::invalid_argument("schedule '" + s.name + "': " + why); };
  if (s.op != p.op) fail("it is for " + std::string(to_string(s.op)) + ", the problem is " + std::string(to_string(p.op)));
  if (static_cast<int>(s.ranks.size()) != world)
    fail("it lists " + std::to_string(s.ranks.size()) + " ranks for a world of " + std::to_string(world));
  const int64_t block = p.op == OpKind::gemm_rs ? p.m / world : 0;
  std::vector<std::vector<const ChunkOp*>> collectives(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const auto& ops = s.ranks[static_cast<size_t>(r)];
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const ChunkOp& op = ops[static_cast<size_t>(i)];
      const std::string what = describe_chunk_op(s, {r, i});
      if (op.rows <= 0 || op.row < 0 || op.row + op.rows > total)
        fail(what + ": rows outside 0.." + std::to_string(total) + " of the op's tensor");
      for (const ChunkRef& d : op.after)
        if (d.rank < 0 || d.rank >= world || d.index < 0 || d.index >= static_cast<int>(s.ranks[static_cast<size_t>(d.rank)].size()))
          fail(what + " depends on " + describe_chunk_op(s, d));
      if (op.kind == ChunkOpKind::collective) {
        if (p.op != OpKind::gemm_ar || op.collective != CollectiveKind::all_reduce)
          fail(what + ": collectives are all_reduce chunks of gemm_ar; " + std::string(to_string(p.op)) + " moves chunks by pull and push");
        if (op.backend != ChunkBackend::nccl) fail(what + ": a collective runs on NCCL (backend nccl)");
        collectives[static_cast<size_t>(r)].push_back(&op);
        continue;
      }
      if (p.op == OpKind::gemm_ar) fail(what + ": gemm_ar's chunks are all_reduce collectives");
      if (op.peer < 0 || op.peer >= world || op.peer == r) fail(what + ": the peer must be another rank");
      if (op.backend == ChunkBackend::nccl)
        fail(what + ": NCCL moves collective chunks here; a pull or push runs on the copy engine or SMs");
      if (p.op == OpKind::gemm_rs) {
        // Rows go to the rank whose block holds them: the pusher's peer, or the puller itself.
        const int receiver = op.kind == ChunkOpKind::push ? op.peer : r;
        if (op.row < receiver * block || op.row + op.rows > (receiver + 1) * block)
          fail(what + ": gemm_rs moves rows of the receiving rank's block " + std::to_string(receiver * block) + ".." +
               std::to_string((receiver + 1) * block));
      }
    }
  }
  for (int r = 1; r < world; ++r) {
    const auto& mine = collectives[static_cast<size_t>(r)];
    const auto& first = collectives[0];
    bool same = mine.size() == first.size();
    for (size_t i = 0; same && i < mine.size(); ++i) same = mine[i]->row == first[i]->row && mine[i]->rows == first[i]->rows;
    if (!same) fail("rank " + std::to_string(r) + "'s collectives differ from rank 0's (NCCL needs the same calls in the same order)");
  }

  // Coverage: ag_gemm: every rank receives every row outside its own shard once; gemm_rs: every rank
  // receives each peer's rows of its block once.
  if (p.op != OpKind::gemm_ar) {
    // received[receiver][source] = row ranges arriving at receiver with source's data
    std::vector<std::vector<std::vector<std::pair<int64_t, int64_t>>>> received(
        static_cast<size_t>(world), std::vector<std::vector<std::pair<int64_t, int64_t>>>(static_cast<size_t>(world)));
    for (int r = 0; r < world; ++r)
      for (const ChunkOp& op : s.ranks[static_cast<size_t>(r)]) {
        const int receiver = op.kind == ChunkOpKind::push ? op.peer : r;
        const int sender = op.kind == ChunkOpKind::push ? r : op.peer;
        // ag_gemm: rows are the data of the shard they lie in, wherever they are read from.
        const int source = p.op == OpKind::ag_gemm ? 0 : sender;
        received[static_cast<size_t>(receiver)][static_cast<size_t>(source)].push_back({op.row, op.row + op.rows});
      }
    auto require_once = [&](std::vector<std::pair<int64_t, int64_t>> ranges, int64_t first, int64_t end, const std::string& what) {
      std::sort(ranges.begin(), ranges.end());
      int64_t at = first;
      for (const auto& [begin, stop] : ranges) {
        if (begin < at) fail(what + ": rows " + std::to_string(begin) + ".." + std::to_string(std::min(at, stop)) + " arrive twice");
        if (begin > at) fail(what + ": rows " + std::to_string(at) + ".." + std::to_string(begin) + " never arrive");
        at = stop;
      }
      if (at < end) fail(what + ": rows " + std::to_string(at) + ".." + std::to_string(end) + " never arrive");
    };
    for (int d = 0; d < world; ++d) {
      if (p.op == OpKind::ag_gemm) {
        auto ranges = received[static_cast<size_t>(d)][0];
        ranges.push_back({d * p.m, (d + 1) * p.m});  // its own shard, there from the start
        require_once(ranges, 0, total, "rank " + std::to_string(d));
      } else {
        for (int q = 0; q < world; ++q)
          if (q != d)
            require_once(received[static_cast<size_t>(d)][static_cast<size_t>(q)], d * block, (d + 1) * block,
                         "rank " + std::to_string(d) + "'s block from rank " + std::to_string(q));
      }
    }
  }

  // Dependency cycles, with each rank's operations of one (backend, peer) in issue order: that is
  // one stream once lowered.
  std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> edges;  // (rank, index) -> what it waits for
  for (int r = 0; r < world; ++r) {
    const auto& ops = s.ranks[static_cast<size_t>(r)];
    std::map<std::pair<int, int>, int> last_on_stream;  // (backend, peer) -> last index
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const ChunkOp& op = ops[static_cast<size_t>(i)];
      auto& in = edges[{r, i}];
      for (const ChunkRef& d : op.after) in.push_back({d.rank, d.index});
      const auto key = std::make_pair(static_cast<int>(op.backend), op.kind == ChunkOpKind::collective ? -1 : op.peer);
      if (const auto it = last_on_stream.find(key); it != last_on_stream.end()) in.push_back({r, it->second});
      last_on_stream[key] = i;
    }
  }
  std::map<std::pair<int, int>, int> state;  // 0 unseen, 1 on the path, 2 done
  std::vector<std::pair<int, int>> path;
  std::function<void(std::pair<int, int>)> visit = [&](std::pair<int, int> node) {
    state[node] = 1;
    path.push_back(node);
    for (const auto& next : edges[node]) {
      if (state[next] == 1) {
        std::string cycle;
        bool on = false;
        for (const auto& n : path) {
          on = on || n == next;
          if (on) cycle += describe_chunk_op(s, {n.first, n.second}) + " -> ";
        }
        fail("dependency cycle: " + cycle + describe_chunk_op(s, {next.first, next.second}));
      }
      if (state[next] == 0) visit(next);
    }
    path.pop_back();
    state[node] = 2;
  };
  for (const auto& [node, in] : edges)
    if (state[node] == 0) visit(node);
}

}  // namespace weft
