// The strict JSON reader (common/json.hpp), the bounded file reader and checked writer
// (common/text_file.hpp), and each of weft's readers on the inputs a lenient reader took silently:
// loose numbers and escapes, duplicate keys, 64-bit values narrowed into an int, implausible
// machine profiles, devices and huge files. Every refusal is checked for its message (the byte,
// the field path, the value and the allowed range), not only for an exception.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <unistd.h>

#include "bench_suite.hpp"
#include "common/json.hpp"
#include "common/text_file.hpp"
#include "recorded_results.hpp"
#include "auto_check.hpp"
#include "simulator_fit.hpp"
#include "weft/model/machine_profile.hpp"
#include "weft/model/tuning_table.hpp"
#include "weft/plan/chunked.hpp"

namespace weft {
namespace {

// The message of what `f` throws as std::invalid_argument; "" (and a failure) when it does not.
template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected std::invalid_argument";
  return "";
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << "message: " << (text)

std::filesystem::path scratch(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("weft_json_readers_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir / name;
}

// A scratch folder of its own, emptied: each test writes the files it reads there.
std::filesystem::path empty_folder(const std::string& name) {
  const auto dir = scratch(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void write(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

TEST(Json, NumbersAreRfc8259Only) {
  for (const char* bad : {"[64,128-64]", "64-1", "0064", "+64", ".5e3", "1.2.3e4", "1.", "1e", "-", "01", "NaN", "Infinity", "0x10", "1e+"})
    EXPECT_HAS(refusal([&] { Json::parse(bad); }), "byte ") << bad;
  EXPECT_HAS(refusal([] { Json::parse("[64,128-64]"); }), "byte 7: expected ',' or ']' after an element, found '-'");
  EXPECT_HAS(refusal([] { Json::parse("1.2.3e4"); }), "byte 3: unexpected '.' after the document's value");
  EXPECT_HAS(refusal([] { Json::parse("0064"); }), "byte 0: malformed number: a leading zero");
  EXPECT_HAS(refusal([] { Json::parse("1e400"); }), "cannot be held by a double");
  EXPECT_EQ(Json::parse("-0").number(), 0.0);
  EXPECT_DOUBLE_EQ(Json::parse("1.5e-3").number(), 1.5e-3);
  EXPECT_DOUBLE_EQ(Json::parse("2E+2").number(), 200);
  EXPECT_EQ(Json::parse("9007199254740993").integer(), int64_t{9007199254740993});  // exact, not via a double
  EXPECT_EQ(Json::parse("1e3").integer(), 1000);
}

TEST(Json, EscapesAreRfc8259Only) {
  EXPECT_HAS(refusal([] { Json::parse(R"("\uZZZZ")"); }), "byte 3: \\u needs four hex digits, found 'Z'");
  EXPECT_HAS(refusal([] { Json::parse(R"("\u-1ab")"); }), "\\u needs four hex digits, found '-'");
  EXPECT_HAS(refusal([] { Json::parse(R"("\q")"); }), "byte 1: unknown escape \\q");
  EXPECT_HAS(refusal([] { Json::parse(R"("\ud800")"); }), "a high surrogate \\u escape without a low one after it");
  EXPECT_HAS(refusal([] { Json::parse(R"("\ud800\u0041")"); }), "a high surrogate \\u escape without a low one after it");
  EXPECT_HAS(refusal([] { Json::parse(R"("\udc00")"); }), "a low surrogate \\u escape without a high one before it");
  EXPECT_HAS(refusal([] { Json::parse("\"\x1b[31mred\""); }), "raw control character (byte 0x1b)");
  EXPECT_HAS(refusal([] { Json::parse("\"\xff\""); }), "not UTF-8");
  EXPECT_HAS(refusal([] { Json::parse("\"\xc0\xaf\""); }), "not UTF-8");       // overlong '/'
  EXPECT_HAS(refusal([] { Json::parse("\"\xed\xa0\x80\""); }), "not UTF-8");   // an encoded surrogate
  EXPECT_EQ(Json::parse(R"("\ud83d\ude00 \u00e9 \/")").text(), "\xf0\x9f\x98\x80 \xc3\xa9 /");
  EXPECT_EQ(Json::parse(R"("\ud83d\ude00")").text(), "\xf0\x9f\x98\x80");
  EXPECT_EQ(Json::parse("\"caf\xc3\xa9\"").text(), "caf\xc3\xa9");
  // Escaped control characters are JSON, but weft's strings reach a terminal: text() refuses them.
  EXPECT_HAS(refusal([] { Json::parse(R"("\u001b[31m")").text(); }), "control character byte 0x1b");
}

TEST(Json, DuplicateMembersAreRefused) {
  EXPECT_HAS(refusal([] { Json::parse(R"({"name": "x", "rows": [1], "rows": []})"); }), "byte 27: member 'rows' is given twice");
  EXPECT_HAS(refusal([] { Json::parse(R"({"a": {"b": 1, "b": 2}})"); }), "a: member 'b' is given twice");
}

TEST(Json, IntegersAreRangeCheckedIntoTheirType) {
  EXPECT_HAS(refusal([] { Json::parse("4294967304").to_int(1, 1024); }), "4294967304 is out of range for an int (1..1024)");
  EXPECT_HAS(refusal([] { Json::parse("4294967297").to_int(); }), "4294967297 is out of range for an int (-2147483648..2147483647)");
  EXPECT_HAS(refusal([] { Json::parse("1.5").to_int(); }), "expected an integer, found 1.5");
  EXPECT_HAS(refusal([] { Json::parse("1e300").integer(); }), "1e+300 is out of range for a 64-bit integer");
  EXPECT_HAS(refusal([] { Json::parse("\"8\"").to_int(); }), "expected an integer, found a string");
  EXPECT_HAS(refusal([] { Json::parse("1e-300").number(1e11, 1e17); }), "1e-300 is outside the plausible range 1e+11 .. 1e+17");
  EXPECT_EQ(Json::parse("2147483647").to_int(), 2147483647);
}

TEST(Json, ErrorsNameTheFileTheByteAndTheFieldPath) {
  const std::string text = R"({"rows": [{"m": 1}, {"m": 4294967304}]})";
  const std::string message = refusal([&] {
    read_json_text(text, "bench/x.json", [](const Json& doc) { return doc["rows"].items()[1]["m"].to_int(1, 1024); });
  });
  EXPECT_EQ(message, "bench/x.json: byte 26: rows[1].m: 4294967304 is out of range for an int (1..1024)");
  EXPECT_EQ(refusal([&] { read_json_text(text, "f", [](const Json& doc) { return doc["rows"].items()[0]["n"].integer(); }); }),
            "f: byte 10: rows[0]: missing member 'n'");
  EXPECT_EQ(refusal([&] { read_json_text(R"({"a": [1, 2,]})", "f", [](const Json&) { return 0; }); }),
            "f: byte 12: a[2]: expected a value, found ']'");
  EXPECT_HAS(refusal([] { read_json_text(R"({"peak_flop": 1})", "p", [](const Json& j) { j.only_members({"peak_flops"}); return 0; }); }),
             "p: byte 14: peak_flop: unknown member 'peak_flop' (known here: peak_flops)");
}

TEST(Json, WritesOnlyValidJson) {
  EXPECT_EQ(Json(Json::Array{Json(std::nan("")), Json(HUGE_VAL)}).dump(0), "[null,null]");  // never "nan"
  EXPECT_HAS(refusal([] { parse_machine_profile(R"({"device": "x", "peak_flops": null, "memory_bytes_per_s": 4e12})"); }),
             "peak_flops: expected a number, found null");
  EXPECT_EQ(Json(Json::Object{{"a", Json(int64_t{4294967304})}}).dump(0), R"({"a":4294967304})");
}

TEST(TextFile, InputsAreRegularFilesOfBoundedSize) {
  EXPECT_HAS(refusal([] { read_text_file("/dev/zero", "machine profile"); }), "machine profile '/dev/zero' is not a regular file");
  EXPECT_HAS(refusal([] { read_text_file("/nonexistent/x.json", "suite file"); }), "cannot read suite file '/nonexistent/x.json'");
  const auto big = scratch("big.json");
  write(big, std::string(3 << 20, ' '));
  EXPECT_HAS(refusal([&] { read_text_file(big.string(), "suite file", size_t{2} << 20); }), "is larger than the 2 MiB weft reads");
  EXPECT_EQ(read_text_file(big.string(), "suite file").size(), size_t{3} << 20);
}

TEST(TextFile, OutputsAreCheckedBeforeAndAfterTheWork) {
  EXPECT_HAS(refusal([] { OutputFile("/proc/forbidden.json", "trace"); }), "cannot write trace '/proc/forbidden.json'");
  EXPECT_HAS(refusal([] { require_writable("/nonexistent/dir/x.csv", "CSV file"); }), "cannot write CSV file '/nonexistent/dir/x.csv'");
  const auto probe = scratch("probe.csv");
  std::filesystem::remove(probe);
  require_writable(probe.string(), "CSV file");
  EXPECT_FALSE(std::filesystem::exists(probe)) << "the check leaves no file behind";
  if (std::filesystem::exists("/dev/full")) {  // every write fails with ENOSPC
    OutputFile full("/dev/full", "trace");
    full.write(std::string(1 << 16, 'x'));
    try {
      full.close();
      ADD_FAILURE() << "a write to /dev/full must fail at close";
    } catch (const std::runtime_error& e) {
      EXPECT_HAS(e.what(), "writing trace '/dev/full' failed: No space left on device");
    }
  }
  const auto half = scratch("half.json");
  {
    OutputFile out(half.string(), "trace");
    out.write("{");
  }  // never closed: an error left it half-written
  EXPECT_FALSE(std::filesystem::exists(half)) << "a file never closed is removed";
}

std::string suite_with_row(const std::string& row) {
  return R"({"name": "t", "rows": [{"name": "r", "op": "ag_moe", "m": 64, "n": 64, "k": 64, )" + row + "}]}";
}

TEST(SuiteReader, RefusesNarrowingDuplicatesAndUnboundedSuites) {
  EXPECT_HAS(refusal([] { parse_suite(suite_with_row(R"("experts": 4294967304, "topk": 2)"), "s.json"); }),
             "rows[0].experts: 4294967304 is out of range for an int (1..1024)");
  EXPECT_HAS(refusal([] { parse_suite(suite_with_row(R"("experts": 8, "topk": 4294967298)"), "s.json"); }),
             "rows[0].topk: 4294967298 is out of range for an int (1..8)");
  EXPECT_HAS(refusal([] { parse_suite(R"({"name": "t", "rows": [{"op": "gemm_ar", "m": 64, "n": 64, "k": 64}], "rows": []})", "s.json"); }),
             "s.json: byte 70: member 'rows' is given twice");
  EXPECT_HAS(refusal([] { parse_suite(suite_with_row(R"("expert": 8, "topk": 2)"), "s.json"); }), "unknown member 'expert'");
  EXPECT_HAS(refusal([] { parse_suite(R"({"name": "t", "rows": [{"op": "gemm_ar", "m": 0, "n": 64, "k": 64}]})", "s.json"); }),
             "rows[0].m: 0 is out of range");
  EXPECT_HAS(refusal([] { parse_suite(R"({"name": "t", "rows": [{"op": "gemm_xx", "m": 1, "n": 64, "k": 64}]})", "s.json"); }),
             "rows[0].op: unknown op 'gemm_xx'");
  std::string many = R"({"name": "big", "rows": [)";
  for (size_t i = 0; i <= kMaxSuiteRows; ++i) many += std::string(i ? "," : "") + R"({"op": "gemm_ar", "m": 64, "n": 64, "k": 64})";
  many += "]}";
  EXPECT_HAS(refusal([&] { parse_suite(many, "big.json"); }), "rows: 4097 rows, more than the 4096 a suite may have");
  EXPECT_EQ(parse_suite(suite_with_row(R"("experts": 8, "topk": 2)")).rows.at(0).experts, 8);
}

std::string schedule_with_op(const std::string& op) { return R"({"op": "ag_gemm", "ranks": [[)" + op + "]]}"; }

TEST(ScheduleReader, EachErrorNamesItsPlace) {
  EXPECT_HAS(refusal([] { parse_schedule_json(schedule_with_op(R"({"kind": "pull", "peer": 4294967297, "rows": [0, 8]})")); }),
             "schedule: byte 54: ranks[0][0].peer: 4294967297 is out of range for an int (0..1023)");
  EXPECT_HAS(refusal([] { parse_schedule_json(R"({"ranks": []})"); }), "missing member 'op'");
  EXPECT_HAS(refusal([] { parse_schedule_json(schedule_with_op(R"({"kind": "pull", "peer": 1, "rows": [0, 8, 9]})")); }),
             "ranks[0][0].rows: rows must be [first, end), two integers");
  EXPECT_HAS(refusal([] { parse_schedule_json(schedule_with_op(R"({"kind": "pull", "peer": 1, "rows": [8, 0]})")); }),
             "ranks[0][0].rows: rows [8, 0) is empty or reversed");
  EXPECT_HAS(refusal([] { parse_schedule_json(schedule_with_op(R"({"kind": "pull", "peer": 1, "rows": [0, 8], "after": [[0]]})")); }),
             "ranks[0][0].after[0]: after lists [rank, index] pairs");
  EXPECT_HAS(refusal([] { parse_schedule_json(schedule_with_op(R"({"kind": "pull", "peer": 1, "rows": [0, 8], "after": [[4294967296, 0]]})")); }),
             "ranks[0][0].after[0][0]: 4294967296 is out of range");
  EXPECT_HAS(refusal([] { parse_schedule_json(schedule_with_op(R"({"kind": "fetch", "peer": 1, "rows": [0, 8]})")); }), "ranks[0][0].kind: ");
  EXPECT_HAS(refusal([] { parse_schedule_json(schedule_with_op(R"({"kind": "pull", "peer": 1, "rows": [0, 8], "backend": "carrier_pigeon"})")); }),
             "ranks[0][0].backend: ");
  EXPECT_HAS(refusal([] { parse_schedule_json(schedule_with_op(R"({"kind": "pull", "peer": 1, "rows": [0, 8], "peers": 2})")); }),
             "ranks[0][0].peers: unknown member 'peers'");
  EXPECT_HAS(refusal([] { parse_schedule_json(schedule_with_op(R"({"kind": "pull", "peer": 1.5, "rows": [0, 8]})")); }),
             "ranks[0][0].peer: expected an integer, found 1.5");
}

std::string profile_with(const std::string& members) {
  return R"({"device": "x", "peak_flops": 8e14, "memory_bytes_per_s": 4e12)" + (members.empty() ? "" : ", " + members) + "}";
}

TEST(MachineProfileReader, EveryFieldIsCheckedForAPlausibleValue) {
  EXPECT_HAS(refusal([] { parse_machine_profile(profile_with(R"("sm_count": 4294967428)")); }),
             "sm_count: 4294967428 is out of range for an int (1..1024)");
  EXPECT_HAS(refusal([] { parse_machine_profile(R"({"device": "x", "peak_flops": 1e-300, "memory_bytes_per_s": 4e12})"); }),
             "peak_flops: 1e-300 is outside the plausible range 1e+11 .. 1e+17");
  EXPECT_HAS(refusal([] { parse_machine_profile(profile_with(R"("launch_seconds": -1e-6)")); }), "launch_seconds: -1e-06 is outside");
  EXPECT_HAS(refusal([] { parse_machine_profile(profile_with(R"("gemm_efficiency": 0)")); }), "gemm_efficiency: 0 is outside");
  EXPECT_HAS(refusal([] { parse_machine_profile(profile_with(R"("sm_count": 132, "collective_sms": 132)")); }),
             "collective_sms: 132 is out of range for an int (0..131)");
  EXPECT_HAS(refusal([] {
               parse_machine_profile(profile_with(R"("collectives": [{"kind": "all_reduce", "world_size": 2, "bytes": [1e6], "seconds": [-1e-5]}])"));
             }),
             "collectives[0].seconds[0]: -1e-05 is outside");
  EXPECT_HAS(refusal([] {
               parse_machine_profile(profile_with(R"("collectives": [{"kind": "all_reduce", "world_size": -2, "bytes": [1e6], "seconds": [1e-5]}])"));
             }),
             "collectives[0].world_size: -2 is out of range for an int (2..1024)");
  EXPECT_HAS(refusal([] {
               parse_machine_profile(profile_with(R"("collectives": [{"kind": "all_reduce", "world_size": 2, "bytes": [2e6, 1e6], "seconds": [1e-5, 2e-5]}])"));
             }),
             "collectives[0].bytes[1]: bytes must increase");
  EXPECT_HAS(refusal([] { parse_machine_profile(profile_with(R"("peak_flop": 1e15)")); }), "unknown member 'peak_flop'");
  EXPECT_HAS(refusal([] { parse_machine_profile(R"({"device": "x", "peak_flops": 8e14})"); }), "missing member 'memory_bytes_per_s'");
  const MachineProfile h200 = load_machine_profile(std::string(WEFT_BENCH_DIR) + "/machines/h200.json");
  EXPECT_EQ(h200.sm_count, 132);
  const MachineProfile back = parse_machine_profile(machine_profile_json(h200));  // what weft writes, it reads back
  EXPECT_EQ(back.collectives, h200.collectives);
  EXPECT_EQ(back.prediction_accuracy, h200.prediction_accuracy);
  EXPECT_EQ(back.peak_flops, h200.peak_flops);
}

TEST(TuningTableReader, RefusesNarrowingAndBadKnobs) {
  EXPECT_HAS(refusal([] { parse_tuning_table(R"({"entries": [{"op": "gemm_rs", "world": 4294967298, "m": 1, "n": 1, "k": 1, "candidates": []}]})"); }),
             "entries[0].world: 4294967298 is out of range for an int (1..1024)");
  EXPECT_HAS(refusal([] {
               parse_tuning_table(
                   R"({"entries": [{"op": "gemm_rs", "world": 2, "m": 1, "n": 1, "k": 1, "candidates": [{"strategy": "chunked", "ms": 1, "options": {"chunks": "4abc"}}]}]})");
             }),
             "entries[0].candidates[0].options: option chunks must be a non-negative int, got '4abc'");
}

// An MoE row carries its experts and topk (rows of one shape differ by them, and the routing drawn
// for the simulator follows them); one without them (an older weft bench's) is left out.
TEST(RecordedResultsReader, MoeRowsCarryTheirExpertsAndTopk) {
  const auto dir = empty_folder("results_moe");
  const std::string header = "row,op,strategy,world,m,n,k,experts,topk,t_ms,t_gemm_ms,t_comm_ms,t_seq_ms\n";
  write(dir / "a.csv", header + "\"MoE-1 RS\",moe_rs,sequential,4,256,128,64,8,2,1,0.5,0.5,1\n\"MoE-2 RS\",moe_rs,sequential,4,256,128,64,32,2,2,0.5,0.5,2\n"
                                "\"AR\",gemm_ar,sequential,4,256,128,64,0,0,1,0.5,0.5,1\n");
  write(dir / "b.json", R"({"rows": [{"row": "MoE-3 RS", "op": "moe_rs", "strategy": "sequential", "world": 4, "m": 256, "n": 128, "k": 64,
                              "experts": 32, "topk": 5, "t_ms": 3, "t_gemm_ms": 1, "t_comm_ms": 1, "t_seq_ms": 3},
                             {"row": "old", "op": "moe_rs", "strategy": "sequential", "world": 4, "m": 256, "n": 128, "k": 64,
                              "t_ms": 3, "t_gemm_ms": 1, "t_comm_ms": 1, "t_seq_ms": 3}]})");
  const auto rows = bench::read_recorded_rows(dir.string());
  ASSERT_EQ(rows.size(), 4u) << "three MoE rows of one shape kept apart, the AR row, and not the one without experts";
  std::set<std::pair<int, int>> seen;
  for (const auto& r : rows)
    if (r.problem.op == OpKind::moe_rs) {
      seen.insert({r.problem.experts, r.problem.topk});
      EXPECT_EQ(r.problem.choices.size(), 4u) << "routing drawn for its experts";
    }
  EXPECT_EQ(seen, (std::set<std::pair<int, int>>{{8, 2}, {32, 2}, {32, 5}}));
  write(dir / "a.csv", header + "\"MoE-1 RS\",moe_rs,sequential,4,256,128,64,8,9,1,0.5,0.5,1\n");
  EXPECT_HAS(refusal([&] { bench::read_recorded_rows(dir.string()); }), "a.csv: line 2: topk: '9' is not a number in 1..8");
}

// An attention row carries its shape (batch, heads, kv_heads, head_dim, causal; n and k are 0): rows
// of one length differ by it, and auto's table and the simulator take the whole problem. One without
// it (an older weft bench's) stands for no known problem and is left out; a CSV's are left out too
// (its columns have no heads).
TEST(RecordedResultsReader, AttentionRowsCarryTheirShape) {
  const auto dir = empty_folder("results_attention");
  const std::string shape = R"("batch": 1, "heads": 32, "kv_heads": 8, "head_dim": 128)";
  auto row = [&](const std::string& strategy, const std::string& extra) {
    return R"({"row": "L3-8B 16k", "op": "ag_attention", "strategy": ")" + strategy + R"(", "world": 4, "m": 4096, "n": 0, "k": 0,
               "t_ms": 2, "t_gemm_ms": 1.9, "t_comm_ms": 0.2, "t_seq_ms": 2.1)" + extra + "}";
  };
  write(dir / "a.json", R"({"rows": [)" + row("sequential", ", " + shape + R"(, "causal": true)") + ", " +
                            row("tilelink", ", " + shape + R"(, "causal": true)") + ", " + row("sequential", ", " + shape + R"(, "causal": false)") +
                            ", " + row("decomposed", "") + "]}");
  write(dir / "b.csv", "row,op,strategy,world,m,n,k,t_ms,t_gemm_ms,t_comm_ms,t_seq_ms\nr,ag_attention,sequential,4,4096,0,0,1,0.5,0.5,1\n");
  const auto rows = bench::read_recorded_rows(dir.string());
  ASSERT_EQ(rows.size(), 3u) << "causal and not kept apart; not the row without its shape, nor the CSV's";
  int causal = 0;
  for (const auto& r : rows) {
    EXPECT_EQ(r.problem.op, OpKind::ag_attention);
    EXPECT_EQ(r.problem.heads, 32);
    EXPECT_EQ(r.problem.kv_heads, 8);
    EXPECT_EQ(r.problem.head_dim, 128);
    EXPECT_EQ(r.problem.batch, 1);
    causal += r.problem.causal;
    EXPECT_NO_THROW(check_problem(r.problem)) << describe(r.problem);
  }
  EXPECT_EQ(causal, 2);
  write(dir / "a.json", R"({"rows": [)" + row("sequential", R"(, "batch": 1, "heads": 32, "kv_heads": 5, "head_dim": 128, "causal": true)") + "]}");
  EXPECT_HAS(refusal([&] { bench::read_recorded_rows(dir.string()); }), "kv_heads must divide heads");
}

// The simulator's accuracy per strategy (auto's bias correction) comes from the GEMM ops' rows: an
// attention row of a strategy of the same name (sequential, decomposed, tilelink) leaves it as it is
// (auto does not predict attention with the simulator, whose attention model is not fitted).
TEST(SimulatorAccuracy, AttentionRowsDoNotMoveTheGemmStrategiesBias) {
  const auto dir = empty_folder("results_accuracy");
  const std::string gemm = R"({"row": "r", "op": "gemm_rs", "strategy": "sequential", "world": 2, "m": 4096, "n": 4096, "k": 4096,
                               "t_ms": 0.5, "t_gemm_ms": 0.4, "t_comm_ms": 0.2, "t_seq_ms": 0.5})";
  const std::string attention = R"({"row": "a", "op": "ag_attention", "strategy": "sequential", "world": 2, "m": 4096, "n": 0, "k": 0,
                                    "batch": 1, "heads": 32, "kv_heads": 8, "head_dim": 128, "causal": true,
                                    "t_ms": 50, "t_gemm_ms": 49, "t_comm_ms": 1, "t_seq_ms": 50})";
  const MachineProfile machine;
  write(dir / "a.json", R"({"rows": [)" + gemm + "]}");
  const auto alone = bench::prediction_accuracy(bench::plans_for(bench::read_recorded_rows(dir.string()), machine), machine);
  write(dir / "a.json", R"({"rows": [)" + gemm + ", " + attention + "]}");
  const auto rows = bench::read_recorded_rows(dir.string());
  ASSERT_EQ(rows.size(), 2u);
  const auto with = bench::prediction_accuracy(bench::plans_for(rows, machine), machine);
  ASSERT_EQ(alone.count("sequential"), 1u);
  ASSERT_EQ(with.count("sequential"), 1u);
  EXPECT_DOUBLE_EQ(with.at("sequential").bias, alone.at("sequential").bias);
  EXPECT_DOUBLE_EQ(with.at("sequential").error, alone.at("sequential").error);
}

