#include "calibrate.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "measure.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/model/tiling.hpp"
#include "weft/plan/transforms.hpp"
#include "weft/cuda/check.hpp"

namespace weft::cli {

using namespace weft::bench;

namespace {

// The median ms of an m x n x k GEMM: cuBLASLt, or (`tile` given) the overlap GEMM with an empty
// table of those tiles, unsplit.
double gemm_ms(Communicator& comm, int64_t m, int64_t n, int64_t k, int warmup, int iterations, const TileShape* tile = nullptr) {
  PlanOptions options;
  options.tile_m = tile ? tile->tile_m : 128;
  options.tile_n = tile ? tile->tile_n : 256;
  const Plan gemm = steps_of_kind(plan_sequential(Problem{OpKind::gemm_ar, m, n, k, 1, DType::bf16, DType::bf16, {}}, options), StepKind::gemm);
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  double ms = 0;
  {
    CudaExecutor exec(comm, gemm, ExecutorOptions{.plain_gemm = tile ? ExecutorOptions::PlainGemm::overlap : ExecutorOptions::PlainGemm::library});
    fill_buffers(exec, 0, 1, stream);
    ms = median_call_ms(
        comm, [] {}, stream, warmup, iterations, [&](cudaStream_t s) { exec.run(s); },
        [&] { finish_or_explain(exec, stream, "calibration GEMM"); });
  }
  cudaStreamDestroy(stream);
  return ms;
}

double gemm_flops_per_s(Communicator& comm, int64_t m, int64_t n, int64_t k, int warmup, int iterations) {
  const double ms = gemm_ms(comm, m, n, k, warmup, iterations);
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  std::printf("  GEMM %lldx%lldx%lld: %.3f ms, %.1f TFLOP/s\n", static_cast<long long>(m), static_cast<long long>(n),
              static_cast<long long>(k), ms, flops / ms * 1e-9);
  return flops / (ms * 1e-3);
}

double copy_bytes_per_s(size_t bytes, int warmup, int iterations) {
  void *from = nullptr, *to = nullptr;
  WEFT_CUDA_CHECK(cudaMalloc(&from, bytes));
  WEFT_CUDA_CHECK(cudaMalloc(&to, bytes));
  WEFT_CUDA_CHECK(cudaMemset(from, 0x3c, bytes));  // timed on data, not on never-touched pages
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  WEFT_CUDA_CHECK(cudaEventCreate(&start));
  WEFT_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> times;
  for (int i = 0; i < warmup + iterations; ++i) {
    WEFT_CUDA_CHECK(cudaEventRecord(start, stream));
    WEFT_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream));
    WEFT_CUDA_CHECK(cudaEventRecord(stop, stream));
    if (!synchronize_with_timeout(stream, 30000)) throw CudaError("calibration copy did not finish within 30 s");
    float ms = 0;
    WEFT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (i >= warmup) times.push_back(ms);
  }
  const double ms = median(times);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  cudaFree(from);
  cudaFree(to);
  const double moved = 2.0 * static_cast<double>(bytes);  // read once, written once
  std::printf("  copy of %.1f GiB: %.3f ms, %.2f TB/s (read + written)\n", static_cast<double>(bytes) / (1u << 30), ms,
              moved / ms * 1e-9);
  return moved / (ms * 1e-3);
}

// FlashOverlap's bandwidth curve (Section 4.2.1, Figure 8): one NCCL call of each size, 64 KiB to
// 512 MiB of input per rank, on the first `world` GPUs; the slowest rank's median.
CollectiveCurve collective_curve(CollectiveKind kind, int world, int warmup, int iterations) {
  auto group = first_gpus(world);
  CollectiveCurve curve;
  curve.kind = kind;
  curve.world_size = world;
  const int64_t cols = 1024;  // bf16: 2 KiB a row
  for (int64_t bytes = int64_t{64} << 10; bytes <= int64_t{512} << 20; bytes *= 2) {
    const int64_t rows = bytes / (cols * 2);
    // `bytes` is what one rank hands the call: the buffer reduced, or the rows it sends (all-to-all,
    // spread evenly over the ranks as signal's pools are on average).
    Problem p{kind == CollectiveKind::reduce_scatter ? OpKind::gemm_rs : OpKind::gemm_ar, rows, cols, 64, world, DType::bf16, DType::bf16, {}};
    if (kind == CollectiveKind::all_to_all) {
      p.op = OpKind::gemm_a2a;
      for (int r = 0; r < world; ++r) {
        p.routing.emplace_back();
        for (int64_t i = 0; i < rows; ++i) p.routing.back().push_back(static_cast<int>((i + r) % world));
      }
    }
    const Plan plan = steps_of_kind(plan_sequential(p, PlanOptions{}), StepKind::collective);
    curve.bytes.push_back(static_cast<double>(bytes));
    curve.seconds.push_back(slowest_rank_median_ms(group, plan, 1, warmup, iterations, "calibration collective") * 1e-3);
  }
  std::printf("  %s, world %d: 64 KiB %.1f us, 1 MiB %.1f us, 16 MiB %.1f us, 512 MiB %.3f ms\n", std::string(to_string(kind)).c_str(), world,
              curve.seconds[0] * 1e6, curve.seconds[4] * 1e6, curve.seconds[8] * 1e6, curve.seconds.back() * 1e3);
  return curve;
}

