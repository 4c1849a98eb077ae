#include "weft/runtime/workspace.hpp"

#include <algorithm>
#include <cstring>

#include "current_device.hpp"
#include "weft/cuda/check.hpp"

namespace weft {

Workspace::Workspace(Communicator& comm) : comm_(comm) {
  const OnDevice on(comm_.device());
  WEFT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&device_error_host_), sizeof(WaitRecord), cudaHostAllocMapped));
  std::memset(static_cast<void*>(device_error_host_), 0, sizeof(WaitRecord));
  WEFT_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_error_device_), device_error_host_, 0));
  // Nothing shared yet: a workspace whose plans never reach a peer never needs peer access.
  signals_.push_back(std::make_unique<SignalSet>(comm_, 0, /*shared=*/false));
  symmetric_.push_back(std::make_unique<SymmetricMemory>(comm_, 0, /*shared=*/false));
}

Workspace::~Workspace() {
  const OnDevice on(comm_.device(), OnDevice::NoThrow{});
  for (const LocalArena& a : retired_local_) cudaFree(a.data);
  if (local_) cudaFree(local_->data);
  cudaFreeHost(device_error_host_);
}

WorkspaceSize Workspace::size() const {
  return {symmetric_.back()->bytes(), local_ ? local_->bytes : 0, signals_.back()->count(),
          symmetric_.back()->shared() && signals_.back()->shared()};
}

void Workspace::reserve(const WorkspaceSize& wanted) {
  const OnDevice on(comm_.device());
  const WorkspaceSize now = size();
  // Shared symmetric memory and signals are collective: every rank takes the same branch because
  // every rank passes the same sizes (SymmetricMemory checks that they agree).
  const bool symmetric_fits = wanted.symmetric_bytes <= now.symmetric_bytes && (!wanted.peers || symmetric_.back()->shared());
  if (!symmetric_fits)
    symmetric_.push_back(std::make_unique<SymmetricMemory>(comm_, std::max(wanted.symmetric_bytes, now.symmetric_bytes), wanted.peers));
  const bool signals_fit = wanted.signals <= now.signals && (!wanted.peers || signals_.back()->shared());
  if (!signals_fit) signals_.push_back(std::make_unique<SignalSet>(comm_, std::max(wanted.signals, now.signals), wanted.peers));
  if (wanted.local_bytes > now.local_bytes) {
    if (local_) retired_local_.push_back(*local_);
    local_ = std::make_unique<LocalArena>();
    local_->bytes = wanted.local_bytes;
    WEFT_CUDA_CHECK(cudaMalloc(&local_->data, wanted.local_bytes));
  }
}

void* Workspace::symmetric_on(int rank) const { return symmetric_.back()->on(rank); }

WaitRecord Workspace::peek_error() const {
  WaitRecord seen;
  std::memcpy(static_cast<void*>(&seen), static_cast<const void*>(device_error_host_), sizeof seen);
  return seen;
}

WaitRecord Workspace::take_error() {
  WaitRecord seen;
  std::memcpy(static_cast<void*>(&seen), static_cast<const void*>(device_error_host_), sizeof seen);
  if (seen.failed) std::memset(static_cast<void*>(device_error_host_), 0, sizeof(WaitRecord));
  return seen;
}

}  // namespace weft
