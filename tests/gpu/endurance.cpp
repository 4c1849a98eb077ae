// Endurance: every op x strategy called N times back to back (10,000 by default), once with each
// call enqueued by the executor and once as launches of a CUDA graph the caller captured on every
// rank; every 1,000th call (and the first after each of the 4 input changes, and the last) poisoned
// before and checked against the host reference after. No hang (every wait is bounded) and no drift.
// One process per GPU, started by torchrun (or mpirun, Slurm):
//   torchrun --standalone --nproc_per_node=4 --no-python build/tests/gpu/weft_endurance --calls 10000
// Options: --calls N, --sample-every N (1000), --op OP, --strategy S. Prints one line per case and
// rank; exits non-zero on any mismatch or error.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "check_against_host.hpp"
#include "weft/plan/strategies.hpp"

namespace {

struct Options {
  int calls = 10000;
  int sample_every = 1000;
  std::string op, strategy;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--calls" && has_value) o.calls = std::atoi(argv[++i]);
    else if (arg == "--sample-every" && has_value) o.sample_every = std::atoi(argv[++i]);
    else if (arg == "--op" && has_value) o.op = argv[++i];
    else if (arg == "--strategy" && has_value) o.strategy = argv[++i];
    else throw std::invalid_argument("weft_endurance: unknown or incomplete option '" + arg + "' (--calls N, --sample-every N, --op OP, --strategy S)");
  }
  if (o.calls < 1 || o.sample_every < 1) throw std::invalid_argument("weft_endurance: --calls and --sample-every must be at least 1");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace weft;
  try {
    const Options o = parse(argc, argv);
    auto comm = Communicator::from_environment();
    const int world = comm->world_size();
    int failures = 0, cases = 0;
    for (OpKind op : all_ops()) {
      if (!o.op.empty() && std::string(to_string(op)) != o.op) continue;
      for (const Strategy& s : strategies()) {
        if (!s.supports(op) || (!o.strategy.empty() && s.name != o.strategy)) continue;
        // 96 rows per rank are ragged against 128-row tiles; small, so that 10,000 calls are seconds.
        Problem p{op, 96 * world, 136, 72, world, DType::bf16, DType::bf16, {}};
        draw_routing(p, 11);
        const Plan plan = s.build(p, {});
        for (const bench::CallMode mode : {bench::CallMode::enqueued, bench::CallMode::graph_launches}) {
          const bool graphs = mode == bench::CallMode::graph_launches;
          ExecutorOptions options;
          options.replay_calls = false;  // enqueued: each call op by op; graphs: the caller's graph alone
          const auto start = std::chrono::steady_clock::now();
          std::string error;
          bench::BackToBackCalls b;
          try {
            b = bench::back_to_back_calls_against_reference(*comm, plan, o.calls, options, mode, o.sample_every);
          } catch (const std::exception& e) {
            error = e.what();
          }
          const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          const bool ok = error.empty() && b.check.passed() && b.sampled > 0;
          failures += !ok;
          ++cases;
          std::printf("rank %d: %-8s %-26s %-13s %6d calls in %7.2f s, %3d sampled, worst error / bound %.2e %s%s\n", comm->rank(),
                      std::string(to_string(op)).c_str(), s.name.c_str(), graphs ? "graph-launch" : "enqueued", o.calls, seconds, b.sampled,
                      b.check.worst_ratio, ok ? "ok" : "FAILED: ", error.empty() ? b.check.explain().c_str() : error.c_str());
          std::fflush(stdout);
          // A failed case may leave the communicator aborted: nothing after it can run.
          if (!error.empty() && comm->aborted()) {
            std::fprintf(stderr, "weft_endurance: rank %d: the communicator was aborted; stopping after %d case(s)\n", comm->rank(), cases);
            return 1;
          }
        }
      }
    }
    std::printf("rank %d: endurance %s: %d case(s), %d failed\n", comm->rank(), failures == 0 ? "passed" : "FAILED", cases, failures);
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft_endurance failed: %s\n", e.what());
    return 2;
  }
}
