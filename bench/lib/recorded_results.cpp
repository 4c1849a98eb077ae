#include "recorded_results.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>
#include <sstream>

#include "common/json.hpp"
#include "common/text_file.hpp"

namespace weft::bench {

namespace {

std::string canonical_strategy(const std::string& s) { return s.rfind("ficco=", 0) == 0 ? "ficco_" + s.substr(6) : s; }

// Splits one CSV line, honouring double quotes (suite row names are quoted).
std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false;
  for (char ch : line) {
    if (ch == '"') quoted = !quoted;
    else if (ch == ',' && !quoted) {
      fields.push_back(field);
      field.clear();
    } else {
      field += ch;
    }
  }
  fields.push_back(field);
  return fields;
}

RecordedRow make_row(const std::string& file, const std::string& name, OpKind op, const std::string& strategy, int world, int64_t m, int64_t n,
                     int64_t k, int experts, int topk, double t, double t_gemm, double t_comm, double t_seq) {
  RecordedRow r;
  r.file = file;
  r.row = name;
  r.problem = Problem{op, m, n, k, world, DType::bf16, DType::bf16, {}};
  r.problem.experts = experts;
  r.problem.topk = topk;
  draw_routing(r.problem, 1);
  r.strategy = canonical_strategy(strategy);
  r.t_ms = t;
  r.t_gemm_ms = t_gemm;
  r.t_comm_ms = t_comm;
  r.t_seq_ms = t_seq;
  return r;
}

// A CSV field read whole (std::stoi reads "2x" as 2 and 4294967298 as an exception without a name).
template <class T>
T csv_number(const std::string& field, const char* column, T lo, T hi) {
  T value{};
  const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
  if (error != std::errc() || end != field.data() + field.size() || !(value >= lo && value <= hi))
    throw std::invalid_argument(std::string(column) + ": '" + field + "' is not a number in " + std::to_string(lo) + ".." + std::to_string(hi));
  return value;
}

// An FP8 row's operands (weft bench --dtype e4m3 --scaling tensor|row); bf16 where the row does not say.
void set_dtype(Problem& p, std::string_view dtype, std::string_view scaling) {
  p.input_dtype = dtype.empty() ? DType::bf16 : parse_dtype(dtype);
  p.scaling = scaling.empty() ? Scaling::none : parse_scaling(scaling);
  if (p.input_dtype != DType::bf16 && p.input_dtype != DType::e4m3) throw std::invalid_argument("dtype: '" + std::string(dtype) + "' is not bf16 or e4m3");
  if ((p.input_dtype == DType::e4m3) != (p.scaling == Scaling::tensor || p.scaling == Scaling::row))
    throw std::invalid_argument("scaling: '" + std::string(scaling) + "' with dtype " + std::string(to_string(p.input_dtype)) +
                                " (e4m3 takes tensor or row, bf16 none)");
}

// Recorded times in milliseconds: finite, and a row of a day's run at most.
constexpr double kMaxRecordedMs = 1e8;

}  // namespace