// Each 128-row tile's rate relative to 128x256, in the tiling rule's terms (model/tiling.hpp: time =
// waves x K-tiles x tile area / rate): the overlap GEMM with an empty table of that tile on a
// compute-bound shape that every tile width divides (7680 columns), rate = waves x K-tiles x area
// / time. 64-row tiles are left out: the rule picks those by bytes in flight, not by rate.
TileRates measured_tile_rates(Communicator& comm, int sm_count, int warmup, int iterations) {
  constexpr int64_t m = 8192, n = 7680, k = 8192;
  std::map<std::string, double> work_per_ms;
  for (const TileShape& tile : overlap_gemm_tiles()) {
    if (tile.tile_m != 128) continue;
    const int64_t tiles = (m / tile.tile_m) * (n / tile.tile_n), waves = (tiles + sm_count - 1) / sm_count;
    const double ms = gemm_ms(comm, m, n, k, warmup, iterations, &tile);
    work_per_ms[tile_name(tile)] = static_cast<double>(waves) * static_cast<double>(k / tile.tile_k) * tile.tile_m * tile.tile_n / ms;
    std::printf("  overlap GEMM %lldx%lldx%lld with %s tiles: %.3f ms (%lld waves)\n", static_cast<long long>(m), static_cast<long long>(n),
                static_cast<long long>(k), tile_name(tile).c_str(), ms, static_cast<long long>(waves));
  }
  TileRates rates;
  const double widest = work_per_ms.at(tile_name(overlap_gemm_tiles().front()));
  for (const auto& [name, work] : work_per_ms) rates[name] = work / widest;
  std::printf("  tile rates relative to %s:", tile_name(overlap_gemm_tiles().front()).c_str());
  for (const auto& [name, rate] : rates) std::printf(" %s %.3f", name.c_str(), rate);
  std::printf("\n");
  return rates;
}

}  // namespace

MachineProfile calibrate_machine(int warmup, int iterations) {
  auto group = Communicator::local_group({0});
  Communicator& comm = *group.front();
  cudaDeviceProp prop{};
  WEFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, comm.device()));
  MachineProfile p;
  p.device = prop.name;
  std::printf("calibrating GPU 0 (%s):\n", prop.name);
  // The rate the heuristics compare against is what a large library GEMM reaches, not the data
  // sheet's: the best of a few large square and rectangular shapes.
  p.peak_flops = 0;
  for (int64_t size : {int64_t{8192}, int64_t{12288}})
    p.peak_flops = std::max(p.peak_flops, gemm_flops_per_s(comm, size, size, size, warmup, iterations));
  p.memory_bytes_per_s = copy_bytes_per_s(size_t{2} << 30, warmup, iterations);
  p.sm_count = prop.multiProcessorCount;
  p.tile_rates = measured_tile_rates(comm, p.sm_count, warmup, iterations);
  int visible = 0;
  WEFT_CUDA_CHECK(cudaGetDeviceCount(&visible));
  for (int world = 2; world <= visible; world *= 2)
    for (CollectiveKind kind : {CollectiveKind::all_reduce, CollectiveKind::reduce_scatter, CollectiveKind::all_to_all})
      p.collectives.push_back(collective_curve(kind, world, warmup, iterations));
  p.source = "weft tune --calibrate (" + std::to_string(iterations) + " timed runs, median)";
  return p;
}

}  // namespace weft::cli
