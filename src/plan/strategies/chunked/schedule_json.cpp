// Chunk schedules as JSON (plan/chunked.hpp gives the format).
#include <cstdint>
#include <stdexcept>

#include "common/json.hpp"
#include "common/text_file.hpp"
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

Schedule parse_schedule_json(std::string_view text, const std::string& name) {
  return read_json_text(text, name, [](const Json& doc) {
    doc.only_members({"name", "op", "ranks"});
    Schedule s;
    s.name = doc.has("name") ? doc["name"].text() : "user schedule";
    s.op = doc["op"].text_as(parse_op);
    const Json& ranks = doc["ranks"];
    if (ranks.items().size() > static_cast<size_t>(kMaxFileWorld))
      ranks.reject(std::to_string(ranks.items().size()) + " ranks, more than the " + std::to_string(kMaxFileWorld) + " a schedule may have");
    for (const Json& rank : ranks.items()) {
      auto& ops = s.ranks.emplace_back();
      for (const Json& o : rank.items()) {
        o.only_members({"kind", "collective", "peer", "rows", "backend", "after"});
        ChunkOp op;
        op.kind = o["kind"].text_as(parse_chunk_op_kind);
        if (op.kind == ChunkOpKind::collective) {
          const Json& collective = o["collective"];
          if (collective.text() != "all_reduce") collective.reject("collective '" + collective.text() + "': chunk collectives are all_reduce");
          if (o.has("peer")) o["peer"].reject("a collective has no peer");
          op.collective = CollectiveKind::all_reduce;
          op.backend = ChunkBackend::nccl;
        } else {
          // The plan's validation checks the peer against the world size; here, that it is a rank.
          op.peer = o["peer"].to_int(0, kMaxFileWorld - 1);
        }
        const Json& rows = o["rows"];
        if (rows.items().size() != 2) rows.reject("rows must be [first, end), two integers");
        op.row = rows.items()[0].integer(0, kMaxFileDimension);
        const int64_t end = rows.items()[1].integer(0, kMaxFileDimension);
        if (end <= op.row) rows.reject("rows [" + std::to_string(op.row) + ", " + std::to_string(end) + ") is empty or reversed");
        op.rows = end - op.row;
        if (const Json* b = o.find("backend")) op.backend = b->text_as(parse_chunk_backend);
        if (const Json* after = o.find("after"))
          for (const Json& d : after->items()) {
            const auto& pair = d.items();
            if (pair.size() != 2) d.reject("after lists [rank, index] pairs");
            op.after.push_back({pair[0].to_int(0, kMaxFileWorld - 1), pair[1].to_int(0, INT32_MAX)});
          }
        ops.push_back(std::move(op));
      }
    }
    return s;
  });
}

Schedule load_schedule(const std::string& path) { return parse_schedule_json(read_text_file(path, "schedule file"), path); }

}  // namespace weft
