#include "weft/model/machine_profile.hpp"

#include <algorithm>
#include <stdexcept>

#include "common/json.hpp"
#include "common/text_file.hpp"

namespace weft {

CollectiveKind parse_collective_kind(std::string_view text) {
  for (CollectiveKind k : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter, CollectiveKind::all_reduce,
                           CollectiveKind::all_to_all})
    if (to_string(k) == text) return k;
  throw std::invalid_argument("unknown collective '" + std::string(text) +
                              "' (known: all_gather, reduce_scatter, all_reduce, all_to_all)");
}

const CollectiveCurve* MachineProfile::curve(CollectiveKind kind, int world_size) const {
  for (const CollectiveCurve& c : collectives)
    if (c.kind == kind && c.world_size == world_size) return &c;
  return nullptr;
}

double MachineProfile::overlapped_slowdown(CollectiveKind kind, int world_size) const {
  const CollectiveCurve* c = curve(kind, world_size);
  return c ? c->overlapped_slowdown : 1.0;
}

double MachineProfile::collective_seconds(CollectiveKind kind, int world_size, double bytes) const {
  if (world_size <= 1) return 0.0;
  if (const CollectiveCurve* c = curve(kind, world_size); c && !c->bytes.empty()) {
    const auto& x = c->bytes;
    const auto& y = c->seconds;
    if (x.size() == 1 || bytes <= x.front()) return y.front();
    size_t i = static_cast<size_t>(std::upper_bound(x.begin(), x.end(), bytes) - x.begin());
    i = std::min(std::max<size_t>(i, 1), x.size() - 1);
    const double slope = (y[i] - y[i - 1]) / (x[i] - x[i - 1]);
    return std::max(y[i - 1] + slope * (bytes - x[i - 1]), 0.0);
  }
  // The orientation figures (4xH200, 256 MB): all-reduce 1.28 ms, reduce-scatter 0.76 ms, all-gather
  // 0.73 ms (of its 64 MB input); 20 us for a call's fixed cost.
  const double latency = 20e-6;
  switch (kind) {
    case CollectiveKind::all_reduce: return latency + bytes / (256e6 / 1.28e-3);
    case CollectiveKind::reduce_scatter: return latency + bytes / (256e6 / 0.76e-3);
    case CollectiveKind::all_gather: return latency + bytes * world_size / (256e6 / 0.73e-3);
    case CollectiveKind::all_to_all: return latency + bytes / (256e6 / 0.76e-3);
  }
  return latency;
}

