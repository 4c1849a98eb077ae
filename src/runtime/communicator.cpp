#include "weft/runtime/communicator.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>

#include "current_device.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/rank_threads.hpp"

namespace weft {

namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

int env_int(std::initializer_list<const char*> names, const char* what) {
  for (const char* n : names)
    if (!env(n).empty()) return std::stoi(env(n));
  std::string tried;
  for (const char* n : names) tried += std::string(" ") + n;
  throw Error(std::string("Communicator::from_environment: no ") + what + " in the environment (looked for" +
                           tried + "); start with torchrun --no-python, mpirun or srun");
}

uint64_t hash_text(const std::string& text) { return std::hash<std::string>{}(text); }

// NCCL (2.22 and later) connects ranks lazily, inside the first collective of each kind and the
// first send/recv to each peer: that call then blocks on the host until the peer makes it too, and
// a peer that never does (it failed, or skipped the call) blocks it forever, out of reach of every
// timeout weft sets. So weft's own communicators connect at creation: NCCL_RUNTIME_CONNECT=0 for
// the collectives (unless the user chose a value; NCCL reads it once per process, so a communicator
// made earlier by another library keeps lazy connections), and a send/recv with every peer.
void connect_at_creation() { setenv("NCCL_RUNTIME_CONNECT", "0", 0); }

}  // namespace

int64_t Communicator::timeout_ms() {
  static const int64_t ms = [] {
    const std::string seconds = env("WEFT_COLLECTIVE_TIMEOUT_S");
    return seconds.empty() ? int64_t{120000} : static_cast<int64_t>(std::stod(seconds) * 1000);
  }();
  return ms;
}

// A reusable barrier for the threads of one process, with a deadline: once one rank gives up, the
// others fail at once instead of waiting out their own deadline.
struct Communicator::ProcessBarrier {
  explicit ProcessBarrier(int count) : parties(count) {}
  void arrive_and_wait(int rank, int64_t timeout_ms) {
    std::unique_lock lock(mutex);
    if (broken) throw Error("Communicator: another rank of this process gave up at a host barrier");
    const uint64_t my_generation = generation;
    if (++arrived == parties) {
      arrived = 0;
      ++generation;
      changed.notify_all();
      return;
    }
    if (!changed.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return generation != my_generation || broken; })) {
      broken = true;
      changed.notify_all();
      throw Error("Communicator: rank " + std::to_string(rank) + " waited " + std::to_string(timeout_ms / 1000) +
                               " s at a host barrier for the other ranks of this process; one failed or made different calls "
                               "(see its error above; WEFT_COLLECTIVE_TIMEOUT_S sets the limit)");
    }
    if (broken) throw Error("Communicator: another rank of this process gave up at a host barrier");
  }
  void give_up() {
    std::lock_guard lock(mutex);
    broken = true;
    changed.notify_all();
  }
  // All-gather on the host: every rank's bytes in rank order. Two barrier phases, so that no rank
  // overwrites its slot for the next exchange while another is still reading this one.
  std::vector<uint8_t> exchange(int rank, const void* data, size_t bytes, int64_t timeout_ms) {
    {
      std::lock_guard lock(mutex);
      slots.resize(static_cast<size_t>(parties));
      const auto* first = static_cast<const uint8_t*>(data);
      slots[static_cast<size_t>(rank)].assign(first, first + bytes);
    }
    arrive_and_wait(rank, timeout_ms);
    std::vector<uint8_t> all;
    std::string mismatch;
    {
      std::lock_guard lock(mutex);
      for (int r = 0; r < parties; ++r) {
        const auto& slot = slots[static_cast<size_t>(r)];
        if (slot.size() != bytes && mismatch.empty())
          mismatch = "rank " + std::to_string(r) + " gave " + std::to_string(slot.size()) + " bytes, rank " + std::to_string(rank) +
                     " gave " + std::to_string(bytes);
        all.insert(all.end(), slot.begin(), slot.end());
      }
    }
    arrive_and_wait(rank, timeout_ms);
    if (!mismatch.empty()) throw std::invalid_argument("Communicator: ranks made different host all-gathers: " + mismatch);
    return all;
  }
  const int parties;
  std::vector<std::vector<uint8_t>> slots;
  std::mutex mutex;
  std::condition_variable changed;
  int arrived = 0;
  uint64_t generation = 0;
  bool broken = false;
};

