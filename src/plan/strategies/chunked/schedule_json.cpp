// Chunk schedules as JSON (plan/chunked.hpp gives the format).
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "common/json.hpp"
#include "weft/plan/chunked.hpp"

namespace weft {

std::string schedule_json(const Schedule& s) {
  Json::Array ranks;
  for (const auto& ops : s.ranks) {
    Json::Array list;
    for (const ChunkOp& op : ops) {
      Json::Object o;
      o["kind"] = std::string(to_string(op.kind));
      if (op.kind == ChunkOpKind::collective) o["collective"] = std::string(to_string(op.collective));
      else o["peer"] = op.peer;
      o["rows"] = Json(Json::Array{Json(op.row), Json(op.row + op.rows)});
      o["backend"] = std::string(to_string(op.backend));
      if (!op.after.empty()) {
        Json::Array after;
        for (const ChunkRef& d : op.after) after.push_back(Json(Json::Array{Json(d.rank), Json(d.index)}));
        o["after"] = Json(std::move(after));
      }
      list.push_back(Json(std::move(o)));
    }
    ranks.push_back(Json(std::move(list)));
  }
  Json::Object doc;
  doc["name"] = s.name;
  doc["op"] = std::string(to_string(s.op));
  doc["ranks"] = Json(std::move(ranks));
  return Json(std::move(doc)).dump();
}

Schedule parse_schedule_json(std::string_view text) {
  const Json doc = Json::parse(text);
  Schedule s;
  s.name = doc.has("name") ? doc["name"].text() : "user schedule";
  s.op = parse_op(doc["op"].text());
  int r = 0;
  for (const Json& rank : doc["ranks"].items()) {
    auto& ops = s.ranks.emplace_back();
    int i = 0;
    for (const Json& o : rank.items()) {
      const std::string where = "ranks[" + std::to_string(r) + "][" + std::to_string(i) + "]";
      try {
        ChunkOp op;
        op.kind = parse_chunk_op_kind(o["kind"].text());
        if (op.kind == ChunkOpKind::collective) {
          const std::string kind = o["collective"].text();
          if (kind != "all_reduce") throw std::invalid_argument("collective '" + kind + "': chunk collectives are all_reduce");
          op.collective = CollectiveKind::all_reduce;
          op.backend = ChunkBackend::nccl;
        } else {
          op.peer = static_cast<int>(o["peer"].integer());
        }
        const auto& rows = o["rows"].items();
        if (rows.size() != 2) throw std::invalid_argument("rows must be [first, end)");
        op.row = rows[0].integer();
        op.rows = rows[1].integer() - op.row;
        if (o.has("backend")) op.backend = parse_chunk_backend(o["backend"].text());
        if (o.has("after"))
          for (const Json& d : o["after"].items()) {
            const auto& pair = d.items();
            if (pair.size() != 2) throw std::invalid_argument("after lists [rank, index] pairs");
            op.after.push_back({static_cast<int>(pair[0].integer()), static_cast<int>(pair[1].integer())});
          }
        ops.push_back(std::move(op));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(where + ": " + e.what());
      }
      ++i;
    }
    ++r;
  }
  return s;
}

Schedule load_schedule(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read schedule file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return parse_schedule_json(text.str());
  } catch (const std::exception& e) {
    throw std::invalid_argument("schedule file '" + path + "': " + e.what());
  }
}

}  // namespace weft
