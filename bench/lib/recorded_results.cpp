#include "recorded_results.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "common/json.hpp"

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

RecordedRow make_row(const std::string& file, const std::string& name, const std::string& op, const std::string& strategy, int world,
                     int64_t m, int64_t n, int64_t k, double t, double t_gemm, double t_comm, double t_seq) {
  RecordedRow r;
  r.file = file;
  r.row = name;
  r.problem = Problem{parse_op(op), m, n, k, world, DType::bf16, DType::bf16, {}};
  draw_routing(r.problem, 1);
  r.strategy = canonical_strategy(strategy);
  r.t_ms = t;
  r.t_gemm_ms = t_gemm;
  r.t_comm_ms = t_comm;
  r.t_seq_ms = t_seq;
  return r;
}

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
    key << to_string(r.problem.op) << ' ' << r.problem.m << ' ' << r.problem.n << ' ' << r.problem.k << ' ' << r.problem.world_size << ' '
        << r.strategy;
    latest[key.str()] = std::move(r);
  };
  for (const std::string& path : files) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    const std::string name = std::filesystem::path(path).filename().string();
    try {
      if (path.ends_with(".json")) {
        const Json doc = Json::parse(text.str());
        if (!doc.has("rows")) continue;
        for (const Json& r : doc["rows"].items()) {
          if (!r.has("t_ms") || !r.has("strategy") || !r.has("world")) continue;
          keep(make_row(name, r["row"].text(), r["op"].text(), r["strategy"].text(), static_cast<int>(r["world"].integer()), r["m"].integer(),
                        r["n"].integer(), r["k"].integer(), r["t_ms"].number(), r["t_gemm_ms"].number(), r["t_comm_ms"].number(),
                        r["t_seq_ms"].number()));
        }
      } else {
        std::string line;
        std::getline(text, line);
        const std::vector<std::string> header = split_csv(line);
        auto column = [&](const char* want) {
          const auto it = std::find(header.begin(), header.end(), want);
          return it == header.end() ? -1 : static_cast<int>(it - header.begin());
        };
        const int c_row = column("row"), c_op = column("op"), c_strategy = column("strategy"), c_world = column("world"), c_m = column("m"),
                  c_n = column("n"), c_k = column("k"), c_t = column("t_ms"), c_gemm = column("t_gemm_ms"), c_comm = column("t_comm_ms"),
                  c_seq = column("t_seq_ms");
        if (std::min({c_row, c_op, c_strategy, c_world, c_m, c_n, c_k, c_t, c_gemm, c_comm, c_seq}) < 0) continue;  // another table
        while (std::getline(text, line)) {
          const auto f = split_csv(line);
          if (f.size() < header.size()) continue;
          auto at = [&](int c) { return f[static_cast<size_t>(c)]; };
          keep(make_row(name, at(c_row), at(c_op), at(c_strategy), std::stoi(at(c_world)), std::stoll(at(c_m)), std::stoll(at(c_n)),
                        std::stoll(at(c_k)), std::stod(at(c_t)), std::stod(at(c_gemm)), std::stod(at(c_comm)), std::stod(at(c_seq))));
        }
      }
    } catch (const std::exception&) {
      continue;  // not a weft bench table
    }
  }
  std::vector<RecordedRow> rows;
  for (auto& [key, row] : latest) rows.push_back(std::move(row));
  return rows;
}

}  // namespace weft::bench
