#include "weft/runtime/symmetric_memory.hpp"

#include <cstring>
#include <stdexcept>

#include "current_device.hpp"
#include "weft/cuda/check.hpp"

namespace weft {

void enable_peer_access(const Communicator& comm) {
  const OnDevice on(comm.device());
  for (int r = 0; r < comm.world_size(); ++r) {
    const PeerInfo& peer = comm.peer(r);
    if (r == comm.rank()) continue;
    if (!comm.reaches(r))
      throw CudaError("rank " + std::to_string(comm.rank()) + " cannot load/store rank " + std::to_string(r) + "'s memory (" +
                      describe(comm.topology()) + "); use a strategy that communicates through NCCL alone (sequential, signal)");
    if (peer.device == comm.device()) continue;
    if (comm.peer_in_this_process(r)) {
      const cudaError_t status = cudaDeviceEnablePeerAccess(peer.device, 0);
      if (status == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();
      } else {
        WEFT_CUDA_CHECK(status);
      }
    }
  }
}

SymmetricMemory::SymmetricMemory(Communicator& comm, size_t bytes, bool shared) : comm_(comm), bytes_(bytes), shared_(shared) {
  if (!shared) {
    const OnDevice on(comm.device());
    WEFT_CUDA_CHECK(cudaMalloc(&local_, bytes_ == 0 ? 16 : bytes_));
    peers_.assign(static_cast<size_t>(comm.world_size()), nullptr);
    opened_.assign(static_cast<size_t>(comm.world_size()), false);
    peers_[static_cast<size_t>(comm.rank())] = local_;
    return;
  }
  comm.require_agreement(bytes, "the size of a symmetric allocation");
  const OnDevice on(comm.device());
  enable_peer_access(comm);
  WEFT_CUDA_CHECK(cudaMalloc(&local_, bytes_ == 0 ? 16 : bytes_));
  struct Exported {
    cudaIpcMemHandle_t handle;
    void* pointer;
  } mine{};
  mine.pointer = local_;
  WEFT_CUDA_CHECK(cudaIpcGetMemHandle(&mine.handle, local_));
  const auto all = comm.all_gather_bytes(&mine, sizeof mine);
  const int world = comm.world_size();
  peers_.assign(static_cast<size_t>(world), nullptr);
  opened_.assign(static_cast<size_t>(world), false);
  for (int r = 0; r < world; ++r) {
    Exported theirs;
    std::memcpy(&theirs, all.data() + static_cast<size_t>(r) * sizeof theirs, sizeof theirs);
    if (r == comm.rank() || comm.peer_in_this_process(r)) {
      peers_[static_cast<size_t>(r)] = theirs.pointer;  // one address space: the pointer is valid here
    } else {
      WEFT_CUDA_CHECK(cudaIpcOpenMemHandle(&peers_[static_cast<size_t>(r)], theirs.handle, cudaIpcMemLazyEnablePeerAccess));
      opened_[static_cast<size_t>(r)] = true;
    }
  }
}

void* SymmetricMemory::on(int rank) const {
  void* p = peers_.at(static_cast<size_t>(rank));
  if (!p)
    throw std::logic_error("rank " + std::to_string(comm_.rank()) + "'s symmetric memory was allocated for this rank alone; rank " +
                           std::to_string(rank) + "'s is not mapped here");
  return p;
}

SymmetricMemory::~SymmetricMemory() {
  const OnDevice on(comm_.device(), OnDevice::NoThrow{});
  for (size_t r = 0; r < peers_.size(); ++r)
    if (opened_[r]) cudaIpcCloseMemHandle(peers_[r]);
  cudaFree(local_);
}

}  // namespace weft
