// `weft bench attention`: the attention kernel alone on GPU 0 (attention_bench.hpp). Each shape,
// causal and not: inputs random, the output poisoned, one run checked on sampled rows (first, middle
// and last query of the first and last head) against softmax(Q K^T / sqrt(d)) V in double, then
// timed (median of `iterations`, L2 not flushed: Q, K and V are read many times per run anyway).
// Beside it, interleaved, the same run with every KV tile waiting on a signal that is already met,
// its output checked too: what the per-tile waits of the overlapped plans cost when nothing waits.
// Twice: the tiles of each eighth of the sequence sharing a signal (tilelink's plan at world 8:
// a KV tile waits on its rank block's arrival), and every tile with a signal of its own (the worst
// case: arrivals of one tile each).
#include "attention_bench.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "attention_check.hpp"
#include "common/text_file.hpp"
#include "measure.hpp"
#include "weft/kernels/attention.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/cuda/check.hpp"

namespace weft::cli {

using namespace weft::bench;

namespace {

std::vector<AttentionShape> default_shapes() {
  // Llama-3-8B-like GQA at 4k-16k tokens in both head dims (the rows weft.benchmark --attention times
  // against SDPA), MHA, and GQA by 8 at d64.
  return {{4096, 32, 8, 128}, {8192, 32, 8, 128}, {16384, 32, 8, 128}, {8192, 32, 32, 128}, {8192, 16, 16, 64}, {16384, 32, 4, 64},
          {4096, 32, 8, 64},  {8192, 32, 8, 64}};
}

}  // namespace

int run_attention_bench(const AttentionBenchOptions& o) {
  std::optional<OutputFile> csv_file;
  std::FILE* csv = nullptr;
  if (!o.csv_path.empty()) {
    csv_file.emplace(o.csv_path, "CSV file");
    csv = csv_file->stream();
    std::fprintf(csv, "tokens,heads,kv_heads,head_dim,causal,tiles,tflop,ms,tflops,error,check,waited_ms,wait_cost,tile_waited_ms,tile_wait_cost,exact_tflops\n");
  }
  std::printf("%8s %6s %8s %8s %7s %10s %10s %9s %9s %5s %10s %9s %10s %9s %9s\n", "tokens", "heads", "kv_heads", "head_dim", "causal", "TFLOP", "ms",
              "TFLOP/s", "error", "check", "waited ms", "wait cost", "tile-w ms", "tile-w", "exact TF/s");
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int failed = 0;
  for (const AttentionShape& s : o.shapes.empty() ? default_shapes() : o.shapes)
    for (bool causal : {false, true}) {
      const SelfAttentionRun run({s.tokens, s.heads, s.kv_heads, s.head_dim, causal}, o.seed, stream);
      const AttentionTiling tiling = attention_tiling(s.head_dim);
      const AttentionLaunch& l = run.launch;
      const std::vector<AttentionKvTile>& tiles = run.tiles;
      Attention attention(l);
      attention.launch(stream);
      if (!synchronize_with_timeout(stream, 60000)) throw std::runtime_error("the attention kernel did not finish in 60 s");
      // The first, middle and last query of the first and last head.
      const double error = attention_sampled_error(run.shape, run.q.data, run.k.data, run.v.data, run.o.data,
                                                   {{0, 0}, {0, s.heads - 1}, {s.tokens / 2, 0}, {s.tokens / 2, s.heads - 1}, {s.tokens - 1, 0},
                                                    {s.tokens - 1, s.heads - 1}});
      // The same run with every KV tile waiting on a signal that is already 1: per eighth of the
      // sequence (arrivals of a rank's block at world 8), then per tile.
      const int64_t eighth = std::max<int64_t>(1, (s.tokens + 7) / 8);
      const std::vector<int32_t> signal_per_eighth = [&] {
        std::vector<int32_t> ids;
        for (const AttentionKvTile& t : tiles) ids.push_back(static_cast<int32_t>(t.row / eighth));
        return ids;
      }();
      std::vector<int32_t> signal_per_tile(tiles.size());
      for (size_t i = 0; i < tiles.size(); ++i) signal_per_tile[i] = static_cast<int32_t>(i);
      // Signal ids up to 7 (the eighths) and up to the tile count - 1 (per tile): room for both.
      const std::vector<uint64_t> ones(std::max<size_t>(tiles.size(), 8), 1);
      DeviceBuffer met(ones.size() * sizeof(uint64_t));
      WEFT_CUDA_CHECK(cudaMemcpy(met.data, ones.data(), ones.size() * sizeof(uint64_t), cudaMemcpyHostToDevice));
      struct Waited {
        std::unique_ptr<DeviceBuffer> table;
        std::unique_ptr<Attention> attention;
      };
      auto waiting_on = [&](const std::vector<int32_t>& signals) {
        std::vector<AttentionKvTile> waiting = tiles;
        for (size_t i = 0; i < waiting.size(); ++i) waiting[i].wait_signal = signals[i], waiting[i].wait_value = 1;
        Waited w{std::make_unique<DeviceBuffer>(waiting.size() * sizeof(AttentionKvTile)), nullptr};
        WEFT_CUDA_CHECK(cudaMemcpy(w.table->data, waiting.data(), waiting.size() * sizeof(AttentionKvTile), cudaMemcpyHostToDevice));
        AttentionLaunch waited_launch = l;
        waited_launch.kv_tiles = w.table->as<const AttentionKvTile>();
        waited_launch.wait_signals = met.as<const uint64_t>();
        require_valid_kv_tiles(waited_launch, waiting);
        w.attention = std::make_unique<Attention>(waited_launch);
        return w;
      };
      Waited per_eighth = waiting_on(signal_per_eighth), per_tile = waiting_on(signal_per_tile);
      double waited_error = 0;
      for (Waited* w : {&per_eighth, &per_tile}) {
        run.poison_output(stream);
        w->attention->launch(stream);
        if (!synchronize_with_timeout(stream, 60000)) throw std::runtime_error("the attention kernel with met waits did not finish in 60 s");
        waited_error = std::max(waited_error, attention_sampled_error(run.shape, run.q.data, run.k.data, run.v.data, run.o.data,
                                                                     {{0, 0}, {s.tokens / 2, s.heads - 1}, {s.tokens - 1, 0}}));
      }
      // Two bf16 roundings (P and O) of the weighted |v|, with margin; NaN fails.
      const bool ok = error <= 4 * std::ldexp(1.0, -9) && waited_error <= 4 * std::ldexp(1.0, -9);
      if (!ok) ++failed;
      const std::vector<double> ms = interleaved_median_ms({[&](cudaStream_t st) { attention.launch(st); },
                                                            [&](cudaStream_t st) { per_eighth.attention->launch(st); },
                                                            [&](cudaStream_t st) { per_tile.attention->launch(st); }},
                                                           stream, o.warmup, o.iterations,
                                                           [&](size_t) {
                                                             if (!synchronize_with_timeout(stream, 60000))
                                                               throw std::runtime_error("the attention kernel did not finish in 60 s");
                                                           });
      const int64_t computed = attention_tiles_computed(l, tiles);
      const double tflop = 4.0 * tiling.tile_q * tiling.tile_kv * s.head_dim * static_cast<double>(computed) / 1e12;
      const double tflops = tflop / (ms[0] * 1e-3);
      const double wait_cost = ms[1] / ms[0] - 1.0, tile_wait_cost = ms[2] / ms[0] - 1.0;
      const double exact_tflops = attention_exact_flops(l, tiles) / 1e12 / (ms[0] * 1e-3);
      std::printf("%8lld %6d %8d %8d %7s %10.3f %10.4f %9.1f %9.2e %5s %10.4f %8.1f%% %10.4f %8.1f%% %9.1f\n", static_cast<long long>(s.tokens), s.heads,
                  s.kv_heads, s.head_dim, causal ? "yes" : "no", tflop, ms[0], tflops, std::max(error, waited_error), ok ? "ok" : "FAILED", ms[1],
                  wait_cost * 100, ms[2], tile_wait_cost * 100, exact_tflops);
      std::fflush(stdout);
      if (csv)
        std::fprintf(csv, "%lld,%d,%d,%d,%d,%lld,%.4f,%.5f,%.2f,%.3e,%s,%.5f,%.4f,%.5f,%.4f,%.2f\n", static_cast<long long>(s.tokens), s.heads, s.kv_heads,
                     s.head_dim, causal ? 1 : 0, static_cast<long long>(computed), tflop, ms[0], tflops, std::max(error, waited_error),
                     ok ? "ok" : "FAILED", ms[1], wait_cost, ms[2], tile_wait_cost, exact_tflops);
    }
  cudaStreamDestroy(stream);
  if (csv_file) csv_file->close();
  return failed;
}

}  // namespace weft::cli
