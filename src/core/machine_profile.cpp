#include "weft/core/machine_profile.hpp"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "weft/core/json.hpp"

namespace weft {

std::string machine_profile_json(const MachineProfile& p) {
  Json::Object o;
  o["device"] = p.device;
  o["peak_flops"] = p.peak_flops;
  o["memory_bytes_per_s"] = p.memory_bytes_per_s;
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
