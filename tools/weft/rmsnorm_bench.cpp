#include "common/text_file.hpp"
#include "rmsnorm_bench.hpp"

#include <optional>
#include <cstdio>
#include <fstream>
#include <map>

#include "measure.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/ir/reorder_map.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/rmsnorm.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/device_reorder_map.hpp"

namespace weft::cli {

using namespace weft::bench;

namespace {

constexpr float kEpsilon = 1e-6f;

// The plan's restore steps into its output, on the buffers given by name.
struct RestoreMoves {
  DeviceRegion src, dst;
  std::unique_ptr<DeviceBuffer> moves;
  int64_t count = 0;
};

DeviceRegion region_in(void* base, const BufferDecl& decl, const Rect& box) {
  return DeviceRegion{static_cast<uint16_t*>(base) + box.row * decl.cols + box.col, box.rows, box.cols, decl.cols};
}

}  // namespace

int run_rmsnorm_bench(const std::vector<BenchSuite>& suites, const RmsnormBenchOptions& o) {
  const Strategy& signal = find_strategy("signal");
  // Opened before the timing; every write is checked when it is closed (OutputFile).
  std::optional<OutputFile> csv_file;
  std::FILE* csv = nullptr;
  if (!o.csv_path.empty()) {
    csv_file.emplace(o.csv_path, "CSV file");
    csv = csv_file->stream();
    std::fprintf(csv, "suite,row,op,world,map,rows,cols,plain_ms,fused_ms,overhead,restore_and_plain_ms,difference\n");
  }
  std::printf("%-20s %-9s %-6s %13s %10s %10s %9s %14s %10s\n", "row", "op", "map", "rows x cols", "plain ms", "fused ms", "overhead",
              "restore+plain", "difference");
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer sums(3 * sizeof(double));
  int failed = 0;
  for (const BenchSuite& suite : suites)
    for (const SuiteRow& row : suite.rows) {
      if (!signal.supports(row.op)) continue;
      Problem p;
      Plan plan;
      try {
        p = problem_for(row, o.world, o.seed);
        PlanOptions base;
        base.machine = o.machine;
        plan = signal.build(p, resolve_options(signal, p, base));
      } catch (const std::invalid_argument& e) {
        std::printf("%-20s %-9s n/a: %s\n", row.name.c_str(), std::string(to_string(row.op)).c_str(), e.what());
        continue;
      }
      const RankPlan& rp = plan.ranks.at(0);
      const DeviceReorderMapTable table(reorder_map(plan, 0));
      const ReorderMap& map = table.map();
      // Every buffer the restore steps read, filled with random values; C, the result restored.
      std::map<std::string, std::unique_ptr<DeviceBuffer>> memory;
      auto buffer = [&](BufferId id) -> void* {
        const BufferDecl& decl = rp.buffers[static_cast<size_t>(id)];
        auto& slot = memory[decl.name];
        if (!slot) {
          slot = std::make_unique<DeviceBuffer>(static_cast<size_t>(decl.rows * decl.cols) * 2);
          fill_random_bf16(slot->get(), decl.rows * decl.cols, o.seed + memory.size(), stream);
        }
        return slot->get();
      };
      std::vector<RestoreMoves> restores;
      for (const Step& step : rp.steps) {
        const auto* move = std::get_if<MoveBoxesStep>(&step.body);
        if (move == nullptr || move->dst.buffer != rp.output.buffer) continue;
        RestoreMoves r;
        r.src = region_in(buffer(move->src.buffer), rp.buffers[static_cast<size_t>(move->src.buffer)], move->src.box);
        r.dst = region_in(buffer(move->dst.buffer), rp.buffers[static_cast<size_t>(move->dst.buffer)], move->dst.box);
        std::vector<DeviceBoxMove> host;
        for (const BoxMove& m : move->moves) host.push_back({m.from.row, m.from.col, m.to.row, m.to.col, m.to.rows, m.to.cols});
        r.count = static_cast<int64_t>(host.size());
        r.moves = std::make_unique<DeviceBuffer>(host.size() * sizeof(DeviceBoxMove));
        WEFT_CUDA_CHECK(cudaMemcpy(r.moves->get(), host.data(), host.size() * sizeof(DeviceBoxMove), cudaMemcpyHostToDevice));
        restores.push_back(std::move(r));
      }
      const DeviceRegion c = region_in(buffer(rp.output.buffer), rp.buffers[static_cast<size_t>(rp.output.buffer)], rp.output.box);
      const DeviceReorderMap view = table.view(memory.at(map.source)->get(), map.edge_source.empty() ? nullptr : memory.at(map.edge_source)->get());
      DeviceBuffer weight(static_cast<size_t>(c.cols) * 2), out(static_cast<size_t>(2 * c.rows * c.cols) * 2);
      fill_random_bf16(weight.get(), c.cols, o.seed + 100, stream);
      const DeviceRegion y_plain{out.get(), c.rows, c.cols, c.cols};
      const DeviceRegion y_fused{static_cast<uint16_t*>(out.get()) + c.rows * c.cols, c.rows, c.cols, c.cols};
      fill_u16(out.get(), 2 * c.rows * c.cols, kBf16Nan, stream);
      auto restore = [&](cudaStream_t s) {
        for (const RestoreMoves& r : restores) move_boxes_bf16(r.dst, r.src, static_cast<const DeviceBoxMove*>(r.moves->get()), r.count, s);
      };
      restore(stream);
      const std::vector<double> ms = interleaved_median_ms(
          {[&](cudaStream_t s) { rmsnorm_bf16(c, weight.get(), y_plain, kEpsilon, s); },
           [&](cudaStream_t s) { rmsnorm_reordered_bf16(view, weight.get(), y_fused, kEpsilon, s); },
           [&](cudaStream_t s) {
             restore(s);
             rmsnorm_bf16(c, weight.get(), y_plain, kEpsilon, s);
           }},
          stream, o.warmup, o.iterations, [&](size_t) {
            if (!synchronize_with_timeout(stream, 30000)) throw std::runtime_error("RMSNorm of '" + row.name + "' did not finish in 30 s");
          });
      const double difference = relative_difference(y_fused.data, y_plain.data, c.rows * c.cols, static_cast<double*>(sums.get()), stream);
      if (difference != 0.0) ++failed;
      const double overhead = ms[1] / ms[0] - 1.0;
      const std::string shape = std::to_string(c.rows) + "x" + std::to_string(c.cols);
      std::printf("%-20s %-9s %-6s %13s %10.4f %10.4f %8.1f%% %14.4f %10.2e%s\n", row.name.c_str(), std::string(to_string(p.op)).c_str(),
                  std::string(map.granularity()).c_str(), shape.c_str(), ms[0], ms[1], 100.0 * overhead, ms[2], difference,
                  difference != 0.0 ? "  DIFFERS" : "");
      std::fflush(stdout);
      if (csv)
        std::fprintf(csv, "%s,%s,%s,%d,%s,%lld,%lld,%.5f,%.5f,%.4f,%.5f,%.3e\n", suite.name.c_str(), row.name.c_str(),
                     std::string(to_string(p.op)).c_str(), o.world, std::string(map.granularity()).c_str(), static_cast<long long>(c.rows),
                     static_cast<long long>(c.cols), ms[0], ms[1], overhead, ms[2], difference);
    }
  cudaStreamDestroy(stream);
  if (csv_file) csv_file->close();
  return failed;
}

}  // namespace weft::cli
