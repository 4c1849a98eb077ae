// `weft bench gemm`: the overlap GEMM against cuBLASLt on one GPU, over the GEMM shapes the suites'
// rows give one rank at a world size. Per shape, each result verified against cuBLASLt first:
//   library  : cuBLASLt (the plain tile table lowered as the executor does by default);
//   empty    : the overlap GEMM with an empty table (every tile in place, no waits, no notifies),
//              once per compiled tile shape (a memory-bound shape: also split 1-4 ways over K, the
//              tile's column its best; where the last wave is partial, also with stream-K on each
//              128-row tile; for m <= 256, also the exchanged product C^T = B A^T on each tile
//              compiled for it, "/x"; on 128x128 and 128x256 (FP8: 128x128x128), clusters of
//              two sharing a B or an A tile by TMA multicast, "/c2x1" and "/c1x2", and on bf16
//              128x128 of four and eight, "/c2x2", "/c2x4", "/c4x2", where the tile grid makes
//              whole blocks, with the tile's splits), so the tile rule's pick can be judged;
//   notify   : the chosen tile with a notify on every tile and every full row block of tiles stored
//              at a remapped position (reversed), the epilogue work FlashOverlap's reordering needs;
//              also each of the two alone (CSV and summary), to trace a cost to one of them;
//   peer     : the chosen tile storing every tile into a second, symmetric buffer with a
//              system-scope notify each, as fused gemm_rs stores to a peer (on one GPU the buffer
//              is this GPU's own: the kernel's path and the notify, not NVLink, are what is timed).
#include "common/text_file.hpp"
#include "gemm_bench.hpp"

#include <optional>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <stdexcept>
#include <tuple>

#include "measure.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/transforms.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/overlap_gemm.hpp"
#include "weft/model/tiling.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/cuda_executor.hpp"

