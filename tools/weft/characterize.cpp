#include "common/text_file.hpp"
#include "characterize.hpp"

#include <sstream>
#include <algorithm>
#include <barrier>
#include <cstdio>
#include <fstream>
#include <memory>

#include "measure.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/transforms.hpp"
#include "weft/plan/validation.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/rank_threads.hpp"

namespace weft::cli {

using namespace weft::bench;

namespace {

// The decomposed plan's copy-engine transfers alone, unordered. A measurement plan: it leaves the
// op's output unproduced, so it is not validated as an op (its copies read inputs only).
Plan copy_engine_transfers(const Plan& decomposed) {
  Plan plan = decomposed;
  plan.strategy += "/copies-only";
  for (RankPlan& rp : plan.ranks) {
    std::erase_if(rp.steps, [](const Step& s) { return !std::holds_alternative<CopyStep>(s.body); });
    for (Step& s : rp.steps) {
      s.waits.clear();
      s.notifies.clear();
    }
  }
  return plan;
}

struct Row {
  std::string name;
  int world = 0;
  int64_t m = 0, n = 0, k = 0;  // the rank's GEMM
  double t_gemm = 0;
  double t_split[4] = {};  // rows/W, rows/W^2, k/W, k/W^2
  double t_copies = 0, t_nccl = 0, t_with_copies = 0, t_with_nccl = 0;
  double dil(int i) const { return t_split[i] / t_gemm - 1.0; }
  double cil_copies() const { return t_with_copies / std::max(t_gemm, t_copies) - 1.0; }
  double cil_nccl() const { return t_with_nccl / std::max(t_gemm, t_nccl) - 1.0; }
};

}  // namespace

void run_characterize(const BenchSuite& suite, const CharacterizeOptions& o) {
  std::vector<Row> rows;
  PlanOptions plan_options;
  plan_options.tile_n = 256;
  std::printf("%-14s %5s %6s %6s %6s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n", "row", "world", "M", "N", "K", "gemm ms",
              "DIL r/W", "r/W^2", "k/W", "k/W^2", "CE ms", "NCCL ms", "CIL CE", "CIL NCCL");
  for (int world : o.world_sizes) {
    auto group = first_gpus(world);
    for (const SuiteRow& suite_row : suite.rows) {
      if (suite_row.op != OpKind::ag_gemm) continue;
      Problem problem;
      try {
        problem = problem_for(suite_row, world, o.seed);
      } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "weft characterize: skipping '%s' at world %d: %s\n", suite_row.name.c_str(), world, e.what());
        continue;
      }
      std::fprintf(stderr, "weft characterize: world %d, %s\n", world, suite_row.name.c_str());
      // Each cut of the GEMM is validated within the whole op (gather, then the pieces), then timed
      // alone, as `weft bench` times T_gemm.
      const Plan sequential = plan_sequential(problem, plan_options);
      auto cut = [&](GemmSplitAxis axis, int parts) {
        const Plan whole = split_gemms(sequential, axis, parts);
        require_valid(whole);
        return steps_of_kind(whole, StepKind::gemm);
      };
      std::vector<Plan> plans = {steps_of_kind(sequential, StepKind::gemm),
                                 cut(GemmSplitAxis::rows, world),
                                 cut(GemmSplitAxis::rows, world * world),
                                 cut(GemmSplitAxis::k, world),
                                 cut(GemmSplitAxis::k, world * world),
                                 copy_engine_transfers(plan_decomposed(problem, plan_options)),
                                 steps_of_kind(sequential, StepKind::collective)};
      std::vector<std::vector<double>> medians(plans.size() + 2, std::vector<double>(static_cast<size_t>(world), 0.0));
      std::barrier sync(world);
      for_each_rank(group, [&](Communicator& comm) {
        const auto rank = static_cast<size_t>(comm.rank());
        cudaStream_t stream, gemm_stream, comm_stream;
        for (cudaStream_t* s : {&stream, &gemm_stream, &comm_stream})
          WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
        std::vector<std::unique_ptr<CudaExecutor>> execs;
        for (const Plan& plan : plans) {
          execs.push_back(std::make_unique<CudaExecutor>(comm, plan, ExecutorOptions{.validate = false}));
          fill_buffers(*execs.back(), comm.rank(), o.seed, stream);
        }
        auto meet = [&] { sync.arrive_and_wait(); };
        std::vector<std::function<void(cudaStream_t)>> variants;
        for (size_t p = 0; p < plans.size(); ++p) variants.push_back([&, p](cudaStream_t s) { execs[p]->run(s); });
        const std::vector<double> ms = interleaved_call_medians_ms(
            comm, meet, stream, o.warmup, o.iterations, variants, [&](size_t p) { finish_or_explain(*execs[p], stream, plans[p].strategy); });
        for (size_t p = 0; p < plans.size(); ++p) medians[p][rank] = ms[p];
        // The whole GEMM and one transfer plan at once, each on its own stream, no order between.
        cudaEvent_t fork, gemm_done, comm_done;
        for (cudaEvent_t* e : {&fork, &gemm_done, &comm_done}) WEFT_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
        for (size_t c = 0; c < 2; ++c) {
          CudaExecutor& transfer = *execs[5 + c];
          medians[plans.size() + c][rank] = median_call_ms(
              comm, meet, stream, o.warmup, o.iterations,
              [&](cudaStream_t s) {
                WEFT_CUDA_CHECK(cudaEventRecord(fork, s));
                WEFT_CUDA_CHECK(cudaStreamWaitEvent(gemm_stream, fork, 0));
                WEFT_CUDA_CHECK(cudaStreamWaitEvent(comm_stream, fork, 0));
                execs[0]->run(gemm_stream);
                transfer.run(comm_stream);
                WEFT_CUDA_CHECK(cudaEventRecord(gemm_done, gemm_stream));
                WEFT_CUDA_CHECK(cudaEventRecord(comm_done, comm_stream));
                WEFT_CUDA_CHECK(cudaStreamWaitEvent(s, gemm_done, 0));
                WEFT_CUDA_CHECK(cudaStreamWaitEvent(s, comm_done, 0));
              },
              [&] { finish_or_explain(transfer, stream, "GEMM with " + transfer.plan().strategy); });
        }
        for (cudaEvent_t e : {fork, gemm_done, comm_done}) cudaEventDestroy(e);
        execs.clear();
        for (cudaStream_t s : {stream, gemm_stream, comm_stream}) cudaStreamDestroy(s);
      });
      auto worst = [&](size_t p) { return *std::max_element(medians[p].begin(), medians[p].end()); };
      Row r;
      r.name = suite_row.name;
      r.world = world;
      r.m = problem.m * world;
      r.n = problem.n;
      r.k = problem.k;
      r.t_gemm = worst(0);
      for (int i = 0; i < 4; ++i) r.t_split[i] = worst(static_cast<size_t>(i) + 1);
      r.t_copies = worst(5);
      r.t_nccl = worst(6);
      r.t_with_copies = worst(7);
      r.t_with_nccl = worst(8);
      std::printf("%-14s %5d %6lld %6lld %6lld %8.3f %7.1f%% %7.1f%% %7.1f%% %7.1f%% %8.3f %8.3f %7.1f%% %7.1f%%\n",
                  r.name.substr(0, 14).c_str(), world, static_cast<long long>(r.m), static_cast<long long>(r.n),
                  static_cast<long long>(r.k), r.t_gemm, r.dil(0) * 100, r.dil(1) * 100, r.dil(2) * 100, r.dil(3) * 100, r.t_copies,
                  r.t_nccl, r.cil_copies() * 100, r.cil_nccl() * 100);
      std::fflush(stdout);
      rows.push_back(r);
    }
  }
  if (!o.csv_path.empty()) {
    std::ostringstream csv;
    csv << "row,world,m,n,k,t_gemm_ms,t_rows_w_ms,t_rows_w2_ms,t_k_w_ms,t_k_w2_ms,t_copies_ms,t_nccl_ms,t_gemm_with_copies_ms,"
           "t_gemm_with_nccl_ms,dil_rows_w,dil_rows_w2,dil_k_w,dil_k_w2,cil_copies,cil_nccl\n";
    for (const Row& r : rows) {
      csv << '"' << r.name << "\"," << r.world << ',' << r.m << ',' << r.n << ',' << r.k << ',' << r.t_gemm;
      for (double t : r.t_split) csv << ',' << t;
      csv << ',' << r.t_copies << ',' << r.t_nccl << ',' << r.t_with_copies << ',' << r.t_with_nccl;
      for (int i = 0; i < 4; ++i) csv << ',' << r.dil(i);
      csv << ',' << r.cil_copies() << ',' << r.cil_nccl() << '\n';
    }
    OutputFile file(o.csv_path, "CSV file");
    file.write(csv.str());
    file.close();  // throws where a write failed
  }
}

}  // namespace weft::cli
