#include "bench_suite.hpp"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace weft {

BenchSuite parse_suite(const Json& json) {
  BenchSuite suite;
  suite.name = json["name"].text();
  if (json.has("description")) suite.description = json["description"].text();
  for (const Json& r : json["rows"].items()) {
    SuiteRow row;
    row.op = parse_op(r["op"].text());
    row.m = r["m"].integer();
    row.n = r["n"].integer();
    row.k = r["k"].integer();
    if (r.has("name")) row.name = r["name"].text();
    if (r.has("source")) row.source = r["source"].text();
    if (r.has("experts")) row.experts = static_cast<int>(r["experts"].integer());
    if (r.has("topk")) row.topk = static_cast<int>(r["topk"].integer());
    if (r.has("split")) {
      const std::string split = r["split"].text();
      if (split != "tensor" && split != "none") throw std::invalid_argument("suite row split must be 'tensor' or 'none', got '" + split + "'");
      row.tensor_split = split == "tensor";
    }
    suite.rows.push_back(row);
  }
  return suite;
}

BenchSuite load_suite(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read suite file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return parse_suite(Json::parse(text.str()));
  } catch (const std::exception& e) {
    throw std::invalid_argument("suite file '" + path + "': " + e.what());
  }
}

Problem problem_for(const SuiteRow& row, int world, uint64_t seed) {
  auto split = [&](int64_t value, const char* what) {
    if (!row.tensor_split) return value;
    if (value % world != 0)
      throw std::invalid_argument("suite row '" + row.name + "': " + what + "=" + std::to_string(value) +
                                  " is not divisible by world size " + std::to_string(world));
    return value / world;
  };
  Problem p;
  p.op = row.op;
  p.world_size = world;
  p.m = row.m;
  p.n = row.n;
  p.k = row.k;
  switch (row.op) {
    case OpKind::ag_gemm:
      p.m = split(row.m, "m");
      p.n = split(row.n, "n");
      break;
    case OpKind::gemm_rs:
    case OpKind::gemm_ar: p.k = split(row.k, "k"); break;
    case OpKind::gemm_a2a:
    case OpKind::a2a_gemm: p.m = split(row.m, "m"); break;
    case OpKind::ag_moe:
      p.m = split(row.m, "m");
      p.n = split(row.n, "n");
      break;
    case OpKind::moe_rs:
      p.m = split(row.m, "m");
      p.k = split(row.k, "k");
      break;
  }
  p.experts = row.experts;
  p.topk = row.topk;
  draw_routing(p, seed);
  check_problem(p);
  return p;
}

}  // namespace weft
