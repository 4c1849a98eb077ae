#include "weft/runtime/cuda_executor.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>

#include "lowering/lowering.hpp"
#include "weft/plan/analysis.hpp"
#include "weft/plan/gpu_lowering.hpp"
#include "weft/kernels/tile_program.hpp"
#include "weft/plan/validation.hpp"
#include "current_device.hpp"
#include "weft/cuda/check.hpp"

namespace weft {

namespace {

constexpr size_t kGemmWorkspaceBytes = 32u << 20;
constexpr size_t kBufferAlignment = 256;

size_t aligned(size_t bytes) { return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment; }
size_t element_bytes_of(const BufferDecl& decl) { return static_cast<size_t>(std::max<int64_t>(decl.rows * decl.cols, 1)) * dtype_bytes(decl.dtype); }

bool named(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool whole_buffer(const Region& r, const BufferDecl& decl) {
  return r.box.row == 0 && r.box.col == 0 && r.box.rows == decl.rows && r.box.cols == decl.cols;
}

// Where the plan gathers A into one whole plain scratch buffer (sequential's all-gather), a caller
// who takes the gathered A back gives that buffer's memory itself.
bool gathers_into(const RankPlan& rp, size_t b, const ExecutorOptions& options) {
  const BufferDecl& decl = rp.buffers[b];
  return options.caller_gathered_a && decl.role == BufferRole::scratch && rp.gathered_a.size() == 1 &&
         rp.gathered_a.front().buffer == static_cast<BufferId>(b) && whole_buffer(rp.gathered_a.front(), decl);
}

// A caller's buffer the plan reads or writes directly: a non-symmetric input the caller names, the
// output where the caller gives one and it is a whole plain output buffer, or the buffer A is
// gathered into (gathers_into).
bool direct_caller_buffer(const RankPlan& rp, size_t b, const ExecutorOptions& options) {
  const BufferDecl& decl = rp.buffers[b];
  if (decl.symmetric) return false;
  if (decl.role == BufferRole::input) return named(options.caller_buffers, decl.name);
  if (gathers_into(rp, b, options)) return true;
  return options.caller_output && decl.role == BufferRole::output && rp.output.buffer == static_cast<BufferId>(b) &&
         whole_buffer(rp.output, decl);
}

// Offsets of a rank's buffers in its arenas: symmetric ones in the symmetric arena, the others in the
// local one (npos for a caller's buffer, which has no place there).
struct Placement {
  std::vector<size_t> offset;
  size_t symmetric_bytes = 0;
  size_t local_bytes = 0;
};

// A buffer's bytes in its arena: its elements, and for an FP8 buffer its fp32 scales after them (at
// aligned(element_bytes_of)), in the layout the library GEMM reads (device_scale_layout).
size_t bytes_of(const Problem& problem, const BufferDecl& decl) {
  const auto grid = scale_grid(problem, decl);
  if (!grid) return element_bytes_of(decl);
  return aligned(element_bytes_of(decl)) + static_cast<size_t>(device_scale_count(*grid, decl.rows, decl.cols)) * sizeof(float);
}

Placement place(const Problem& problem, const RankPlan& rp, const ExecutorOptions& options) {
  Placement p;
  for (size_t b = 0; b < rp.buffers.size(); ++b) {
    const BufferDecl& decl = rp.buffers[b];
    if (direct_caller_buffer(rp, b, options)) {
      p.offset.push_back(std::string::npos);
    } else if (decl.symmetric) {
      p.offset.push_back(p.symmetric_bytes);
      p.symmetric_bytes += aligned(bytes_of(problem, decl));
    } else {
      p.offset.push_back(p.local_bytes);
      p.local_bytes += aligned(bytes_of(problem, decl));
    }
  }
  return p;
}

int64_t env_ms(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::atoll(value) : fallback;
}

}  // namespace

WorkspaceSize workspace_size(const Plan& plan, const ExecutorOptions& options) {
  WorkspaceSize size;
  for (const RankPlan& rp : plan.ranks) {
    const Placement p = place(plan.problem, rp, options);
    size.symmetric_bytes = std::max(size.symmetric_bytes, p.symmetric_bytes);
    size.local_bytes = std::max(size.local_bytes, p.local_bytes);
    size.signals = std::max(size.signals, static_cast<int>(rp.signals.size()));
  }
  size.peers = reaches_across_ranks(plan);
  return size;
}

struct CudaExecutor::Impl {
  struct Step {
    const weft::Step* step = nullptr;
    lowering::Lowered lowered;
    std::vector<std::pair<int, uint64_t>> waits;    // (signal, value within the call)
    std::vector<uint64_t> written;                  // per notify: value to write (single writer), 0: add
    bool synced_in_kernel = false;                  // a companion step: its waits and notifies are the kernel's
  };

