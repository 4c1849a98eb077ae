// Copies, reductions, row permutations and box moves: the data movement around the GEMM.
#include <algorithm>
#include <cstdint>
#include <optional>

#include "lowering.hpp"
#include "weft/cuda/check.hpp"

namespace weft::lowering {

std::shared_ptr<void> upload(const void* data, size_t bytes) {
  void* device = nullptr;
  WEFT_CUDA_CHECK(cudaMalloc(&device, std::max<size_t>(bytes, 1)));
  if (bytes) WEFT_CUDA_CHECK(cudaMemcpy(device, data, bytes, cudaMemcpyHostToDevice));
  return std::shared_ptr<void>(device, [](void* p) { cudaFree(p); });
}

// Through the copy engine; a peer's memory through symmetric memory (a pull or a push). A transfer
// to or from a peer whose step runs on SMs is a copy kernel on the CTAs the step allows; a local copy
// stays a cudaMemcpy, which the runtime runs as it sees fit.
namespace {

// `bytes` bytes per row as bf16 pairs for the SM copy kernel; false where a row, the stride or an
// address is odd.
bool as_pairs(const DeviceRegion& bytes, DeviceRegion& pairs) {
  if (bytes.cols % 2 || bytes.stride % 2 || reinterpret_cast<uintptr_t>(bytes.data) % 2) return false;
  pairs = {bytes.data, bytes.rows, bytes.cols / 2, bytes.stride / 2};
  return true;
}

// FP8 rows (tensor or row scales; plan/gpu_lowering.hpp) move with their scales: the bytes by the
// copy engine whatever the step's engine (the SM copy kernel moves bf16 pairs), then the rows' scales
// (one float per row) or the tensor's one scale, from the source's scale array (a peer's through
// symmetric memory) into the destination's. Between GPUs of one process (Context::peer_copies_on_sms)
// both go as bf16 pairs through the SM copy kernel instead, where the rows' bytes pair up.
Lowered lower_fp8_copy(const CopyStep& copy, const std::string& label, const Context& context) {
  const BoundRegion src = context.region(copy.src), dst = context.region(copy.dst);
  const std::optional<BoundScales> from = context.scales(copy.src), to = context.scales(copy.dst);
  if (!from || !to || from->grid.block_cols != 0 || dst.dtype != src.dtype)
    throw std::invalid_argument("CudaExecutor: copy '" + label + "' moves " + std::string(to_string(src.dtype)) +
                                " rows other than with tensor or row scales into a buffer of the same dtype, which has no lowering");
  const bool row_scales = from->grid.block_rows == 1;
  const int64_t src_row = src.stride > 0 ? src.offset / src.stride : 0, dst_row = dst.stride > 0 ? dst.offset / dst.stride : 0;
  const bool on_sms = context.peer_copies_on_sms && (copy.src.rank != context.rank || copy.dst.rank != context.rank);
  return {[src, dst, from, to, row_scales, src_row, dst_row, on_sms](cudaStream_t stream) {
            const DeviceRegion s = src.resolve(), d = dst.resolve();
            const size_t scales = row_scales ? static_cast<size_t>(s.rows) : 1;
            float* scales_to = const_cast<float*>(to->resolve()) + (row_scales ? dst_row : 0);
            const float* scales_from = from->resolve() + (row_scales ? src_row : 0);
            DeviceRegion s_pairs, d_pairs;
            if (on_sms && as_pairs(s, s_pairs) && as_pairs(d, d_pairs)) {
              copy_bf16(d_pairs, s_pairs, kPeerCopySms, stream);
              const auto n = static_cast<int64_t>(scales * 2);  // a float is two bf16 slots
              copy_bf16({scales_to, 1, n, n}, {const_cast<float*>(scales_from), 1, n, n}, kPeerCopySms, stream);
              return;
            }
            WEFT_CUDA_CHECK(cudaMemcpy2DAsync(d.data, static_cast<size_t>(d.stride), s.data, static_cast<size_t>(s.stride),
                                              static_cast<size_t>(s.cols), static_cast<size_t>(s.rows), cudaMemcpyDefault, stream));
            WEFT_CUDA_CHECK(cudaMemcpyAsync(scales_to, scales_from, scales * sizeof(float), cudaMemcpyDefault, stream));
          },
          {}};
}

}  // namespace

Lowered lower_copy(const CopyStep& copy, Engine engine, const std::string& label, const Context& context) {
  const BoundRegion src = context.region(copy.src), dst = context.region(copy.dst);
  if (src.rows * src.cols == 0) return {};
  if (is_fp8(src.dtype)) return lower_fp8_copy(copy, label, context);
  const bool crosses_ranks = copy.src.rank != context.rank || copy.dst.rank != context.rank;
  if (crosses_ranks && (engine == Engine::sm || context.peer_copies_on_sms)) {
    const int ctas = engine == Engine::sm ? copy.sms : kPeerCopySms;
    return {[src, dst, ctas](cudaStream_t stream) { copy_bf16(dst.resolve(), src.resolve(), ctas, stream); }, {}};
  }
  return {[src, dst](cudaStream_t stream) {
            const DeviceRegion s = src.resolve(), d = dst.resolve();
            WEFT_CUDA_CHECK(cudaMemcpy2DAsync(d.data, static_cast<size_t>(d.stride) * 2, s.data, static_cast<size_t>(s.stride) * 2,
                                              static_cast<size_t>(s.cols) * 2, static_cast<size_t>(s.rows), cudaMemcpyDefault,
                                              stream));
          },
          {}};
}

int leave_sms_for_peer_copies(int max_ctas) {
  int device = 0, sms = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int room = std::max(1, sms - kPeerCopySms);
  return max_ctas > 0 ? std::min(max_ctas, room) : room;
}

Lowered lower_reduce(const ReduceStep& reduce, const std::string& label, const Context& context) {
  if (reduce.srcs.size() > static_cast<size_t>(kMaxReduceSources))
    throw std::invalid_argument("CudaExecutor: reduce step '" + label + "' has " + std::to_string(reduce.srcs.size()) +
                                " sources; the kernel takes at most " + std::to_string(kMaxReduceSources));
  std::vector<BoundRegion> srcs;
  for (const Region& r : reduce.srcs) srcs.push_back(context.region(r));
  const BoundRegion dst = context.region(reduce.dst);
  const bool accumulate = reduce.accumulate;
  return {[srcs, dst, accumulate](cudaStream_t stream) {
            DeviceRegion resolved[kMaxReduceSources];
            for (size_t i = 0; i < srcs.size(); ++i) resolved[i] = srcs[i].resolve();
            reduce_bf16(dst.resolve(), resolved, static_cast<int>(srcs.size()), accumulate, stream);
          },
          {}};
}

Lowered lower_permute_rows(const PermuteRowsStep& permute, const std::string&, const Context& context) {
  const BoundRegion src = context.region(permute.src), dst = context.region(permute.dst);
  if (permute.index) {  // rows a route wrote this call (i32, on the device)
    const BoundRegion index = context.region(*permute.index);
    return {[src, dst, index](cudaStream_t stream) {
              permute_rows_bf16(dst.resolve(), src.resolve(), static_cast<const int32_t*>(index.resolve().data), stream);
            },
            {}};
  }
  std::shared_ptr<void> rows = upload(permute.source_rows.data(), permute.source_rows.size() * sizeof(int64_t));
  return {[src, dst, rows](cudaStream_t stream) {
            permute_rows_bf16(dst.resolve(), src.resolve(), static_cast<const int64_t*>(rows.get()), stream);
          },
          {}};
}

Lowered lower_combine_rows(const CombineRowsStep& combine, const std::string&, const Context& context) {
  const BoundRegion src = context.region(combine.src), weights = context.region(combine.weights), dst = context.region(combine.dst);
  const int topk = combine.topk;
  if (combine.index) {  // rows a route wrote this call (i32, on the device)
    const BoundRegion index = context.region(*combine.index);
    return {[src, weights, dst, index, topk](cudaStream_t stream) {
              combine_rows_bf16(dst.resolve(), src.resolve(), weights.resolve(), static_cast<const int32_t*>(index.resolve().data), topk, stream);
            },
            {}};
  }
  std::shared_ptr<void> rows = upload(combine.source_rows.data(), combine.source_rows.size() * sizeof(int64_t));
  return {[src, weights, dst, rows, topk](cudaStream_t stream) {
            combine_rows_bf16(dst.resolve(), src.resolve(), weights.resolve(), static_cast<const int64_t*>(rows.get()), topk, stream);
          },
          {}};
}

Lowered lower_move_boxes(const MoveBoxesStep& step, const std::string&, const Context& context) {
  const BoundRegion src = context.region(step.src), dst = context.region(step.dst);
  std::vector<DeviceBoxMove> moves;
  moves.reserve(step.moves.size());
  for (const BoxMove& m : step.moves) moves.push_back({m.from.row, m.from.col, m.to.row, m.to.col, m.from.rows, m.from.cols});
  std::shared_ptr<void> table = upload(moves.data(), moves.size() * sizeof(DeviceBoxMove));
  const auto count = static_cast<int64_t>(moves.size());
  return {[src, dst, table, count](cudaStream_t stream) {
            move_boxes_bf16(dst.resolve(), src.resolve(), static_cast<const DeviceBoxMove*>(table.get()), count, stream);
          },
          {}};
}

}  // namespace weft::lowering
