// A collective step is one NCCL call (all-to-all: a group of sends and receives) on the step's stream.
// An all-gather of FP8 rows moves their bytes and, with them, their scales (plan/gpu_lowering.hpp
// says which: tensor scales, the same on every rank, copied into the gathered buffer's; row scales
// gathered as the rows are, one float each).
#include <optional>

#include "lowering.hpp"
#include "weft/cuda/check.hpp"

namespace weft::lowering {

namespace {

// The first row of a row-major region (its offset in whole rows).
int64_t first_row(const BoundRegion& r) { return r.stride > 0 ? r.offset / r.stride : 0; }

}  // namespace

Lowered lower_collective(const CollectiveStep& step, const std::string& label, const Context& context) {
  const BoundRegion src = context.region(step.src), dst = context.region(step.dst);
  for (const BoundRegion* r : {&src, &dst})
    if (r->rows > 1 && r->stride != r->cols)
      throw std::invalid_argument("CudaExecutor: collective '" + label + "' needs contiguous regions (whole rows); NCCL takes flat buffers");
  ncclComm_t nccl = context.nccl;
  const CollectiveKind kind = step.kind;
  const std::vector<int64_t> send_rows = step.send_rows, recv_rows = step.recv_rows;
  const int world = context.world_size;
  const bool fp8 = is_fp8(src.dtype);
  std::optional<BoundScales> src_scales, dst_scales;
  bool row_scales = false;
  if (fp8) {
    src_scales = context.scales(step.src);
    dst_scales = context.scales(step.dst);
    if (kind != CollectiveKind::all_gather || dst.dtype != src.dtype || !src_scales || !dst_scales || src_scales->grid.block_cols != 0)
      throw std::invalid_argument("CudaExecutor: collective '" + label + "' moves " + std::string(to_string(src.dtype)) +
                                  " data other than by an all-gather of rows with tensor or row scales, which has no lowering");
    row_scales = src_scales->grid.block_rows == 1;
  }
  // i32: the MoE choices given on the device, all-gathered (the structure check allows nothing else).
  const bool indices = src.dtype == DType::i32;
  if (indices && (kind != CollectiveKind::all_gather || dst.dtype != DType::i32))
    throw std::invalid_argument("CudaExecutor: collective '" + label + "' moves i32 indices other than by an all-gather into i32");
  const ncclDataType_t elements = fp8 ? ncclUint8 : indices ? ncclInt32 : ncclBfloat16;
  return {[=](cudaStream_t stream) {
            const DeviceRegion s = src.resolve(), d = dst.resolve();
            const size_t cols = static_cast<size_t>(s.cols);
            switch (kind) {
              case CollectiveKind::all_gather:
                WEFT_NCCL_CHECK(ncclAllGather(s.data, d.data, static_cast<size_t>(s.rows) * cols, elements, nccl, stream));
                if (row_scales) {
                  WEFT_NCCL_CHECK(ncclAllGather(src_scales->resolve() + first_row(src), const_cast<float*>(dst_scales->resolve()) + first_row(dst),
                                                static_cast<size_t>(s.rows), ncclFloat32, nccl, stream));
                } else if (fp8) {  // tensor scaling: one scale, the same on every rank
                  WEFT_CUDA_CHECK(cudaMemcpyAsync(const_cast<float*>(dst_scales->resolve()), src_scales->resolve(), sizeof(float),
                                                  cudaMemcpyDeviceToDevice, stream));
                }
                break;
              case CollectiveKind::reduce_scatter:
                WEFT_NCCL_CHECK(ncclReduceScatter(s.data, d.data, static_cast<size_t>(d.rows) * cols, ncclBfloat16, ncclSum, nccl, stream));
                break;
              case CollectiveKind::all_reduce:
                WEFT_NCCL_CHECK(ncclAllReduce(s.data, d.data, static_cast<size_t>(d.rows) * cols, ncclBfloat16, ncclSum, nccl, stream));
                break;
              case CollectiveKind::all_to_all: {
                WEFT_NCCL_CHECK(ncclGroupStart());
                size_t sent = 0, received = 0;
                for (int p = 0; p < world; ++p) {
                  const size_t out = static_cast<size_t>(send_rows[static_cast<size_t>(p)]) * cols;
                  const size_t in = static_cast<size_t>(recv_rows[static_cast<size_t>(p)]) * cols;
                  if (out) WEFT_NCCL_CHECK(ncclSend(static_cast<const uint16_t*>(s.data) + sent, out, ncclBfloat16, p, nccl, stream));
                  if (in) WEFT_NCCL_CHECK(ncclRecv(static_cast<uint16_t*>(d.data) + received, in, ncclBfloat16, p, nccl, stream));
                  sent += out;
                  received += in;
                }
                WEFT_NCCL_CHECK(ncclGroupEnd());
                break;
              }
            }
          },
          {}};
}

}  // namespace weft::lowering