  std::unique_ptr<Workspace> own_workspace;
  Workspace* workspace = nullptr;
  SignalSet* signals = nullptr;
  // Each buffer of this rank: its address; a caller's buffer's is the one bound last.
  std::vector<void*> base;
  std::vector<bool> caller_owned;
  // A caller's FP8 buffer's scales (bind's `scales`); null for the others, whose scales follow
  // their elements (bytes_of).
  std::vector<void*> scale_base;
  // Peers' symmetric buffers as this GPU sees them, keyed by (rank, buffer); addresses never move.
  std::map<std::pair<int, int>, void*> peer_base;
  // Symmetric inputs copied in from the caller's pointer after the barrier: (buffer, source).
  std::vector<std::pair<int, const void*>> copied_in;
  // A symmetric FP8 input's scales, copied in beside its elements (peers pulling its rows read
  // them there, in symmetric memory): (buffer, the caller's scales). Also where the producer wrote
  // the elements in place.
  std::vector<std::pair<int, const void*>> scales_copied_in;
  // bind_output: where the result goes. Where the output is not a caller buffer itself, it is
  // copied there at the end of a call.
  void* output_target = nullptr;
  int output_buffer = -1;  // the output's buffer when it is a caller buffer, else -1
  // bind_gathered_a: where the gathered A goes (ExecutorOptions::caller_gathered_a), and the buffer
  // the plan gathers into when that is the caller's memory itself, else -1 (copied at the end).
  void* gathered_a_target = nullptr;
  int gathered_a_buffer = -1;
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> joins;
  cudaEvent_t fork = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* gemm_workspace = nullptr;
  std::vector<Step> steps;
  std::vector<void*> placeholders;  // caller buffers' stand-ins while the constructor warms up
  // Some rank of the plan reads or writes another rank's memory or signals. Decided from the whole
  // plan, so that every rank agrees and the barriers it guards are collective.
  bool plan_touches_peers = false;
  bool peers_in_process = false;  // other GPUs' ranks share this process (Communicator::local_group)
  uint64_t calls = 0;
  std::vector<cudaEvent_t> call_done;  // completion of the last max_calls_in_flight calls (ring)
  std::vector<bool> call_recorded;
  int64_t call_timeout_ms = 0;
  bool stuck = false;  // a call timed out; its waits were released
  // Replayed calls (ExecutorOptions::replay_calls): a call captured once per set of bindings,
  // the newest last.
  struct Replay {
    std::vector<const void*> bindings;
    cudaGraphExec_t exec = nullptr;
  };
  bool replay = false;
  // A call of one plan stream runs on the caller's stream itself: no fork and join (four API calls
  // and two cross-stream hops less, which a small GEMM's time shows). A call that cannot wait on
  // anything (no signals, no peers, no collective between ranks: a world of one's GEMM alone) can
  // neither hang nor hold a peer, so its calls in flight are not bounded; and where it is one
  // operation, it is not captured for replay (a graph launch is no cheaper, and adds its latency).
  bool on_caller_stream = false;
  bool cannot_wait = false;
  std::vector<Replay> replays;
  std::vector<const void*> last_bindings;  // of the last call enqueued op by op
  bool enqueued_once = false;
  cudaStream_t capture_stream = nullptr;
  uint64_t replayed = 0;
  uint64_t device_wait_timeout_ns = 0;  // the bound of every device-side wait, the call's barriers' too
  uint64_t call_signature = 0;          // the plan's fingerprint, which the call's barriers compare between ranks
};

namespace {

// How many bindings' captured calls an executor keeps (a caller alternating between a few sets of
// buffers, e.g. two microbatches, replays each).
constexpr size_t kMaxReplays = 4;

// NCCL requires that whether an operation is graph-captured be the same on every rank of the
// launch; a capture decided per rank from its own bindings cannot promise that. So a call with an
// NCCL operation (a collective step) is replayed only where it is alone in its communicator. The
// call's barriers are device-side (SignalSet::barrier), not NCCL's.
bool call_has_nccl(const RankPlan& rp) {
  return std::any_of(rp.steps.begin(), rp.steps.end(), [](const Step& s) { return std::holds_alternative<CollectiveStep>(s.body); });
}

// A caller's pointer that the GEMMs (TMA, cuBLASLt) or NCCL read or write: 16-byte aligned. `who`
// says which call and which memory; `needs` what needs the alignment.
void require_aligned(const void* data, const std::string& who, const char* needs) {
  if (reinterpret_cast<uintptr_t>(data) % 16 != 0)
    throw std::invalid_argument(who + " at " + std::to_string(reinterpret_cast<uintptr_t>(data)) + " is not 16-byte aligned; " + needs +
                                " need it");
}

}  // namespace

CudaExecutor::CudaExecutor(Communicator& comm, Plan plan, ExecutorOptions options)
    : comm_(comm), plan_(std::move(plan)), options_(std::move(options)), impl_(new Impl) {
  const OnDevice on(comm_.device());
  comm_.require_usable("CudaExecutor");
  if (plan_.world_size() != comm_.world_size())
    throw std::invalid_argument("plan for " + std::to_string(plan_.world_size()) + " ranks given to a communicator of " +
                                std::to_string(comm_.world_size()));
  if (options_.validate) require_valid(plan_);
  // The plan's fingerprint: agreed on here, and compared again by every call's device barrier.
  impl_->call_signature = std::hash<std::string>{}(to_string(plan_));
  comm_.require_agreement(impl_->call_signature, "the plan (strategy, shapes, options)");
  // bf16 everywhere; FP8 (and the f32 an FP8 GEMM may give) only where each step's lowering takes
  // it, which refuses naming what is missing (lowering/dtypes.cpp).
  for (const BufferDecl& decl : rank_plan().buffers) {
    // f32 also for attention's log-sum-exp, which the attention lowering checks.
    // i32 for the MoE choices given on the device and the route's tables (the structure check keeps
    // them to indices).
    const bool f32_ok = is_fp8(plan_.problem.input_dtype) || plan_.problem.op == OpKind::ag_attention;
    const bool i32_ok = plan_.problem.routing_on_device;
    if (decl.dtype != DType::bf16 && !is_fp8(decl.dtype) && !(f32_ok && decl.dtype == DType::f32) && !(i32_ok && decl.dtype == DType::i32))
      throw std::invalid_argument("CudaExecutor: buffer '" + decl.name + "' is " + std::string(to_string(decl.dtype)) +
                                  "; the executor handles bf16 buffers, FP8 operands with their bf16 or f32 results, and the i32 indices of "
                                  "MoE choices given on the device, so far");
  }
  // What the executor cannot lower for the plan's dtypes, decided on the CPU (plan/gpu_lowering.hpp).
  if (auto gap = gpu_lowering_gap(plan_, {options_.plain_gemm == ExecutorOptions::PlainGemm::overlap}))
    throw std::invalid_argument("CudaExecutor: " + *gap + " (" + call_context() + ")");
  if (options_.caller_gathered_a && is_fp8(plan_.problem.input_dtype))
    throw std::invalid_argument("CudaExecutor: the gathered A is not handed back with FP8 operands yet (its rows' scales are not) (" +
                                call_context() + ")");
  if (options_.caller_gathered_a && rank_plan().gathered_a.empty())
    throw std::invalid_argument("CudaExecutor: the gathered A was asked for (ExecutorOptions::caller_gathered_a), but the plan of " +
                                call_context() + " keeps none" + (plan_.problem.op == OpKind::ag_gemm ? "" : " (only ag_gemm gathers A)"));
  for (const std::string& name : options_.caller_buffers) {
    const BufferDecl& decl = rank_plan().buffers.at(static_cast<size_t>(find_buffer(rank_plan(), name)));
    if (decl.role != BufferRole::input)
      throw std::invalid_argument("CudaExecutor: caller buffer '" + name + "' is not an input of the plan (outputs: bind_output)");
  }
  Impl& im = *impl_;
  im.plan_touches_peers = reaches_across_ranks(plan_);
  const char* replay_env = std::getenv("WEFT_REPLAY_CALLS");
  const bool replay_wanted = options_.replay_calls && !(replay_env && std::string(replay_env) == "0");
  // Not where peers share this process (local_group, a thread per GPU): instantiating the graph can
  // allocate device memory, and an allocation in a process whose GPUs map each other's memory can
  // wait for the peer devices to go idle, while those spin in the call's first barrier waiting for
  // this rank (the communicator's caveat for one thread per GPU). Ranks capture on their own
  // conditions, so a host barrier around the capture would not be collective.
  im.peers_in_process = comm_.other_gpus_in_this_process();
  im.replay = replay_wanted && (comm_.world_size() == 1 || !call_has_nccl(rank_plan())) && !im.peers_in_process;
  int in_flight = options_.max_calls_in_flight;
  if (in_flight == 0) in_flight = static_cast<int>(env_ms("WEFT_MAX_CALLS_IN_FLIGHT", 8));
  if (in_flight < 1)
    throw std::invalid_argument("ExecutorOptions::max_calls_in_flight (or WEFT_MAX_CALLS_IN_FLIGHT) must be at least 1 (got " +
                                std::to_string(in_flight) + ")");
  im.call_timeout_ms = options_.call_timeout_ms > 0 ? options_.call_timeout_ms : Communicator::timeout_ms();
  place_buffers();

  // Streams without a GEMM carry the communication and the small kernels around it: they get the
  // higher priority, so their kernels take the first SMs that a GEMM's finished CTAs free.
  const RankPlan& mine = rank_plan();
  std::vector<bool> computes(static_cast<size_t>(mine.stream_count), false);
  for (const Step& step : mine.steps)
    if (std::holds_alternative<GemmStep>(step.body) || std::holds_alternative<AttentionStep>(step.body))
      computes[static_cast<size_t>(step.stream)] = true;
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
  // Calls queued on the device at once are bounded. Without a bound, a loop of calls fills the
  // device's command queue and the host blocks inside an enqueue (a kernel launch, an NCCL call)
  // while its device waits for a peer whose host thread is blocked the same way.
  im.call_done.resize(static_cast<size_t>(in_flight));
  im.call_recorded.assign(static_cast<size_t>(in_flight), false);
  for (cudaEvent_t& e : im.call_done) WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  WEFT_CUBLAS_CHECK(cublasLtCreate(&im.lt));
  // cuBLASLt's workspace where a library GEMM may use it (an attention plan has none: no 32 MiB per
  // cached token count).
  const bool has_gemm = std::any_of(mine.steps.begin(), mine.steps.end(), [](const Step& s) { return std::holds_alternative<GemmStep>(s.body); });
  if (has_gemm) WEFT_CUDA_CHECK(cudaMalloc(&im.gemm_workspace, kGemmWorkspaceBytes));
  lower_steps();
  load_gemm_kernels();
  im.on_caller_stream = mine.stream_count == 1;
  im.cannot_wait = mine.signals.empty() && !im.plan_touches_peers && (comm_.world_size() == 1 || !call_has_nccl(mine));
  const bool copies_in = std::any_of(options_.caller_buffers.begin(), options_.caller_buffers.end(), [&](const std::string& name) {
    return mine.buffers.at(static_cast<size_t>(find_buffer(mine, name))).symmetric;
  });
  if (im.cannot_wait && mine.steps.size() == 1 && !copies_in && !(options_.caller_output && im.output_buffer < 0) &&
      !(options_.caller_gathered_a && im.gathered_a_buffer < 0))
    im.replay = false;
}

void CudaExecutor::place_buffers() {
  Impl& im = *impl_;
  if (options_.workspace) {
    if (&options_.workspace->communicator() != &comm_)
      throw std::invalid_argument("CudaExecutor: the workspace belongs to another communicator");
    im.workspace = options_.workspace;
  } else {
    im.own_workspace = std::make_unique<Workspace>(comm_);
    im.workspace = im.own_workspace.get();
  }
  // Collective: every rank asks for the same (the largest of any rank's needs).
  im.workspace->reserve(workspace_size(plan_, options_));
  im.signals = &im.workspace->signals();
  const RankPlan& mine = rank_plan();
  const Placement here = place(plan_.problem, mine, options_);
  for (size_t b = 0; b < mine.buffers.size(); ++b) {
    const BufferDecl& decl = mine.buffers[b];
    const size_t offset = here.offset[b];
    const bool caller = offset == std::string::npos;
    im.caller_owned.push_back(caller);
    if (caller && decl.role == BufferRole::output) im.output_buffer = static_cast<int>(b);
    if (caller && gathers_into(mine, b, options_)) im.gathered_a_buffer = static_cast<int>(b);
    if (caller) {
      // A stand-in until the caller binds its memory: the constructor's warm-up runs every library
      // GEMM once on real memory.
      void* stand_in = nullptr;
      WEFT_CUDA_CHECK(cudaMalloc(&stand_in, bytes_of(plan_.problem, decl)));
      im.placeholders.push_back(stand_in);
      im.base.push_back(stand_in);
      im.scale_base.push_back(scale_grid(plan_.problem, decl) ? static_cast<char*>(stand_in) + aligned(element_bytes_of(decl)) : nullptr);
      continue;
    } else if (decl.symmetric) {
      im.base.push_back(static_cast<char*>(im.workspace->symmetric_on(comm_.rank())) + offset);
    } else {
      im.base.push_back(static_cast<char*>(im.workspace->local()) + offset);
    }
    im.scale_base.push_back(nullptr);
  }
  // Peers' symmetric buffers: at the offsets their own plans place them in their arenas (only a plan
  // that reaches peers has them mapped).
  for (const RankPlan& rp : plan_.ranks) {
    if (!im.plan_touches_peers) break;
    if (rp.rank == comm_.rank()) continue;
    const Placement there = place(plan_.problem, rp, options_);
    for (size_t b = 0; b < rp.buffers.size(); ++b)
      if (rp.buffers[b].symmetric && there.offset[b] != std::string::npos)
        im.peer_base[{rp.rank, static_cast<int>(b)}] = static_cast<char*>(im.workspace->symmetric_on(rp.rank)) + there.offset[b];
  }
}

void CudaExecutor::lower_steps() {
  Impl& im = *impl_;
  lowering::Context context;
  context.plan = &plan_;
  context.rank = comm_.rank();
  context.world_size = comm_.world_size();
  context.region = [this](const Region& r) {
    const BufferDecl& decl = plan_.ranks.at(static_cast<size_t>(r.rank)).buffers.at(static_cast<size_t>(r.buffer));
    lowering::BoundRegion bound;
    if (r.rank == comm_.rank()) {
      bound.base = &impl_->base.at(static_cast<size_t>(r.buffer));
      bound.moves = impl_->caller_owned.at(static_cast<size_t>(r.buffer));
    } else {
      const auto it = impl_->peer_base.find({r.rank, r.buffer});
      if (it == impl_->peer_base.end())
        throw std::invalid_argument("CudaExecutor: region of non-symmetric buffer '" + decl.name + "' on rank " + std::to_string(r.rank));
      bound.base = &it->second;
    }
    bound.rows = r.box.rows;
    bound.cols = r.box.cols;
    bound.column_major = decl.order == MemoryOrder::column_major;
    bound.offset = bound.column_major ? r.box.col * decl.rows + r.box.row : r.box.row * decl.cols + r.box.col;
    bound.stride = bound.column_major ? decl.rows : decl.cols;
    bound.dtype = decl.dtype;
    return bound;
  };
  // An FP8 region's scales: the whole scale array of its buffer, after the elements (bytes_of).
  context.scales = [this, region = context.region](const Region& r) -> std::optional<lowering::BoundScales> {
    const BufferDecl& decl = plan_.ranks.at(static_cast<size_t>(r.rank)).buffers.at(static_cast<size_t>(r.buffer));
    const auto grid = scale_grid(plan_.problem, decl);
    if (!grid) return std::nullopt;
    lowering::BoundScales s;
    s.elements = region(r);
    s.byte_offset = aligned(element_bytes_of(decl));
    if (r.rank == comm_.rank() && impl_->scale_base.at(static_cast<size_t>(r.buffer))) s.scale_base = &impl_->scale_base[static_cast<size_t>(r.buffer)];
    s.grid = *grid;
    s.buffer_rows = decl.rows;
    s.buffer_cols = decl.cols;
    return s;
  };
  context.whole = [this, region = context.region](int rank, int buffer) {
    const BufferDecl& decl = plan_.ranks.at(static_cast<size_t>(rank)).buffers.at(static_cast<size_t>(buffer));
    return region(Region{rank, buffer, Rect{0, 0, decl.rows, decl.cols}});
  };
  context.lt = im.lt;
  context.gemm_workspace = im.gemm_workspace;
  context.gemm_workspace_bytes = im.gemm_workspace ? kGemmWorkspaceBytes : 0;
  context.nccl = comm_.nccl();
  context.own_signals = im.signals->local();
  // A plan that reaches no peer has its counters alone: peers' are not mapped (and never raised).
  context.signals_of = [signals = im.signals, touches = im.plan_touches_peers, me = comm_.rank()](int rank) -> uint64_t* {
    return rank == me || touches ? signals->on(rank) : nullptr;
  };
  context.device_error = im.workspace->device_error();
  const int64_t wait_ms = options_.device_wait_timeout_ms > 0 ? options_.device_wait_timeout_ms : env_ms("WEFT_DEVICE_WAIT_TIMEOUT_MS", 10000);
  context.device_wait_timeout_ns = static_cast<uint64_t>(wait_ms) * 1'000'000ull;
  im.device_wait_timeout_ns = context.device_wait_timeout_ns;
  context.plain_gemm_on_overlap = options_.plain_gemm == ExecutorOptions::PlainGemm::overlap;
  context.fp8_fast_accumulation = options_.fp8_fast_accumulation;
  const char* peer_copies = std::getenv("WEFT_PEER_COPIES_IN_PROCESS");
  context.peer_copies_on_sms = im.peers_in_process && !(peer_copies && std::string(peer_copies) == "copy_engine");

  const std::vector<std::vector<uint64_t>> written = single_writer_values(plan_, comm_.rank());
  const RankPlan& mine = rank_plan();
  im.steps.reserve(mine.steps.size());
  std::map<int, std::vector<int>> companions;  // id -> its steps, in order
  for (size_t i = 0; i < mine.steps.size(); ++i)
    if (mine.steps[i].companion >= 0) companions[mine.steps[i].companion].push_back(static_cast<int>(i));
  for (size_t i = 0; i < mine.steps.size(); ++i) {
    const Step& step = mine.steps[i];
    lowering::require_lowerable_dtypes(step, context);
    Impl::Step lowered;
    lowered.step = &step;
    lowered.written = written[i];
    for (const Wait& w : step.waits) lowered.waits.push_back({w.signal.id, w.value});
    if (step.companion >= 0) {
      // The group's first step launches the kernel for all of them; the others enqueue nothing.
      const std::vector<int>& group = companions[step.companion];
      lowered.synced_in_kernel = true;
      if (group.front() == static_cast<int>(i)) lowered.lowered = lowering::lower_companion(mine, group, context);
      im.steps.push_back(std::move(lowered));
      continue;
    }
    lowered.lowered = std::visit(
        [&](const auto& body) -> lowering::Lowered {
          using T = std::decay_t<decltype(body)>;
          if constexpr (std::is_same_v<T, GemmStep>) return lowering::lower_gemm(body, step.label, context);
          else if constexpr (std::is_same_v<T, CopyStep>) return lowering::lower_copy(body, step.engine, step.label, context);
          else if constexpr (std::is_same_v<T, ReduceStep>) return lowering::lower_reduce(body, step.label, context);
          else if constexpr (std::is_same_v<T, PermuteRowsStep>) return lowering::lower_permute_rows(body, step.label, context);
          else if constexpr (std::is_same_v<T, CombineRowsStep>) return lowering::lower_combine_rows(body, step.label, context);
          else if constexpr (std::is_same_v<T, MoveBoxesStep>) return lowering::lower_move_boxes(body, step.label, context);
          else if constexpr (std::is_same_v<T, CollectiveStep>) return lowering::lower_collective(body, step.label, context);
          else if constexpr (std::is_same_v<T, AttentionStep>) return lowering::lower_attention(body, step.label, context);
          else if constexpr (std::is_same_v<T, JoinStep>) return {};  // a join only waits
          else if constexpr (std::is_same_v<T, RouteStep>) return lowering::lower_route(body, step.label, context);
          else static_assert(sizeof(T) == 0, "a step kind the CUDA executor does not lower");
        },
        step.body);
    im.steps.push_back(std::move(lowered));
  }
}

// cuBLASLt loads its kernel libraries on a kernel's first use (cuLibraryLoadData, whatever
// CUDA_MODULE_LOADING says), and in a process driving several GPUs that load waits for the other
// devices too: a rank loading a kernel in the middle of a call hangs while a peer's device sits in
// a collective waiting for it. So every library GEMM runs
// once here, exactly as a call runs it (beta included: cuBLASLt runs another kernel for beta 1), and
// no rank leaves before all have loaded, through a barrier that puts no work on any device. The
// warm-up reads and writes the plan's buffers and the caller buffers' stand-ins: outputs and scratch
// are rewritten by every call, and validation forbids writes to inputs.
void CudaExecutor::load_gemm_kernels() {
  Impl& im = *impl_;
  cudaStream_t warm;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&warm, cudaStreamNonBlocking));
  for (const Impl::Step& s : im.steps)
    if (s.lowered.warm_up) s.lowered.warm_up(warm);
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());  // the warm-up and every upload of the constructor
  WEFT_CUDA_CHECK(cudaStreamDestroy(warm));
  for (size_t b = 0; b < im.base.size(); ++b)
    if (im.caller_owned[b]) im.base[b] = im.scale_base[b] = nullptr;  // bind() gives the caller's memory (and an FP8 input's scales)
  for (void* stand_in : im.placeholders) WEFT_CUDA_CHECK(cudaFree(stand_in));
  im.placeholders.clear();
  // Also: a peer's warm-up may store into our buffers, so nobody writes inputs or poisons outputs
  // before every warm-up has landed.
  comm_.host_barrier();
}

