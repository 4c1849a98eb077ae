#include "weft/runtime/device_reorder_map.hpp"

#include <cuda_runtime_api.h>

#include "weft/cuda/check.hpp"
#include "weft/runtime/cuda_executor.hpp"

namespace weft {

DeviceReorderMapTable::DeviceReorderMapTable(ReorderMap map) : map_(std::move(map)) {
  const size_t bytes = map_.first_row.size() * sizeof(int64_t);
  if (bytes == 0) return;
  WEFT_CUDA_CHECK(cudaMalloc(&first_row_, bytes));
  WEFT_CUDA_CHECK(cudaMemcpy(first_row_, map_.first_row.data(), bytes, cudaMemcpyHostToDevice));
}

DeviceReorderMapTable::~DeviceReorderMapTable() { cudaFree(first_row_); }

DeviceReorderMap DeviceReorderMapTable::view(const void* source, const void* edge_source) const {
  DeviceReorderMap v;
  v.source = source;
  v.edge_source = edge_source;
  v.first_row = first_row_;
  v.segment_cols = map_.segment_cols;
  v.segments_per_row = map_.segments_per_row;
  v.rows_per_entry = map_.rows_per_entry;
  v.edge_cols = map_.edge_cols();
  return v;
}

DeviceReorderMap DeviceReorderMapTable::view(const CudaExecutor& executor) const {
  return view(executor.buffer(map_.source), map_.edge_source.empty() ? nullptr : executor.buffer(map_.edge_source));
}

}  // namespace weft
