// A collective step is one NCCL call (all-to-all: a group of sends and receives) on the step's stream.
#include "lowering.hpp"
#include "weft/runtime/cuda_check.hpp"

namespace weft::lowering {

Lowered lower_collective(const CollectiveStep& step, const std::string& label, const Context& context) {
  const BoundRegion src = context.region(step.src), dst = context.region(step.dst);
  for (const BoundRegion* r : {&src, &dst})
    if (r->rows > 1 && r->stride != r->cols)
      throw std::invalid_argument("CudaExecutor: collective '" + label + "' needs contiguous regions (whole rows); NCCL takes flat buffers");
  ncclComm_t nccl = context.nccl;
  const CollectiveKind kind = step.kind;
  const std::vector<int64_t> send_rows = step.send_rows, recv_rows = step.recv_rows;
  const int world = context.world_size;
  return {[=](cudaStream_t stream) {
            const DeviceRegion s = src.resolve(), d = dst.resolve();
            const size_t cols = static_cast<size_t>(s.cols);
            switch (kind) {
              case CollectiveKind::all_gather:
                WEFT_NCCL_CHECK(ncclAllGather(s.data, d.data, static_cast<size_t>(s.rows) * cols, ncclBfloat16, nccl, stream));
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