CudaExecutor::~CudaExecutor() {
  const OnDevice on(comm_.device(), OnDevice::NoThrow{});
  Impl& im = *impl_;
  // cudaFree waits for the whole device: if a stream is stuck in a wait, freeing would hang the
  // process. Release the waits first; leak, loudly, if even that does not free the streams.
  // A replayed call runs on the caller's stream, not on the executor's: its completion event says
  // when it is done.
  auto drain = [&] {
    bool done = true;
    for (cudaStream_t s : im.streams) done = done && synchronize_with_timeout(s, 10000);
    for (size_t c = 0; c < im.call_done.size(); ++c)
      if (im.call_recorded[c]) done = done && wait_for_event_with_timeout(im.call_done[c], 10000);
    return done;
  };
  bool drained = drain();
  if (!drained) {
    try {
      im.signals->release_every_wait();
    } catch (const std::exception& e) {  // a destructor does not throw: say it and leak below
      std::fprintf(stderr, "weft: rank %d could not release its waits: %s\n", comm_.rank(), e.what());
    }
    drained = drain();
  }
  // Ranks of one local_group meet on the host before and after freeing (below); one that leaves
  // early breaks their barriers, so that they fail at once rather than count its next barrier as
  // this one.
  const bool meets_on_host = im.peers_in_process && comm_.meets_on_host();
  if (!drained) {
    std::fprintf(stderr, "weft: rank %d's streams are still blocked; leaving its buffers allocated\n%s", comm_.rank(), diagnose().c_str());
    if (meets_on_host) comm_.give_up_host_barriers();
    (void)impl_.release();
    return;
  }
  // Peers may still be pulling from or pushing into this rank's buffers and signals: nobody frees
  // until every rank has finished its own streams (each enters the barrier only after that). The
  // barrier puts no work on a device (host_barrier): a peer that is already freeing waits in
  // cudaFree for every device of the process to go idle, and a collective kernel here that waited
  // for that peer would never finish.
  if (meets_on_host && comm_.aborted()) comm_.give_up_host_barriers();
  if ((im.plan_touches_peers || meets_on_host) && !comm_.aborted()) {
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
  for (const Impl::Replay& r : im.replays) cudaGraphExecDestroy(r.exec);
  if (im.capture_stream) cudaStreamDestroy(im.capture_stream);
  im.steps.clear();  // lowered steps free their tables and descriptors
  for (auto s : im.streams) cudaStreamDestroy(s);
  for (auto e : im.joins) cudaEventDestroy(e);
  if (im.fork) cudaEventDestroy(im.fork);
  for (cudaEvent_t e : im.call_done) cudaEventDestroy(e);
  if (im.gemm_workspace) cudaFree(im.gemm_workspace);
  if (im.lt) cublasLtDestroy(im.lt);
  // Where peers share the process, nobody leaves before every rank has freed (the buffers and
  // signals impl_ owns included): a rank that went on to its next call would spin in that call's
  // barrier, and a peer still in cudaFree (which waits for every GPU that maps the memory to go
  // idle) would never return.
  impl_.reset();
  if (meets_on_host) comm_.meet_after_freeing("the executor");
}

void* CudaExecutor::buffer(std::string_view name) const {
  // An FP8 buffer's scales ("A_scale"): after its elements (bytes_of), in device_scale_layout.
  for (size_t b = 0; b < rank_plan().buffers.size(); ++b) {
    const BufferDecl& decl = rank_plan().buffers[b];
    if (scale_grid(plan_.problem, decl) && scale_name(decl.name) == name && impl_->base[b])
      return impl_->scale_base[b] ? impl_->scale_base[b] : static_cast<char*>(impl_->base[b]) + aligned(element_bytes_of(decl));
  }
  return impl_->base.at(static_cast<size_t>(find_buffer(rank_plan(), name)));
}

DeviceRegion CudaExecutor::region(const Region& r) const {
  const BufferDecl& decl = plan_.ranks.at(static_cast<size_t>(r.rank)).buffers.at(static_cast<size_t>(r.buffer));
  void* base = nullptr;
  if (r.rank == comm_.rank()) {
    base = impl_->base.at(static_cast<size_t>(r.buffer));
  } else {
    const auto it = impl_->peer_base.find({r.rank, r.buffer});
    if (it == impl_->peer_base.end())
      throw std::invalid_argument("CudaExecutor: region of non-symmetric buffer '" + decl.name + "' on rank " + std::to_string(r.rank));
    base = it->second;
  }
  auto* bytes = static_cast<char*>(base);
  const int64_t element = dtype_bytes(decl.dtype);
  if (decl.order == MemoryOrder::column_major)  // its memory: the box's transpose, row-major
    return DeviceRegion{bytes + (r.box.col * decl.rows + r.box.row) * element, r.box.cols, r.box.rows, decl.rows};
  return DeviceRegion{bytes + (r.box.row * decl.cols + r.box.col) * element, r.box.rows, r.box.cols, decl.cols};
}

DeviceRegion CudaExecutor::output() const {
  const Region& out = rank_plan().output;
  if (options_.caller_output) return DeviceRegion{impl_->output_target, out.box.rows, out.box.cols, out.box.cols};
  return region(out);
}

void CudaExecutor::bind(std::string_view name, const void* data, const void* scales) {
  Impl& im = *impl_;
  if (!named(options_.caller_buffers, std::string(name)))
    throw std::invalid_argument("CudaExecutor::bind: '" + std::string(name) + "' is not one of ExecutorOptions::caller_buffers");
  const auto b = static_cast<size_t>(find_buffer(rank_plan(), name));
  const BufferDecl& decl = rank_plan().buffers[b];
  const bool in_place = decl.symmetric && options_.symmetric_inputs_in_place && data == nullptr;
  if (!in_place && data == nullptr) throw std::invalid_argument("CudaExecutor::bind: '" + decl.name + "' is null");
  require_aligned(data, "CudaExecutor::bind: '" + decl.name + "'", "the GEMMs' loads (TMA, cuBLASLt)");
  const bool fp8 = scale_grid(plan_.problem, decl).has_value();
  if (fp8 != (scales != nullptr))
    throw std::invalid_argument("CudaExecutor::bind: '" + decl.name + "' is " + std::string(to_string(decl.dtype)) +
                                (fp8 ? " and needs its scales (fp32, device_scale_index's layout)" : " and takes no scales"));
  if (fp8) {
    require_aligned(scales, "CudaExecutor::bind: the scales of '" + decl.name + "'", "cuBLASLt's scale vectors");
    if (decl.symmetric) {  // copied in beside the elements, where peers read them (scale_base stays null)
      std::erase_if(im.scales_copied_in, [&](const auto& entry) { return entry.first == static_cast<int>(b); });
      im.scales_copied_in.emplace_back(static_cast<int>(b), scales);
    } else {
      im.scale_base[b] = const_cast<void*>(scales);
    }
  }
  if (decl.symmetric) {
    std::erase_if(im.copied_in, [&](const auto& entry) { return entry.first == static_cast<int>(b); });
    if (!in_place) im.copied_in.emplace_back(static_cast<int>(b), data);
  } else {
    im.base[b] = const_cast<void*>(data);
  }
}

void CudaExecutor::bind_output(void* data) {
  Impl& im = *impl_;
  if (!options_.caller_output) throw std::invalid_argument("CudaExecutor::bind_output: ExecutorOptions::caller_output is off");
  if (!data) throw std::invalid_argument("CudaExecutor::bind_output: the output is null");
  require_aligned(data, "CudaExecutor::bind_output: the output", "the GEMMs' stores");
  im.output_target = data;
  if (im.output_buffer >= 0) im.base[static_cast<size_t>(im.output_buffer)] = data;
}

void CudaExecutor::bind_gathered_a(void* data) {
  Impl& im = *impl_;
  if (!options_.caller_gathered_a) throw std::invalid_argument("CudaExecutor::bind_gathered_a: ExecutorOptions::caller_gathered_a is off");
  if (!data) throw std::invalid_argument("CudaExecutor::bind_gathered_a: the gathered A's memory is null");
  require_aligned(data, "CudaExecutor::bind_gathered_a: the gathered A", "the GEMMs' loads and NCCL's stores");
  im.gathered_a_target = data;
  if (im.gathered_a_buffer >= 0) im.base[static_cast<size_t>(im.gathered_a_buffer)] = data;
}

std::string CudaExecutor::call_context() const { return describe(plan_.problem) + ", strategy " + plan_.strategy; }

void CudaExecutor::check() {
  const OnDevice on(comm_.device());
  const WaitRecord e = impl_->workspace->take_error();
  if (!e.failed) return;
  // Every message names the rank and the op (a process runs many), then the wait and the peer.
  const std::string rank = "rank " + std::to_string(comm_.rank()) + " (" + call_context() + ")";
  const auto& names = rank_plan().signals;
  auto signal_name = [&](int32_t id) { return id >= 0 && static_cast<size_t>(id) < names.size() ? names[static_cast<size_t>(id)] : std::string("?"); };
  // The ranks are out of step (a peer is gone, late, or in another call): this rank's waits are
  // released (the rest of its call would wait for peers' signals that will not come) and the
  // communicator aborted, so that nothing later (the next call, a destructor's barrier) waits on
  // them again.
  if (e.source == tile::kWaitInBarrier || e.source == tile::kOtherCallInBarrier) {
    const std::string why =
        e.source == tile::kWaitInBarrier
            ? rank + ": the call's device barrier gave up waiting for rank " + std::to_string(e.signal) + " (it had arrived " +
                  std::to_string(e.observed) + " times, " + std::to_string(e.expected) +
                  " expected), so the call's result is wrong (the peer is late or gone; WEFT_DEVICE_WAIT_TIMEOUT_MS sets the limit)"
            : rank + ": rank " + std::to_string(e.signal) + " is making another call (its plan's fingerprint " + std::to_string(e.observed) +
                  ", this call's " + std::to_string(e.expected) +
                  "): every rank must call the same op with the same shapes, strategy and options in the same order, so the call's result is wrong";
    impl_->signals->release_every_wait();
    comm_.abort(why + "; the communicator was aborted");
    throw DeviceWaitTimeout(why + "; the communicator was aborted");
  }
  if (e.source == tile::kBadMoeChoice)
    throw std::invalid_argument(rank + ": MoE choice " + std::to_string(e.where) + " (token " + std::to_string(e.where / std::max(plan_.problem.topk, 1)) +
                                " of every rank's, choice " + std::to_string(e.where % std::max(plan_.problem.topk, 1)) + ") names expert " +
                                std::to_string(static_cast<int32_t>(e.observed)) + ", not one of the " + std::to_string(e.expected) +
                                " experts; the route skipped it, so the call's result is wrong");
  if (e.source == tile::kWaitInAttention)
    throw DeviceWaitTimeout(rank + ": entry " + std::to_string(e.where) + " of an attention step's KV table (its plan's adjacent KV tiles with one wait merged) gave up waiting for signal '" +
                            signal_name(e.signal) + "' (#" + std::to_string(e.signal) + ") >= " + std::to_string(e.expected) + "; it was " +
                            std::to_string(e.observed) + ", so the call's result is wrong (WEFT_DEVICE_WAIT_TIMEOUT_MS sets the limit)");
  if (e.source == tile::kWaitInTileProgram) {
    const auto& steps = rank_plan().steps;
    const std::string step = e.where >= 0 && static_cast<size_t>(e.where) < steps.size() ? steps[static_cast<size_t>(e.where)].label : "?";
    if (e.signal == kTileProgramOrderSignal)
      throw DeviceWaitTimeout(rank + ": companion step '" + step + "' gave up waiting for an earlier step of its launch to complete (" +
                              std::to_string(e.observed) + " of " + std::to_string(e.expected) + " pieces); the call's result is wrong");
    throw DeviceWaitTimeout(rank + ": companion step '" + step + "' gave up waiting for signal '" + signal_name(e.signal) + "' (#" +
                            std::to_string(e.signal) + ") >= " + std::to_string(e.expected) + "; it was " + std::to_string(e.observed) +
                            ", so the call's result is wrong (WEFT_DEVICE_WAIT_TIMEOUT_MS sets the limit)");
  }
  if (e.signal == kSplitFixupSignal)
    throw DeviceWaitTimeout(rank + ": an overlap GEMM tile (table entry " + std::to_string(e.where) +
                            ") gave up waiting for the partial sums of K split " + std::to_string(e.expected - 1) +
                            " of its tile; the call's result is wrong");
  if (e.signal == kStoreHandoffSignal)
    throw DeviceWaitTimeout(rank + ": the overlap GEMM's hand-off of staged tiles between its consumers and its storing warps gave up "
                            "at table entry " + std::to_string(e.where) + "; the call's result is wrong");
  if (e.signal == kNotifyHandoffSignal)
    throw DeviceWaitTimeout(rank + ": the overlap GEMM's hand-off of stored tiles to its notifying warp gave up at table entry " +
                            std::to_string(e.where) + "; the call's result is wrong");
  const std::string name = signal_name(e.signal);
  throw DeviceWaitTimeout(rank + ": an overlap GEMM tile (table entry " + std::to_string(e.where) + ") gave up waiting for signal '" +
                          name + "' (#" + std::to_string(e.signal) + ") >= " + std::to_string(e.expected) + "; it was " +
                          std::to_string(e.observed) + ", so the call's result is wrong (the signal's writer is late or gone; " +
                          "WEFT_DEVICE_WAIT_TIMEOUT_MS sets the limit)");
}

void CudaExecutor::fail_stuck_call(const std::string& what) {
  Impl& im = *impl_;
  const std::string diagnosis = diagnose();
  const std::string why = what + " has not finished after " + std::to_string(im.call_timeout_ms / 1000) + " s (" +
                          std::to_string(im.call_timeout_ms) + " ms)";
  // Release this rank's stream and tile waits, then, as NCCL's watchdog does, stop the
  // communicator's kernels (one waiting for a peer that is gone would never return): the device
  // drains and the process can report and go on or exit.
  im.signals->release_every_wait();
  comm_.abort("a call " + why);
  im.stuck = true;
  throw CallTimeout("rank " + std::to_string(comm_.rank()) + " (" + call_context() + "): " + why +
                    "; the communicator was aborted. Unmet waits:\n" + diagnosis);
}

void CudaExecutor::run(cudaStream_t stream) {
  Impl& im = *impl_;
  const OnDevice on(comm_.device());
  comm_.require_usable("CudaExecutor::run");
  check();
  for (size_t b = 0; b < im.base.size(); ++b)
    if (im.caller_owned[b] && !im.base[b])
      throw std::invalid_argument("CudaExecutor::run: caller buffer '" + rank_plan().buffers[b].name + "' is not bound" +
                                  (static_cast<int>(b) == im.gathered_a_buffer ? " (bind_gathered_a)" : ""));
  if (options_.caller_gathered_a && !im.gathered_a_target)
    throw std::invalid_argument("CudaExecutor::run: caller_gathered_a is on but bind_gathered_a has not been called");
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  WEFT_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  const uint64_t in_flight = im.call_done.size();
  const size_t slot = im.calls % in_flight;
  // Bounded like every wait for peers, so that a stuck call ends in this diagnosis. Not while
  // capturing: nothing may wait on the host then, and a replay is timed by its caller.
  const bool bounded = !capturing && !im.cannot_wait;
  if (bounded && im.call_recorded[slot] && !wait_for_event_with_timeout(im.call_done[slot], im.call_timeout_ms))
    fail_stuck_call("call " + std::to_string(im.calls - in_flight));
  if (capturing || !im.replay || !replay_call(stream)) enqueue_call(stream);
  if (bounded) {
    WEFT_CUDA_CHECK(cudaEventRecord(im.call_done[slot], stream));
    im.call_recorded[slot] = true;
  }
  ++im.calls;
}

std::vector<const void*> CudaExecutor::bindings() const {
  const Impl& im = *impl_;
  std::vector<const void*> key;
  for (size_t b = 0; b < im.base.size(); ++b)
    if (im.caller_owned[b]) {
      key.push_back(im.base[b]);
      key.push_back(im.scale_base[b]);
    }
  for (const auto* list : {&im.copied_in, &im.scales_copied_in})
    for (const auto& [buffer, source] : *list) {
      key.push_back(reinterpret_cast<const void*>(static_cast<uintptr_t>(buffer)));
      key.push_back(source);
    }
  key.push_back(im.output_target);
  key.push_back(im.gathered_a_target);
  return key;
}

bool CudaExecutor::replay_call(cudaStream_t stream) {
  Impl& im = *impl_;
  const std::vector<const void*> key = bindings();
  for (const Impl::Replay& r : im.replays)
    if (r.bindings == key) {
      WEFT_CUDA_CHECK(cudaGraphLaunch(r.exec, stream));
      ++im.replayed;
      return true;
    }
  // Captured the second time a set of bindings comes (the first call of an executor allocates and
  // loads kernels, which a capture may not), so that a caller whose buffers move every call pays
  // no capture.
  const bool again = im.enqueued_once && key == im.last_bindings;
  im.last_bindings = key;
  im.enqueued_once = true;
  if (!again) return false;
  if (!im.capture_stream) WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&im.capture_stream, cudaStreamNonBlocking));
  WEFT_CUDA_CHECK(cudaStreamBeginCapture(im.capture_stream, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    enqueue_call(im.capture_stream);
  } catch (...) {
    (void)cudaStreamEndCapture(im.capture_stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  const cudaError_t ended = cudaStreamEndCapture(im.capture_stream, &graph);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = ended == cudaSuccess ? cudaGraphInstantiate(&exec, graph, 0) : ended;
  if (graph) cudaGraphDestroy(graph);
  if (instantiated != cudaSuccess) {
    // Something in the call cannot be captured here: every later call is enqueued op by op.
    (void)cudaGetLastError();
    std::fprintf(stderr, "weft: rank %d: a call of strategy '%s' could not be captured (%s); calls are enqueued op by op\n", comm_.rank(),
                 plan_.strategy.c_str(), cudaGetErrorString(instantiated));
    im.replay = false;
    return false;
  }
  if (im.replays.size() == kMaxReplays) {
    WEFT_CUDA_CHECK(cudaGraphExecDestroy(im.replays.front().exec));
    im.replays.erase(im.replays.begin());
  }
  im.replays.push_back({key, exec});
  WEFT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  ++im.replayed;
  return true;
}

uint64_t CudaExecutor::replayed_calls() const { return impl_->replayed; }

size_t CudaExecutor::copies_in_per_call() const { return impl_->copied_in.size(); }

void CudaExecutor::enqueue_call(cudaStream_t stream) {
  Impl& im = *impl_;
  // Counters this plan waits on start at zero (a plan without signals has none to reset).
  if (!rank_plan().signals.empty()) im.signals->reset(stream);
  // A peer may still be reading buffers we are about to overwrite in its previous call, and no peer
  // may raise our counters before they are reset.
  if (im.plan_touches_peers) im.signals->barrier(stream, im.workspace->device_error(), im.device_wait_timeout_ns, im.call_signature);
  for (const auto& [buffer, source] : im.copied_in) {
    const BufferDecl& decl = rank_plan().buffers[static_cast<size_t>(buffer)];
    WEFT_CUDA_CHECK(cudaMemcpyAsync(im.base[static_cast<size_t>(buffer)], source, element_bytes_of(decl), cudaMemcpyDeviceToDevice, stream));
  }
  for (const auto& [buffer, source] : im.scales_copied_in) {
    const BufferDecl& decl = rank_plan().buffers[static_cast<size_t>(buffer)];
    const size_t bytes = static_cast<size_t>(device_scale_count(*scale_grid(plan_.problem, decl), decl.rows, decl.cols)) * sizeof(float);
    void* target = static_cast<char*>(im.base[static_cast<size_t>(buffer)]) + aligned(element_bytes_of(decl));
    if (target != source) WEFT_CUDA_CHECK(cudaMemcpyAsync(target, source, bytes, cudaMemcpyDeviceToDevice, stream));  // the producer's own scales: in place
  }
  // A symmetric input copied in is read by peers as soon as they start: no rank starts before every
  // rank's copy has landed.
  if ((!im.copied_in.empty() || !im.scales_copied_in.empty()) && im.plan_touches_peers)
    im.signals->barrier(stream, im.workspace->device_error(), im.device_wait_timeout_ns, im.call_signature);
  if (!im.on_caller_stream) {
    WEFT_CUDA_CHECK(cudaEventRecord(im.fork, stream));
    for (cudaStream_t s : im.streams) WEFT_CUDA_CHECK(cudaStreamWaitEvent(s, im.fork, 0));
  }
  for (const Impl::Step& low : im.steps) {
    cudaStream_t s = im.on_caller_stream ? stream : im.streams[static_cast<size_t>(low.step->stream)];
    if (low.synced_in_kernel) {
      if (low.lowered.enqueue) low.lowered.enqueue(s);
      continue;
    }
    for (auto [signal, value] : low.waits) im.signals->wait(s, signal, value);
    if (low.lowered.enqueue) low.lowered.enqueue(s);
    for (size_t n = 0; n < low.step->notifies.size(); ++n) {
      const Notify& notify = low.step->notifies[n];
      if (low.written[n]) im.signals->set(s, notify.signal.rank, notify.signal.id, low.written[n]);
      else im.signals->notify(s, notify.signal.rank, notify.signal.id, notify.increment);
    }
  }
  for (size_t i = 0; i < im.streams.size() && !im.on_caller_stream; ++i) {
    WEFT_CUDA_CHECK(cudaEventRecord(im.joins[i], im.streams[i]));
    WEFT_CUDA_CHECK(cudaStreamWaitEvent(stream, im.joins[i], 0));
  }
  if (options_.caller_output && im.output_buffer < 0) {
    const DeviceRegion from = region(rank_plan().output);
    const auto bytes = static_cast<size_t>(dtype_bytes(rank_plan().buffers.at(static_cast<size_t>(rank_plan().output.buffer)).dtype));
    WEFT_CUDA_CHECK(cudaMemcpy2DAsync(im.output_target, static_cast<size_t>(from.cols) * bytes, from.data, static_cast<size_t>(from.stride) * bytes,
                                      static_cast<size_t>(from.cols) * bytes, static_cast<size_t>(from.rows), cudaMemcpyDeviceToDevice, stream));
  }
  if (options_.caller_gathered_a && im.gathered_a_buffer < 0) {
    // The pieces where the shards lie, stacked into the caller's [W * M, K]; every step that wrote
    // them has joined the caller's stream above.
    int64_t row = 0;
    for (const Region& piece : rank_plan().gathered_a) {
      const DeviceRegion from = region(piece);
      const size_t row_bytes = static_cast<size_t>(from.cols) * 2;
      if (from.rows > 0)
        WEFT_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(im.gathered_a_target) + static_cast<size_t>(row) * row_bytes, row_bytes, from.data,
                                          static_cast<size_t>(from.stride) * 2, row_bytes, static_cast<size_t>(from.rows),
                                          cudaMemcpyDeviceToDevice, stream));
      row += from.rows;
    }
  }
  // A symmetric input written in place by the caller's producer: no rank may overwrite it for the
  // next call while a peer still reads it in this one.
  if (options_.symmetric_inputs_in_place && im.plan_touches_peers)
    im.signals->barrier(stream, im.workspace->device_error(), im.device_wait_timeout_ns, im.call_signature);
}