Communicator::Communicator(ncclComm_t comm, int device, bool owned) : comm_(comm), device_(device), owned_(owned) {
  const OnDevice on(device_);
  WEFT_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
  WEFT_NCCL_CHECK(ncclCommCount(comm_, &world_));
  WEFT_CUDA_CHECK(cudaMalloc(&barrier_word_, sizeof(int32_t)));
  WEFT_CUDA_CHECK(cudaMemset(barrier_word_, 0, sizeof(int32_t)));
  // connect_peers' words and small host all-gathers: allocated here, before any rank has work on
  // its device (see barrier_word_).
  scratch_bytes_ = 4096;
  WEFT_CUDA_CHECK(cudaMalloc(&scratch_, scratch_bytes_));
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&host_stream_, cudaStreamNonBlocking));
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
}

Communicator::~Communicator() {
  const OnDevice on(device_, OnDevice::NoThrow{});
  if (scratch_) cudaFree(scratch_);
  if (barrier_word_) cudaFree(barrier_word_);
  if (host_stream_) cudaStreamDestroy(host_stream_);
  if (owned_ && comm_ && aborted_.empty()) ncclCommDestroy(comm_);
}

void Communicator::abort(const std::string& why) {
  if (!aborted_.empty()) return;
  aborted_ = why.empty() ? std::string("aborted") : why;
  // NCCL's kernels of this communicator stop waiting for peers and return; what they computed is
  // lost. A communicator the caller owns (wrap) is left to the caller, who must abort it too.
  if (owned_ && comm_) ncclCommAbort(comm_);
}

void Communicator::require_usable(const char* what) const {
  if (!aborted_.empty())
    throw CommunicatorAborted(std::string(what) + " on rank " + std::to_string(rank_) + ": the communicator was aborted (" + aborted_ +
                              "); make a new one");
}

std::vector<std::unique_ptr<Communicator>> Communicator::local_group(const std::vector<int>& devices) {
  if (devices.empty()) throw std::invalid_argument("Communicator::local_group: no devices given");
  int visible = 0;
  WEFT_CUDA_CHECK(cudaGetDeviceCount(&visible));
  for (int d : devices)
    if (d < 0 || d >= visible)
      throw std::invalid_argument("Communicator::local_group: device " + std::to_string(d) + " is not one of the " +
                                  std::to_string(visible) + " visible GPUs");
  int caller_device = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&caller_device));
  const OnDevice keep(caller_device);  // NCCL's initialisation visits every device of the group
  std::vector<ncclComm_t> comms(devices.size());
  connect_at_creation();
  WEFT_NCCL_CHECK(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()));
  std::vector<std::unique_ptr<Communicator>> group;
  auto barrier = std::make_shared<ProcessBarrier>(static_cast<int>(devices.size()));
  for (size_t i = 0; i < devices.size(); ++i) {
    group.emplace_back(new Communicator(comms[i], devices[i], true));
    group.back()->process_barrier_ = barrier;
  }
  // Learning peers is collective: every rank's thread takes part.
  for_each_rank(group, [](Communicator& comm) {
    comm.learn_peers();
    comm.connect_peers();
  });
  return group;
}

