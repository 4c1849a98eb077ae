// The device memory a plan runs in besides its caller's buffers: symmetric bytes (the same size on
// every rank, each peer's address known), local scratch bytes, the signal counters, and a record of
// the first device-side wait that gave up. An op's executors (one per row count) share one
// workspace, so symmetric memory is allocated and exchanged once, not per plan or per call; calls of
// those executors run one at a time (on one stream, or ordered by the caller).
//
//   Workspace ws(comm);
//   ws.reserve({symmetric_bytes, local_bytes, signal_count});   // collective; grows, never shrinks
//   CudaExecutor exec(comm, plan, {.workspace = &ws});
//
// Growing adds a larger arena and keeps the older ones until the workspace dies: executors lowered
// earlier, and CUDA graphs captured from them, keep pointing into memory that stays valid.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/kernels/overlap_gemm.hpp"
#include "weft/runtime/communicator.hpp"
#include "weft/runtime/signal_set.hpp"
#include "weft/runtime/symmetric_memory.hpp"

namespace weft {

struct WorkspaceSize {
  size_t symmetric_bytes = 0;
  size_t local_bytes = 0;
  int signals = 0;
  // Whether the plans reach peers' memory or signals (reaches_across_ranks): then symmetric bytes
  // and signals are shared with every peer (collective, load/store access needed); else they are
  // this rank's alone, and the plans run between any ranks NCCL connects.
  bool peers = false;
};

class Workspace {
 public:
  explicit Workspace(Communicator& comm);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  Communicator& communicator() const { return comm_; }
  // Collective where size.peers (every rank passes the same size). No-op where the current arenas
  // are large enough (and shared with the peers, where size.peers).
  void reserve(const WorkspaceSize& size);
  WorkspaceSize size() const;

  // The current arenas (valid until the workspace dies, whatever reserve does later).
  void* symmetric_on(int rank) const;  // rank's symmetric arena as this GPU sees it
  void* local() const { return local_ ? local_->data : nullptr; }
  SignalSet& signals() const { return *signals_.back(); }

  // The first device-side wait that gave up since the last take_error (pinned, mapped host memory:
  // the device writes it, the host reads it without a CUDA call, so reading works while streams
  // are stuck and inside graph replays).
  WaitRecord* device_error() const { return device_error_device_; }
  // The record so far, cleared for the next call; failed == 0 when nothing gave up.
  WaitRecord take_error();
  // The record so far, left in place.
  WaitRecord peek_error() const;

 private:
  struct LocalArena {
    void* data = nullptr;
    size_t bytes = 0;
  };
  Communicator& comm_;
  std::vector<std::unique_ptr<SymmetricMemory>> symmetric_;  // the last is current
  std::vector<std::unique_ptr<SignalSet>> signals_;          // the last is current
  std::vector<LocalArena> retired_local_;
  std::unique_ptr<LocalArena> local_;
  WaitRecord* device_error_host_ = nullptr;
  WaitRecord* device_error_device_ = nullptr;
};

}  // namespace weft
