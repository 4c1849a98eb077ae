#include "arguments.hpp"

#include "weft/model/wave_partition.hpp"
#include "weft/plan/auto.hpp"
#include "weft/plan/chunked.hpp"

#include <climits>
#include <cmath>
#include <algorithm>
#include <optional>
#include <cstdint>
#include <sstream>
#include <stdexcept>

namespace weft::cli {

Arguments::Arguments(int argc, char** argv, int first, const CommandSpec& spec) : spec_(spec) {
  const std::string command = "weft " + spec.name;
  for (int i = first; i < argc; ++i) {
    std::string word = argv[i];
    if (word.rfind("--", 0) != 0 || word.size() == 2)
      throw std::invalid_argument("unexpected argument '" + word + "' (options are --name value; " + command + " --help)");
    word = word.substr(2);
    std::optional<std::string> value;
    if (const auto eq = word.find('='); eq != std::string::npos) {
      value = word.substr(eq + 1);
      word = word.substr(0, eq);
    }
    const OptionSpec* option = spec.find(word);
    if (!option) throw std::invalid_argument("unknown option --" + word + " for " + command + " (" + command + " --help lists its options)");
    if (values_.count(word)) throw std::invalid_argument("--" + word + " is given twice");
    if (option->kind == OptionKind::flag) {
      if (value) throw std::invalid_argument("--" + word + " is a flag and takes no value (got '" + *value + "')");
      values_[word] = "";
      continue;
    }
    if (!value) {
      if (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0)
        throw std::invalid_argument("--" + word + " needs a value (" + option->value + ": " + option->help + ")");
      value = argv[++i];
    }
    if (value->empty()) throw std::invalid_argument("--" + word + " needs a value (" + option->value + ": " + option->help + ")");
    values_[word] = *value;
  }
}

const OptionSpec& Arguments::spec_of(const std::string& name) const {
  const OptionSpec* option = spec_.find(name);
  // A command reading an option its table does not list is weft's bug, not the user's.
  if (!option) throw std::logic_error("weft " + spec_.name + " reads --" + name + ", which its option table does not list");
  return *option;
}

bool Arguments::flag(const std::string& name) const {
  spec_of(name);
  read_[name] = true;
  return values_.count(name) > 0;
}

std::string Arguments::text(const std::string& name, const std::string& fallback) const {
  spec_of(name);
  read_[name] = true;
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

namespace {

int64_t strict_integer(const OptionSpec& option, const std::string& value) {
  int64_t parsed = 0;
  try {
    size_t used = 0;
    parsed = std::stoll(value, &used);
    if (used != value.size()) throw std::invalid_argument(value);
  } catch (const std::out_of_range&) {
    throw std::invalid_argument("--" + option.name + " must be between " + std::to_string(option.min) + " and " + std::to_string(option.max) +
                                ", got " + value);
  } catch (const std::exception&) {
    throw std::invalid_argument("--" + option.name + " expects an integer, got '" + value + "'");
  }
  if (parsed < option.min || parsed > option.max)
    throw std::invalid_argument("--" + option.name + " must be between " + std::to_string(option.min) + " and " + std::to_string(option.max) +
                                ", got " + value);
  return parsed;
}

}  // namespace

int64_t Arguments::integer(const std::string& name, int64_t fallback) const {
  const std::string value = text(name, "");
  return value.empty() ? fallback : strict_integer(spec_of(name), value);
}

std::vector<int> Arguments::integers(const std::string& name, const std::vector<int>& fallback) const {
  const std::string value = text(name, "");
  if (value.empty()) return fallback;
  std::vector<int> out;
  std::stringstream in(value);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) throw std::invalid_argument("--" + name + " expects a comma-separated list of integers, got '" + value + "'");
    out.push_back(static_cast<int>(strict_integer(spec_of(name), item)));
  }
  // getline drops a trailing empty item: "2," would read as "2".
  if (out.empty() || value.back() == ',')
    throw std::invalid_argument("--" + name + " expects a comma-separated list of integers, got '" + value + "'");
  return out;
}