std::string machine_profile_json(const MachineProfile& p) {
  Json::Object o;
  o["device"] = p.device;
  o["peak_flops"] = p.peak_flops;
  o["fp8_speedup"] = p.fp8_speedup;
  o["memory_bytes_per_s"] = p.memory_bytes_per_s;
  o["sm_count"] = p.sm_count;
  o["collective_sms"] = p.collective_sms;
  o["overlapped_call_seconds"] = p.overlapped_call_seconds;
  o["ficco_threshold_seconds"] = p.ficco_threshold_seconds;
  o["gemm_efficiency"] = p.gemm_efficiency;
  o["overlap_gemm_efficiency"] = p.overlap_gemm_efficiency;
  o["fp8_overlap_gemm_rate"] = p.fp8_overlap_gemm_rate;
  o["attention_efficiency"] = p.attention_efficiency;
  o["gemm_fixed_seconds"] = p.gemm_fixed_seconds;
  o["link_bytes_per_s"] = p.link_bytes_per_s;
  o["nvlink_bytes_per_s"] = p.nvlink_bytes_per_s;
  o["copy_latency_seconds"] = p.copy_latency_seconds;
  o["launch_seconds"] = p.launch_seconds;
  o["sm_copy_bytes_per_s_per_sm"] = p.sm_copy_bytes_per_s_per_sm;
  o["sm_reduce_bytes_per_s_per_sm"] = p.sm_reduce_bytes_per_s_per_sm;
  o["barrier_seconds"] = p.barrier_seconds;
  o["gemm_slowdown_beside_copies"] = p.gemm_slowdown_beside_copies;
  if (!p.tile_rates.empty()) {
    Json::Object rates;
    for (const auto& [tile, rate] : p.tile_rates) rates[tile] = rate;
    o["tile_rates"] = Json(std::move(rates));
  }
  auto accuracy_json = [](const std::map<std::string, MachineProfile::PredictionAccuracy>& by_strategy) {
    Json::Object accuracy;
    for (const auto& [name, a] : by_strategy) accuracy[name] = Json(Json::Object{{"bias", Json(a.bias)}, {"error", Json(a.error)}});
    return Json(std::move(accuracy));
  };
  if (!p.prediction_accuracy.empty()) o["prediction_accuracy"] = accuracy_json(p.prediction_accuracy);
  if (!p.fp8_prediction_accuracy.empty()) o["fp8_prediction_accuracy"] = accuracy_json(p.fp8_prediction_accuracy);
  Json::Array curves;
  for (const CollectiveCurve& c : p.collectives) {
    Json::Object curve;
    curve["kind"] = std::string(to_string(c.kind));
    curve["world_size"] = c.world_size;
    curve["bytes"] = Json::Array(c.bytes.begin(), c.bytes.end());
    curve["seconds"] = Json::Array(c.seconds.begin(), c.seconds.end());
    curve["overlapped_slowdown"] = c.overlapped_slowdown;
    curves.push_back(Json(curve));
  }
  o["collectives"] = curves;
  o["source"] = p.source;
  return Json(o).dump() + "\n";
}

namespace {

// The plausible range of each number a profile gives: wide enough for any GPU weft may meet (and
// for what weft tune --fit-simulator writes), narrow enough that a typo or a unit slip (1e-300
// FLOP/s, negative seconds) is refused instead of turning predictions into NaN or infinity.
struct Field {
  const char* name;
  double MachineProfile::*field;
  double lo, hi;
};
constexpr Field kFields[] = {
    {"peak_flops", &MachineProfile::peak_flops, 1e11, 1e17},
    {"fp8_speedup", &MachineProfile::fp8_speedup, 1.0, 8.0},
    {"memory_bytes_per_s", &MachineProfile::memory_bytes_per_s, 1e10, 1e14},
    {"overlapped_call_seconds", &MachineProfile::overlapped_call_seconds, 0, 1e-2},
    {"ficco_threshold_seconds", &MachineProfile::ficco_threshold_seconds, 1e-12, 10},
    {"gemm_efficiency", &MachineProfile::gemm_efficiency, 0.01, 1.0},
    {"overlap_gemm_efficiency", &MachineProfile::overlap_gemm_efficiency, 0.01, 2.0},
    {"fp8_overlap_gemm_rate", &MachineProfile::fp8_overlap_gemm_rate, 0.05, 2.0},
    {"attention_efficiency", &MachineProfile::attention_efficiency, 0.01, 1.0},
    {"gemm_fixed_seconds", &MachineProfile::gemm_fixed_seconds, 0, 1e-2},
    {"link_bytes_per_s", &MachineProfile::link_bytes_per_s, 1e8, 1e14},
    {"nvlink_bytes_per_s", &MachineProfile::nvlink_bytes_per_s, 1e8, 1e14},
    {"copy_latency_seconds", &MachineProfile::copy_latency_seconds, 0, 1e-2},
    {"launch_seconds", &MachineProfile::launch_seconds, 0, 1e-2},
    {"sm_copy_bytes_per_s_per_sm", &MachineProfile::sm_copy_bytes_per_s_per_sm, 1e7, 1e13},
    {"sm_reduce_bytes_per_s_per_sm", &MachineProfile::sm_reduce_bytes_per_s_per_sm, 1e7, 1e13},
    {"barrier_seconds", &MachineProfile::barrier_seconds, 0, 1e-2},
    {"gemm_slowdown_beside_copies", &MachineProfile::gemm_slowdown_beside_copies, 1.0, 10.0},
};
constexpr int kMaxSmCount = 1024;

}  // namespace

