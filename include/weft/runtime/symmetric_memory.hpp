// Symmetric memory: the same-sized device buffer on every rank, with every peer's pointer, so that
// copy engines and kernels can read and write peers' buffers directly (NVLink or PCIe P2P).
//
//   SymmetricMemory mem(comm, bytes);    // collective: every rank calls it with the same size
//   void* mine = mem.local(); void* theirs = mem.on(peer);
//
// Peers are reached through CUDA IPC handles (exchanged with NCCL) when they live in another process
// and through plain pointers with peer access enabled when they share this process. We use CUDA IPC
// rather than NCCL 2.28's symmetric windows because the windows hand out peer addresses only to
// device code (the NCCL device API), while copy engines (cudaMemcpyAsync) need raw peer pointers.
#pragma once

#include <cstddef>
#include <vector>

#include "weft/runtime/communicator.hpp"

namespace weft {

class SymmetricMemory {
 public:
  // shared: every peer's address is exchanged (collective; every peer must be reachable by
  // load/store). Not shared: this rank's memory only, no collective call, no peer access needed,
  // for plans that touch no peer memory (they run over NCCL alone, across nodes too).
  SymmetricMemory(Communicator& comm, size_t bytes, bool shared = true);
  ~SymmetricMemory();
  SymmetricMemory(const SymmetricMemory&) = delete;
  SymmetricMemory& operator=(const SymmetricMemory&) = delete;

  void* local() const { return local_; }
  void* on(int rank) const;
  size_t bytes() const { return bytes_; }
  bool shared() const { return shared_; }

 private:
  Communicator& comm_;
  size_t bytes_ = 0;
  bool shared_ = true;
  void* local_ = nullptr;
  std::vector<void*> peers_;
  std::vector<bool> opened_;  // IPC mappings to close
};

// Enables load/store access from `comm`'s device to each peer's device; throws naming the pair
// when the hardware cannot do it.
void enable_peer_access(const Communicator& comm);

}  // namespace weft