std::vector<int64_t> parse_shape(const std::string& text, size_t parts) {
  const std::string expected =
      parts == 3 ? "a shape MxNxK of positive integers" : "a shape of " + std::to_string(parts) + " positive integers separated by 'x'";
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
      throw std::invalid_argument("expected " + expected + ", got '" + text + "'");
    }
    if (x == std::string::npos) break;
    start = x + 1;
  }
  if (dims.size() != parts) throw std::invalid_argument("expected " + expected + ", got '" + text + "'");
  return dims;
}

std::vector<std::string> Arguments::list(const std::string& name, const std::vector<std::string>& fallback) const {
  const std::string value = text(name, "");
  if (value.empty()) return fallback;
  std::vector<std::string> items;
  std::stringstream in(value);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) throw std::invalid_argument("--" + name + " expects a comma-separated list without empty items, got '" + value + "'");
    items.push_back(item);
  }
  if (value.back() == ',') throw std::invalid_argument("--" + name + " expects a comma-separated list without empty items, got '" + value + "'");
  return items;
}

std::vector<std::string> Arguments::unread() const {
  std::vector<std::string> names;
  for (const auto& [name, value] : values_)
    if (!read_.count(name)) names.push_back("--" + name);
  return names;
}

namespace {

// ag_attention's shape: --batch, --heads, --kv-heads, --head-dim, --causal; n and k are not its.
void attention_shape_from(const Arguments& args, Problem& p) {
  const bool attention = is_attention(p.op);
  const std::string n = args.text("n", ""), k = args.text("k", "");
  if (attention && (!n.empty() || !k.empty()))
    throw std::invalid_argument("--n and --k are the GEMM ops' sizes; ag_attention's come from --batch, --heads, --kv-heads and --head-dim");
  const int64_t batch = args.integer("batch", 0), heads = args.integer("heads", 0), kv_heads = args.integer("kv-heads", 0),
                head_dim = args.integer("head-dim", 0);
  const bool causal = args.flag("causal");
  if (!attention) {
    if (batch || heads || kv_heads || head_dim || causal)
      throw std::invalid_argument("--batch, --heads, --kv-heads, --head-dim and --causal are for ag_attention, not " + std::string(to_string(p.op)));
    p.n = args.integer("n", 128);
    p.k = args.integer("k", 64);
    return;
  }
  p.batch = static_cast<int>(batch ? batch : 1);
  p.heads = static_cast<int>(heads ? heads : 8);
  p.kv_heads = static_cast<int>(kv_heads ? kv_heads : p.heads);
  p.head_dim = static_cast<int>(head_dim ? head_dim : 64);
  p.causal = causal;
  require_problem_fits(p);  // Q's columns (batch x heads x head_dim) before anything is laid out
}

}  // namespace

// --dtype (or its older name --input-dtype), --b-dtype, --output-dtype, --scaling and --b-layout.
void dtypes_from(const Arguments& args, Problem& p) {
  const std::string dtype = args.text("dtype", ""), input = args.text("input-dtype", "");
  if (!dtype.empty() && !input.empty()) throw std::invalid_argument("--dtype and --input-dtype name the same thing: give one");
  p.input_dtype = parse_dtype(!dtype.empty() ? dtype : !input.empty() ? input : "bf16");
  if (const std::string b = args.text("b-dtype", ""); !b.empty()) p.b_dtype = parse_dtype(b);
  p.output_dtype = parse_dtype(args.text("output-dtype", "bf16"));
  const std::string scaling = args.text("scaling", "");
  if (is_fp8(p.input_dtype) && scaling.empty())
    throw std::invalid_argument("--dtype " + std::string(to_string(p.input_dtype)) + " needs --scaling tensor, row or block");
  p.scaling = parse_scaling(scaling.empty() ? "none" : scaling);
  p.b_layout = parse_b_layout(args.text("b-layout", "nk"));
}


