#include "gpu_bench.hpp"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>

#include "measure.hpp"
#include "common/text_file.hpp"
#include "heuristic_judgement.hpp"
#include "weft/ir/scaling.hpp"
#include "weft/plan/auto.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/transforms.hpp"
#include "weft/plan/validation.hpp"
#include "weft/model/wave_partition.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/cuda_executor.hpp"
#include "weft/runtime/rank_threads.hpp"
#include "weft/runtime/signal_set.hpp"

namespace weft::cli {

using namespace weft::bench;

namespace {

constexpr double kTolerance = 2e-2;  // bf16 outputs summed in different orders

struct Measured {
  std::string row, strategy;
  OpKind op{};
  int world = 0;
  int64_t m = 0, n = 0, k = 0;
  int experts = 0, topk = 0;  // the MoE ops' (0 for the others)
  int batch = 0, heads = 0, kv_heads = 0, head_dim = 0;  // ag_attention's (0 for the others)
  bool causal = false;
  DType dtype = DType::bf16;
  Scaling scaling = Scaling::none;
  double t_gemm = 0, t_comm = 0, t_seq = 0, t = 0, error = 0;
  double t_in_place = 0;  // the producer's output already in the strategy's symmetric A (no copy-in); t where none
  double host_us = 0;             // host time to enqueue one call after a wait for the last (the slowest rank's median)
  double host_back_to_back_us = 0;  // the same with calls back to back (back_to_back_host_us)
  bool verified = false;
};

// FiCCO's heuristic against its own schedules, measured: per row, the fastest schedule, the pick,
// and what a wrong pick cost (the paper: right in 81% of cases, ~14% loss when wrong).
void print_heuristic_judgement(const std::vector<Measured>& rows) {
  std::vector<TimedStrategy> timed;
  for (const Measured& r : rows)
    timed.push_back({r.row + " (world " + std::to_string(r.world) + ")", r.strategy, r.t_seq, r.t});
  const HeuristicJudgement j = judge_heuristic(timed, "ficco");
  if (j.judged == 0) return;
  std::printf("\nFiCCO heuristic vs the fastest FiCCO schedule:\n%-34s %-18s %8s %-18s %8s %7s\n", "row", "fastest", "speedup",
              "picked", "speedup", "loss");
  for (const JudgedRow& r : j.rows)
    std::printf("%-34s %-18s %8.3f %-18s %8.3f %6.1f%%%s\n", r.row.c_str(), r.best.c_str(), r.best_speedup, r.picked.c_str(),
                r.picked_speedup, r.loss * 100, r.picked_best ? "" : "  wrong");
  std::printf("picked the fastest (within 1%%) in %d of %d rows; mean loss when wrong %.1f%%\n", j.right, j.judged,
              j.mean_loss_when_wrong * 100);
}

void write_outputs(const std::vector<Measured>& rows, const GpuBenchOptions& o, const std::string& suite) {
  if (!o.json_path.empty()) {
    Json::Array list;
    for (const auto& r : rows) {
      Json::Object j;
      j["row"] = r.row;
      j["op"] = std::string(to_string(r.op));
      j["strategy"] = r.strategy;
      j["world"] = r.world;
      j["m"] = r.m;
      j["n"] = r.n;
      j["k"] = r.k;
      if (r.experts > 0) {  // the MoE ops: rows of one m, n and k differ by these
        j["experts"] = r.experts;
        j["topk"] = r.topk;
      }
      if (r.heads > 0) {  // ag_attention: its shape (n and k are 0)
        j["batch"] = r.batch;
        j["heads"] = r.heads;
        j["kv_heads"] = r.kv_heads;
        j["head_dim"] = r.head_dim;
        j["causal"] = r.causal;
      }
      j["dtype"] = std::string(to_string(r.dtype));
      j["scaling"] = std::string(to_string(r.scaling));
      j["t_gemm_ms"] = r.t_gemm;
      j["t_comm_ms"] = r.t_comm;
      j["t_seq_ms"] = r.t_seq;
      j["t_ms"] = r.t;
      j["t_in_place_ms"] = r.t_in_place;
      j["bound_ms"] = std::max(r.t_gemm, r.t_comm);
      j["speedup"] = r.t_seq / r.t;
      j["overlap_efficiency"] = (r.t_seq - r.t) / (r.t_seq - r.t_gemm);
      j["host_enqueue_us"] = r.host_us;
      j["host_enqueue_back_to_back_us"] = r.host_back_to_back_us;
      j["relative_error"] = r.error;
      j["verified"] = r.verified;
      list.push_back(Json(std::move(j)));
    }
    Json::Object doc;
    doc["suite"] = suite;
    doc["iterations"] = o.iterations;
    doc["inputs"] = "the caller's: every input (A, B; Q, K, V; top-k weights) in ordinary device memory, the result into the caller's buffer, copies included (t_in_place_ms: A already in symmetric memory)";
    doc["rows"] = Json(std::move(list));
    OutputFile file(o.json_path, "JSON results");
    file.write(Json(std::move(doc)).dump() + "\n");
    file.close();  // throws where a write failed
  }
  if (!o.csv_path.empty()) {
    std::ostringstream csv;
    csv << "row,op,strategy,world,m,n,k,experts,topk,dtype,scaling,t_gemm_ms,t_comm_ms,t_seq_ms,t_ms,t_in_place_ms,bound_ms,speedup,overlap_efficiency,relative_error,verified,host_enqueue_us,host_enqueue_back_to_back_us\n";
    for (const auto& r : rows)
      csv << '"' << r.row << "\"," << to_string(r.op) << ',' << r.strategy << ',' << r.world << ',' << r.m << ',' << r.n << ','
          << r.k << ',' << r.experts << ',' << r.topk << ',' << to_string(r.dtype) << ',' << to_string(r.scaling) << ',' << r.t_gemm << ',' << r.t_comm << ',' << r.t_seq << ',' << r.t << ',' << r.t_in_place << ',' << std::max(r.t_gemm, r.t_comm)
          << ',' << r.t_seq / r.t << ',' << (r.t_seq - r.t) / (r.t_seq - r.t_gemm) << ',' << r.error << ','
          << (r.verified ? "yes" : "no") << ',' << r.host_us << ',' << r.host_back_to_back_us << '\n';
    OutputFile file(o.csv_path, "CSV file");
    file.write(csv.str());
    file.close();  // throws where a write failed
  }
}

}  // namespace

int run_gpu_bench(const BenchSuite& suite, const GpuBenchOptions& o) {
  std::vector<Measured> results;
  int failures = 0;
  PlanOptions plan_options = o.plan;
  plan_options.tile_m = 128;
  plan_options.tile_n = 256;
  // FP8: only plans the CUDA executor lowers (a strategy that cannot declines, saying why), as weft::Op plans them.
  if (is_fp8(o.dtype)) plan_options.gpu_lowerable_only = true;
  // What a call's time includes: what a caller pays, as weft::Op runs it (every input, A and B or Q,
  // K and V, in ordinary device memory, the result into the caller's buffer, any copy into symmetric
  // memory included); the
  // `in-place ms` column is the same plan with the producer's output already in its symmetric A
  // (weft::Op::a_in_workspace), where the strategy reads A from there.
  if (prints_for_every_rank()) {
    std::printf("ranks: %s\n", launched_one_rank_per_process() ? "one process per GPU (as its launcher started them)" : "a thread per GPU of this process");
    std::printf("inputs: the caller's (every input in ordinary device memory, the result into the caller's buffer, copies included); "
                "in-place ms: A written by its producer into the strategy's symmetric buffer\n");
    if (is_fp8(o.dtype))
      std::printf("operands: %s with %s scales, bf16 result; sequential is cuBLASLt's FP8 matmul after the collective\n",
                  std::string(to_string(o.dtype)).c_str(), std::string(to_string(o.scaling)).c_str());
    std::printf("\n");
  }
  if (prints_for_every_rank())
    std::printf("%-22s %-9s %5s %-25s %9s %9s %9s %9s %11s %9s %8s %7s %9s %7s %7s %s\n", "row", "op", "world", "strategy", "gemm ms",
              "comm ms", "seq ms", "ms", "in-place ms", "bound ms", "speedup", "E", "rel.err", "host us", "b2b us", "check");
  // Launched one process per GPU (torchrun), as users run weft, this process is one rank: the
  // slowest rank's figures are gathered over the communicator and rank 0 prints and writes them.
  // Otherwise every rank is a thread of this process.
  bool prints = true;
  for (int world : o.world_sizes) {
    auto group = benchmark_ranks(world);
    const bool one_rank_here = group.size() == 1 && world > 1;
    prints = !one_rank_here || group.front()->rank() == 0;
    // Strategies that reach a peer these GPUs cannot reach (WEFT_P2P=0, no P2P) decline, saying so.
    plan_options.topology = group.front()->topology();
    for (const SuiteRow& row : suite.rows) {
      if (std::find(o.ops.begin(), o.ops.end(), row.op) == o.ops.end()) continue;
      Problem problem;
      try {
        problem = problem_for(row, world, o.seed, o.dtype, o.scaling);
      } catch (const std::invalid_argument& e) {
        if (prints) std::fprintf(stderr, "weft bench: skipping '%s' at world %d: %s\n", row.name.c_str(), world, e.what());
        continue;
      }
      if (prints) std::fprintf(stderr, "weft bench: world %d, %s (%s)\n", world, row.name.c_str(), describe(problem).c_str());
      // Plans are built and validated once, here; executors skip validating them again per rank.
      std::vector<Plan> plans;  // [0] gemm-only, [1] communication-only, [2] sequential, then strategies
      // The baseline's parts from its own plan (at world 1 the collective is NCCL's one-rank copy);
      // the baseline itself as make_plan gives it (at world 1 the GEMM alone, as every strategy).
      const Plan sequential_parts = plan_sequential(problem, plan_options);
      plans.push_back(steps_of_kind(sequential_parts, StepKind::gemm));
      plans.push_back(steps_of_kind(sequential_parts, StepKind::collective));
      plans.push_back(make_plan(find_strategy("sequential"), problem, plan_options));
      require_valid(plans.back());
      // Where sequential's MoE is the grouped overlap GEMM (the kernel tilelink's plans run too), the
      // checks' reference is the plan with a library GEMM per expert, and sequential is checked too.
      const bool separate_reference = (problem.op == OpKind::ag_moe || problem.op == OpKind::moe_rs) && plan_options.moe_grouped_gemm;
      PlanOptions per_expert = plan_options;
      per_expert.moe_grouped_gemm = false;
      const Plan reference = separate_reference ? make_plan(find_strategy("sequential"), problem, per_expert) : Plan{};
      for (const auto& name : o.strategies) {
        const Strategy& s = find_strategy(name);
        if (name == "sequential" || !s.supports(problem.op)) continue;
        const PlanOptions options = resolve_options(s, problem, plan_options);
        try {
          plans.push_back(make_plan(s, problem, plan_options));
        } catch (const std::invalid_argument& e) {
          if (prints)
            std::fprintf(stderr, "weft bench: %s does not apply to '%s' at world %d: %s\n", name.c_str(), row.name.c_str(), world, e.what());
          continue;
        }
        require_valid(plans.back());
        if (name == "auto" && prints) {  // what it ran and why: the tuning table's nearest shape or the simulator
          const AutoChoice choice = choose_strategy(problem, plan_options);
          std::fprintf(stderr, "weft bench: auto runs %s on '%s' at world %d: %s\n", choice.candidate.strategy.c_str(), row.name.c_str(), world,
                       choice.reason.c_str());
        }
        if (name == "signal" && prints) {  // its wave groups, which the table's strategy column cannot show
          const SignalLayout layout = signal_layout(problem, options);
          std::fprintf(stderr, "weft bench: signal: tile %dx%d, GEMM on %d SMs, %lld tiles in %d waves, groups %s (predicted %.3f ms, GEMM %.3f ms)\n",
                       options.tile_m, options.tile_n, layout.gemm_sms, static_cast<long long>(layout.tiles), layout.waves,
                       to_string(layout.partition).c_str(), layout.predicted_seconds * 1e3, layout.predicted_gemm_seconds * 1e3);
        }
      }
      const size_t count = plans.size();
      std::vector<std::vector<double>> medians(count, std::vector<double>(static_cast<size_t>(world), 0.0));
      std::vector<std::vector<double>> in_place_ms(count, std::vector<double>(static_cast<size_t>(world), 0.0));
      std::vector<std::vector<double>> errors(count, std::vector<double>(static_cast<size_t>(world), 0.0));
      std::vector<std::vector<double>> host_us(count, std::vector<double>(static_cast<size_t>(world), 0.0));
      std::vector<std::vector<double>> host_b2b_us(count, std::vector<double>(static_cast<size_t>(world), 0.0));
      std::barrier sync(static_cast<std::ptrdiff_t>(group.size()));  // the threads of this process
      for_each_rank(group, [&](Communicator& comm) {
        const int rank = comm.rank();
        cudaStream_t stream;
        WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        // The caller's tensors: A and B in ordinary device memory, C where the caller wants it (a
        // call copies whatever the strategy needs elsewhere, as weft::Op does); `want` keeps the
        // baseline's result for the checks.
        // Every input of the plan is the caller's (A and B; attention's Q, K and V; moe_rs's top-k
        // weights too), each in ordinary device memory.
        const RankPlan& mine = plans[2].ranks.at(static_cast<size_t>(rank));
        std::vector<std::string> inputs;
        std::vector<void*> memory, scales;  // scales: an FP8 input's (fp32, device_scale_index's layout), else null
        for (const BufferDecl& decl : mine.buffers) {
          if (decl.role != BufferRole::input) continue;
          inputs.push_back(decl.name);
          memory.push_back(nullptr);
          WEFT_CUDA_CHECK(cudaMalloc(&memory.back(), static_cast<size_t>(decl.rows * decl.cols) * dtype_bytes(decl.dtype)));
          scales.push_back(nullptr);
          if (const std::optional<ScaleGrid> grid = scale_grid(problem, decl))
            WEFT_CUDA_CHECK(cudaMalloc(&scales.back(), static_cast<size_t>(device_scale_count(*grid, decl.rows, decl.cols)) * sizeof(float)));
        }
        const bool has_a = std::find(inputs.begin(), inputs.end(), "A") != inputs.end();
        const Region& out = mine.output;
        const size_t out_bytes = static_cast<size_t>(out.box.rows * out.box.cols) * 2;
        void *c = nullptr, *want = nullptr;
        WEFT_CUDA_CHECK(cudaMalloc(&c, out_bytes));
        WEFT_CUDA_CHECK(cudaMalloc(&want, out_bytes));
        ExecutorOptions callers{.validate = false, .caller_buffers = inputs, .caller_output = true};
        auto bind_inputs = [&](CudaExecutor& exec, bool a_in_place) {
          for (size_t i = 0; i < inputs.size(); ++i) exec.bind(inputs[i], a_in_place && inputs[i] == "A" ? nullptr : memory[i], scales[i]);
          exec.bind_output(c);
        };
        // Executors [0], [1]: the baseline's GEMM and collective alone, on their own buffers; then
        // every plan as a caller runs it; then, for plans that read A from symmetric memory, the same
        // plan with the producer's output already there (weft::Op::a_in_workspace: no copy-in).
        std::vector<std::unique_ptr<CudaExecutor>> execs;
        std::vector<size_t> in_place_of(count, 0);  // executor index of plan p's in-place variant (0: none)
        std::unique_ptr<CudaExecutor> reference_exec;  // not timed
        if (separate_reference) {
          reference_exec = std::make_unique<CudaExecutor>(comm, reference, callers);
          bind_inputs(*reference_exec, false);
          fill_buffers(*reference_exec, rank, o.seed, stream);
        }
        for (size_t p = 0; p < count; ++p) {
          execs.push_back(std::make_unique<CudaExecutor>(comm, plans[p], p < 2 ? ExecutorOptions{.validate = false} : callers));
          if (p >= 2) bind_inputs(*execs.back(), false);
          fill_buffers(*execs.back(), rank, o.seed, stream);
        }
        for (size_t p = 2; p < count; ++p) {
          const RankPlan& rp = plans[p].ranks.at(static_cast<size_t>(rank));
          if (!has_a || !rp.buffers.at(static_cast<size_t>(find_buffer(rp, "A"))).symmetric) continue;
          ExecutorOptions in_place = callers;
          in_place.symmetric_inputs_in_place = true;
          auto exec = std::make_unique<CudaExecutor>(comm, plans[p], in_place);
          bind_inputs(*exec, true);
          fill_buffers(*exec, rank, o.seed, stream);  // the same A as the caller's (same name, rank, seed)
          in_place_of[p] = execs.size();
          execs.push_back(std::move(exec));
        }
        double* sums = nullptr;
        WEFT_CUDA_CHECK(cudaMalloc(&sums, 3 * sizeof(double)));
        // Ranks of one process meet on the host before the first collective: a rank still in a driver
        // call (an allocation) may wait for every device of the process to go idle, while a faster
        // peer's device already waits in a collective for it (as back_to_back_calls_against_reference
        // and the executors' constructors do).
        comm.host_barrier();
        // Verification: every variant against sequential (or the separate reference), on the same
        // inputs, its output poisoned first.
        CudaExecutor& checks_against = reference_exec ? *reference_exec : *execs[2];
        checks_against.run(stream);
        finish_or_explain(checks_against, stream, reference_exec ? "sequential with a GEMM per expert (the reference)" : "sequential");
        WEFT_CUDA_CHECK(cudaMemcpyAsync(want, c, out_bytes, cudaMemcpyDeviceToDevice, stream));
        const DeviceRegion expected{want, out.box.rows, out.box.cols, out.box.cols};
        for (size_t p = reference_exec ? 2 : 3; p < count; ++p)
          errors[p][static_cast<size_t>(rank)] = run_against_device_result(*execs[p], expected, sums, stream, plans[p].strategy);
        for (size_t p = 2; p < count; ++p)
          if (in_place_of[p])
            errors[p][static_cast<size_t>(rank)] = std::max(
                errors[p][static_cast<size_t>(rank)],
                run_against_device_result(*execs[in_place_of[p]], expected, sums, stream, plans[p].strategy + " (in place)"));
        std::vector<std::function<void(cudaStream_t)>> variants;
        for (size_t e = 0; e < execs.size(); ++e) variants.push_back([&, e](cudaStream_t s) { execs[e]->run(s); });
        auto finish = [&](size_t e) { finish_or_explain(*execs[e], stream, execs[e]->plan().strategy); };
        std::vector<double> enqueue_us;
        const std::vector<double> ms = interleaved_call_medians_ms(comm, [&] { sync.arrive_and_wait(); }, stream, o.warmup, o.iterations,
                                                                   variants, finish, &enqueue_us);
        const std::vector<double> b2b_us = back_to_back_host_us(comm, [&] { sync.arrive_and_wait(); }, stream, variants, finish);
        for (size_t p = 0; p < count; ++p) {
          medians[p][static_cast<size_t>(rank)] = ms[p];
          in_place_ms[p][static_cast<size_t>(rank)] = in_place_of[p] ? ms[in_place_of[p]] : ms[p];
          host_us[p][static_cast<size_t>(rank)] = enqueue_us[p];
          host_b2b_us[p][static_cast<size_t>(rank)] = b2b_us[p];
        }
        if (one_rank_here) {
          // Every rank's figures, for the slowest-rank columns (threads share the tables instead).
          std::vector<std::vector<std::vector<double>>*> tables{&medians, &in_place_ms, &errors, &host_us, &host_b2b_us};
          std::vector<double> figures;
          for (auto* table : tables)
            for (size_t p = 0; p < count; ++p) figures.push_back((*table)[p][static_cast<size_t>(rank)]);
          const std::vector<uint8_t> bytes = comm.all_gather_bytes(figures.data(), figures.size() * sizeof(double));
          std::vector<double> all(bytes.size() / sizeof(double));
          std::memcpy(all.data(), bytes.data(), all.size() * sizeof(double));
          for (int r = 0; r < world; ++r) {
            const double* theirs = all.data() + static_cast<size_t>(r) * figures.size();
            size_t i = 0;
            for (auto* table : tables)
              for (size_t p = 0; p < count; ++p) (*table)[p][static_cast<size_t>(r)] = theirs[i++];
          }
        }
        cudaFree(sums);
        reference_exec.reset();
        execs.clear();
        for (void* buffer : memory) cudaFree(buffer);
        for (void* buffer : scales) cudaFree(buffer);  // null where the input has none
        for (void* buffer : {c, want}) cudaFree(buffer);
        cudaStreamDestroy(stream);
      });
      auto worst = [&](size_t p) { return *std::max_element(medians[p].begin(), medians[p].end()); };
      for (size_t p = 2; p < count; ++p) {
        Measured m;
        m.row = row.name;
        m.op = problem.op;
        m.strategy = plans[p].strategy;
        m.world = world;
        m.m = problem.m;
        m.n = problem.n;
        m.k = problem.k;
        m.experts = problem.experts;
        m.topk = problem.topk;
        m.dtype = problem.input_dtype;
        m.scaling = problem.scaling;
        if (is_attention(problem.op)) {
          m.batch = problem.batch;
          m.heads = problem.heads;
          m.kv_heads = problem.kv_heads;
          m.head_dim = problem.head_dim;
          m.causal = problem.causal;
        }
        m.t_gemm = worst(0);
        m.t_comm = worst(1);
        m.t_seq = worst(2);
        m.t = worst(p);
        m.t_in_place = *std::max_element(in_place_ms[p].begin(), in_place_ms[p].end());
        m.host_us = *std::max_element(host_us[p].begin(), host_us[p].end());
        m.host_back_to_back_us = *std::max_element(host_b2b_us[p].begin(), host_b2b_us[p].end());
        m.error = p == 2 && !separate_reference ? 0.0 : *std::max_element(errors[p].begin(), errors[p].end());
        m.verified = m.error <= kTolerance;
        failures += !m.verified;
        if (prints)
          std::printf("%-22s %-9s %5d %-25s %9.3f %9.3f %9.3f %9.3f %11.3f %9.3f %8.3f %7.2f %9.2e %7.1f %7.1f %s\n", m.row.c_str(),
                    std::string(to_string(m.op)).c_str(), world, m.strategy.c_str(), m.t_gemm, m.t_comm, m.t_seq, m.t, m.t_in_place,
                    std::max(m.t_gemm, m.t_comm), m.t_seq / m.t, (m.t_seq - m.t) / (m.t_seq - m.t_gemm), m.error, m.host_us, m.host_back_to_back_us,
                    p == 2 && !separate_reference ? "baseline" : (m.verified ? "ok" : "MISMATCH"));
        std::fflush(stdout);
        results.push_back(m);
      }
    }
  }
  if (prints) {
    write_outputs(results, o, suite.name);
    print_heuristic_judgement(results);
  }
  return failures;
}

}  // namespace weft::cli
