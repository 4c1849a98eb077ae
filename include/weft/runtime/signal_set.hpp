// Signals: 64-bit counters in symmetric memory, one array per rank.
//
// notify() adds to a counter (on this rank or a peer) from a stream, after the stream's earlier work
// is visible (release); wait() makes a stream wait until a local counter reaches a value (acquire)
// without occupying an SM (cuStreamWaitValue64). Counters only grow: the executor offsets every
// expected value by (calls so far) x (increments per call), so repeated calls and graph replays
// need no reset.
//
// A stream blocked in a wait also blocks whatever the GPU queues behind it on the same hardware
// queue; call prefer_many_hardware_queues() before the first CUDA call so that weft's few streams
// get queues of their own.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "weft/runtime/symmetric_memory.hpp"

namespace weft {

class SignalSet {
 public:
  SignalSet(Communicator& comm, int count);
  ~SignalSet();
  SignalSet(const SignalSet&) = delete;
  SignalSet& operator=(const SignalSet&) = delete;

  int count() const { return count_; }
  uint64_t* local() const { return static_cast<uint64_t*>(memory_.local()); }
  uint64_t* on(int rank) const { return static_cast<uint64_t*>(memory_.on(rank)); }

  void notify(cudaStream_t stream, int rank, int signal, uint64_t increment) const;
  void wait(cudaStream_t stream, int signal, uint64_t at_least) const;
  // Current values, read on a private stream so that it works while other streams are blocked.
  std::vector<uint64_t> read_values() const;

 private:
  Communicator& comm_;
  int count_;
  SymmetricMemory memory_;
  uint64_t* host_copy_ = nullptr;  // pinned, so reading values never blocks the host on a stuck device
};

// Sets CUDA_DEVICE_MAX_CONNECTIONS to 32 unless the user chose a value; effective only before the
// process's first CUDA call.
void prefer_many_hardware_queues();

// Waits for `stream` to finish for at most `timeout_ms`; returns false on timeout (the work stays queued).
bool synchronize_with_timeout(cudaStream_t stream, int64_t timeout_ms);

}  // namespace weft
