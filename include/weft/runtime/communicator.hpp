// A Communicator is one rank's handle on the group: its NCCL communicator, rank, world size, device,
// and what it knows of its peers (same process? same node? reachable by load/store?).
//
// Four ways to get one:
//   auto group = Communicator::local_group({0, 1, 2, 3});   // one process, one thread per GPU
//   auto comm  = Communicator::from_environment();          // one process per GPU (torchrun, mpirun, SLURM)
//   auto comm  = Communicator::from_unique_id(id, rank, world, device);  // id made by one rank and sent
//                                                            // to the others (weft.torch.init does so)
//   auto comm  = Communicator::wrap(existing_comm, device); // a communicator the caller owns
// Every rank must then make the same calls in the same order (NCCL's rule); each rank's calls come
// from the thread that owns it.
#pragma once

#include <nccl.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/ir/topology.hpp"

namespace weft {

// NCCL's bootstrap id as plain bytes, for sending over another channel.
struct NcclUniqueId {
  std::array<char, 128> bytes{};
};

struct PeerInfo {
  int device = -1;
  uint64_t process = 0;  // host and process id, hashed
  uint64_t host = 0;
};

class Communicator {
 public:
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  static std::vector<std::unique_ptr<Communicator>> local_group(const std::vector<int>& devices);
  // Reads RANK/WORLD_SIZE/LOCAL_RANK (torchrun), OMPI_COMM_WORLD_* (Open MPI) or SLURM_PROCID/
  // SLURM_NTASKS/SLURM_LOCALID, and bootstraps NCCL through NCCL_COMM_ID (set from MASTER_ADDR and
  // MASTER_PORT + 1 when absent). Throws naming the missing variable. The local rank's GPU becomes the
  // process's current device; every other call of weft leaves the caller's current device as it was.
  static std::unique_ptr<Communicator> from_environment();
  // A fresh id (on one rank); every rank then calls from_unique_id with it (collective).
  static NcclUniqueId new_unique_id();
  static std::unique_ptr<Communicator> from_unique_id(const NcclUniqueId& id, int rank, int world_size, int device);
  // Does not take ownership: the caller destroys `comm` after this object.
  static std::unique_ptr<Communicator> wrap(ncclComm_t comm, int device);

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  int device() const { return device_; }
  ncclComm_t nccl() const { return comm_; }
  const PeerInfo& peer(int rank) const { return peers_.at(static_cast<size_t>(rank)); }
  bool peer_in_this_process(int rank) const { return peers_.at(static_cast<size_t>(rank)).process == peers_[rank_].process; }
  // Other GPUs' ranks share this process (local_group): freeing memory they map, or a copy engine's
  // copy to or from their memory, can wait for their work (CudaExecutor's caveats).
  bool other_gpus_in_this_process() const {
    for (int r = 0; r < world_; ++r)
      if (r != rank_ && peer_in_this_process(r) && peer(r).device != device_) return true;
    return false;
  }
  // Which ranks share a node and which pairs load/store each other's memory: same node and P2P
  // between the GPUs (cudaDeviceCanAccessPeer where both are this process's; GPUs of processes on
  // one node are taken to reach each other through CUDA IPC). WEFT_P2P=0 makes every peer
  // unreachable, so that only plans communicating through NCCL run (the stand-in for several nodes).
  const Topology& topology() const { return topology_; }
  bool reaches(int rank) const { return topology_.reaches(rank_, rank); }

  // Gathers `bytes` bytes from every rank (rank order); collective, synchronous, and bounded: throws
  // when the peers do not join within WEFT_COLLECTIVE_TIMEOUT_S (120 s unless set). Ranks of one
  // process (local_group) exchange on the host; one rank per process goes through NCCL.
  std::vector<uint8_t> all_gather_bytes(const void* data, size_t bytes);
  // Returns once every rank has called it (bounded as above). Ranks of one process (local_group) meet
  // on the host alone, with no device work: a rank may be inside a driver call that waits for every
  // device of the process to go idle (cuBLASLt loading its kernels), and a collective kernel waiting
  // on that rank would never let it.
  void host_barrier();
  // Ranks of one local_group meet on the host alone (host_barrier touches no device).
  bool meets_on_host() const { return process_barrier_ != nullptr; }
  // For teardown where the ranks of one local_group free memory their GPUs map: returns once every
  // rank has called it (after its frees), so that no rank starts a call whose barrier its GPU would
  // spin in while a peer's cudaFree waits for that GPU to go idle. Prints and returns where the
  // peers do not come (never throws); does nothing unless meets_on_host(), or once aborted.
  void meet_after_freeing(const char* what) noexcept;
  // This rank will not come to the host barriers its peers wait in (its streams are stuck, or its
  // communicator was aborted while theirs were not): they fail at once instead of after the timeout.
  void give_up_host_barriers() noexcept;
  // How long a rank waits for its peers anywhere (host barriers, exchanges, a call that does not
  // finish): WEFT_COLLECTIVE_TIMEOUT_S seconds, 120 unless set.
  static int64_t timeout_ms();
  // A device-side barrier on `stream`: a one-element all-reduce.
  void barrier(cudaStream_t stream);
  // Throws std::invalid_argument unless every rank passes the same value (shapes, plan
  // fingerprints): a mismatch becomes an error naming the ranks, not a hang inside a collective.
  void require_agreement(uint64_t value, const std::string& what);
  // After a call that cannot finish (a peer died or hangs): NCCL's kernels of this communicator are
  // stopped (ncclCommAbort, as NCCL's watchdog in PyTorch does) where weft owns the communicator,
  // and every later use throws CommunicatorAborted naming `why`.
  void abort(const std::string& why);
  bool aborted() const { return !aborted_.empty(); }
  // Throws CommunicatorAborted when aborted; `what` names the use.
  void require_usable(const char* what) const;

 private:
  Communicator(ncclComm_t comm, int device, bool owned);
  void learn_peers();
  // Makes NCCL connect to every peer now (a send/recv of one word each way) rather than inside a
  // call, where a peer that never joins would block the host (communicator.cpp: connect_at_creation).
  void connect_peers();

  ncclComm_t comm_ = nullptr;
  int device_ = -1;
  int rank_ = 0;
  int world_ = 1;
  bool owned_ = true;
  std::string aborted_;  // why, once aborted
  std::vector<PeerInfo> peers_;
  Topology topology_;
  void* scratch_ = nullptr;  // device memory for all_gather_bytes (one process per rank)
  // barrier()'s one word, allocated with the communicator: in a process driving several GPUs, a
  // rank allocating device memory can wait for a peer's device that sits in a collective waiting
  // for this rank (NCCL's caveat for one thread per GPU), so nothing allocates lazily in a call.
  void* barrier_word_ = nullptr;
  cudaStream_t host_stream_ = nullptr;  // the host-side collectives' own stream, so they can be bounded
  struct ProcessBarrier;
  std::shared_ptr<ProcessBarrier> process_barrier_;  // shared by the ranks of one local_group
  size_t scratch_bytes_ = 0;
};

}  // namespace weft
