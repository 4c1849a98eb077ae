#include <algorithm>
#include "weft/model/tuning_table.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "common/json.hpp"
#include "common/text_file.hpp"
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

void merge_entry(TuningTable& table, TuningEntry entry) {
  auto same = [&](const TuningEntry& e) {
    return e.op == entry.op && e.world == entry.world && e.m == entry.m && e.n == entry.n && e.k == entry.k && e.experts == entry.experts &&
           e.topk == entry.topk && e.batch == entry.batch && e.heads == entry.heads && e.kv_heads == entry.kv_heads && e.head_dim == entry.head_dim &&
           e.causal == entry.causal && e.dtype == entry.dtype && e.scaling == entry.scaling;
  };
  const auto it = std::find_if(table.entries.begin(), table.entries.end(), same);
  if (it == table.entries.end()) {
    table.entries.push_back(std::move(entry));
    return;
  }
  for (const TunedCandidate& old : it->candidates) {
    const bool remeasured = std::any_of(entry.candidates.begin(), entry.candidates.end(),
                                        [&](const TunedCandidate& c) { return c.strategy == old.strategy && c.options == old.options; });
    if (!remeasured) entry.candidates.push_back(old);
  }
  *it = std::move(entry);
}

const TuningEntry* TuningTable::nearest(const Problem& p, double* distance) const {
  const TuningEntry* best = nullptr;
  double best_distance = std::numeric_limits<double>::infinity();
  if (distance) *distance = best_distance;
  for (const TuningEntry& e : entries) {
    // An entry stands for calls of its own dtype (an FP8 GEMM runs at about twice bf16's rate) and
    // FP8 scaling mode: cuBLASLt's row-scaled FP8 matmul is not its tensor-scaled one, and the
    // strategies built on it rank differently by mode.
    if (e.op != p.op || e.world != p.world_size || e.dtype != p.input_dtype || e.scaling != p.scaling) continue;
    const bool moe = is_moe(p.op);
    // An MoE row's GEMMs are per expert (about m * topk / experts rows each): the same m, n and k
    // with other experts or topk is another problem, and an entry that does not say is no guide.
    if (moe && (e.experts < 1 || e.topk < 1 || p.experts < 1 || p.topk < 1)) continue;
    auto term = [](double a, double b) { return std::pow(std::log(a / b), 2); };
    // An attention entry stands for the same heads, head dimension and masking at another length.
    const bool attention = is_attention(p.op);
    if (attention && (e.heads < 1 || e.batch != p.batch || e.heads != p.heads || e.kv_heads != p.kv_heads || e.head_dim != p.head_dim ||
                      e.causal != p.causal || p.m < 1))
      continue;
    double squared = attention ? term(static_cast<double>(e.m), static_cast<double>(p.m))
                               : term(static_cast<double>(e.m), static_cast<double>(p.m)) + term(static_cast<double>(e.n), static_cast<double>(p.n)) +
                                     term(static_cast<double>(e.k), static_cast<double>(p.k));
    if (moe) squared += term(e.experts, p.experts) + term(e.topk, p.topk);
    const double d = std::sqrt(squared);
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
    if (e.experts > 0) {
      o["experts"] = e.experts;
      o["topk"] = e.topk;
    }
    if (e.heads > 0) {
      o["batch"] = e.batch;
      o["heads"] = e.heads;
      o["kv_heads"] = e.kv_heads;
      o["head_dim"] = e.head_dim;
      o["causal"] = e.causal;
    }
    if (e.dtype != DType::bf16) {
      o["dtype"] = std::string(to_string(e.dtype));
      o["scaling"] = std::string(to_string(e.scaling));
    }
    o["source"] = e.source;
    o["candidates"] = Json(std::move(candidates));
    entries.push_back(Json(std::move(o)));
  }
  Json::Object doc;
  doc["machine"] = t.machine;
  doc["entries"] = Json(std::move(entries));
  return Json(std::move(doc)).dump();
}

