#include "common/text_file.hpp"
#include "kernels_bench.hpp"

#include <optional>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <random>

#include "measure.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/rmsnorm.hpp"
#include "weft/cuda/check.hpp"

namespace weft::cli {

using namespace weft::bench;

namespace {

constexpr uint16_t kBf16One = 0x3f80;

// One kernel at one size: what it moves, how to run it, and how to check what it wrote.
struct KernelCase {
  std::string kernel, shape;
  int64_t bytes = 0;  // read + written by the kernel
  std::function<void(cudaStream_t)> run;
  std::function<double(cudaStream_t)> check;  // relative difference to the reference (0: exact)
  double tolerance = 0;
  std::vector<std::unique_ptr<DeviceBuffer>> memory;

  DeviceBuffer& buffer(int64_t elements) {
    memory.push_back(std::make_unique<DeviceBuffer>(static_cast<size_t>(elements) * 2));
    return *memory.back();
  }
};

DeviceRegion whole(const DeviceBuffer& b, int64_t rows, int64_t cols) { return DeviceRegion{b.data, rows, cols, cols}; }

std::string shape_of(int64_t rows, int64_t cols) { return std::to_string(rows) + "x" + std::to_string(cols); }

// A device copy of host indices.
template <class T>
DeviceBuffer& upload(KernelCase& c, const std::vector<T>& host) {
  c.memory.push_back(std::make_unique<DeviceBuffer>(host.size() * sizeof(T)));
  WEFT_CUDA_CHECK(cudaMemcpy(c.memory.back()->data, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return *c.memory.back();
}

std::vector<int64_t> shuffled(int64_t count, uint64_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(count));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  return order;
}

std::vector<int64_t> inverse(const std::vector<int64_t>& order) {
  std::vector<int64_t> back(order.size());
  for (size_t i = 0; i < order.size(); ++i) back[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
  return back;
}

class Cases {
 public:
  Cases(uint64_t seed, cudaStream_t stream, double* sums) : seed_(seed), stream_(stream), sums_(sums) {}

  std::vector<std::unique_ptr<KernelCase>> take() { return std::move(cases_); }

  // The SM copy of a rank's shard (fused/tilelink pulls, the SM copy backend).
  void copy(int64_t rows, int64_t cols) {
    KernelCase& c = add("copy", shape_of(rows, cols), 2 * rows * cols * 2);
    const DeviceRegion src = random(c, rows, cols), dst = poisoned(c, rows, cols);
    c.run = [=](cudaStream_t s) { copy_bf16(dst, src, 0, s); };
    c.check = [=, this](cudaStream_t) { return relative_difference(dst.data, src.data, rows * cols, sums_, stream_); };
  }

  // The sum of `slots` contiguous slots (fused gemm_rs, decomposed gemm_rs, two_level).
  void reduce(int slots, int64_t rows, int64_t cols) {
    KernelCase& c = add("reduce " + std::to_string(slots), shape_of(rows, cols), (slots + 1) * rows * cols * 2);
    const DeviceRegion all = random(c, slots * rows, cols), dst = poisoned(c, rows, cols), want = poisoned(c, rows, cols);
    std::vector<DeviceRegion> srcs;
    for (int s = 0; s < slots; ++s) srcs.push_back(DeviceRegion{static_cast<uint16_t*>(all.data) + s * rows * cols, rows, cols, cols});
    c.run = [=](cudaStream_t s) { reduce_bf16(dst, srcs.data(), slots, false, s); };
    // The reference: slot by slot into `want`, rounding to bf16 after each (hence the tolerance).
    c.check = [=, this](cudaStream_t s) {
      WEFT_CUDA_CHECK(cudaMemcpyAsync(want.data, srcs[0].data, static_cast<size_t>(rows * cols) * 2, cudaMemcpyDeviceToDevice, s));
      for (int k = 1; k < slots; ++k) reduce_bf16(want, &srcs[static_cast<size_t>(k)], 1, true, s);
      return relative_difference(dst.data, want.data, rows * cols, sums_, s);
    };
    c.tolerance = 1e-2;
  }

  // Rows in a random order (tokens grouped by destination for all-to-all).
  void permute(int64_t rows, int64_t cols) {
    KernelCase& c = add("permute rows", shape_of(rows, cols), 2 * rows * cols * 2);
    const DeviceRegion src = random(c, rows, cols), dst = poisoned(c, rows, cols), back = poisoned(c, rows, cols);
    const std::vector<int64_t> order = shuffled(rows, seed_);
    const auto* there = upload(c, order).as<int64_t>();
    const auto* home = upload(c, inverse(order)).as<int64_t>();
    c.run = [=](cudaStream_t s) { permute_rows_bf16(dst, src, there, s); };
    c.check = [=, this](cudaStream_t s) {
      permute_rows_bf16(back, dst, home, s);
      return relative_difference(back.data, src.data, rows * cols, sums_, s);
    };
  }

  // signal's restore: every tile_m x tile_n box of a rows x cols result moved back in place from
  // where the GEMM stored it (here: a random order of the boxes).
  void move_boxes(int64_t rows, int64_t cols, int64_t tile_m, int64_t tile_n) {
    if (rows % tile_m != 0 || cols % tile_n != 0) return;
    KernelCase& c = add("move boxes " + std::to_string(tile_m) + "x" + std::to_string(tile_n), shape_of(rows, cols), 2 * rows * cols * 2);
    const DeviceRegion src = random(c, rows, cols), dst = poisoned(c, rows, cols), back = poisoned(c, rows, cols);
    const int64_t per_row = cols / tile_n, boxes = rows / tile_m * per_row;
    const std::vector<int64_t> order = shuffled(boxes, seed_ + 1);
    std::vector<DeviceBoxMove> moves, returns;
    for (int64_t b = 0; b < boxes; ++b) {
      const int64_t from = order[static_cast<size_t>(b)];
      const DeviceBoxMove m{from / per_row * tile_m, from % per_row * tile_n, b / per_row * tile_m, b % per_row * tile_n, tile_m, tile_n};
      moves.push_back(m);
      returns.push_back({m.to_row, m.to_col, m.from_row, m.from_col, tile_m, tile_n});
    }
    const auto* there = upload(c, moves).as<DeviceBoxMove>();
    const auto* home = upload(c, returns).as<DeviceBoxMove>();
    c.run = [=](cudaStream_t s) { move_boxes_bf16(dst, src, there, boxes, s); };
    c.check = [=, this](cudaStream_t s) {
      move_boxes_bf16(back, dst, home, boxes, s);
      return relative_difference(back.data, src.data, rows * cols, sums_, s);
    };
  }

  // MoE's top-k combine: each of `tokens` rows the weighted sum of `topk` rows of `rows`.
  void combine(int64_t tokens, int64_t rows, int64_t cols, int topk) {
    KernelCase& c = add("combine top-" + std::to_string(topk), shape_of(tokens, cols), (topk + 1) * tokens * cols * 2);
    const DeviceRegion src = random(c, rows, cols), dst = poisoned(c, tokens, cols);
    // Weights of one, so that the reference is a sum of permuted rows.
    DeviceBuffer& w = c.buffer(tokens * topk);
    fill_u16(w.data, tokens * topk, kBf16One, stream_);
    const DeviceRegion weights{w.data, tokens, topk, topk};
    std::mt19937_64 rng(seed_ + 2);
    std::vector<int64_t> picks(static_cast<size_t>(tokens * topk));
    for (auto& p : picks) p = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
    const auto* rows_of = upload(c, picks).as<int64_t>();
    std::vector<DeviceRegion> parts;
    std::vector<const int64_t*> part_rows;
    for (int j = 0; j < topk; ++j) {
      std::vector<int64_t> column;
      for (int64_t t = 0; t < tokens; ++t) column.push_back(picks[static_cast<size_t>(t * topk + j)]);
      part_rows.push_back(upload(c, column).as<int64_t>());
      parts.push_back(poisoned(c, tokens, cols));
    }
    const DeviceRegion want = poisoned(c, tokens, cols);
    c.run = [=](cudaStream_t s) { combine_rows_bf16(dst, src, weights, rows_of, topk, s); };
    c.check = [=, this](cudaStream_t s) {
      for (int j = 0; j < topk; ++j) permute_rows_bf16(parts[static_cast<size_t>(j)], src, part_rows[static_cast<size_t>(j)], s);
      reduce_bf16(want, parts.data(), topk, false, s);
      return relative_difference(dst.data, want.data, tokens * cols, sums_, s);
    };
    c.tolerance = 1e-2;
  }

  // RMSNorm of a result (FlashOverlap's consumer after gemm_ar / gemm_rs); checked for what it
  // leaves unwritten (weft bench rmsnorm checks its values against the fused remap).
  void rmsnorm(int64_t rows, int64_t cols) {
    KernelCase& c = add("rmsnorm", shape_of(rows, cols), 2 * rows * cols * 2 + cols * 2);
    const DeviceRegion x = random(c, rows, cols), y = poisoned(c, rows, cols);
    const DeviceRegion weight = random(c, 1, cols);
    c.run = [=](cudaStream_t s) { rmsnorm_bf16(x, weight.data, y, 1e-6f, s); };
    c.check = [=, this](cudaStream_t s) { return relative_difference(y.data, y.data, rows * cols, sums_, s); };
  }

 private:
  KernelCase& add(std::string kernel, std::string shape, int64_t bytes) {
    cases_.push_back(std::make_unique<KernelCase>());
    KernelCase& c = *cases_.back();
    c.kernel = std::move(kernel);
    c.shape = std::move(shape);
    c.bytes = bytes;
    return c;
  }
  DeviceRegion random(KernelCase& c, int64_t rows, int64_t cols) {
    DeviceBuffer& b = c.buffer(rows * cols);
    fill_random_bf16(b.data, rows * cols, seed_ + c.memory.size(), stream_);
    return whole(b, rows, cols);
  }
  DeviceRegion poisoned(KernelCase& c, int64_t rows, int64_t cols) {
    DeviceBuffer& b = c.buffer(rows * cols);
    fill_u16(b.data, rows * cols, kBf16Nan, stream_);
    return whole(b, rows, cols);
  }

  uint64_t seed_;
  cudaStream_t stream_;
  double* sums_;
  std::vector<std::unique_ptr<KernelCase>> cases_;
};

}  // namespace

int run_kernels_bench(const std::vector<BenchSuite>& suites, const KernelsBenchOptions& o) {
  // Opened before the timing; every write is checked when it is closed (OutputFile).
  std::optional<OutputFile> csv_file;
  std::FILE* csv = nullptr;
  if (!o.csv_path.empty()) {
    csv_file.emplace(o.csv_path, "CSV file");
    csv = csv_file->stream();
    std::fprintf(csv, "suite,row,world,kernel,shape,mib,kernel_ms,kernel_gbps,memcpy_ms,memcpy_gbps,fraction,difference,check\n");
  }
  std::printf("the roofline of each kernel: cudaMemcpyAsync device to device moving the same bytes (read + written), timed interleaved;\n"
              "L2 flushed before every timed call of either\n\n");
  std::printf("%-20s %-18s %13s %9s %10s %9s %10s %9s %9s %10s %s\n", "row", "kernel", "shape", "MiB", "ms", "GB/s", "memcpy ms", "GB/s",
              "fraction", "difference", "check");
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer sums(3 * sizeof(double));
  // Every timed call starts with its data out of L2 (written over by twice the L2's size, as nvbench
  // does): the kernels' sizes are 6-1024 MiB against a 50 MiB L2, and without the flush what the
  // previous call left in L2 decided the small ones' fractions as much as the kernels did
  // (bench/results).
  int device = 0, l2_bytes = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
  const size_t flush_bytes = 2 * static_cast<size_t>(std::max(l2_bytes, 1 << 20));
  DeviceBuffer flush(flush_bytes);
  const auto flush_l2 = [&](cudaStream_t s) { WEFT_CUDA_CHECK(cudaMemsetAsync(flush.data, 0, flush_bytes, s)); };
  int failed = 0;
  std::vector<double> fractions;
  for (const BenchSuite& suite : suites)
    for (const SuiteRow& row : suite.rows) {
      Problem p;
      try {
        p = problem_for(row, o.world, o.seed);
      } catch (const std::invalid_argument& e) {
        std::printf("%-20s n/a: %s\n", row.name.c_str(), e.what());
        continue;
      }
      Cases cases(o.seed, stream, sums.as<double>());
      switch (p.op) {
        case OpKind::ag_gemm: cases.copy(p.m, p.k); break;
        case OpKind::gemm_rs:
          cases.reduce(o.world, p.m / o.world, p.n);
          cases.move_boxes(p.m, p.n, 128, 256);
          cases.rmsnorm(p.m / o.world, p.n);
          break;
        case OpKind::gemm_ar:
          cases.move_boxes(p.m, p.n, 128, 256);
          cases.rmsnorm(p.m, p.n);
          break;
        case OpKind::gemm_a2a:
        case OpKind::a2a_gemm:
          cases.permute(p.m, p.k);
          cases.combine(p.m / 2, p.m, p.n, 2);
          break;
        case OpKind::ag_moe:
        case OpKind::moe_rs: cases.combine(p.m, p.m * std::max(p.topk, 1), p.n, std::max(p.topk, 1)); break;
        case OpKind::ag_attention: break;  // no auxiliary kernel around it (problem_for refuses such rows anyway)
      }
      for (const auto& c : cases.take()) {
        // The copy engine moving the same bytes: half read, half written.
        DeviceBuffer from(static_cast<size_t>(c->bytes / 2)), to(static_cast<size_t>(c->bytes / 2));
        fill_u16(from.data, c->bytes / 4, 0x3c00, stream);
        c->run(stream);
        if (!synchronize_with_timeout(stream, 30000)) throw std::runtime_error(c->kernel + " of '" + row.name + "' did not finish in 30 s");
        const double difference = c->check(stream);
        const bool ok = difference <= c->tolerance;
        if (!ok) ++failed;
        const std::vector<double> ms = interleaved_median_ms(
            {c->run, [&](cudaStream_t s) {
               WEFT_CUDA_CHECK(cudaMemcpyAsync(to.data, from.data, static_cast<size_t>(c->bytes / 2), cudaMemcpyDeviceToDevice, s));
             }},
            stream, o.warmup, o.iterations, [&](size_t) {
              if (!synchronize_with_timeout(stream, 30000)) throw std::runtime_error(c->kernel + " of '" + row.name + "' did not finish in 30 s");
            },
            flush_l2);
        const double gbps = static_cast<double>(c->bytes) / (ms[0] * 1e-3) / 1e9, copy_gbps = static_cast<double>(c->bytes) / (ms[1] * 1e-3) / 1e9;
        const double fraction = gbps / copy_gbps;
        fractions.push_back(fraction);
        std::printf("%-20s %-18s %13s %9.1f %10.4f %9.0f %10.4f %9.0f %8.1f%% %10.2e %s\n", row.name.c_str(), c->kernel.c_str(), c->shape.c_str(),
                    static_cast<double>(c->bytes) / (1 << 20), ms[0], gbps, ms[1], copy_gbps, 100 * fraction, difference, ok ? "ok" : "FAILED");
        std::fflush(stdout);
        if (csv)
          std::fprintf(csv, "%s,%s,%d,%s,%s,%.2f,%.5f,%.1f,%.5f,%.1f,%.4f,%.3e,%s\n", suite.name.c_str(), row.name.c_str(), o.world, c->kernel.c_str(),
                       c->shape.c_str(), static_cast<double>(c->bytes) / (1 << 20), ms[0], gbps, ms[1], copy_gbps, fraction, difference,
                       ok ? "ok" : "FAILED");
      }
    }
  if (!fractions.empty()) {
    std::sort(fractions.begin(), fractions.end());
    std::printf("\n%zu kernel(s): fraction of the copy roofline min %.1f%%, median %.1f%%, max %.1f%%\n", fractions.size(), 100 * fractions.front(),
                100 * fractions[fractions.size() / 2], 100 * fractions.back());
  }
  cudaStreamDestroy(stream);
  if (csv_file) csv_file->close();
  return failed;
}

}  // namespace weft::cli