std::unique_ptr<Communicator> Communicator::from_environment() {
  const int rank = env_int({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, "rank");
  const int world = env_int({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, "world size");
  const int local = env_int({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, "local rank");
  // NCCL bootstraps itself from NCCL_COMM_ID ("host:port"): rank 0 listens there, the others connect.
  if (env("NCCL_COMM_ID").empty()) {
    const std::string host = env("MASTER_ADDR");
    const std::string port = env("MASTER_PORT");
    if (host.empty() || port.empty())
      throw Error("Communicator::from_environment: set NCCL_COMM_ID=host:port, or MASTER_ADDR and MASTER_PORT");
    const std::string id = host + ":" + std::to_string(std::stoi(port) + 1);  // MASTER_PORT itself is torchrun's store
    setenv("NCCL_COMM_ID", id.c_str(), 0);
  }
  // One process per GPU: the launcher's local rank chooses the GPU, and it becomes the process's
  // current device (the header says so), as torchrun's scripts do with torch.cuda.set_device.
  WEFT_CUDA_CHECK(cudaSetDevice(local));
  ncclUniqueId id;
  WEFT_NCCL_CHECK(ncclGetUniqueId(&id));
  ncclComm_t comm;
  connect_at_creation();
  WEFT_NCCL_CHECK(ncclCommInitRank(&comm, world, id, rank));
  std::unique_ptr<Communicator> result(new Communicator(comm, local, true));
  result->learn_peers();
  result->connect_peers();
  return result;
}

NcclUniqueId Communicator::new_unique_id() {
  ncclUniqueId id;
  WEFT_NCCL_CHECK(ncclGetUniqueId(&id));
  NcclUniqueId bytes;
  static_assert(sizeof id == sizeof bytes.bytes, "NCCL's unique id changed size");
  std::memcpy(bytes.bytes.data(), &id, sizeof id);
  return bytes;
}

std::unique_ptr<Communicator> Communicator::from_unique_id(const NcclUniqueId& unique_id, int rank, int world_size, int device) {
  if (rank < 0 || rank >= world_size)
    throw std::invalid_argument("Communicator::from_unique_id: rank " + std::to_string(rank) + " is not in 0.." + std::to_string(world_size - 1));
  const OnDevice on(device);
  ncclUniqueId id;
  std::memcpy(&id, unique_id.bytes.data(), sizeof id);
  ncclComm_t comm;
  connect_at_creation();
  WEFT_NCCL_CHECK(ncclCommInitRank(&comm, world_size, id, rank));
  std::unique_ptr<Communicator> result(new Communicator(comm, device, true));
  result->learn_peers();
  result->connect_peers();
  return result;
}

std::unique_ptr<Communicator> Communicator::wrap(ncclComm_t comm, int device) {
  std::unique_ptr<Communicator> result(new Communicator(comm, device, false));
  result->learn_peers();
  return result;
}

void Communicator::connect_peers() {
  if (world_ == 1) return;
  // Every peer has passed learn_peers (an all-gather), so every rank is here too: the connections
  // that NCCL makes inside this group complete.
  const OnDevice on(device_);
  auto* words = static_cast<uint16_t*>(scratch_);
  WEFT_NCCL_CHECK(ncclGroupStart());
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    WEFT_NCCL_CHECK(ncclSend(words + p, 1, ncclBfloat16, p, comm_, host_stream_));
    WEFT_NCCL_CHECK(ncclRecv(words + world_ + p, 1, ncclBfloat16, p, comm_, host_stream_));
  }
  WEFT_NCCL_CHECK(ncclGroupEnd());
  if (!synchronize_with_timeout(host_stream_, timeout_ms())) {
    abort("connecting to peers timed out");
    throw Error("Communicator: rank " + std::to_string(rank_) + " could not exchange a word with every peer within " +
                std::to_string(timeout_ms() / 1000) + " s while connecting; a peer failed during creation (WEFT_COLLECTIVE_TIMEOUT_S sets the limit)");
  }
}

void Communicator::learn_peers() {
  char hostname[256] = {};
  gethostname(hostname, sizeof hostname - 1);
  PeerInfo mine{device_, hash_text(std::string(hostname) + "/" + std::to_string(getpid())), hash_text(hostname)};
  const auto all = all_gather_bytes(&mine, sizeof mine);
  peers_.resize(static_cast<size_t>(world_));
  std::memcpy(peers_.data(), all.data(), all.size());
  const char* p2p = std::getenv("WEFT_P2P");
  const bool p2p_allowed = !(p2p && std::string(p2p) == "0");
  std::vector<uint64_t> hosts;
  topology_ = Topology::single_node(world_);
  for (int r = 0; r < world_; ++r) {
    const uint64_t host = peers_[static_cast<size_t>(r)].host;
    auto it = std::find(hosts.begin(), hosts.end(), host);
    if (it == hosts.end()) it = hosts.insert(hosts.end(), host);
    topology_.node[static_cast<size_t>(r)] = static_cast<int>(it - hosts.begin());
  }
  for (int a = 0; a < world_; ++a)
    for (int b = 0; b < world_; ++b) {
      const PeerInfo& pa = peers_[static_cast<size_t>(a)];
      const PeerInfo& pb = peers_[static_cast<size_t>(b)];
      bool reach = a == b;
      if (!reach && p2p_allowed && pa.host == pb.host) {
        reach = true;
        if (pa.process == pb.process && pa.process == peers_[static_cast<size_t>(rank_)].process && pa.device != pb.device) {
          int can = 0;
          reach = cudaDeviceCanAccessPeer(&can, pa.device, pb.device) == cudaSuccess && can;
          cudaGetLastError();
        }
      }
      topology_.load_store[static_cast<size_t>(a)][static_cast<size_t>(b)] = reach;
    }
}

std::vector<uint8_t> Communicator::all_gather_bytes(const void* data, size_t bytes) {
  require_usable("a host all-gather");
  // Ranks of one process exchange through host memory: no kernel of one rank then waits on another
  // rank whose host thread may sit in a driver call that waits for every device of the process
  // (cudaFree of peer-mapped memory, a library load).
  if (process_barrier_) return process_barrier_->exchange(rank_, data, bytes, timeout_ms());
  const size_t needed = bytes * static_cast<size_t>(world_ + 1);
  const OnDevice on(device_);
  if (!host_stream_) WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&host_stream_, cudaStreamNonBlocking));
  if (needed > scratch_bytes_) {
    if (scratch_) WEFT_CUDA_CHECK(cudaFree(scratch_));
    scratch_bytes_ = std::max<size_t>(needed, 4096);
    WEFT_CUDA_CHECK(cudaMalloc(&scratch_, scratch_bytes_));
  }
  auto* send = static_cast<uint8_t*>(scratch_);
  uint8_t* recv = send + bytes;
  // On the all-gather's stream: a cudaMemcpy from pageable memory may return before its DMA lands,
  // and nothing would order it before NCCL's kernel on another stream (which could then send what
  // the scratch held before).
  WEFT_CUDA_CHECK(cudaMemcpyAsync(send, data, bytes, cudaMemcpyHostToDevice, host_stream_));
  WEFT_NCCL_CHECK(ncclAllGather(send, recv, bytes, ncclUint8, comm_, host_stream_));
  // A rank that failed (or took another path) never joins: say so instead of waiting forever.
  if (!synchronize_with_timeout(host_stream_, timeout_ms())) {
    // NCCL's kernel still waits for the peer: abort it, as NCCL's watchdog in PyTorch does, so that
    // the device drains and nothing later (a destructor's barrier) waits on this communicator again.
    const std::string why = "Communicator: rank " + std::to_string(rank_) + " waited " + std::to_string(timeout_ms() / 1000) +
                            " s for its peers in a host-side all-gather of " + std::to_string(bytes) +
                            " bytes; a peer failed or made different calls (see its error above; "
                            "WEFT_COLLECTIVE_TIMEOUT_S sets the limit). The communicator was aborted.";
    abort(why);
    throw Error(why);
  }
  std::vector<uint8_t> result(bytes * static_cast<size_t>(world_));
  WEFT_CUDA_CHECK(cudaMemcpyAsync(result.data(), recv, result.size(), cudaMemcpyDeviceToHost, host_stream_));
  WEFT_CUDA_CHECK(cudaStreamSynchronize(host_stream_));
  return result;
}

