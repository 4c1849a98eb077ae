#include "weft/runtime/cuda_executor.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "overlap_gemm_lowering.hpp"
#include "weft/core/plan_validation.hpp"
#include "weft/runtime/cuda_check.hpp"
#include "weft/runtime/signal_set.hpp"
#include "weft/runtime/symmetric_memory.hpp"

namespace weft {

namespace {

constexpr size_t kGemmWorkspaceBytes = 32u << 20;

int64_t pointer_alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  int64_t alignment = 256;
  while (alignment > 2 && address % static_cast<uintptr_t>(alignment) != 0) alignment /= 2;
  return alignment;
}

// One cuBLASLt matmul with its descriptors and chosen algorithm, set up once per plan.
struct LoweredGemm {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t weight = nullptr, activation = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
  const void* a = nullptr;  // our A [M, K]
  const void* b = nullptr;  // our B [N, K]
  void* c = nullptr;
  // 1 where the GEMM adds to C. The warm-up must use the same: cuBLASLt runs another kernel for
  // beta 0, and the first use of a kernel loads its library (see load_gemm_kernels).
  float beta = 0.0f;

  void destroy() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    for (auto* l : {weight, activation, out})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
};

}  // namespace

struct CudaExecutor::Impl {
  struct Lowered {
    const Step* step = nullptr;
    std::vector<std::pair<int, uint64_t>> waits;  // (signal, value within one call)
    std::function<void(cudaStream_t)> enqueue;
  };

  std::vector<std::unique_ptr<SymmetricMemory>> symmetric;  // per buffer, null if local
  std::vector<void*> local_memory;                           // per buffer, owned when not symmetric
  std::unique_ptr<SignalSet> signals;
  std::vector<uint64_t> raised_per_call;  // per own signal
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> joins;
  cudaEvent_t fork = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  std::vector<LoweredGemm> gemms;
  std::vector<std::unique_ptr<LoweredOverlapGemm>> overlap_gemms;
  uint64_t* raised_per_call_device = nullptr;  // for the overlap GEMM's tile waits
  OverlapGemmError* gemm_error = nullptr;      // where its bounded waits report
  std::vector<void*> device_tables;  // row lists and box moves the steps' kernels read
  std::vector<Lowered> steps;
  // Some rank of the plan reads or writes another rank's memory or signals. Decided from the whole
  // plan, so that every rank agrees and the barriers it guards are collective.
  bool plan_touches_peers = false;
  uint64_t calls = 0;
  // Completion of the last max_calls_in_flight calls (ring, by call number).
  std::vector<cudaEvent_t> call_done;
};

namespace {

}  // namespace