MachineProfile parse_machine_profile(std::string_view text, const std::string& name) {
  return read_json_text(text, name, [](const Json& j) {
    j.only_members({"device", "peak_flops", "fp8_speedup", "memory_bytes_per_s", "sm_count", "collective_sms", "overlapped_call_seconds",
                    "ficco_threshold_seconds", "gemm_efficiency", "overlap_gemm_efficiency", "fp8_overlap_gemm_rate", "attention_efficiency", "gemm_fixed_seconds", "link_bytes_per_s",
                    "nvlink_bytes_per_s", "copy_latency_seconds", "launch_seconds", "sm_copy_bytes_per_s_per_sm", "sm_reduce_bytes_per_s_per_sm", "barrier_seconds",
                    "gemm_slowdown_beside_copies", "tile_rates", "prediction_accuracy", "fp8_prediction_accuracy", "collectives",
                    "source"});
    MachineProfile p;
    p.device = j["device"].text();
    j["peak_flops"];  // required, as memory_bytes_per_s: the rest has defaults
    j["memory_bytes_per_s"];
    if (const Json* v = j.find("source")) p.source = v->text();
    for (const Field& f : kFields)
      if (const Json* v = j.find(f.name)) p.*f.field = v->number(f.lo, f.hi);
    if (const Json* v = j.find("sm_count")) p.sm_count = v->to_int(1, kMaxSmCount);
    if (const Json* v = j.find("collective_sms")) p.collective_sms = v->to_int(0, p.sm_count - 1);
    if (p.collective_sms >= p.sm_count)
      j.reject("collective_sms " + std::to_string(p.collective_sms) + " must be below sm_count " + std::to_string(p.sm_count));
    if (const Json* rates = j.find("tile_rates"))
      for (const auto& [tile, rate] : rates->members()) p.tile_rates[tile] = rate.number(1e-3, 10);
    for (const auto& [key, field] : {std::pair{"prediction_accuracy", &MachineProfile::prediction_accuracy},
                                     std::pair{"fp8_prediction_accuracy", &MachineProfile::fp8_prediction_accuracy}})
      if (const Json* accuracy = j.find(key))
        for (const auto& [strategy, a] : accuracy->members()) {
          a.only_members({"bias", "error"});
          // bias is the mean of predicted / measured - 1 (at least -1); error its mean magnitude.
          (p.*field)[strategy] = MachineProfile::PredictionAccuracy{a["bias"].number(-1, 100), a["error"].number(0, 100)};
        }
    if (const Json* curves = j.find("collectives"))
      for (const Json& item : curves->items()) {
        item.only_members({"kind", "world_size", "bytes", "seconds", "overlapped_slowdown"});
        CollectiveCurve c;
        c.kind = item["kind"].text_as(parse_collective_kind);
        c.world_size = item["world_size"].to_int(2, kMaxFileWorld);
        for (const Json& b : item["bytes"].items()) c.bytes.push_back(b.number(1, 1e15));
        for (const Json& s : item["seconds"].items()) c.seconds.push_back(s.number(1e-9, 1e3));
        if (const Json* v = item.find("overlapped_slowdown")) c.overlapped_slowdown = v->number(1, 100);
        if (c.bytes.size() != c.seconds.size() || c.bytes.empty()) item.reject("a curve needs as many seconds as bytes, at least one");
        for (size_t i = 1; i < c.bytes.size(); ++i)
          if (!(c.bytes[i] > c.bytes[i - 1])) item["bytes"].items()[i].reject("bytes must increase");
        if (p.curve(c.kind, c.world_size)) item.reject("a second " + std::string(to_string(c.kind)) + " curve at world " + std::to_string(c.world_size));
        p.collectives.push_back(std::move(c));
      }
    return p;
  });
}

MachineProfile load_machine_profile(const std::string& path) {
  return parse_machine_profile(read_text_file(path, "machine profile"), path);
}

}  // namespace weft
