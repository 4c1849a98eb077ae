#include "bench_suite.hpp"

#include <stdexcept>

#include "common/text_file.hpp"

namespace weft {

BenchSuite parse_suite(std::string_view text, const std::string& name) {
  return read_json_text(text, name, [](const Json& json) {
    json.only_members({"name", "description", "rows"});
    BenchSuite suite;
    suite.name = json["name"].text();
    if (const Json* d = json.find("description")) suite.description = d->text();
    const Json& rows = json["rows"];
    if (rows.items().size() > kMaxSuiteRows)
      rows.reject(std::to_string(rows.items().size()) + " rows, more than the " + std::to_string(kMaxSuiteRows) +
                  " a suite may have (checking one row's plans takes about 0.1 s on the CPU, timing it seconds on GPUs): split the suite");
    for (const Json& r : rows.items()) {
      r.only_members({"name", "op", "m", "n", "k", "split", "experts", "topk", "source", "batch", "heads", "kv_heads", "head_dim", "causal"});
      SuiteRow row;
      row.op = r["op"].text_as(parse_op);
      row.m = r["m"].integer(1, kMaxFileDimension);
      if (is_attention(row.op)) {
        if (r.find("n") || r.find("k")) r.reject("an ag_attention row has no n and k: heads, kv_heads, head_dim and batch give its columns");
        row.heads = r["heads"].to_int(1, kMaxFileHeads);
        row.head_dim = r["head_dim"].to_int(1, kMaxFileHeadDim);
        row.kv_heads = r.find("kv_heads") ? r["kv_heads"].to_int(1, row.heads) : row.heads;
        row.batch = r.find("batch") ? r["batch"].to_int(1, kMaxFileBatch) : 1;
        if (const Json* v = r.find("causal")) row.causal = v->boolean();
      } else {
        for (const char* field : {"batch", "heads", "kv_heads", "head_dim", "causal"})
          if (r.find(field)) r.reject(std::string(field) + " is an ag_attention row's, not " + std::string(to_string(row.op)) + "'s");
        row.n = r["n"].integer(1, kMaxFileDimension);
        row.k = r["k"].integer(1, kMaxFileDimension);
      }
      if (const Json* v = r.find("name")) row.name = v->text();
      if (const Json* v = r.find("source")) row.source = v->text();
      if (const Json* v = r.find("experts")) row.experts = v->to_int(1, kMaxFileExperts);
      if (const Json* v = r.find("topk")) row.topk = v->to_int(1, row.experts ? row.experts : kMaxFileExperts);
      if (const Json* v = r.find("split")) {
        const std::string split = v->text();
        if (split != "tensor" && split != "none") v->reject("split must be 'tensor' or 'none', got '" + split + "'");
        row.tensor_split = split == "tensor";
      }
      if (is_moe(row.op) != (row.experts > 0) || (row.experts > 0) != (row.topk > 0))
        r.reject(is_moe(row.op) ? "an " + std::string(to_string(row.op)) + " row needs experts and topk"
                                : "experts and topk are for the MoE ops (ag_moe, moe_rs), not " + std::string(to_string(row.op)));
      suite.rows.push_back(row);
    }
    return suite;
  });
}

BenchSuite load_suite(const std::string& path) { return parse_suite(read_text_file(path, "suite file"), path); }

Problem problem_for(const SuiteRow& row, int world, uint64_t seed, DType dtype, Scaling scaling) {
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
    case OpKind::ag_attention:
      p.m = split(row.m, "m");  // the sequence's tokens, a block per rank
      p.batch = row.batch;
      p.heads = row.heads;
      p.kv_heads = row.kv_heads;
      p.head_dim = row.head_dim;
      p.causal = row.causal;
      break;
  }
  p.experts = row.experts;
  p.topk = row.topk;
  p.input_dtype = dtype;
  p.scaling = scaling;
  draw_routing(p, seed);
  check_problem(p);
  return p;
}

}  // namespace weft