CudaExecutor::CudaExecutor(Communicator& comm, Plan plan, ExecutorOptions options) : comm_(comm), plan_(std::move(plan)), impl_(new Impl) {
  WEFT_CUDA_CHECK(cudaSetDevice(comm_.device()));
  if (plan_.world_size() != comm_.world_size())
    throw std::invalid_argument("plan for " + std::to_string(plan_.world_size()) + " ranks given to a communicator of " +
                                std::to_string(comm_.world_size()));
  if (options.validate) require_valid(plan_);
  comm_.require_agreement(std::hash<std::string>{}(to_string(plan_)), "the plan (strategy, shapes, options)");
  const RankPlan& mine = rank_plan();
  Impl& im = *impl_;

  // Buffers: symmetric ones are allocated collectively, in declaration order on every rank.
  for (const BufferDecl& decl : mine.buffers) {
    if (decl.dtype != DType::bf16)
      throw std::invalid_argument("CudaExecutor: buffer '" + decl.name + "' is " + std::string(to_string(decl.dtype)) +
                                  "; the executor handles bf16 buffers so far");
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(decl.rows * decl.cols, 1)) * 2;
    if (decl.symmetric) {
      im.symmetric.push_back(std::make_unique<SymmetricMemory>(comm_, bytes));
      im.local_memory.push_back(im.symmetric.back()->local());
    } else {
      void* p = nullptr;
      WEFT_CUDA_CHECK(cudaMalloc(&p, bytes));
      im.symmetric.push_back(nullptr);
      im.local_memory.push_back(p);
    }
  }

  // Signals: one symmetric array as long as the longest rank's list.
  size_t signal_count = 0;
  for (const RankPlan& rp : plan_.ranks) signal_count = std::max(signal_count, rp.signals.size());
  im.signals = std::make_unique<SignalSet>(comm_, static_cast<int>(signal_count));
  // What every counter of the plan gains per call, and who raises it: (rank, stream) of each
  // notifying step, stream -1 for a GEMM tile. Keyed by (owner rank, signal).
  std::map<std::pair<int, int>, uint64_t> raised_in_plan;
  std::map<std::pair<int, int>, std::set<std::pair<int, int>>> writers;
  auto count_raise = [&](const Notify& n, int rank, int stream) {
    raised_in_plan[{n.signal.rank, n.signal.id}] += n.increment;
    writers[{n.signal.rank, n.signal.id}].insert({rank, stream});
  };
  for (const RankPlan& rp : plan_.ranks)
    for (const Step& s : rp.steps) {
      for (const Notify& n : s.notifies) count_raise(n, rp.rank, s.stream);
      if (const auto* g = std::get_if<GemmStep>(&s.body))
        for (const GemmTile& t : g->tiles)
          if (t.notify) count_raise(*t.notify, rp.rank, -1);
    }
  im.raised_per_call.assign(signal_count, 0);
  for (const auto& [key, raised] : raised_in_plan)
    if (key.first == comm_.rank()) im.raised_per_call[static_cast<size_t>(key.second)] = raised;

  im.plan_touches_peers = reaches_across_ranks(plan_);
  WEFT_CUDA_CHECK(cudaMalloc(&im.raised_per_call_device, std::max<size_t>(signal_count, 1) * sizeof(uint64_t)));
  WEFT_CUDA_CHECK(cudaMemcpy(im.raised_per_call_device, im.raised_per_call.data(), signal_count * sizeof(uint64_t), cudaMemcpyHostToDevice));
  WEFT_CUDA_CHECK(cudaMalloc(&im.gemm_error, sizeof(OverlapGemmError)));
  WEFT_CUDA_CHECK(cudaMemset(im.gemm_error, 0, sizeof(OverlapGemmError)));

  // Streams without a GEMM carry the communication and the small kernels around it: they get the
  // higher priority, so their kernels take the first SMs that a GEMM's finished CTAs free.
  std::vector<bool> computes(static_cast<size_t>(mine.stream_count), false);
  for (const Step& step : mine.steps)
    if (std::holds_alternative<GemmStep>(step.body)) computes[static_cast<size_t>(step.stream)] = true;
  int lowest_priority = 0, highest_priority = 0;
  WEFT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest_priority, &highest_priority));
  for (int s = 0; s < mine.stream_count; ++s) {
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking,
                                                 computes[static_cast<size_t>(s)] ? lowest_priority : highest_priority));
    im.streams.push_back(stream);
    cudaEvent_t join;
    WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    im.joins.push_back(join);
  }
  WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&im.fork, cudaEventDisableTiming));
  // Calls queued on the device at once are bounded (ExecutorOptions::max_calls_in_flight). Without a
  // bound, a loop of calls fills the device's command queue and the host blocks inside an enqueue (a
  // kernel launch, an NCCL call) while its device waits for a peer whose host thread is blocked the
  // same way, or behind a lock the first holds: seen at world 4 as a silent hang of 1,000
  // back-to-back calls. With 8 the world-4 test still hangs (2026-11-22); its cause is open.
  int in_flight = options.max_calls_in_flight;
  if (in_flight == 0) {
    const char* from_environment = std::getenv("WEFT_MAX_CALLS_IN_FLIGHT");
    in_flight = from_environment ? std::atoi(from_environment) : 8;
  }
  if (in_flight < 1)
    throw std::invalid_argument("ExecutorOptions::max_calls_in_flight (or WEFT_MAX_CALLS_IN_FLIGHT) must be at least 1 (got " +
                                std::to_string(in_flight) + ")");
  im.call_done.resize(static_cast<size_t>(in_flight));
  for (cudaEvent_t& e : im.call_done) WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  WEFT_CUBLAS_CHECK(cublasLtCreate(&im.lt));
  WEFT_CUDA_CHECK(cudaMalloc(&im.workspace, kGemmWorkspaceBytes));
  im.gemms.reserve(mine.steps.size());

  // Counters raised by step notifies of one stream of this rank alone (no other stream or rank, no
  // GEMM tile): that stream may write them (see SignalSet::set).
  std::map<std::pair<int, int>, int> single_writer;  // -> this rank's stream
  for (const auto& [key, who] : writers)
    if (who.size() == 1 && who.begin()->first == comm_.rank() && who.begin()->second >= 0) single_writer[key] = who.begin()->second;
  std::map<std::pair<int, int>, uint64_t> written_so_far;

  for (const Step& step : mine.steps) {
    Impl::Lowered low;
    low.step = &step;
    for (const Wait& w : step.waits) low.waits.push_back({w.signal.id, w.value});
    std::function<void(cudaStream_t)> body;
    std::visit(
        [&](const auto& b) {
          using T = std::decay_t<decltype(b)>;
          if constexpr (std::is_same_v<T, GemmStep>) {
            if (b.tiles.empty()) return;
            if (!is_plain_tile_table(b) || options.plain_gemm == ExecutorOptions::PlainGemm::overlap) {
              im.overlap_gemms.push_back(std::make_unique<LoweredOverlapGemm>(lower_overlap_gemm(b, step.label, overlap_context())));
              LoweredOverlapGemm* lowered = im.overlap_gemms.back().get();
              const uint64_t* calls = &im.calls;
              body = [lowered, calls](cudaStream_t stream) { lowered->gemm->launch(stream, *calls); };
              return;
            }
            // A plain table covers the output once, tile (i, j) landing at c + (i, j), with no waits
            // or notifies: exactly what one library GEMM computes.
            const GemmTile& first = b.tiles.front();
            Region c = first.store;
            c.box = {first.store.box.row - first.tile.row, first.store.box.col - first.tile.col, b.a.box.rows, b.b.box.rows};
            const DeviceRegion ra = region(b.a), rb = region(b.b), rc = region(c);
            LoweredGemm g;
            g.a = ra.data;
            g.b = rb.data;
            g.c = rc.data;
            const auto m = static_cast<uint64_t>(ra.rows), n = static_cast<uint64_t>(rb.rows), k = static_cast<uint64_t>(ra.cols);
            WEFT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
            WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose));
            WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep));
            // Row-major C[M,N] = A[M,K] B[N,K]^T is column-major C^T[N,M] = op(B^T)[N,K] * A^T[K,M].
            WEFT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.weight, CUDA_R_16BF, k, n, rb.stride));
            WEFT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.activation, CUDA_R_16BF, k, m, ra.stride));
            WEFT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.out, CUDA_R_16BF, n, m, rc.stride));
            cublasLtMatmulPreference_t pref;
            WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
            const uint64_t workspace = kGemmWorkspaceBytes;
            WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
            const uint32_t align_a = static_cast<uint32_t>(pointer_alignment(g.b)), align_b = static_cast<uint32_t>(pointer_alignment(g.a)),
                           align_c = static_cast<uint32_t>(pointer_alignment(g.c));
            WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a));
            WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b));
            WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c));
            WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof align_c));
            cublasLtMatmulHeuristicResult_t found{};
            int count = 0;
            const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(im.lt, g.desc, g.weight, g.activation, g.out, g.out,
                                                                          pref, 1, &found, &count);
            cublasLtMatmulPreferenceDestroy(pref);
            if (status != CUBLAS_STATUS_SUCCESS || count == 0) {
              g.destroy();
              throw std::invalid_argument("CudaExecutor: cuBLASLt has no algorithm for GEMM step '" + step.label + "' (m=" +
                                          std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                                          "); check K and N alignment (multiples of 8 elements)");
            }
            g.algo = found.algo;
            g.beta = b.accumulate ? 1.0f : 0.0f;
            im.gemms.push_back(g);
            const LoweredGemm* lowered = &im.gemms.back();
            cublasLtHandle_t lt = im.lt;
            void* ws = im.workspace;
            body = [lowered, lt, ws](cudaStream_t stream) {
              const float one = 1.0f;
              WEFT_CUBLAS_CHECK(cublasLtMatmul(lt, lowered->desc, &one, lowered->b, lowered->weight, lowered->a, lowered->activation,
                                               &lowered->beta, lowered->c, lowered->out, lowered->c, lowered->out, &lowered->algo, ws,
                                               kGemmWorkspaceBytes, stream));
            };
          } else if constexpr (std::is_same_v<T, CopyStep>) {
            const DeviceRegion src = region(b.src), dst = region(b.dst);
            if (src.rows * src.cols == 0) return;
            body = [src, dst](cudaStream_t stream) {
              WEFT_CUDA_CHECK(cudaMemcpy2DAsync(dst.data, static_cast<size_t>(dst.stride) * 2, src.data,
                                                static_cast<size_t>(src.stride) * 2, static_cast<size_t>(src.cols) * 2,
                                                static_cast<size_t>(src.rows), cudaMemcpyDefault, stream));
            };
          } else if constexpr (std::is_same_v<T, ReduceStep>) {
            std::vector<DeviceRegion> srcs;
            for (const Region& r : b.srcs) {
              srcs.push_back(region(r));
            }
            const DeviceRegion dst = region(b.dst);
            const bool accumulate = b.accumulate;
            body = [srcs, dst, accumulate](cudaStream_t stream) {
              reduce_bf16(dst, srcs.data(), static_cast<int>(srcs.size()), accumulate, stream);
            };
          } else if constexpr (std::is_same_v<T, PermuteRowsStep>) {
            const DeviceRegion src = region(b.src), dst = region(b.dst);
            int64_t* rows = nullptr;
            WEFT_CUDA_CHECK(cudaMalloc(&rows, std::max<size_t>(b.source_rows.size(), 1) * sizeof(int64_t)));
            WEFT_CUDA_CHECK(cudaMemcpy(rows, b.source_rows.data(), b.source_rows.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
            im.device_tables.push_back(rows);
            body = [src, dst, rows](cudaStream_t stream) { permute_rows_bf16(dst, src, rows, stream); };
          } else if constexpr (std::is_same_v<T, MoveBoxesStep>) {
            const DeviceRegion src = region(b.src), dst = region(b.dst);
            std::vector<DeviceBoxMove> moves;
            moves.reserve(b.moves.size());
            for (const BoxMove& m : b.moves) moves.push_back({m.from.row, m.from.col, m.to.row, m.to.col, m.from.rows, m.from.cols});
            DeviceBoxMove* table = nullptr;
            WEFT_CUDA_CHECK(cudaMalloc(&table, std::max<size_t>(moves.size(), 1) * sizeof(DeviceBoxMove)));
            WEFT_CUDA_CHECK(cudaMemcpy(table, moves.data(), moves.size() * sizeof(DeviceBoxMove), cudaMemcpyHostToDevice));
            im.device_tables.push_back(table);
            const auto count = static_cast<int64_t>(moves.size());
            body = [src, dst, table, count](cudaStream_t stream) { move_boxes_bf16(dst, src, table, count, stream); };
          } else if constexpr (std::is_same_v<T, CollectiveStep>) {
            const DeviceRegion src = region(b.src), dst = region(b.dst);
            for (const auto* r : {&src, &dst})
              if (r->rows > 1 && r->stride != r->cols)
                throw std::invalid_argument("CudaExecutor: collective '" + step.label +
                                            "' needs contiguous regions (whole rows); NCCL takes flat buffers");
            ncclComm_t nccl = comm_.nccl();
            const CollectiveKind kind = b.kind;
            const auto send_rows = b.send_rows, recv_rows = b.recv_rows;
            const int world = comm_.world_size();
            body = [=](cudaStream_t stream) {
              const size_t cols = static_cast<size_t>(src.cols);
              switch (kind) {
                case CollectiveKind::all_gather:
                  WEFT_NCCL_CHECK(ncclAllGather(src.data, dst.data, static_cast<size_t>(src.rows) * cols, ncclBfloat16, nccl, stream));
                  break;
                case CollectiveKind::reduce_scatter:
                  WEFT_NCCL_CHECK(ncclReduceScatter(src.data, dst.data, static_cast<size_t>(dst.rows) * cols, ncclBfloat16, ncclSum,
                                                    nccl, stream));
                  break;
                case CollectiveKind::all_reduce:
                  WEFT_NCCL_CHECK(ncclAllReduce(src.data, dst.data, static_cast<size_t>(dst.rows) * cols, ncclBfloat16, ncclSum,
                                                nccl, stream));
                  break;
                case CollectiveKind::all_to_all: {
                  WEFT_NCCL_CHECK(ncclGroupStart());
                  size_t sent = 0, received = 0;
                  for (int p = 0; p < world; ++p) {
                    const size_t out = static_cast<size_t>(send_rows[static_cast<size_t>(p)]) * cols;
                    const size_t in = static_cast<size_t>(recv_rows[static_cast<size_t>(p)]) * cols;
                    if (out) WEFT_NCCL_CHECK(ncclSend(static_cast<const uint16_t*>(src.data) + sent, out, ncclBfloat16, p, nccl, stream));
                    if (in) WEFT_NCCL_CHECK(ncclRecv(static_cast<uint16_t*>(dst.data) + received, in, ncclBfloat16, p, nccl, stream));
                    sent += out;
                    received += in;
                  }
                  WEFT_NCCL_CHECK(ncclGroupEnd());
                  break;
                }
              }
            };
          }
        },
        step.body);
    // A counter that only this stream raises is written (its value after this step, this call)
    // instead of added to: no kernel, so no SM is needed to raise it.
    struct Raise {
      Notify notify;
      uint64_t written_per_call = 0;  // 0: add with a kernel; else the total it reaches per call
      uint64_t value_within_call = 0;
    };
    std::vector<Raise> raises;
    for (const Notify& n : step.notifies) {
      const auto key = std::make_pair(n.signal.rank, n.signal.id);
      Raise raise{n};
      if (single_writer.count(key) && single_writer.at(key) == step.stream) {
        raise.value_within_call = (written_so_far[key] += n.increment);
        raise.written_per_call = raised_in_plan.at(key);
      }
      raises.push_back(raise);
    }
    SignalSet* signals = im.signals.get();
    const uint64_t* calls = &im.calls;
    low.enqueue = [body, raises, signals, calls](cudaStream_t stream) {
      if (body) body(stream);
      for (const Raise& r : raises) {
        if (r.written_per_call)
          signals->set(stream, r.notify.signal.rank, r.notify.signal.id, *calls * r.written_per_call + r.value_within_call);
        else
          signals->notify(stream, r.notify.signal.rank, r.notify.signal.id, r.notify.increment);
      }
    };
    im.steps.push_back(std::move(low));
  }
  load_gemm_kernels();
}