Problem problem_from(const Arguments& args) {
  Problem p;
  p.op = parse_op(args.text("op", "gemm_ar"));
  p.m = args.integer("m", 256);
  p.world_size = static_cast<int>(args.integer("world", 2));
  attention_shape_from(args, p);
  dtypes_from(args, p);
  const auto seed = static_cast<uint64_t>(args.integer("seed", 1));
  const int64_t experts = args.integer("experts", 0), topk = args.integer("topk", 0);
  if (!is_moe(p.op) && (experts || topk))
    throw std::invalid_argument("--experts and --topk are for the MoE ops (ag_moe, moe_rs), not " + std::string(to_string(p.op)));
  if (is_moe(p.op)) {
    p.experts = static_cast<int>(experts ? experts : 8);
    p.topk = static_cast<int>(topk ? topk : std::min<int64_t>(2, p.experts));
    p.routing_on_device = args.flag("routing-on-device");
  } else if (args.flag("routing-on-device")) {
    throw std::invalid_argument("--routing-on-device is for the MoE ops (ag_moe, moe_rs), not " + std::string(to_string(p.op)));
  }
  // Routing tables hold an entry per routed row: bounded before they are drawn.
  const int64_t routed = static_cast<int64_t>(p.world_size) * p.m * std::max(1, p.topk);
  if ((routes_rows(p.op) || is_moe(p.op)) && routed > kMaxRoutedRows)
    throw std::invalid_argument("--world x --m" + std::string(is_moe(p.op) ? " x --topk" : "") + " is " + std::to_string(routed) +
                                " routed rows, more than the " + std::to_string(kMaxRoutedRows) + " weft lays out on the CPU");
  draw_routing(p, seed);
  check_problem(p);
  return p;
}

std::vector<OpKind> ops_from(const Arguments& args, bool with_attention) {
  const std::vector<std::string> names = args.list("op", {});
  if (names.empty()) {
    std::vector<OpKind> ops = all_ops();
    if (with_attention) ops.insert(ops.end(), attention_ops().begin(), attention_ops().end());
    return ops;
  }
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
  for (const int world : args.integers("world", {visible})) {
    if (world < 1 || world > visible)
      throw std::invalid_argument("--world " + std::to_string(world) + ": must be between 1 and the " + std::to_string(visible) +
                                  " GPU(s) visible");
    sizes.push_back(world);
  }
  return sizes;
}

PlanOptions plan_options_from(const Arguments& args) {
  PlanOptions o;
  const std::string tile = args.text("tile", "128x128");
  const auto x = tile.find('x');
  auto side = [&](const std::string& part) {
    try {
      size_t used = 0;
      const long long v = std::stoll(part, &used);
      if (used == part.size() && v >= 1 && v <= 4096) return static_cast<int>(v);
    } catch (const std::exception&) {
    }
    throw std::invalid_argument("--tile expects MxN with M and N between 1 and 4096, got '" + tile + "'");
  };
  if (x == std::string::npos) throw std::invalid_argument("--tile expects MxN with M and N between 1 and 4096, got '" + tile + "'");
  o.tile_m = side(tile.substr(0, x));
  o.tile_n = side(tile.substr(x + 1));
  o.raster = parse_raster(args.text("raster", std::string(to_string(o.raster))));
  o.swizzle = static_cast<int>(args.integer("swizzle", o.swizzle));
  const std::string machine = args.text("machine", "");
  if (!machine.empty()) o.machine = load_machine_profile(machine);
  // auto as a caller's weft::Op makes it: the shipped profile where no --machine is given, and the
  // shipped tuning table beside that profile (WEFT_MACHINE_PROFILE / WEFT_TUNING_TABLE override).
  use_default_auto_inputs(o);
  chunked_options_from(args, o.chunked);
  tilelink_options_from(args, o.tilelink);
  const std::string source = args.text("ag-source", "");
  if (!source.empty()) o.all_gather_source = parse_all_gather_source(source);
  o.moe_grouped_gemm = !args.flag("per-expert-moe-gemm");
  return o;
}