namespace weft::cli {

using namespace weft::bench;

namespace {

// The GEMM-only plan of one rank computing C [m, n] = A [m, k] B [n, k]^T with `tile`, split
// `splits` ways along K.
Plan gemm_plan(const GemmShape& s, const TileShape& tile, int splits, const GemmBenchOptions& o, int tail_splits = 1, bool stream_k = false,
               bool exchanged = false, int cluster_m = 1, int cluster_n = 1) {
  if (exchanged) {  // the kernel's tile, transposed onto C, and the exchanged product (clusters: C's)
    Plan plan = gemm_plan(s, TileShape{tile.tile_n, tile.tile_m, tile.tile_k}, splits, o, tail_splits, stream_k);
    for (Step& step : plan.ranks.at(0).steps) {
      GemmStep& gemm = std::get<GemmStep>(step.body);
      gemm.exchanged = true;
      if (cluster_m * cluster_n > 1) order_tiles_in_clusters(gemm, cluster_m, cluster_n);
    }
    return plan;
  }
  if (cluster_m * cluster_n > 1) {  // the plan's tiles in the clusters' groups (blocks of cluster_m x cluster_n)
    Plan plan = gemm_plan(s, tile, splits, o, tail_splits, stream_k);
    for (Step& step : plan.ranks.at(0).steps) order_tiles_in_clusters(std::get<GemmStep>(step.body), cluster_m, cluster_n);
    return plan;
  }
  PlanOptions options;
  options.tail_splits = tail_splits;
  options.stream_k = stream_k;
  options.raster = o.raster;
  options.swizzle = o.swizzle;
  options.tile_m = tile.tile_m;
  options.tile_n = tile.tile_n;
  options.k_splits = splits;
  Problem p{OpKind::gemm_ar, s.m, s.n, s.k, 1, o.dtype, DType::bf16, {}};
  p.scaling = o.scaling;
  return steps_of_kind(plan_sequential(p, options), StepKind::gemm);
}

// The splits timed for one tile: the model's for a table of the whole grid, and for a memory-bound
// shape every split up to 4 that leaves each entry 4 K-tiles or more.
std::vector<int> splits_to_time(const GemmShape& s, const TileShape& tile, int sm_count) {
  const int64_t tiles = ((s.m + tile.tile_m - 1) / tile.tile_m) * ((s.n + tile.tile_n - 1) / tile.tile_n);
  std::vector<int> splits{choose_k_splits(tiles, s.m, s.n, s.k, tile, sm_count)};
  const int64_t k_tiles = (s.k + tile.tile_k - 1) / tile.tile_k;
  if (memory_bound_gemm(s.m, s.n, s.k))
    for (int split = 1; split <= 4 && k_tiles / split >= 4; ++split)
      if (std::find(splits.begin(), splits.end(), split) == splits.end()) splits.push_back(split);
  return splits;
}

// Row block b of full blocks lands at block (full - 1 - b); the ragged last block stays.
int64_t remapped_block(int64_t block, int64_t full_blocks) { return block < full_blocks ? full_blocks - 1 - block : block; }

// The epilogue work FlashOverlap's reordering needs, each part on its own so that a cost can be
// traced to one: a notify after every tile, and/or every full row block stored at its remapped
// position.
struct EpilogueWork {
  const char* name;
  bool notify;
  bool remap;
  bool peer;  // stores into a second, symmetric buffer (the rank's output moves there)
};
constexpr EpilogueWork kEpilogueWork[] = {
    {"notify+remap", true, true, false}, {"notify only", true, false, false}, {"remap only", false, true, false}, {"peer store", true, false, true}};

Plan with_epilogue_work(Plan plan, const EpilogueWork& work) {
  RankPlan& rp = plan.ranks.at(0);
  rp.signals.push_back("tile_done");
  const SignalId done = static_cast<SignalId>(rp.signals.size()) - 1;
  if (work.peer) {
    const BufferDecl& out = rp.buffers.at(static_cast<size_t>(rp.output.buffer));
    rp.buffers.push_back(BufferDecl{"peer_out", BufferRole::scratch, out.rows, out.cols, out.dtype, /*symmetric=*/true});
    rp.output.buffer = static_cast<BufferId>(rp.buffers.size()) - 1;
  }
  for (Step& step : rp.steps) {
    auto& gemm = std::get<GemmStep>(step.body);
    const int64_t full_blocks = gemm.a.box.rows / gemm.tile_m;
    for (GemmTile& t : gemm.tiles) {
      const int64_t block = t.tile.row / gemm.tile_m;
      if (work.remap) t.store.box.row += (remapped_block(block, full_blocks) - block) * gemm.tile_m;
      if (work.peer) t.store.buffer = rp.output.buffer;
      if (work.notify) t.notify = Notify{SignalRef{0, done}, 1};
    }
  }
  return plan;
}

}  // namespace

int run_gemm_bench(const std::vector<BenchSuite>& suites, const GemmBenchOptions& o) {
  std::set<GemmShape> seen;
  std::vector<std::pair<std::string, GemmShape>> shapes;
  for (const GemmShape& s : o.shapes)
    if (seen.insert(s).second) shapes.emplace_back("--gemm", s);
  if (o.shapes.empty())
    for (const BenchSuite& suite : suites)
      for (const SuiteRow& row : suite.rows) {
        Problem p;
        try {
          p = problem_for(row, o.world, o.seed);
        } catch (const std::invalid_argument&) {
          continue;
        }
        const Plan plan = plan_sequential(p, PlanOptions{});  // named: a range-for over a temporary's member dangles
        for (const Step& step : plan.ranks.at(0).steps)
          if (const auto* g = std::get_if<GemmStep>(&step.body)) {
            const GemmShape s{g->a.box.rows, g->b.box.rows, g->a.box.cols};
            if (seen.insert(s).second) shapes.emplace_back(suite.name + ":" + row.name, s);
            break;
          }
      }

  auto group = Communicator::local_group({0});
  Communicator& comm = *group.front();
  int sm_count = 0;
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, comm.device()));
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  double* sums = nullptr;
  WEFT_CUDA_CHECK(cudaMalloc(&sums, 3 * sizeof(double)));

  // FP8: the tiles its main loop is compiled for (128x128x128 alone and in clusters, 64x128x128); no
  // exchanged or stream-K variants.
  const bool fp8 = is_fp8(o.dtype);
  const std::vector<OverlapGemmConfig> configs = fp8 ? fp8_overlap_gemm_configs() : overlap_gemm_configs();
  if (fp8)
    std::printf("FP8 %s with %s scales: the overlap GEMM's FP8 main loop against cuBLASLt's FP8 matmul (fast accumulation off in both)\n\n",
                std::string(to_string(o.dtype)).c_str(), std::string(to_string(o.scaling)).c_str());
  // Opened before the timing; every write is checked when it is closed (OutputFile).
  std::optional<OutputFile> csv_file;
  if (!o.csv_path.empty()) csv_file.emplace(o.csv_path, "CSV file");
  std::FILE* csv = csv_file ? csv_file->stream() : nullptr;
  if (csv) {
    std::fprintf(csv, "row,m,n,k,library_ms");
    for (OverlapGemmConfig c : configs) std::fprintf(csv, ",empty_ms_%s", to_string(c).c_str());
    std::fprintf(csv, ",chosen,chosen_ms,best,notify_ms,notify_only_ms,remap_only_ms,peer_store_ms,library_tflops,chosen_tflops,"
                      "chosen_ratio,best_ratio,notify_overhead,peer_store_overhead,error_empty,error_notify\n");
  }
  std::printf("%-30s %6s %6s %6s %8s", "row (first with this shape)", "m", "n", "k", "lib ms");
  for (OverlapGemmConfig c : configs) std::printf(" %10s", to_string(c).c_str());
  std::printf(" %-13s %-13s %9s %8s %8s %8s %7s %7s %8s %s\n", "chosen", "best", "notify ms", "lib TF/s", "chosen/lib", "best/lib",
              "notify+", "peer+", "err", "check");
  std::vector<double> chosen_ratios, best_ratios, overheads, notify_only_overheads, remap_only_overheads, peer_overheads;
  int failures = 0, chose_best = 0;
  auto name_of = [](OverlapGemmConfig c, int splits, int tail = 1, bool stream_k = false, bool exchanged = false, int cluster_m = 1, int cluster_n = 1) {
    return to_string(c) + (exchanged ? "/x" : "") + (cluster_m * cluster_n > 1 ? "/c" + std::to_string(cluster_m) + "x" + std::to_string(cluster_n) : "") +
           (splits > 1 ? "/k" + std::to_string(splits) : "") + (tail > 1 ? "/t" + std::to_string(tail) : "") + (stream_k ? "/sk" : "");
  };
  for (const auto& [name, s] : shapes) {
    // The rule as for a GEMM whose tiles wait for nothing (this plan's), on B stored [N, K]: clusters allowed.
    const GemmTiling tiling = fp8 ? choose_fp8_overlap_gemm_tiling(s.m, s.n, s.k, sm_count, o.tile_rates)
                                  : choose_overlap_gemm_tiling(s.m, s.n, s.k, sm_count, o.tile_rates, true, /*clusters_allowed=*/true);
    const TileShape chosen_tile = tiling.tile;  // C's
    // The kernel's tile: C's, or for the exchanged product C's transposed.
    const TileShape kernel_tile = tiling.exchanged ? TileShape{chosen_tile.tile_n, chosen_tile.tile_m, chosen_tile.tile_k} : chosen_tile;
    const OverlapGemmConfig chosen = fp8 ? fp8_config_for(kernel_tile.tile_m, kernel_tile.tile_n) : config_for(kernel_tile.tile_m, kernel_tile.tile_n);
    const std::string chosen_name =
        name_of(chosen, tiling.k_splits, tiling.tail_splits, tiling.stream_k, tiling.exchanged, tiling.cluster_m, tiling.cluster_n);
    const Plan chosen_plain = gemm_plan(s, kernel_tile, tiling.k_splits, o, tiling.tail_splits, tiling.stream_k, tiling.exchanged,
                                        tiling.cluster_m, tiling.cluster_n);
    CudaExecutor library(comm, chosen_plain, ExecutorOptions{.plain_gemm = ExecutorOptions::PlainGemm::library});
    fill_buffers(library, 0, o.seed, stream);
    library.run(stream);
    finish_or_explain(library, stream, "library");
    const DeviceRegion want = library.output();

    // Every compiled tile (and split) with an empty table, checked against cuBLASLt.
    struct Variant {
      size_t config;
      int splits;
      int tail = 1;
      bool stream_k = false;
      bool exchanged = false;  // not in the tile's column: a kernel of its own
      int cluster_m = 1, cluster_n = 1;  // clusters of two: kernels of their own, apart like exchanged
      std::string name(const std::vector<OverlapGemmConfig>& configs, decltype(name_of)& named) const {
        return named(configs[config], splits, tail, stream_k, exchanged, cluster_m, cluster_n);
      }
    };
    std::vector<Variant> variants;
    for (size_t c = 0; c < configs.size(); ++c) {
      const OverlapGemmShape t = shape_of(configs[c]);
      std::vector<int> splits = splits_to_time(s, TileShape{t.tile_m, t.tile_n, t.tile_k}, sm_count);
      if (configs[c] == chosen && !tiling.exchanged && std::find(splits.begin(), splits.end(), tiling.k_splits) == splits.end())
        splits.push_back(tiling.k_splits);
      for (int split : splits) variants.push_back({c, split});
      if (configs[c] == chosen && tiling.tail_splits > 1) variants.push_back({c, tiling.k_splits, tiling.tail_splits});
      // Clusters (cluster_m x cluster_n sharing B down a cluster column and A along a cluster row)
      // where the tile rows and columns make whole blocks, with the tile's splits (in step), on the
      // tiles compiled for them.
      for (const auto& [cm, cn] : compiled_cluster_shapes())
        if (compiled_in_cluster(configs[c], cm, cn) && (s.m + t.tile_m - 1) / t.tile_m % cm == 0 && (s.n + t.tile_n - 1) / t.tile_n % cn == 0)
          for (int split : splits) variants.push_back({c, split, 1, false, false, cm, cn});
      if (fp8) continue;
      // Stream-K on every 128-row tile where it applies (a partial last wave, or fewer tiles than SMs),
      // so that a rule for it can be judged: the memory-bound shapes too (m = 200 has 2 rows of tiles,
      // often fewer than the SMs, where cuBLASLt keeps every SM busy).
      if (std::isfinite(stream_k_time((s.m + t.tile_m - 1) / t.tile_m * ((s.n + t.tile_n - 1) / t.tile_n), s.k,
                                      TileShape{t.tile_m, t.tile_n, t.tile_k}, sm_count)) && t.tile_m == 128)
        variants.push_back({c, 1, 1, true});
      else if (configs[c] == chosen && tiling.stream_k)
        variants.push_back({c, 1, 1, true});
      // The exchanged product where m fits a few tile columns (m <= 256) on the tiles compiled for it,
      // and in clusters (C's: 2x1, 2x2, 2x4) where they are compiled and C's tiles make whole blocks.
      std::vector<int> exchanged_splits = splits_to_time(GemmShape{s.n, s.m, s.k}, TileShape{t.tile_m, t.tile_n, t.tile_k}, sm_count);
      if (configs[c] == chosen && tiling.exchanged && std::find(exchanged_splits.begin(), exchanged_splits.end(), tiling.k_splits) == exchanged_splits.end())
        exchanged_splits.push_back(tiling.k_splits);
      if (s.m <= 256 && t.tile_m == 128 && (t.tile_n == 96 || t.tile_n == 112 || t.tile_n == 128 || t.tile_n == 192))
        for (int split : exchanged_splits) {
          variants.push_back({c, split, 1, false, true});
          for (const auto& [cm, cn] : compiled_cluster_shapes())  // the kernel's shape; C's is (cn, cm)
            if (compiled_in_cluster(configs[c], cm, cn, /*exchanged=*/true) && (s.m + t.tile_n - 1) / t.tile_n % cn == 0 &&
                (s.n + t.tile_m - 1) / t.tile_m % cm == 0)
              variants.push_back({c, split, 1, false, true, cn, cm});
        }
    }
    double error_empty = 0;
    std::vector<std::unique_ptr<CudaExecutor>> empties;
    for (const Variant& v : variants) {
      const OverlapGemmShape t = shape_of(configs[v.config]);
      empties.push_back(std::make_unique<CudaExecutor>(
          comm, gemm_plan(s, TileShape{t.tile_m, t.tile_n, t.tile_k}, v.splits, o, v.tail, v.stream_k, v.exchanged, v.cluster_m, v.cluster_n),
          ExecutorOptions{.plain_gemm = ExecutorOptions::PlainGemm::overlap}));
      CudaExecutor& empty = *empties.back();
      fill_buffers(empty, 0, o.seed, stream);
      empty.run(stream);
      finish_or_explain(empty, stream, "overlap " + v.name(configs, name_of));
      error_empty = std::max(error_empty, relative_difference(empty.output().data, want.data, s.m * s.n, sums, stream));
    }

    // The chosen tile with the epilogue work, checked against cuBLASLt block by block.
    std::vector<std::unique_ptr<CudaExecutor>> worked;
    double error_notify = 0;
    std::string notify_error;
    auto rows_at = [](const DeviceRegion& r, int64_t row) { return static_cast<const uint16_t*>(r.data) + row * r.stride; };
    const int64_t full_blocks = s.m / chosen_tile.tile_m;
    for (const EpilogueWork& work : kEpilogueWork) {
      worked.push_back(std::make_unique<CudaExecutor>(comm, with_epilogue_work(chosen_plain, work),
                                                      ExecutorOptions{.validate = false, .plain_gemm = ExecutorOptions::PlainGemm::overlap}));
      CudaExecutor& e = *worked.back();
      fill_buffers(e, 0, o.seed, stream);
      e.run(stream);
      try {
        finish_or_explain(e, stream, std::string("overlap with ") + work.name);
      } catch (const DeviceWaitTimeout& timeout) {
        if (notify_error.empty()) notify_error = timeout.what();
      }
      // Outputs are whole [m, n] buffers: row blocks are contiguous runs.
      std::vector<DifferenceRun> blocks;
      for (int64_t block = 0; block * chosen_tile.tile_m < s.m; ++block) {
        const int64_t rows = std::min<int64_t>(chosen_tile.tile_m, s.m - block * chosen_tile.tile_m);
        const int64_t lands = work.remap ? remapped_block(block, full_blocks) : block;
        blocks.push_back({rows_at(e.output(), lands * chosen_tile.tile_m), rows_at(want, block * chosen_tile.tile_m), rows * s.n});
      }
      error_notify = std::max(error_notify, relative_difference(blocks, sums, stream));
    }

    std::vector<CudaExecutor*> timed{&library};
    for (auto& e : worked) timed.push_back(e.get());
    for (auto& e : empties) timed.push_back(e.get());
    std::vector<std::function<void(cudaStream_t)>> runs;
    for (CudaExecutor* e : timed) runs.push_back([e](cudaStream_t on) { e->run(on); });
    const std::vector<double> medians = interleaved_median_ms(
        runs, stream, o.warmup, o.iterations, [&](size_t v) { finish_or_explain(*timed[v], stream, timed[v]->plan().strategy); });
    constexpr size_t kWorkCount = std::size(kEpilogueWork);
    static_assert(kWorkCount == 4, "the medians below name each epilogue work");
    const double t_library = medians[0], t_notify = medians[1], t_notify_only = medians[2], t_remap_only = medians[3], t_peer = medians[4];
    // Per compiled tile, its best split; the chosen (tile, split) exactly.
    std::vector<double> t_configs(configs.size(), INFINITY);
    double t_chosen = 0, t_best = INFINITY;
    std::string best_name;
    for (size_t v = 0; v < variants.size(); ++v) {
      const double t = medians[1 + kWorkCount + v];
      if (configs[variants[v].config] == chosen && variants[v].splits == tiling.k_splits && variants[v].tail == tiling.tail_splits &&
          variants[v].stream_k == tiling.stream_k && variants[v].exchanged == tiling.exchanged && variants[v].cluster_m == tiling.cluster_m &&
          variants[v].cluster_n == tiling.cluster_n)
        t_chosen = t;
      // The exchanged product and clusters stand apart from the best: in the 'each tile and split' line
      // only, so that the best stays comparable with earlier sweeps (the rule's clustered picks are
      // its own column's).
      if (variants[v].exchanged || variants[v].cluster_m * variants[v].cluster_n > 1) continue;
      t_configs[variants[v].config] = std::min(t_configs[variants[v].config], t);
      if (t < t_best) {
        t_best = t;
        best_name = variants[v].name(configs, name_of);
      }
    }

    if (t_chosen == 0) throw std::logic_error("weft bench gemm: the rule's pick " + chosen_name + " for " + name + " was not among the variants timed");
    const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    const bool ok = error_empty <= 1e-2 && error_notify <= 1e-2 && notify_error.empty();
    failures += !ok;
    chose_best += t_chosen <= t_best * 1.01;  // within noise of the best
    const double ratio = t_library / t_chosen, best_ratio = t_library / t_best, overhead = t_notify / t_chosen - 1.0;
    const double peer_overhead = t_peer / t_chosen - 1.0;
    chosen_ratios.push_back(ratio);
    best_ratios.push_back(best_ratio);
    overheads.push_back(overhead);
    notify_only_overheads.push_back(t_notify_only / t_chosen - 1.0);
    remap_only_overheads.push_back(t_remap_only / t_chosen - 1.0);
    peer_overheads.push_back(peer_overhead);
    std::printf("%-30s %6lld %6lld %6lld %8.3f", name.substr(0, 30).c_str(), static_cast<long long>(s.m),
                static_cast<long long>(s.n), static_cast<long long>(s.k), t_library);
    for (double t : t_configs) std::printf(" %10.3f", t);
    std::printf(" %-13s %-13s %9.3f %8.1f %8.3f %8.3f %6.1f%% %6.1f%% %8.1e %s\n", chosen_name.c_str(), best_name.c_str(), t_notify,
                flops / t_library * 1e-9, ratio, best_ratio, overhead * 100, peer_overhead * 100, std::max(error_empty, error_notify),
                ok ? "ok" : "MISMATCH");
    if (!notify_error.empty()) std::fprintf(stderr, "  %s\n", notify_error.c_str());
    if (variants.size() > configs.size()) {  // splits swept or a tail split: each (tile, split) on its own
      std::printf("  %-28s", "each tile and split, ms:");
      for (size_t v = 0; v < variants.size(); ++v)
        std::printf(" %s %.4f", variants[v].name(configs, name_of).c_str(),
                    medians[1 + kWorkCount + v]);
      std::printf("\n");
    }
    std::fflush(stdout);
    if (csv) {
      std::fprintf(csv, "%s,%lld,%lld,%lld,%.5f", name.c_str(), static_cast<long long>(s.m), static_cast<long long>(s.n),
                   static_cast<long long>(s.k), t_library);
      for (double t : t_configs) std::fprintf(csv, ",%.5f", t);
      std::fprintf(csv, ",%s,%.5f,%s,%.5f,%.5f,%.5f,%.5f,%.2f,%.2f,%.4f,%.4f,%.4f,%.4f,%.3e,%.3e\n", chosen_name.c_str(), t_chosen,
                   best_name.c_str(), t_notify, t_notify_only, t_remap_only, t_peer, flops / t_library * 1e-9, flops / t_chosen * 1e-9,
                   ratio, best_ratio, overhead, peer_overhead, error_empty, error_notify);
    }
  }
  if (csv_file) csv_file->close();
  if (!chosen_ratios.empty()) {
    auto min_of = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
    std::printf("\noverlap GEMM (empty table, chosen tile) / cuBLASLt throughput over %zu shapes: median %.3f, min %.3f\n",
                chosen_ratios.size(), median(chosen_ratios), min_of(chosen_ratios));
    std::printf("with the best compiled tile and split per shape: median %.3f, min %.3f; the rule chose the best (within 1%%) in %d of %zu\n",
                median(best_ratios), min_of(best_ratios), chose_best, chosen_ratios.size());
    auto max_of = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
    std::printf("notify on every tile + remapped stores vs empty table: median %+.1f%%, max %+.1f%%\n", median(overheads) * 100,
                max_of(overheads) * 100);
    std::printf("  notify only: median %+.1f%%, max %+.1f%%; remapped stores only: median %+.1f%%, max %+.1f%%\n",
                median(notify_only_overheads) * 100, max_of(notify_only_overheads) * 100, median(remap_only_overheads) * 100,
                max_of(remap_only_overheads) * 100);
    std::printf("peer-store path (every tile into a second, symmetric buffer, system-scope notify each) vs empty table: median %+.1f%%, max %+.1f%%\n",
                median(peer_overheads) * 100, max_of(peer_overheads) * 100);
  }
  cudaFree(sums);
  cudaStreamDestroy(stream);
  return failures;
}

}  // namespace weft::cli