// cuBLASLt loads its kernel libraries on a kernel's first use (cuLibraryLoadData, whatever
// CUDA_MODULE_LOADING says), and in a process driving several GPUs that load waits for the other
// devices too. Seen on 2xH200 (scripts/hang_probe.sh): one rank in cuLibraryLoadData under
// cublasLtMatmul, the other's device running a collective or a signal wait that needed the first
// rank's host to move on. So every GEMM runs once here, and no rank leaves before all have loaded,
// through a barrier that puts no work on any device. Each GEMM runs exactly as run() will run it,
// beta included: an accumulating GEMM warmed up with beta 0 left its own kernel to load in the
// middle of a call (the same hang, FiCCO's 2D schedule, 1 of 4 runs of the GPU tests on 2xH200).
// The warm-up reads and writes the plan's own buffers: outputs and scratch are rewritten by every
// run, and validation forbids writes to inputs.
void CudaExecutor::load_gemm_kernels() {
  Impl& im = *impl_;
  cudaStream_t warm;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&warm, cudaStreamNonBlocking));
  const float one = 1.0f;
  for (const LoweredGemm& g : im.gemms)
    WEFT_CUBLAS_CHECK(cublasLtMatmul(im.lt, g.desc, &one, g.b, g.weight, g.a, g.activation, &g.beta, g.c, g.out, g.c, g.out, &g.algo,
                                     im.workspace, kGemmWorkspaceBytes, warm));
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());  // the warm-up and every upload of the constructor
  WEFT_CUDA_CHECK(cudaStreamDestroy(warm));
  // Also: a peer's warm-up may store into our buffers, so nobody writes inputs or poisons outputs
  // before every warm-up has landed.
  comm_.host_barrier();
}

