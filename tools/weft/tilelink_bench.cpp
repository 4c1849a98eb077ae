#include "common/text_file.hpp"
#include "tilelink_bench.hpp"

#include <optional>
#include <algorithm>
#include <barrier>
#include <cstdio>

#include "measure.hpp"
#include "weft/model/tiling.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/transforms.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/cuda_executor.hpp"
#include "weft/runtime/rank_threads.hpp"

namespace weft::cli {

using namespace weft::bench;

namespace {

constexpr int64_t kCols = 4096;

// Every rank copies X (its own, or rank r+1's: a pull through NVLink) into Y, in communication
// tiles of `tile_rows` rows, `repeats` times over, as one companion launch on `ctas` CTAs.
RankPlan copy_rank(int rank, int world, int64_t rows, int64_t tile_rows, int ctas, bool pull, int repeats, int stream) {
  RankPlan rp;
  rp.rank = rank;
  rp.stream_count = stream + 1;
  rp.buffers = {BufferDecl{"X", BufferRole::input, rows, kCols, DType::bf16, /*symmetric=*/true},
                BufferDecl{"Y", BufferRole::scratch, rows, kCols, DType::bf16}};
  const int src = pull ? (rank + 1) % world : rank;
  for (int rep = 0; rep < repeats; ++rep)
    for (int64_t row = 0; row < rows; row += tile_rows) {
      const int64_t n = std::min(tile_rows, rows - row);
      Step step;
      step.label = "copy tile " + std::to_string(row / tile_rows);
      step.stream = stream;
      step.engine = Engine::sm;
      step.companion = 0;
      step.body = CopyStep{Region{src, 0, Rect{row, 0, n, kCols}}, Region{rank, 1, Rect{row, 0, n, kCols}}, ctas};
      rp.steps.push_back(step);
    }
  return rp;
}

// The executors' plans need an output: a copy plan's is Y, declared an output here.
Plan copy_plan(int world, int64_t rows, int64_t tile_rows, int ctas, bool pull) {
  Plan plan;
  plan.strategy = pull ? "companion pull" : "companion copy";
  plan.problem = Problem{OpKind::gemm_ar, rows, kCols, 1, world, DType::bf16, DType::bf16, {}};
  for (int r = 0; r < world; ++r) {
    RankPlan rp = copy_rank(r, world, rows, tile_rows, ctas, pull, 1, 0);
    rp.buffers[1].role = BufferRole::output;
    rp.output = Region{r, 1, Rect{0, 0, rows, kCols}};
    plan.ranks.push_back(std::move(rp));
  }
  return plan;
}

// The overlap GEMM alone on `sms` SMs (the tile the model picks for them).
Plan gemm_plan(int64_t m, int64_t n, int64_t k, int sms) {
  PlanOptions o;
  const GemmTiling tiling = choose_overlap_gemm_tiling(m, n, k, sms);
  o.tile_m = tiling.tile.tile_m;
  o.tile_n = tiling.tile.tile_n;
  Plan plan = steps_of_kind(plan_sequential(Problem{OpKind::gemm_ar, m, n, k, 1, DType::bf16, DType::bf16, {}}, o), StepKind::gemm);
  for (Step& step : plan.ranks[0].steps) std::get<GemmStep>(step.body).sm_limit = sms;
  return plan;
}

// The GEMM on sm_count - comm_sms SMs with the companion copying `repeats` x `rows` rows beside it.
Plan gemm_beside_copy(const Plan& gemm, int64_t rows, int64_t tile_rows, int comm_sms, int repeats) {
  Plan plan = gemm;
  RankPlan& rp = plan.ranks[0];
  const RankPlan copies = copy_rank(0, 1, rows, tile_rows, comm_sms, false, repeats, 1);
  const auto first = static_cast<BufferId>(rp.buffers.size());
  rp.buffers.push_back(copies.buffers[0]);
  rp.buffers.push_back(copies.buffers[1]);
  rp.stream_count = 2;
  for (Step step : copies.steps) {
    auto& copy = std::get<CopyStep>(step.body);
    copy.src.buffer += first;
    copy.dst.buffer += first;
    rp.steps.push_back(step);
  }
  return plan;
}

}  // namespace

int run_tilelink_bench(const TilelinkBenchOptions& o) {
  int visible = 0;
  WEFT_CUDA_CHECK(cudaGetDeviceCount(&visible));
  const int64_t rows = std::max<int64_t>(o.copy_mib * (1 << 20) / (kCols * 2), 1);
  const double bytes = static_cast<double>(rows * kCols * 2);
  int failures = 0;
  // Opened before the timing; every write is checked when it is closed (OutputFile).
  std::optional<OutputFile> csv_file;
  if (!o.csv_path.empty()) csv_file.emplace(o.csv_path, "CSV file");
  std::FILE* csv = csv_file ? csv_file->stream() : nullptr;
  if (csv) std::fprintf(csv, "table,what,ctas_or_comm_sms,m,n,k,ms,gb_per_s,fraction,extra_ms,extra\n");

  // 1. The companion's copy bandwidth against its CTAs: local (HBM read + write) and pulled from a peer.
  std::printf("companion copy of %lld MiB in %lld-row tiles (%lld columns, bf16), one launch; GB/s of data moved\n",
              static_cast<long long>(o.copy_mib), static_cast<long long>(o.comm_tile_rows), static_cast<long long>(kCols));
  std::printf("%6s %10s %10s %12s", "CTAs", "local ms", "local GB/s", "of HBM r+w");
  const bool peers = visible >= 2;
  if (peers) std::printf(" %10s %10s %12s", "pull ms", "pull GB/s", "of NVLink");
  std::printf("\n");
  std::vector<double> local_rate(o.ctas.size(), 0.0);
  for (size_t i = 0; i < o.ctas.size(); ++i) {
    const int ctas = o.ctas[i];
    double ms[2] = {0, 0};
    for (int pull = 0; pull <= (peers ? 1 : 0); ++pull) {
      const int world = pull ? 2 : 1;
      auto group = first_gpus(world);
      const Plan plan = copy_plan(world, rows, o.comm_tile_rows, ctas, pull);
      std::vector<double> rank_ms(static_cast<size_t>(world), 0.0);
      std::vector<double> errors(static_cast<size_t>(world), 0.0);
      std::barrier sync(world);
      for_each_rank(group, [&](Communicator& comm) {
        cudaStream_t stream;
        WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        {
          CudaExecutor exec(comm, plan, ExecutorOptions{.validate = false});
          fill_buffers(exec, comm.rank(), 1, stream);
          exec.run(stream);
          finish_or_explain(exec, stream, plan.strategy);
          // Y of this rank against X of its source, regenerated here (inputs are a pure function of the seed).
          CudaExecutor source(comm, copy_plan(world, rows, o.comm_tile_rows, ctas, false), ExecutorOptions{.validate = false});
          fill_buffers(source, pull ? (comm.rank() + 1) % world : comm.rank(), 1, stream);
          double* sums = nullptr;
          WEFT_CUDA_CHECK(cudaMalloc(&sums, 3 * sizeof(double)));
          errors[static_cast<size_t>(comm.rank())] =
              relative_difference(exec.buffer("Y"), source.buffer("X"), rows * kCols, sums, stream);
          cudaFree(sums);
          rank_ms[static_cast<size_t>(comm.rank())] = median_call_ms(
              comm, [&] { sync.arrive_and_wait(); }, stream, o.warmup, o.iterations, [&](cudaStream_t s) { exec.run(s); },
              [&] { finish_or_explain(exec, stream, plan.strategy); });
        }
        cudaStreamDestroy(stream);
      });
      for (double e : errors) failures += e != 0.0;
      ms[pull] = *std::max_element(rank_ms.begin(), rank_ms.end());
    }
    local_rate[i] = bytes / (ms[0] * 1e-3);
    std::printf("%6d %10.3f %10.1f %11.1f%%", ctas, ms[0], local_rate[i] * 1e-9, 100.0 * 2 * local_rate[i] / o.machine.memory_bytes_per_s);
    if (csv)
      std::fprintf(csv, "copy,local,%d,%lld,%lld,0,%.4f,%.2f,%.4f,,\n", ctas, static_cast<long long>(rows), static_cast<long long>(kCols), ms[0],
                   local_rate[i] * 1e-9, 2 * local_rate[i] / o.machine.memory_bytes_per_s);
    if (peers) {
      const double rate = bytes / (ms[1] * 1e-3);
      std::printf(" %10.3f %10.1f %11.1f%%", ms[1], rate * 1e-9, 100.0 * rate / o.machine.nvlink_bytes_per_s);
      if (csv)
        std::fprintf(csv, "copy,pull,%d,%lld,%lld,0,%.4f,%.2f,%.4f,,\n", ctas, static_cast<long long>(rows), static_cast<long long>(kCols), ms[1],
                     rate * 1e-9, rate / o.machine.nvlink_bytes_per_s);
    }
    std::printf("\n");
    std::fflush(stdout);
  }

  // 2. The GEMM against the SMs given to communication: alone on the rest, and with the companion
  // copying beside it on those SMs for about as long as the GEMM runs.
  auto group = first_gpus(1);
  Communicator& comm = *group.front();
  int sm_count = 0;
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, comm.device()));
  auto rate_on = [&](int ctas) {  // the measured local copy rate of the nearest CTA count
    size_t best = 0;
    for (size_t i = 0; i < o.ctas.size(); ++i)
      if (std::abs(o.ctas[i] - ctas) < std::abs(o.ctas[best] - ctas)) best = i;
    return local_rate[best];
  };
  std::printf("\noverlap GEMM on sm_count - comm SMs (%d SMs), alone and beside the companion copying on the comm SMs\n", sm_count);
  std::printf("%20s %9s %8s %9s %9s %10s %9s %11s %9s\n", "m x n x k", "comm SMs", "GEMM SMs", "GEMM ms", "TFLOP/s", "vs all SMs", "copy MiB",
              "beside ms", "slowdown");
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const auto& shape : o.gemms) {
    const int64_t m = shape.at(0), n = shape.at(1), k = shape.at(2);
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    double all_sms_ms = 0;
    for (int comm_sms : o.comm_sms) {
      if (comm_sms >= sm_count) continue;
      const Plan gemm = gemm_plan(m, n, k, sm_count - comm_sms);
      std::vector<std::unique_ptr<CudaExecutor>> execs;
      const ExecutorOptions options{.validate = false, .plain_gemm = ExecutorOptions::PlainGemm::overlap};
      execs.push_back(std::make_unique<CudaExecutor>(comm, gemm, options));
      fill_buffers(*execs.back(), 0, 1, stream);
      std::vector<double> ms = interleaved_call_medians_ms(
          comm, [] {}, stream, o.warmup, o.iterations, {[&](cudaStream_t s) { execs[0]->run(s); }},
          [&](size_t) { finish_or_explain(*execs[0], stream, "gemm"); });
      const double alone = ms[0];
      if (comm_sms == 0) all_sms_ms = alone;
      double beside = 0, copy_mib = 0;
      if (comm_sms > 0) {
        // Enough copying to last about as long as the GEMM at the rate measured for these CTAs.
        const double want = rate_on(comm_sms) * alone * 1e-3;
        const int repeats = std::max(1, static_cast<int>(want / bytes + 0.5));
        copy_mib = repeats * bytes / (1 << 20);
        execs.push_back(std::make_unique<CudaExecutor>(comm, gemm_beside_copy(gemm, rows, o.comm_tile_rows, comm_sms, repeats), options));
        fill_buffers(*execs.back(), 0, 1, stream);
        ms = interleaved_call_medians_ms(
            comm, [] {}, stream, o.warmup, o.iterations,
            {[&](cudaStream_t s) { execs[0]->run(s); }, [&](cudaStream_t s) { execs[1]->run(s); }},
            [&](size_t v) { finish_or_explain(*execs[v], stream, v ? "gemm beside copy" : "gemm"); });
        beside = ms[1];
      }
      const double base = all_sms_ms > 0 ? all_sms_ms : alone;
      std::printf("%6lldx%6lldx%6lld %9d %8d %9.3f %9.1f %9.3fx", static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
                  comm_sms, sm_count - comm_sms, alone, flops / (alone * 1e-3) * 1e-12, alone / base);
      if (comm_sms > 0) std::printf(" %9.0f %11.3f %8.3fx", copy_mib, beside, beside / std::max(alone, copy_mib * (1 << 20) / rate_on(comm_sms) * 1e3));
      std::printf("\n");
      std::fflush(stdout);
      if (csv)
        std::fprintf(csv, "gemm,overlap_gemm,%d,%lld,%lld,%lld,%.4f,,%.4f,%.4f,%.1f\n", comm_sms, static_cast<long long>(m), static_cast<long long>(n),
                     static_cast<long long>(k), alone, alone / base, beside, copy_mib);
    }
  }
  cudaStreamDestroy(stream);
  if (csv_file) csv_file->close();
  std::printf("\nslowdown: GEMM beside the copy against the longer of the two alone (1.0: no contention)\n");
  return failures;
}

}  // namespace weft::cli
