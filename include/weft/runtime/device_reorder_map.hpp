// A ReorderMap (ir/reorder_map.hpp) on the device, for rmsnorm_reordered_bf16 and any other
// kernel that reads a `signal` plan's result where the plan left it.
//
//   CudaExecutor exec(comm, plan_signal(problem, options));
//   DeviceReorderMapTable table(reorder_map(exec.plan(), comm.rank()));
//   rmsnorm_reordered_bf16(table.view(exec), weight, y, 1e-6f, stream);
#pragma once

#include <cstdint>

#include "weft/ir/reorder_map.hpp"
#include "weft/kernels/rmsnorm.hpp"

namespace weft {

class CudaExecutor;

class DeviceReorderMapTable {
 public:
  explicit DeviceReorderMapTable(ReorderMap map);  // copies the entries to the current device
  ~DeviceReorderMapTable();
  DeviceReorderMapTable(const DeviceReorderMapTable&) = delete;
  DeviceReorderMapTable& operator=(const DeviceReorderMapTable&) = delete;

  const ReorderMap& map() const { return map_; }
  // The map over explicit buffers: source [*, segment_cols], edge [rows, edge_cols] (or null).
  DeviceReorderMap view(const void* source, const void* edge_source) const;
  // The map over the executor's buffers of the names the map gives.
  DeviceReorderMap view(const CudaExecutor& executor) const;

 private:
  ReorderMap map_;
  int64_t* first_row_ = nullptr;
};

}  // namespace weft
