// The tuning table: what was measured on one machine, per (op, world size, shape): every candidate
// (a strategy and its knobs) with its time, and where the figure came from. `weft tune --strategy`
// writes it (bench/tuning/<machine>.json), `weft tune --from-results` seeds it from weft bench's
// recorded rows, and `auto` (model/auto_strategy.hpp) reads it.
//
//   {"machine": "NVIDIA H200", "entries": [{"op": "gemm_rs", "world": 4, "m": 8192, "n": 4096,
//     "k": 2752, "source": "...", "candidates": [{"strategy": "chunked", "ms": 0.31,
//     "options": {"template": "ring", "chunks": 2, "backend": "sm", "comm_sms": 16}}, ...]}]}
// An FP8 entry adds "dtype": "e4m3" and "scaling": "tensor" or "row" (absent: bf16).
// Options a candidate may carry: template, chunks, backend, comm_sms (chunked); comm_chunks (fused);
// gemm_sms, partition, restore (signal).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "weft/ir/problem.hpp"
#include "weft/plan/strategies.hpp"

namespace weft {

struct TunedCandidate {
  std::string strategy;
  std::map<std::string, std::string> options;  // knob -> value, as in the JSON
  double ms = 0;
  bool operator==(const TunedCandidate&) const = default;
};

struct TuningEntry {
  OpKind op = OpKind::gemm_ar;
  int world = 1;
  int64_t m = 0, n = 0, k = 0;  // per-rank shapes, as Problem holds them
  int experts = 0, topk = 0;    // ag_moe and moe_rs: their experts and choices per token (0 for the others)
  // ag_attention: its shape beside m (tokens per rank; n and k are 0); 0 and false for the others.
  int batch = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool causal = false;
  // The operands' dtype and, for FP8, their scaling: an entry stands for calls of its own dtype
  // (an FP8 GEMM runs at about twice bf16's rate, so a bf16 measurement is no guide to it).
  DType dtype = DType::bf16;
  Scaling scaling = Scaling::none;
  std::string source;           // the command, device and date of the measurement
  std::vector<TunedCandidate> candidates;
  // The fastest candidate; `sequential`'s time (0 where it was not measured).
  const TunedCandidate* best() const;
  double sequential_ms() const;
  bool operator==(const TuningEntry&) const = default;
};

struct TuningTable {
  std::string machine;
  std::vector<TuningEntry> entries;
  // The entry of the same op and world size whose shape is nearest in log space
  // (sqrt of the summed squared log ratios of m, n and k, and for the MoE ops of experts and topk:
  // an MoE entry without them stands for no problem; for ag_attention the |log ratio| of m among the
  // entries of the same batch, heads, kv_heads, head_dim and masking); only entries of the problem's
  // dtype and FP8 scaling mode; null when there is none.
  // `distance` gets it.
  const TuningEntry* nearest(const Problem& problem, double* distance = nullptr) const;
  bool operator==(const TuningTable&) const = default;
};

// Adds `entry` to `table`, or replaces the entry of the same shape (op, world, m, n, k, MoE's experts and
// topk, attention's batch, heads, kv heads, head dim and masking, dtype and scaling), keeping that entry's candidates this
// one does not measure (the same strategy with the same options): a tuned knob survives a later
// measurement of the strategies alone, and the other way round.
void merge_entry(TuningTable& table, TuningEntry entry);

std::string tuning_table_json(const TuningTable& table);
// Strict JSON (src/common/json.hpp); errors read "NAME: byte N: entries[2].world: ...".
TuningTable parse_tuning_table(std::string_view json, const std::string& name = "tuning table");
TuningTable load_tuning_table(const std::string& path);

// PlanOptions for a candidate: `base` with the candidate's knobs applied (throws std::invalid_argument
// on a knob it does not know).
PlanOptions apply_candidate(const PlanOptions& base, const TunedCandidate& candidate);

}  // namespace weft