CudaExecutor::~CudaExecutor() {
  cudaSetDevice(comm_.device());
  Impl& im = *impl_;
  // cudaFree waits for the whole device: if a stream is stuck in a wait, freeing would hang the
  // process. Leak instead, loudly, so that the error that got us here can still be reported.
  for (cudaStream_t s : im.streams)
    if (!synchronize_with_timeout(s, 10000)) {
      std::fprintf(stderr, "weft: rank %d's streams are still blocked; leaving its buffers allocated\n%s", comm_.rank(),
                   diagnose().c_str());
      (void)impl_.release();
      return;
    }
  // Peers may still be pulling from or pushing into this rank's buffers and signals: nobody frees
  // until every rank has finished its own streams (each enters the barrier only after that).
  // The barrier puts no work on a device (host_barrier): a peer that is already freeing waits in
  // cudaFree for every device of the process to go idle, and a collective kernel here that waited
  // for that peer would never finish.
  if (im.plan_touches_peers) {
    try {
      comm_.host_barrier();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "weft: rank %d: peers did not reach the executor's final barrier (%s); leaving its buffers allocated\n",
                   comm_.rank(), e.what());
      (void)impl_.release();
      return;
    }
  }
  cudaDeviceSynchronize();
  for (auto& g : im.gemms) g.destroy();
  for (void* table : im.device_tables) cudaFree(table);
  for (auto& g : im.overlap_gemms) cudaFree(g->device_table);
  cudaFree(im.raised_per_call_device);
  cudaFree(im.gemm_error);
  for (size_t b = 0; b < im.local_memory.size(); ++b)
    if (!im.symmetric[b]) cudaFree(im.local_memory[b]);
  for (auto s : im.streams) cudaStreamDestroy(s);
  for (auto e : im.joins) cudaEventDestroy(e);
  if (im.fork) cudaEventDestroy(im.fork);
  for (cudaEvent_t e : im.call_done) cudaEventDestroy(e);
  if (im.workspace) cudaFree(im.workspace);
  if (im.lt) cublasLtDestroy(im.lt);
}