TuningTable parse_tuning_table(std::string_view text, const std::string& name) {
  return read_json_text(text, name, [](const Json& doc) {
    doc.only_members({"machine", "entries"});
    TuningTable t;
    t.machine = doc.has("machine") ? doc["machine"].text() : "";
    for (const Json& e : doc["entries"].items()) {
      e.only_members({"op", "world", "m", "n", "k", "experts", "topk", "batch", "heads", "kv_heads", "head_dim", "causal", "dtype", "scaling", "source",
                      "candidates"});
      TuningEntry entry;
      entry.op = e["op"].text_as(parse_op);
      entry.world = e["world"].to_int(1, kMaxFileWorld);
      entry.m = e["m"].integer(1, kMaxFileDimension);
      // An attention entry's shape is its heads and head dimension: its n and k are 0.
      const bool attention = is_attention(entry.op);
      entry.n = e["n"].integer(attention ? 0 : 1, attention ? 0 : kMaxFileDimension);
      entry.k = e["k"].integer(attention ? 0 : 1, attention ? 0 : kMaxFileDimension);
      if (attention) {
        entry.batch = e["batch"].to_int(1, kMaxFileBatch);
        entry.heads = e["heads"].to_int(1, kMaxFileHeads);
        entry.kv_heads = e["kv_heads"].to_int(1, entry.heads);
        if (entry.heads % entry.kv_heads != 0) e.reject("kv_heads must divide heads");
        entry.head_dim = e["head_dim"].to_int(1, kMaxFileHeadDim);
        entry.causal = e["causal"].boolean();
      } else if (e.has("batch") || e.has("heads") || e.has("kv_heads") || e.has("head_dim") || e.has("causal")) {
        e.reject("batch, heads, kv_heads, head_dim and causal are ag_attention's");
      }
      if (const Json* v = e.find("experts")) entry.experts = v->to_int(1, kMaxFileExperts);
      if (const Json* v = e.find("topk")) entry.topk = v->to_int(1, entry.experts > 0 ? entry.experts : kMaxFileExperts);
      if ((entry.experts > 0) != (entry.topk > 0)) e.reject("experts and topk come together");
      // The dtype of the operands measured: bf16 where absent; FP8 (e4m3) with its scaling.
      if (const Json* v = e.find("dtype")) {
        entry.dtype = v->text_as(parse_dtype);
        if (entry.dtype != DType::bf16 && entry.dtype != DType::e4m3) v->reject("an entry's dtype is bf16 or e4m3 (what weft bench measures)");
      }
      if (const Json* v = e.find("scaling")) entry.scaling = v->text_as(parse_scaling);
      if (entry.dtype == DType::e4m3 && entry.scaling != Scaling::tensor && entry.scaling != Scaling::row)
        e.reject("an e4m3 entry gives its scaling: tensor or row");
      if (entry.dtype == DType::bf16 && entry.scaling != Scaling::none) e.reject("scaling is an FP8 entry's (dtype e4m3)");
      if (const Json* v = e.find("source")) entry.source = v->text();
      for (const Json& c : e["candidates"].items()) {
        c.only_members({"strategy", "ms", "options"});
        TunedCandidate candidate;
        candidate.strategy = c["strategy"].text();
        candidate.ms = c["ms"].number(0, 1e9);  // 0: not measured (best() skips it)
        if (const Json* options = c.find("options")) {
          for (const auto& [k, v] : options->members()) candidate.options[k] = v.text();
          // Knobs are applied when auto picks the candidate: an unknown one or a bad value is
          // refused now, at its place in the file.
          try {
            apply_candidate(PlanOptions{}, candidate);
          } catch (const std::invalid_argument& error) {
            options->reject(error.what());
          }
        }
        entry.candidates.push_back(std::move(candidate));
      }
      t.entries.push_back(std::move(entry));
    }
    return t;
  });
}

TuningTable load_tuning_table(const std::string& path) { return parse_tuning_table(read_text_file(path, "tuning table"), path); }

namespace {

// A knob's integer, all of the text (std::stoi reads "4abc" as 4).
int knob_integer(const std::string& knob, const std::string& value) {
  int parsed = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (error != std::errc() || end != value.data() + value.size() || parsed < 0)
    throw std::invalid_argument("option " + knob + " must be a non-negative int, got '" + value + "'");
  return parsed;
}

}  // namespace

PlanOptions apply_candidate(const PlanOptions& base, const TunedCandidate& c) {
  PlanOptions o = base;
  for (const auto& [knob, value] : c.options) {
    if (knob == "template") o.chunked.shape = parse_schedule_shape(value);
    else if (knob == "chunks") o.chunked.chunks = knob_integer(knob, value);
    else if (knob == "backend") o.chunked.backend = parse_chunk_backend(value);
    else if (knob == "comm_sms" && c.strategy == "tilelink") o.tilelink.comm_sms = knob_integer(knob, value);  // its companion's CTAs
    else if (knob == "comm_sms") o.chunked.comm_sms = knob_integer(knob, value);
    else if (knob == "comm_chunks") o.comm_chunks = knob_integer(knob, value);
    else if (knob == "gemm_sms") o.gemm_sms = knob_integer(knob, value);
    else if (knob == "partition") o.wave_partition = parse_wave_partition(value);
    else if (knob == "restore") o.signal_restore = parse_signal_restore(value);
    else throw std::invalid_argument("tuning table: unknown option '" + knob + "' of strategy '" + c.strategy + "'");
  }
  return o;
}

}  // namespace weft