void Communicator::host_barrier() {
  if (process_barrier_) process_barrier_->arrive_and_wait(rank_, timeout_ms());
  else all_gather_bytes(&rank_, sizeof rank_);  // one rank per process: no device of ours is shared
}

void Communicator::meet_after_freeing(const char* what) noexcept {
  if (!process_barrier_ || aborted()) return;
  try {
    process_barrier_->arrive_and_wait(rank_, timeout_ms());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft: rank %d: peers did not reach %s's barrier after freeing (%s)\n", rank_, what, e.what());
  }
}

void Communicator::give_up_host_barriers() noexcept {
  if (process_barrier_) process_barrier_->give_up();
}

void Communicator::barrier(cudaStream_t stream) {
  require_usable("a device barrier");
  WEFT_NCCL_CHECK(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_, stream));
}

void Communicator::require_agreement(uint64_t value, const std::string& what) {
  const auto all = all_gather_bytes(&value, sizeof value);
  std::vector<uint64_t> values(static_cast<size_t>(world_));
  std::memcpy(values.data(), all.data(), all.size());
  for (int r = 0; r < world_; ++r)
    if (values[static_cast<size_t>(r)] != values[0])
      throw std::invalid_argument("ranks disagree on " + what + ": rank 0 has " + std::to_string(values[0]) + ", rank " +
                               std::to_string(r) + " has " + std::to_string(values[static_cast<size_t>(r)]));
}

}  // namespace weft
