#include "weft/model/machine_profile.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "common/json.hpp"

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
  o["memory_bytes_per_s"] = p.memory_bytes_per_s;
  o["sm_count"] = p.sm_count;
  o["collective_sms"] = p.collective_sms;
  o["overlapped_call_seconds"] = p.overlapped_call_seconds;
  o["ficco_threshold_seconds"] = p.ficco_threshold_seconds;
  o["gemm_efficiency"] = p.gemm_efficiency;
  o["overlap_gemm_efficiency"] = p.overlap_gemm_efficiency;
  o["gemm_fixed_seconds"] = p.gemm_fixed_seconds;
  o["link_bytes_per_s"] = p.link_bytes_per_s;
  o["nvlink_bytes_per_s"] = p.nvlink_bytes_per_s;
  o["copy_latency_seconds"] = p.copy_latency_seconds;
  o["launch_seconds"] = p.launch_seconds;
  o["sm_copy_bytes_per_s_per_sm"] = p.sm_copy_bytes_per_s_per_sm;
  o["barrier_seconds"] = p.barrier_seconds;
  o["gemm_slowdown_beside_copies"] = p.gemm_slowdown_beside_copies;
  if (!p.tile_rates.empty()) {
    Json::Object rates;
    for (const auto& [tile, rate] : p.tile_rates) rates[tile] = rate;
    o["tile_rates"] = Json(std::move(rates));
  }
  if (!p.prediction_accuracy.empty()) {
    Json::Object accuracy;
    for (const auto& [name, a] : p.prediction_accuracy) accuracy[name] = Json(Json::Object{{"bias", Json(a.bias)}, {"error", Json(a.error)}});
    o["prediction_accuracy"] = Json(std::move(accuracy));
  }
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

MachineProfile parse_machine_profile(std::string_view text) {
  const Json j = Json::parse(text);
  MachineProfile p;
  p.device = j["device"].text();
  p.peak_flops = j["peak_flops"].number();
  p.memory_bytes_per_s = j["memory_bytes_per_s"].number();
  if (j.has("source")) p.source = j["source"].text();
  if (!(p.peak_flops > 0) || !(p.memory_bytes_per_s > 0))
    throw std::invalid_argument("machine profile: peak_flops and memory_bytes_per_s must be positive");
  if (j.has("sm_count")) p.sm_count = static_cast<int>(j["sm_count"].integer());
  if (j.has("collective_sms")) p.collective_sms = static_cast<int>(j["collective_sms"].integer());
  if (j.has("overlapped_call_seconds")) p.overlapped_call_seconds = j["overlapped_call_seconds"].number();
  if (p.overlapped_call_seconds < 0) throw std::invalid_argument("machine profile: overlapped_call_seconds must not be negative");
  if (j.has("ficco_threshold_seconds")) p.ficco_threshold_seconds = j["ficco_threshold_seconds"].number();
  for (auto [name, field] : {std::pair{"gemm_efficiency", &p.gemm_efficiency}, {"overlap_gemm_efficiency", &p.overlap_gemm_efficiency},
                             {"gemm_fixed_seconds", &p.gemm_fixed_seconds}, {"link_bytes_per_s", &p.link_bytes_per_s},
                             {"nvlink_bytes_per_s", &p.nvlink_bytes_per_s}, {"copy_latency_seconds", &p.copy_latency_seconds},
                             {"launch_seconds", &p.launch_seconds}, {"sm_copy_bytes_per_s_per_sm", &p.sm_copy_bytes_per_s_per_sm},
                             {"barrier_seconds", &p.barrier_seconds}, {"gemm_slowdown_beside_copies", &p.gemm_slowdown_beside_copies}}) {
    if (j.has(name)) *field = j[name].number();
    if (!(*field >= 0)) throw std::invalid_argument(std::string("machine profile: ") + name + " must not be negative");
  }
  if (j.has("tile_rates"))
    for (const auto& [tile, rate] : j["tile_rates"].members()) {
      p.tile_rates[tile] = rate.number();
      if (!(p.tile_rates[tile] > 0)) throw std::invalid_argument("machine profile: tile rate of " + tile + " must be positive");
    }
  if (j.has("prediction_accuracy"))
    for (const auto& [name, a] : j["prediction_accuracy"].members())
      p.prediction_accuracy[name] = MachineProfile::PredictionAccuracy{a["bias"].number(), a["error"].number()};
  if (!(p.ficco_threshold_seconds > 0)) throw std::invalid_argument("machine profile: ficco_threshold_seconds must be positive");
  if (p.sm_count < 1 || p.collective_sms < 0 || p.collective_sms >= p.sm_count)
    throw std::invalid_argument("machine profile: need sm_count >= 1 and 0 <= collective_sms < sm_count (got " +
                                std::to_string(p.sm_count) + ", " + std::to_string(p.collective_sms) + ")");
  if (j.has("collectives"))
    for (const Json& item : j["collectives"].items()) {
      CollectiveCurve c;
      c.kind = parse_collective_kind(item["kind"].text());
      c.world_size = static_cast<int>(item["world_size"].integer());
      for (const Json& b : item["bytes"].items()) c.bytes.push_back(b.number());
      for (const Json& s : item["seconds"].items()) c.seconds.push_back(s.number());
      if (item.has("overlapped_slowdown")) c.overlapped_slowdown = item["overlapped_slowdown"].number();
      const std::string which = "machine profile: curve " + std::string(to_string(c.kind)) + " at world " + std::to_string(c.world_size);
      if (c.bytes.size() != c.seconds.size() || c.bytes.empty())
        throw std::invalid_argument(which + " needs as many seconds as bytes, at least one");
      for (size_t i = 1; i < c.bytes.size(); ++i)
        if (!(c.bytes[i] > c.bytes[i - 1])) throw std::invalid_argument(which + ": bytes must increase");
      if (!(c.overlapped_slowdown >= 1.0)) throw std::invalid_argument(which + ": overlapped_slowdown must be at least 1");
      p.collectives.push_back(std::move(c));
    }
  return p;
}

MachineProfile load_machine_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read machine profile '" + path + "' (write one with weft tune --calibrate)");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return parse_machine_profile(text.str());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("machine profile '" + path + "': " + e.what());
  }
}

}  // namespace weft