OverlapGemmPlanContext CudaExecutor::overlap_context() const {
  OverlapGemmPlanContext context;
  context.rank = comm_.rank();
  context.world_size = comm_.world_size();
  context.region = [this](const Region& r) { return region(r); };
  context.whole = [this](int rank, int buffer) {
    const BufferDecl& decl = plan_.ranks.at(static_cast<size_t>(rank)).buffers.at(static_cast<size_t>(buffer));
    return region(Region{rank, buffer, Rect{0, 0, decl.rows, decl.cols}});
  };
  context.own_signals = impl_->signals->local();
  context.signals_of = [this](int rank) { return impl_->signals->on(rank); };
  context.raised_per_call = impl_->raised_per_call_device;
  context.error = impl_->gemm_error;
  return context;
}

void* CudaExecutor::buffer(std::string_view name) const {
  return impl_->local_memory.at(static_cast<size_t>(find_buffer(rank_plan(), name)));
}

DeviceRegion CudaExecutor::region(const Region& r) const {
  const BufferDecl& decl = plan_.ranks.at(static_cast<size_t>(r.rank)).buffers.at(static_cast<size_t>(r.buffer));
  void* base = nullptr;
  if (r.rank == comm_.rank()) {
    base = impl_->local_memory.at(static_cast<size_t>(r.buffer));
  } else {
    const auto& sym = impl_->symmetric.at(static_cast<size_t>(r.buffer));
    if (!sym) throw std::invalid_argument("CudaExecutor: region of non-symmetric buffer '" + decl.name + "' on rank " + std::to_string(r.rank));
    base = sym->on(r.rank);
  }
  DeviceRegion d;
  d.data = static_cast<uint16_t*>(base) + r.box.row * decl.cols + r.box.col;
  d.rows = r.box.rows;
  d.cols = r.box.cols;
  d.stride = decl.cols;
  return d;
}