// An FP8 row (weft bench --dtype e4m3 --scaling S) carries its dtype and scaling: it is another
// problem than the bf16 row of the same shape and strategy (both kept), its own tuning-table entry,
// and it leaves the bf16 strategies' prediction accuracy as it is (its GEMM runs at the FP8 rates).
TEST(RecordedResultsReader, Fp8RowsCarryTheirDtypeAndStayApartFromBf16Ones) {
  const auto dir = empty_folder("results_fp8");
  const std::string header = "row,op,strategy,world,m,n,k,experts,topk,dtype,scaling,t_gemm_ms,t_comm_ms,t_seq_ms,t_ms\n";
  write(dir / "a.csv", header + "\"MLP-1 RS\",gemm_rs,sequential,4,8192,4096,688,0,0,bf16,none,0.3,0.1,0.45,0.45\n"
                                "\"MLP-1 RS\",gemm_rs,decomposed,4,8192,4096,688,0,0,bf16,none,0.3,0.1,0.45,0.40\n");
  const MachineProfile machine;
  const auto bf16_only = bench::read_recorded_rows(dir.string());
  ASSERT_EQ(bf16_only.size(), 2u);
  const auto alone = bench::prediction_accuracy(bench::plans_for(bf16_only, machine), machine);
  write(dir / "b.json", R"({"rows": [{"row": "MLP-1 RS", "op": "gemm_rs", "strategy": "sequential", "world": 4, "m": 8192, "n": 4096, "k": 688,
                              "dtype": "e4m3", "scaling": "row", "t_ms": 0.36, "t_gemm_ms": 0.15, "t_comm_ms": 0.1, "t_seq_ms": 0.36},
                             {"row": "MLP-1 RS", "op": "gemm_rs", "strategy": "decomposed", "world": 4, "m": 8192, "n": 4096, "k": 688,
                              "dtype": "e4m3", "scaling": "row", "t_ms": 0.28, "t_gemm_ms": 0.15, "t_comm_ms": 0.1, "t_seq_ms": 0.36}]})");
  const auto rows = bench::read_recorded_rows(dir.string());
  ASSERT_EQ(rows.size(), 4u) << "the FP8 rows do not replace the bf16 rows of the same shape and strategy";
  int fp8 = 0;
  for (const auto& r : rows) {
    fp8 += r.problem.input_dtype == DType::e4m3;
    EXPECT_EQ(r.problem.scaling, r.problem.input_dtype == DType::e4m3 ? Scaling::row : Scaling::none);
    EXPECT_NO_THROW(check_problem(r.problem)) << describe(r.problem);
  }
  EXPECT_EQ(fp8, 2);
  const auto with = bench::prediction_accuracy(bench::plans_for(rows, machine), machine);
  EXPECT_DOUBLE_EQ(with.at("decomposed").bias, alone.at("decomposed").bias);
  EXPECT_DOUBLE_EQ(with.at("sequential").error, alone.at("sequential").error);
  const TuningTable table = bench::tuning_table_from(rows, "test");
  ASSERT_EQ(table.entries.size(), 2u);
  Problem call = rows.front().problem;
  call.input_dtype = DType::e4m3;
  call.scaling = Scaling::row;
  ASSERT_NE(table.nearest(call), nullptr);
  EXPECT_DOUBLE_EQ(table.nearest(call)->sequential_ms(), 0.36);
  // What no weft bench writes is refused, naming the file and place.
  write(dir / "b.json", R"({"rows": [{"row": "r", "op": "gemm_rs", "strategy": "sequential", "world": 4, "m": 8192, "n": 4096, "k": 688,
                              "dtype": "e4m3", "t_ms": 0.36, "t_gemm_ms": 0.15, "t_comm_ms": 0.1, "t_seq_ms": 0.36}]})");
  EXPECT_HAS(refusal([&] { bench::read_recorded_rows(dir.string()); }), "scaling: '' with dtype e4m3");
  std::filesystem::remove(dir / "b.json");
  write(dir / "a.csv", header + "r,gemm_rs,sequential,4,8192,4096,688,0,0,bf16,row,0.3,0.1,0.45,0.45\n");
  EXPECT_HAS(refusal([&] { bench::read_recorded_rows(dir.string()); }), "a.csv: line 2: scaling: 'row' with dtype bf16");
}

