// One rank of a fault drill (scripts/fault_drill.sh starts one process per GPU, without torchrun,
// so that a rank that dies takes no other down with it). Every rank makes --calls calls of an op
// through weft::Op on its own buffers, each followed by finish(); the rank --faulty misbehaves at
// call --at:
//   kill    enqueues the call, then dies (SIGKILL) in the middle of it
//   skip    leaves that call out and goes on with the next
//   shapes  makes that call with half the rows (another plan than its peers')
//   none    nothing: the control run, every rank must finish every call
// A rank whose call fails prints "drill: rank R: raised after S s: <what()>" and exits 3; one that
// finishes every call prints "drill: rank R: finished N calls" and exits 0. The script judges the
// lines: within WEFT_COLLECTIVE_TIMEOUT_S every other rank must have raised an error that names the
// op and the faulty peer (or, for an NCCL step, the collective a rank has not joined).
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "weft/kernels/elementwise.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/op.hpp"
#include "weft/runtime/signal_set.hpp"

namespace {

struct Options {
  std::string fault = "none", op = "ag_gemm", strategy = "decomposed";
  int faulty = -1, at = 3, calls = 6;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--fault") o.fault = value;
    else if (key == "--op") o.op = value;
    else if (key == "--strategy") o.strategy = value;
    else if (key == "--faulty") o.faulty = std::atoi(value.c_str());
    else if (key == "--at") o.at = std::atoi(value.c_str());
    else if (key == "--calls") o.calls = std::atoi(value.c_str());
    else throw std::invalid_argument("weft_fault_drill: unknown option '" + key + "'");
  }
  if (argc % 2 == 0) throw std::invalid_argument("weft_fault_drill: every option takes a value");
  if (o.fault != "none" && o.fault != "kill" && o.fault != "skip" && o.fault != "shapes")
    throw std::invalid_argument("weft_fault_drill: --fault is none, kill, skip or shapes (got '" + o.fault + "')");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace weft;
  configure_cuda_for_waits();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int rank = -1;
  const auto start = std::chrono::steady_clock::now();
  try {
    const Options o = parse(argc, argv);
    auto comm = Communicator::from_environment();
    rank = comm->rank();
    const int world = comm->world_size();
    const OpKind op_kind = parse_op(o.op);  // names the known ops where o.op is none
    if (op_kind != OpKind::ag_gemm && op_kind != OpKind::gemm_rs && op_kind != OpKind::gemm_ar)
      throw std::invalid_argument("weft_fault_drill: --op is ag_gemm, gemm_rs or gemm_ar (got '" + o.op + "')");
    const int64_t rows = 256 * world, n = 512, k = 256;
    OpSpec spec{op_kind, n, k, rows, DType::bf16, DType::bf16, o.strategy, {}, 0, 0};
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    Op op(*comm, spec);
    void *a = nullptr, *b = nullptr, *c = nullptr;
    const int64_t c_rows = op_kind == OpKind::ag_gemm ? rows * world : rows;
    WEFT_CUDA_CHECK(cudaMalloc(&a, static_cast<size_t>(rows * k) * 2));
    WEFT_CUDA_CHECK(cudaMalloc(&b, static_cast<size_t>(n * k) * 2));
    WEFT_CUDA_CHECK(cudaMalloc(&c, static_cast<size_t>(c_rows * n) * 2));
    fill_random_bf16(a, rows * k, 11 + static_cast<uint64_t>(rank), stream);
    fill_random_bf16(b, n * k, 7 + static_cast<uint64_t>(rank), stream);
    op.prepare(rows);
    op.prepare(rows / 2);  // the shapes drill's other plan, made by every rank: only the call differs
    WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
    comm->host_barrier();
    const bool faulty = rank == o.faulty;
    int made = 0;
    for (int call = 0; call < o.calls; ++call) {
      const bool now = faulty && call == o.at;
      if (now && o.fault == "skip") continue;
      const int64_t call_rows = now && o.fault == "shapes" ? rows / 2 : rows;
      op.run({a, b, c, call_rows, {}}, stream);
      if (now && o.fault == "kill") {
        std::printf("drill: rank %d: dying in call %d\n", rank, call);
        std::raise(SIGKILL);
      }
      op.finish(stream);
      ++made;
    }
    std::printf("drill: rank %d: finished %d calls in %.1f s\n", rank, made,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return 0;
  } catch (const std::exception& e) {
    std::string what = e.what();  // on one line, so that the drill's judge reads all of it
    for (char& ch : what)
      if (ch == '\n') ch = '|';
    std::printf("drill: rank %d: raised after %.1f s: %s\n", rank, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                what.c_str());
    std::fflush(stdout);
    // The op and the communicator may be stuck: leave without running their destructors.
    std::_Exit(3);
  }
}
