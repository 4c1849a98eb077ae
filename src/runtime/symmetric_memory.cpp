#include "weft/runtime/symmetric_memory.hpp"

#include <cstring>

#include "weft/runtime/cuda_check.hpp"

namespace weft {

void enable_peer_access(const Communicator& comm) {
  WEFT_CUDA_CHECK(cudaSetDevice(comm.device()));
  for (int r = 0; r < comm.world_size(); ++r) {
    const PeerInfo& peer = comm.peer(r);
    if (peer.host != comm.peer(comm.rank()).host)
      throw CudaError("rank " + std::to_string(r) + " is on another node: symmetric memory needs ranks of one node");
    if (peer.device == comm.device()) continue;
    int can = 0;
    WEFT_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, comm.device(), peer.device));
    if (!can)
      throw CudaError("GPU " + std::to_string(comm.device()) + " cannot reach GPU " + std::to_string(peer.device) +
                      " by load/store (no NVLink or PCIe P2P between them); use a strategy that communicates through NCCL");
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

SymmetricMemory::SymmetricMemory(Communicator& comm, size_t bytes) : comm_(comm), bytes_(bytes) {
  comm.require_agreement(bytes, "the size of a symmetric allocation");
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

SymmetricMemory::~SymmetricMemory() {
  cudaSetDevice(comm_.device());
  for (size_t r = 0; r < peers_.size(); ++r)
    if (opened_[r]) cudaIpcCloseMemHandle(peers_[r]);
  cudaFree(local_);
}

}  // namespace weft