std::optional<Topology> topology_from(const Arguments& args, int world) {
  const int64_t nodes = args.integer("nodes", 0);  // 0: not given
  if (args.flag("no-p2p")) {
    if (nodes != 0) throw std::invalid_argument("--no-p2p and --nodes " + std::to_string(nodes) + ": give one of them");
    return Topology::no_load_store(world);
  }
  if (nodes == 0) return std::nullopt;
  if (world % nodes != 0)
    throw std::invalid_argument("--nodes " + std::to_string(nodes) + " must divide the world size " + std::to_string(world) +
                                " (the same number of ranks on every node)");
  return Topology::nodes_of(static_cast<int>(nodes), world / static_cast<int>(nodes));
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

void require_knobs_apply(const Arguments& args, const std::vector<std::string>& names) {
  struct Knob {
    const char* option;
    std::vector<std::string> readers;
  };
  // auto passes the options on to the strategy it picks, which may be any of them.
  static const Knob knobs[] = {{"schedule", {"chunked", "auto"}},    {"template", {"chunked", "auto"}}, {"chunks", {"chunked", "auto"}},
                               {"backend", {"chunked", "auto"}},     {"group-size", {"chunked", "auto"}},
                               {"comm-sms", {"chunked", "tilelink", "auto"}}, {"comm-tile-rows", {"tilelink", "auto"}},
                               {"order", {"tilelink", "auto"}},      {"ag-source", {"decomposed", "fused", "auto"}},
                               {"per-expert-moe-gemm", {"sequential", "auto"}}};
  for (const Knob& knob : knobs) {
    if (args.text(knob.option, "\x01") == "\x01") continue;  // not given (a flag given reads as "")
    bool read = false;
    for (const std::string& name : names) read = read || std::find(knob.readers.begin(), knob.readers.end(), name) != knob.readers.end();
    if (read) continue;
    std::string chosen, readers;
    for (const std::string& name : names) chosen += (chosen.empty() ? "" : ", ") + name;
    for (size_t i = 0; i + 1 < knob.readers.size(); ++i) readers += (readers.empty() ? "" : " and ") + knob.readers[i];
    throw std::invalid_argument("--" + std::string(knob.option) + " is read by " + readers + " only, and the strategies chosen (" + chosen +
                                ") would ignore it; give --strategy " + knob.readers.front() + " or leave the option out");
  }
}

void require_supports(const Strategy& strategy, OpKind op) {
  if (strategy.supports(op)) return;
  std::string ops;
  for (const auto* list : {&all_ops(), &attention_ops()})
    for (OpKind o : *list)
      if (strategy.supports(o)) ops += (ops.empty() ? "" : ", ") + std::string(to_string(o));
  throw std::invalid_argument("strategy " + strategy.name + " has no plan for " + std::string(to_string(op)) + " (it takes " + ops + ")");
}

void tilelink_options_from(const Arguments& args, TileLinkOptions& o) {
  o.comm_sms = static_cast<int>(args.integer("comm-sms", o.comm_sms));
  o.comm_tile_rows = args.integer("comm-tile-rows", o.comm_tile_rows);
  const std::string order = args.text("order", "");
  if (order == "all_to_all") o.ring = false;
  else if (order == "ring") o.ring = true;
  else if (!order.empty()) throw std::invalid_argument("--order expects ring or all_to_all, got '" + order + "'");
}

void signal_options_from(const Arguments& args, PlanOptions& o) {
  o.gemm_sms = static_cast<int>(args.integer("gemm-sms", o.gemm_sms));
  o.gemm_cta_per_tile = args.flag("gemm-cta-per-tile") || o.gemm_cta_per_tile;
  const std::string partition = args.text("partition", "");
  if (!partition.empty()) o.wave_partition = parse_wave_partition(partition);
  const std::string restore = args.text("restore", "");
  if (!restore.empty()) o.signal_restore = parse_signal_restore(restore);
  o.comm_chunks = static_cast<int>(args.integer("comm-chunks", o.comm_chunks));
}

}  // namespace weft::cli