void CudaExecutor::finish(cudaStream_t stream) {
  const OnDevice on(comm_.device());
  Impl& im = *impl_;
  // Once a barrier of the call found the ranks out of step, the rest of the call waits for peers'
  // signals that will not come: check() says so (and releases those waits) without waiting out
  // the call timeout.
  auto out_of_step = [&] {
    const WaitRecord e = im.workspace->peek_error();
    return e.failed && (e.source == tile::kWaitInBarrier || e.source == tile::kOtherCallInBarrier);
  };
  if (!synchronize_with_timeout(stream, im.call_timeout_ms, out_of_step) && !out_of_step()) fail_stuck_call("the last call");
  check();
}

std::string CudaExecutor::diagnose() const {
  const OnDevice on(comm_.device(), OnDevice::NoThrow{});
  const Impl& im = *impl_;
  // A diagnosis never throws: it is asked for where a call is stuck, in destructors among others.
  std::vector<uint64_t> values;
  try {
    values = im.signals->read_values();
  } catch (const std::exception& e) {
    return "rank " + std::to_string(comm_.rank()) + ": the signals could not be read (" + e.what() + ")\n";
  }
  std::ostringstream out;
  int unmet = 0;
  for (const Impl::Step& low : im.steps)
    for (auto [signal, value] : low.waits) {
      if (values[static_cast<size_t>(signal)] >= value) continue;
      ++unmet;
      out << "rank " << comm_.rank() << " stream " << low.step->stream << " step '" << low.step->label << "' waits for signal '"
          << rank_plan().signals[static_cast<size_t>(signal)] << "' (#" << signal << ") >= " << value << "; value is "
          << values[static_cast<size_t>(signal)] << ", " << describe_raisers(plan_, comm_.rank(), signal) << "\n";
    }
  if (unmet == 0) out << "rank " << comm_.rank() << ": every signal wait is met\n";
  // NCCL's waits are inside its kernels: it cannot say which peer it waits for, only that one of the
  // communicator's ranks has not joined the collective.
  for (const Step& step : rank_plan().steps)
    if (const auto* c = std::get_if<CollectiveStep>(&step.body))
      out << "rank " << comm_.rank() << " stream " << step.stream << " step '" << step.label << "' is an NCCL " << to_string(c->kind)
          << " over all " << comm_.world_size() << " ranks: if it has not completed, a rank has not joined it (late, gone, or in another call)\n";
  return out.str();
}

}  // namespace weft