TEST(RecordedResultsReader, RefusesNarrowingInJsonAndCsv) {
  const auto dir = empty_folder("results");
  const std::string row = R"({"row": "r", "op": "gemm_ar", "strategy": "sequential", "world": WORLD, "m": 64, "n": 64, "k": 64,
                             "t_ms": 1, "t_gemm_ms": 0.5, "t_comm_ms": 0.5, "t_seq_ms": 1})";
  auto with_world = [&](const std::string& world) { return R"({"rows": [)" + std::string(row).replace(row.find("WORLD"), 5, world) + "]}"; };
  write(dir / "a.json", with_world("2"));
  EXPECT_EQ(bench::read_recorded_rows(dir.string()).size(), 1u);
  write(dir / "a.json", with_world("4294967298"));
  EXPECT_HAS(refusal([&] { bench::read_recorded_rows(dir.string()); }), "a.json: byte 75: rows[0].world: 4294967298 is out of range for an int (1..1024)");
  std::filesystem::remove(dir / "a.json");
  write(dir / "b.csv", "row,op,strategy,world,m,n,k,t_ms,t_gemm_ms,t_comm_ms,t_seq_ms\nr,gemm_ar,sequential,4294967298,64,64,64,1,0.5,0.5,1\n");
  EXPECT_HAS(refusal([&] { bench::read_recorded_rows(dir.string()); }), "b.csv: line 2: world: '4294967298' is not a number in 1..1024");
  write(dir / "b.csv", "row,op,strategy,world,m,n,k,t_ms,t_gemm_ms,t_comm_ms,t_seq_ms\nr,gemm_ar,sequential,2x,64,64,64,1,0.5,0.5,1\n");
  EXPECT_HAS(refusal([&] { bench::read_recorded_rows(dir.string()); }), "line 2: world: '2x' is not a number");
}

}  // namespace
}  // namespace weft