void CudaExecutor::run(cudaStream_t stream) {
  Impl& im = *impl_;
  WEFT_CUDA_CHECK(cudaSetDevice(comm_.device()));
  const uint64_t in_flight = im.call_done.size();
  cudaEvent_t& done = im.call_done[im.calls % in_flight];
  // Bounded like every wait for peers, so that a stuck call ends in this diagnosis (WEFT_COLLECTIVE_TIMEOUT_S).
  if (im.calls >= in_flight && !wait_for_event_with_timeout(done, Communicator::timeout_ms()))
    throw CudaError("CudaExecutor::run on rank " + std::to_string(comm_.rank()) + ": call " +
                    std::to_string(im.calls - in_flight) + " has not finished after " +
                    std::to_string(Communicator::timeout_ms() / 1000) + " s; unmet waits:\n" + diagnose());
  // A peer may still be reading buffers we are about to overwrite in its previous call.
  if (im.plan_touches_peers) comm_.barrier(stream);
  WEFT_CUDA_CHECK(cudaEventRecord(im.fork, stream));
  for (cudaStream_t s : im.streams) WEFT_CUDA_CHECK(cudaStreamWaitEvent(s, im.fork, 0));
  const uint64_t epoch = im.calls;
  for (const auto& low : im.steps) {
    cudaStream_t s = im.streams[static_cast<size_t>(low.step->stream)];
    for (auto [signal, value] : low.waits)
      im.signals->wait(s, signal, epoch * im.raised_per_call[static_cast<size_t>(signal)] + value);
    low.enqueue(s);
  }
  for (size_t i = 0; i < im.streams.size(); ++i) {
    WEFT_CUDA_CHECK(cudaEventRecord(im.joins[i], im.streams[i]));
    WEFT_CUDA_CHECK(cudaStreamWaitEvent(stream, im.joins[i], 0));
  }
  WEFT_CUDA_CHECK(cudaEventRecord(done, stream));
  ++im.calls;
}