std::vector<RecordedRow> read_recorded_rows(const std::string& folder, int min_world) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    const std::string path = entry.path().string();
    if (path.ends_with(".json") || path.ends_with(".csv")) files.push_back(path);
  }
  std::sort(files.begin(), files.end());
  std::map<std::string, RecordedRow> latest;
  auto keep = [&](RecordedRow r) {
    // auto's rows are its picks, measured again: a candidate's own row stands for each of them.
    if (r.problem.world_size < min_world || r.t_ms <= 0 || r.strategy.starts_with("auto")) return;
    std::ostringstream key;
    key << to_string(r.problem.op) << ' ' << r.problem.m << ' ' << r.problem.n << ' ' << r.problem.k << ' ' << r.problem.experts << ' '
        << r.problem.topk << ' ' << r.problem.batch << ' ' << r.problem.heads << ' ' << r.problem.kv_heads << ' ' << r.problem.head_dim << ' '
        << r.problem.causal << ' ' << r.problem.world_size << ' ' << to_string(r.problem.input_dtype) << ' ' << to_string(r.problem.scaling) << ' '
        << r.strategy;
    latest[key.str()] = std::move(r);
  };
  for (const std::string& path : files) {
    const std::string name = std::filesystem::path(path).filename().string();
    // These are weft bench's own files: one it cannot read is an error naming the file and the
    // place, not a file silently left out of the judgement.
    const std::string text = read_text_file(path, "results file");
    if (path.ends_with(".json")) {
      read_json_text(text, path, [&](const Json& doc) {
        const Json* rows = doc.is_object() ? doc.find("rows") : nullptr;
        if (!rows) return 0;  // another table
        for (const Json& r : rows->items()) {
          if (!r.has("t_ms") || !r.has("strategy") || !r.has("world")) continue;  // a row of another kind (no timing)
          // Attention rows: their shape is heads and head dimension (n and k are 0), which rows of
          // an older weft bench do not record: those stand for no known problem.
          const OpKind op = r["op"].text_as(parse_op);
          if (is_attention(op)) {
            if (!r.has("heads")) continue;
            RecordedRow row = make_row(name, r["row"].text(), op, r["strategy"].text(), r["world"].to_int(1, kMaxFileWorld),
                                       r["m"].integer(1, kMaxFileDimension), 0, 0, 0, 0, r["t_ms"].number(0, kMaxRecordedMs),
                                       r["t_gemm_ms"].number(0, kMaxRecordedMs), r["t_comm_ms"].number(0, kMaxRecordedMs),
                                       r["t_seq_ms"].number(0, kMaxRecordedMs));
            row.problem.batch = r["batch"].to_int(1, kMaxFileBatch);
            row.problem.heads = r["heads"].to_int(1, kMaxFileHeads);
            row.problem.kv_heads = r["kv_heads"].to_int(1, row.problem.heads);
            if (row.problem.heads % row.problem.kv_heads != 0) r.reject("kv_heads must divide heads");
            row.problem.head_dim = r["head_dim"].to_int(1, kMaxFileHeadDim);
            row.problem.causal = r["causal"].boolean();
            keep(std::move(row));
            continue;
          }
          // An MoE row that does not say its experts and topk (an older weft bench's) stands
          // for no known problem: rows of one m, n and k differ by them.
          if (is_moe(op) && !(r.has("experts") && r.has("topk"))) continue;
          const int experts = is_moe(op) ? r["experts"].to_int(1, kMaxFileExperts) : 0;
          const int topk = is_moe(op) ? r["topk"].to_int(1, experts) : 0;
          RecordedRow row = make_row(name, r["row"].text(), op, r["strategy"].text(), r["world"].to_int(1, kMaxFileWorld),
                                     r["m"].integer(1, kMaxFileDimension), r["n"].integer(1, kMaxFileDimension), r["k"].integer(1, kMaxFileDimension),
                                     experts, topk, r["t_ms"].number(0, kMaxRecordedMs), r["t_gemm_ms"].number(0, kMaxRecordedMs),
                                     r["t_comm_ms"].number(0, kMaxRecordedMs), r["t_seq_ms"].number(0, kMaxRecordedMs));
          try {
            set_dtype(row.problem, r.has("dtype") ? r["dtype"].text() : "", r.has("scaling") ? r["scaling"].text() : "");
          } catch (const std::invalid_argument& e) {
            r.reject(e.what());
          }
          keep(std::move(row));
        }
        return 0;
      });
      continue;
    }
    std::istringstream lines(text);
    std::string line;
    std::getline(lines, line);
    const std::vector<std::string> header = split_csv(line);
    auto column = [&](const char* want) {
      const auto it = std::find(header.begin(), header.end(), want);
      return it == header.end() ? -1 : static_cast<int>(it - header.begin());
    };
    const int c_row = column("row"), c_op = column("op"), c_strategy = column("strategy"), c_world = column("world"), c_m = column("m"),
              c_n = column("n"), c_k = column("k"), c_t = column("t_ms"), c_gemm = column("t_gemm_ms"), c_comm = column("t_comm_ms"),
              c_seq = column("t_seq_ms"), c_experts = column("experts"), c_topk = column("topk"), c_dtype = column("dtype"),
              c_scaling = column("scaling");
    if (std::min({c_row, c_op, c_strategy, c_world, c_m, c_n, c_k, c_t, c_gemm, c_comm, c_seq}) < 0) continue;  // another table
    for (int number = 2; std::getline(lines, line); ++number) {
      const auto f = split_csv(line);
      if (f.size() < header.size()) continue;
      auto at = [&](int c) { return f[static_cast<size_t>(c)]; };
      if (at(c_op) == to_string(OpKind::ag_attention)) continue;  // as the JSON's attention rows
      try {
        const OpKind op = parse_op(at(c_op));
        if (is_moe(op) && (c_experts < 0 || c_topk < 0)) continue;  // as the JSON's MoE rows without them
        const int experts = is_moe(op) ? csv_number(at(c_experts), "experts", 1, kMaxFileExperts) : 0;
        const int topk = is_moe(op) ? csv_number(at(c_topk), "topk", 1, experts) : 0;
        RecordedRow row = make_row(name, at(c_row), op, at(c_strategy), csv_number(at(c_world), "world", 1, kMaxFileWorld),
                                   csv_number(at(c_m), "m", int64_t{1}, kMaxFileDimension), csv_number(at(c_n), "n", int64_t{1}, kMaxFileDimension),
                                   csv_number(at(c_k), "k", int64_t{1}, kMaxFileDimension), experts, topk, csv_number(at(c_t), "t_ms", 0.0, kMaxRecordedMs),
                                   csv_number(at(c_gemm), "t_gemm_ms", 0.0, kMaxRecordedMs), csv_number(at(c_comm), "t_comm_ms", 0.0, kMaxRecordedMs),
                                   csv_number(at(c_seq), "t_seq_ms", 0.0, kMaxRecordedMs));
        set_dtype(row.problem, c_dtype < 0 ? "" : at(c_dtype), c_scaling < 0 ? "" : at(c_scaling));
        keep(std::move(row));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(path + ": line " + std::to_string(number) + ": " + e.what());
      }
    }
  }
  std::vector<RecordedRow> rows;
  for (auto& [key, row] : latest) rows.push_back(std::move(row));
  return rows;
}

}  // namespace weft::bench
