// Signals: 64-bit counters in symmetric memory, one array per rank.
//
// notify() adds to a counter (on this rank or a peer) from a stream, after the stream's earlier work
// is visible (release), with a one-thread kernel; set() writes a counter the same way without a
// kernel (cuStreamWriteValue64), for counters that only one stream raises, so that raising them
// needs no free SM (a persistent GEMM may hold every SM while it waits for that counter); wait()
// makes a stream wait until a local counter reaches a value (acquire) without occupying an SM
// (cuStreamWaitValue64). reset() zeroes this rank's counters from a stream: the executor does so at
// the start of every call, before the call's barrier, so every wait and write is a value within
// one call, fixed when the call is enqueued, and a captured call replays unchanged. barrier() is a
// device-side barrier of every rank's stream (shared sets only) on words of its own, after the
// counters, that reset() leaves alone.
//
// Two CUDA defaults can turn a stream wait into a deadlock, so call configure_cuda_for_waits()
// before the process's first CUDA call: a stream blocked in a wait also blocks work queued behind it
// on the same hardware queue (so ask for 32 queues), and lazy module loading makes the first launch
// of a kernel wait for the device to go idle, which it never does while a stream waits for that
// kernel's work (so load modules eagerly).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "weft/cuda/check.hpp"
#include "weft/runtime/symmetric_memory.hpp"
#include "weft/tile/wait_record.hpp"

namespace weft {

class SignalSet {
 public:
  // shared: in symmetric memory, raised by peers too (collective); else this rank's alone.
  SignalSet(Communicator& comm, int count, bool shared = true);
  bool shared() const { return memory_.shared(); }
  ~SignalSet();
  SignalSet(const SignalSet&) = delete;
  SignalSet& operator=(const SignalSet&) = delete;

  int count() const { return count_; }
  uint64_t* local() const { return static_cast<uint64_t*>(memory_.local()); }
  uint64_t* on(int rank) const { return static_cast<uint64_t*>(memory_.on(rank)); }

  void notify(cudaStream_t stream, int rank, int signal, uint64_t increment) const;
  void set(cudaStream_t stream, int rank, int signal, uint64_t value) const;
  void wait(cudaStream_t stream, int signal, uint64_t at_least) const;
  // Zeroes this rank's counters, ordered on `stream`.
  void reset(cudaStream_t stream) const;
  // Every rank's stream waits here until every rank's stream has arrived (device_barrier in
  // kernels/elementwise.hpp): no host call, no NCCL. Waits give up after timeout_ns, recorded in
  // `error`. Shared sets only; collective in the order of calls. `signature` says which call this
  // is (every rank passes the same in the same call): a peer's that differs is recorded in `error`.
  void barrier(cudaStream_t stream, WaitRecord* error, uint64_t timeout_ns, uint64_t signature) const;
  // Sets every counter of this rank to a value no wait expects, from a private stream: a call that
  // cannot finish (a peer is gone) is released instead of leaving the device stuck.
  void release_every_wait() const;
  // Current values, read on a private stream so that it works while other streams are blocked.
  std::vector<uint64_t> read_values() const;

 private:
  Communicator& comm_;
  int count_;
  SymmetricMemory memory_;
  uint64_t* host_copy_ = nullptr;  // pinned, so reading values never blocks the host on a stuck device
  // After the counters: one arrival word per rank, this rank's barrier count, then two call
  // signature words per rank (DeviceBarrier).
  size_t words() const;
  uint64_t** arrivals_on_ = nullptr;  // device array of every rank's arrival words, then of its signature words (shared sets)
};

// Sets CUDA_DEVICE_MAX_CONNECTIONS=32 and CUDA_MODULE_LOADING=EAGER unless the user chose values;
// effective only before the process's first CUDA call.
void configure_cuda_for_waits();

}  // namespace weft