std::string CudaExecutor::overlap_gemm_error() const {
  if (impl_->overlap_gemms.empty()) return "";
  OverlapGemmError error;
  cudaStream_t reader;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking));
  WEFT_CUDA_CHECK(cudaMemcpyAsync(&error, impl_->gemm_error, sizeof error, cudaMemcpyDeviceToHost, reader));
  const bool read = synchronize_with_timeout(reader, 2000);
  cudaStreamDestroy(reader);
  if (!read) return "rank " + std::to_string(comm_.rank()) + ": could not read the overlap GEMM's error record\n";
  if (!error.failed) return "";
  if (error.signal == kSplitFixupSignal)
    return "rank " + std::to_string(comm_.rank()) + ": an overlap GEMM tile (table entry " + std::to_string(error.tile) +
           ") gave up waiting for the partial sums of K split " + std::to_string(error.expected - 1) + " of its tile\n";
  if (error.signal == kNotifyHandoffSignal)
    return "rank " + std::to_string(comm_.rank()) + ": the overlap GEMM's hand-off of stored tiles to its notifying warp gave " +
           "up at table entry " + std::to_string(error.tile) + " (waiting for its CTA's notifying tile #" +
           std::to_string(error.expected) + "; handed over: " + std::to_string(error.observed) + ")\n";
  return "rank " + std::to_string(comm_.rank()) + ": an overlap GEMM tile (table entry " + std::to_string(error.tile) +
         ") gave up waiting for signal '" + rank_plan().signals.at(static_cast<size_t>(error.signal)) + "' (#" +
         std::to_string(error.signal) + ") >= " + std::to_string(error.expected) + "; it was " + std::to_string(error.observed) +
         "\n";
}

std::string CudaExecutor::diagnose() const {
  const Impl& im = *impl_;
  const auto values = im.signals->read_values();
  const uint64_t epoch = im.calls == 0 ? 0 : im.calls - 1;
  std::ostringstream out;
  int unmet = 0;
  for (const auto& low : im.steps)
    for (auto [signal, value] : low.waits) {
      const uint64_t expected = epoch * im.raised_per_call[static_cast<size_t>(signal)] + value;
      if (values[static_cast<size_t>(signal)] >= expected) continue;
      ++unmet;
      out << "rank " << comm_.rank() << " stream " << low.step->stream << " step '" << low.step->label << "' waits for signal '"
          << rank_plan().signals[static_cast<size_t>(signal)] << "' (#" << signal << ") >= " << expected << "; value is "
          << values[static_cast<size_t>(signal)] << "\n";
    }
  if (unmet == 0) out << "rank " << comm_.rank() << ": every signal wait is met\n";
  out << overlap_gemm_error();
  return out.str();
}

}  // namespace weft
