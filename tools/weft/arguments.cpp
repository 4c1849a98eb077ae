#include "arguments.hpp"

#include "weft/plan/chunked.hpp"

#include <climits>
#include <cstdint>
#include <sstream>
#include <stdexcept>

namespace weft::cli {

Arguments::Arguments(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string word = argv[i];
    if (word.rfind("--", 0) != 0) throw std::invalid_argument("unexpected argument '" + word + "'");
    word = word.substr(2);
    if (auto eq = word.find('='); eq != std::string::npos) {
      values_[word.substr(0, eq)] = word.substr(eq + 1);
    } else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
      values_[word] = argv[++i];
    } else {
      values_[word] = "";
    }
  }
}

bool Arguments::flag(const std::string& name) const {
  read_[name] = true;
  return values_.count(name) > 0;
}

std::string Arguments::text(const std::string& name, const std::string& fallback) const {
  read_[name] = true;
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Arguments::integer(const std::string& name, int64_t fallback) const {
  const std::string value = text(name, "");
  if (value.empty()) return fallback;
  try {
    size_t used = 0;
    const int64_t parsed = std::stoll(value, &used);
    if (used == value.size()) return parsed;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument("--" + name + " expects an integer, got '" + value + "'");
}

std::vector<int> Arguments::integers(const std::string& name, const std::vector<int>& fallback) const {
  std::vector<int> out;
  for (const std::string& item : list(name, {})) {
    try {
      size_t used = 0;
      const long long parsed = std::stoll(item, &used);
      if (used == item.size() && parsed >= INT32_MIN && parsed <= INT32_MAX) {
        out.push_back(static_cast<int>(parsed));
        continue;
      }
    } catch (const std::exception&) {
    }
    throw std::invalid_argument("--" + name + " expects a comma-separated list of integers, got '" + item + "'");
  }
  return out.empty() ? fallback : out;
}

std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> dims;
  size_t start = 0;
  while (true) {
    const size_t x = text.find('x', start);
    const std::string part = text.substr(start, x == std::string::npos ? std::string::npos : x - start);
    try {
      size_t used = 0;
      const long long value = std::stoll(part, &used);
      if (used != part.size() || value < 1) throw std::invalid_argument(part);
      dims.push_back(value);
    } catch (const std::exception&) {
      throw std::invalid_argument("expected a shape MxNxK of positive integers, got '" + text + "'");
    }
    if (x == std::string::npos) break;
    start = x + 1;
  }
  if (dims.size() != 3) throw std::invalid_argument("expected a shape MxNxK of positive integers, got '" + text + "'");
  return dims;
}

std::vector<std::string> Arguments::list(const std::string& name, const std::vector<std::string>& fallback) const {
  const std::string value = text(name, "");
  if (value.empty()) return fallback;
  std::vector<std::string> items;
  std::stringstream in(value);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) items.push_back(item);
  return items;
}

std::vector<std::string> Arguments::unread() const {
  std::vector<std::string> names;
  for (const auto& [name, value] : values_)
    if (!read_.count(name)) names.push_back("--" + name);
  return names;
}

Problem problem_from(const Arguments& args) {
  Problem p;
  p.op = parse_op(args.text("op", "gemm_ar"));
  p.m = args.integer("m", 256);
  p.n = args.integer("n", 128);
  p.k = args.integer("k", 64);
  p.world_size = static_cast<int>(args.integer("world", 2));
  p.input_dtype = parse_dtype(args.text("input-dtype", "bf16"));
  p.output_dtype = parse_dtype(args.text("output-dtype", "bf16"));
  const auto seed = static_cast<uint64_t>(args.integer("seed", 1));
  if (is_moe(p.op)) {
    p.experts = static_cast<int>(args.integer("experts", 8));
    p.topk = static_cast<int>(args.integer("topk", 2));
  }
  draw_routing(p, seed);
  check_problem(p);
  return p;
}

std::vector<OpKind> ops_from(const Arguments& args) {
  const std::vector<std::string> names = args.list("op", {});
  if (names.empty()) return all_ops();
  std::vector<OpKind> ops;
  for (const auto& name : names) ops.push_back(parse_op(name));
  return ops;
}

std::vector<std::string> strategies_from(const Arguments& args) {
  std::vector<std::string> names;
  for (const auto& s : strategies()) names.push_back(s.name);
  names = args.list("strategy", names);
  for (const auto& n : names) find_strategy(n);  // unknown names fail before anything runs
  return names;
}

std::string suite_path(const std::string& name) {
  if (name.find('/') != std::string::npos || name.ends_with(".json")) return name;
  return std::string(WEFT_BENCH_DIR) + "/" + name + ".json";
}

std::vector<int> world_sizes_from(const Arguments& args, int visible) {
  std::vector<int> sizes;
  for (const auto& w : args.list("world", {std::to_string(visible)})) {
    const int world = std::stoi(w);
    if (world < 1 || world > visible)
      throw std::invalid_argument("--world " + w + ": only " + std::to_string(visible) + " GPU(s) are visible");
    sizes.push_back(world);
  }
  return sizes;
}

PlanOptions plan_options_from(const Arguments& args) {
  PlanOptions o;
  const std::string tile = args.text("tile", "128x128");
  const auto x = tile.find('x');
  if (x == std::string::npos) throw std::invalid_argument("--tile expects MxN, got '" + tile + "'");
  o.tile_m = std::stoi(tile.substr(0, x));
  o.tile_n = std::stoi(tile.substr(x + 1));
  if (o.tile_m < 1 || o.tile_n < 1) throw std::invalid_argument("--tile sizes must be positive, got '" + tile + "'");
  o.raster = parse_raster(args.text("raster", std::string(to_string(o.raster))));
  o.swizzle = static_cast<int>(args.integer("swizzle", o.swizzle));
  const std::string machine = args.text("machine", "");
  if (!machine.empty()) o.machine = load_machine_profile(machine);
  chunked_options_from(args, o.chunked);
  tilelink_options_from(args, o.tilelink);
  return o;
}

void chunked_options_from(const Arguments& args, ChunkedOptions& o) {
  const std::string shape = args.text("template", "");
  if (!shape.empty()) o.shape = parse_schedule_shape(shape);
  o.chunks = static_cast<int>(args.integer("chunks", o.chunks));
  const std::string backend = args.text("backend", "");
  if (!backend.empty()) o.backend = parse_chunk_backend(backend);
  o.comm_sms = static_cast<int>(args.integer("comm-sms", o.comm_sms));
  o.group_size = static_cast<int>(args.integer("group-size", o.group_size));
  const std::string schedule = args.text("schedule", "");
  if (!schedule.empty()) o.schedule = load_schedule(schedule);
}

void tilelink_options_from(const Arguments& args, TileLinkOptions& o) {
  o.comm_sms = static_cast<int>(args.integer("comm-sms", o.comm_sms));
  o.comm_tile_rows = args.integer("comm-tile-rows", o.comm_tile_rows);
  const std::string order = args.text("order", "");
  if (order == "all_to_all") o.ring = false;
  else if (order == "ring") o.ring = true;
  else if (!order.empty()) throw std::invalid_argument("--order expects ring or all_to_all, got '" + order + "'");
}

}  // namespace weft::cli
