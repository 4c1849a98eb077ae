#include "weft/model/tuning_table.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "common/json.hpp"
#include "weft/model/wave_partition.hpp"

namespace weft {

const TunedCandidate* TuningEntry::best() const {
  const TunedCandidate* best = nullptr;
  for (const TunedCandidate& c : candidates)
    if (c.ms > 0 && (!best || c.ms < best->ms)) best = &c;
  return best;
}

double TuningEntry::sequential_ms() const {
  for (const TunedCandidate& c : candidates)
    if (c.strategy == "sequential" && c.options.empty()) return c.ms;
  return 0;
}

const TuningEntry* TuningTable::nearest(const Problem& p, double* distance) const {
  const TuningEntry* best = nullptr;
  double best_distance = std::numeric_limits<double>::infinity();
  for (const TuningEntry& e : entries) {
    if (e.op != p.op || e.world != p.world_size) continue;
    auto term = [](double a, double b) { return std::pow(std::log(a / b), 2); };
    const double d = std::sqrt(term(static_cast<double>(e.m), static_cast<double>(p.m)) + term(static_cast<double>(e.n), static_cast<double>(p.n)) +
                               term(static_cast<double>(e.k), static_cast<double>(p.k)));
    if (d < best_distance) {
      best_distance = d;
      best = &e;
    }
  }
  if (distance) *distance = best_distance;
  return best;
}

std::string tuning_table_json(const TuningTable& t) {
  Json::Array entries;
  for (const TuningEntry& e : t.entries) {
    Json::Array candidates;
    for (const TunedCandidate& c : e.candidates) {
      Json::Object o;
      o["strategy"] = c.strategy;
      o["ms"] = c.ms;
      if (!c.options.empty()) {
        Json::Object options;
        for (const auto& [k, v] : c.options) options[k] = v;
        o["options"] = Json(std::move(options));
      }
      candidates.push_back(Json(std::move(o)));
    }
    Json::Object o;
    o["op"] = std::string(to_string(e.op));
    o["world"] = e.world;
    o["m"] = e.m;
    o["n"] = e.n;
    o["k"] = e.k;
    o["source"] = e.source;
    o["candidates"] = Json(std::move(candidates));
    entries.push_back(Json(std::move(o)));
  }
  Json::Object doc;
  doc["machine"] = t.machine;
  doc["entries"] = Json(std::move(entries));
  return Json(std::move(doc)).dump();
}

TuningTable parse_tuning_table(std::string_view text) {
  const Json doc = Json::parse(text);
  TuningTable t;
  t.machine = doc.has("machine") ? doc["machine"].text() : "";
  size_t i = 0;
  for (const Json& e : doc["entries"].items()) {
    try {
      TuningEntry entry;
      entry.op = parse_op(e["op"].text());
      entry.world = static_cast<int>(e["world"].integer());
      entry.m = e["m"].integer();
      entry.n = e["n"].integer();
      entry.k = e["k"].integer();
      if (e.has("source")) entry.source = e["source"].text();
      for (const Json& c : e["candidates"].items()) {
        TunedCandidate candidate;
        candidate.strategy = c["strategy"].text();
        candidate.ms = c["ms"].number();
        if (c.has("options"))
          for (const auto& [k, v] : c["options"].members()) candidate.options[k] = v.text();
        entry.candidates.push_back(std::move(candidate));
      }
      if (entry.world < 1 || entry.m < 1 || entry.n < 1 || entry.k < 1) throw std::invalid_argument("world and shapes must be positive");
      t.entries.push_back(std::move(entry));
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument("tuning table entry " + std::to_string(i) + ": " + error.what());
    }
    ++i;
  }
  return t;
}

TuningTable load_tuning_table(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read tuning table '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return parse_tuning_table(text.str());
  } catch (const std::exception& e) {
    throw std::invalid_argument("tuning table '" + path + "': " + e.what());
  }
}

PlanOptions apply_candidate(const PlanOptions& base, const TunedCandidate& c) {
  PlanOptions o = base;
  for (const auto& [knob, value] : c.options) {
    if (knob == "template") o.chunked.shape = parse_schedule_shape(value);
    else if (knob == "chunks") o.chunked.chunks = std::stoi(value);
    else if (knob == "backend") o.chunked.backend = parse_chunk_backend(value);
    else if (knob == "comm_sms") o.chunked.comm_sms = std::stoi(value);
    else if (knob == "comm_chunks") o.comm_chunks = std::stoi(value);
    else if (knob == "gemm_sms") o.gemm_sms = std::stoi(value);
    else if (knob == "partition") o.wave_partition = parse_wave_partition(value);
    else if (knob == "restore") o.signal_restore = parse_signal_restore(value);
    else throw std::invalid_argument("tuning table: unknown option '" + knob + "' of strategy '" + c.strategy + "'");
  }
  return o;
}

}  // namespace weft
