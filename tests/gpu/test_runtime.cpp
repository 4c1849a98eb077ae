// Runtime pieces on their own: signals across GPUs (peer notify, stream wait, epochs), symmetric
// memory reachability, and agreement checks that turn mismatches into errors instead of hangs.
#include <gtest/gtest.h>

#include <cstdlib>

#include "weft/kernels/elementwise.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/rank_threads.hpp"
#include "weft/runtime/signal_set.hpp"
#include "weft/runtime/symmetric_memory.hpp"

namespace weft {
namespace {

std::vector<std::unique_ptr<Communicator>> make_group() {
  int visible = 0;
  WEFT_CUDA_CHECK(cudaGetDeviceCount(&visible));
  std::vector<int> devices;
  for (int d = 0; d < std::min(visible, 2); ++d) devices.push_back(d);
  return Communicator::local_group(devices);
}

TEST(Runtime, PeerNotifyReleasesAStreamWaitingOnAnotherGpu) {
  auto group = make_group();
  if (group.size() < 2) GTEST_SKIP() << "needs 2 GPUs";
  std::vector<uint64_t> seen(2, 0);
  for_each_rank(group, [&](Communicator& comm) {
    SignalSet signals(comm, 4);
    SymmetricMemory data(comm, 1024 * sizeof(uint16_t));
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const int peer = 1 - comm.rank();
    for (uint64_t epoch = 1; epoch <= 3; ++epoch) {
      // Rank 0 writes into rank 1's memory, then raises rank 1's signal 2; rank 1 waits for it.
      if (comm.rank() == 0) {
        fill_u16(data.on(peer), 1024, static_cast<uint16_t>(0x3f80 + epoch), stream);
        signals.notify(stream, peer, 2, 1);
      } else {
        signals.wait(stream, 2, epoch);
      }
      ASSERT_TRUE(synchronize_with_timeout(stream, 10000)) << "rank " << comm.rank() << " epoch " << epoch;
      comm.barrier(stream);
      ASSERT_TRUE(synchronize_with_timeout(stream, 10000));
    }
    if (comm.rank() == 1) {
      uint16_t first = 0;
      WEFT_CUDA_CHECK(cudaMemcpy(&first, data.local(), sizeof first, cudaMemcpyDeviceToHost));
      seen[1] = first;
      seen[0] = signals.read_values()[2];
    }
    cudaStreamDestroy(stream);
  });
  EXPECT_EQ(seen[1], 0x3f80 + 3);
  EXPECT_EQ(seen[0], 3u);
}

// A wait record in mapped host memory, as the executor's workspace keeps one.
struct MappedWaitRecord {
  WaitRecord* host = nullptr;
  WaitRecord* device = nullptr;
  MappedWaitRecord() {
    WEFT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host), sizeof(WaitRecord), cudaHostAllocMapped));
    *host = WaitRecord{};
    WEFT_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device), host, 0));
  }
  ~MappedWaitRecord() { cudaFreeHost(host); }
  MappedWaitRecord(const MappedWaitRecord&) = delete;
  MappedWaitRecord& operator=(const MappedWaitRecord&) = delete;
};

// What the executor's calls start with: every rank's writes into its peers' memory before the
// barrier are seen by them after it, round after round.
TEST(Runtime, DeviceBarrierOrdersEveryRanksStream) {
  auto group = make_group();
  if (group.size() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const int world = static_cast<int>(group.size());
  std::vector<int> wrong(static_cast<size_t>(world), -1);
  for_each_rank(group, [&](Communicator& comm) {
    SignalSet signals(comm, 3);
    SymmetricMemory data(comm, static_cast<size_t>(world) * 256 * sizeof(uint16_t));
    MappedWaitRecord record;
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    int mismatches = 0;
    std::vector<uint16_t> mine(static_cast<size_t>(world) * 256);
    for (uint16_t round = 1; round <= 20; ++round) {
      for (int q = 0; q < world; ++q)  // this rank's slot in every rank's buffer, its own included
        fill_u16(static_cast<uint16_t*>(data.on(q)) + comm.rank() * 256, 256, round, stream);
      // Each barrier's signature differs from the one before (as consecutive calls' may): every rank
      // reads its peer's of this barrier, never the next one's.
      signals.barrier(stream, record.device, 10'000'000'000ull, 2u * round);
      WEFT_CUDA_CHECK(cudaMemcpyAsync(mine.data(), data.local(), mine.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost, stream));
      ASSERT_TRUE(synchronize_with_timeout(stream, 10000)) << "rank " << comm.rank() << " round " << round;
      for (uint16_t v : mine) mismatches += v != round;
      signals.barrier(stream, record.device, 10'000'000'000ull, 2u * round + 1);  // nobody writes round + 1 before all have read
    }
    ASSERT_TRUE(synchronize_with_timeout(stream, 10000));
    wrong[static_cast<size_t>(comm.rank())] = mismatches + static_cast<int>(record.host->failed);
    cudaStreamDestroy(stream);
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(wrong[static_cast<size_t>(r)], 0) << "rank " << r;
}

// A rank that never arrives: the others give up after the timeout, record which rank they waited
// for, and return (the executor turns the record into DeviceWaitTimeout).
TEST(Runtime, DeviceBarrierThatAPeerMissesTimesOutNamingIt) {
  auto group = make_group();
  if (group.size() < 2) GTEST_SKIP() << "needs 2 GPUs";
  WaitRecord seen;
  for_each_rank(group, [&](Communicator& comm) {
    SignalSet signals(comm, 1);
    if (comm.rank() != 0) return;  // rank 1 (and any other) stays away
    MappedWaitRecord record;
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    signals.barrier(stream, record.device, 200'000'000ull, 1);
    EXPECT_TRUE(synchronize_with_timeout(stream, 10000)) << "a missed barrier must end in its timeout";
    seen = *record.host;
    cudaStreamDestroy(stream);
  });
  EXPECT_EQ(seen.failed, 1u);
  EXPECT_EQ(seen.source, tile::kWaitInBarrier);
  EXPECT_EQ(seen.signal, 1) << "the rank waited for";
  EXPECT_EQ(seen.expected, 1u);
  EXPECT_EQ(seen.observed, 0u);
}

// Ranks that meet in a barrier while making different calls (another shape, another plan): each
// records the peer it disagrees with, its own signature and the peer's, instead of going on.
TEST(Runtime, DeviceBarrierOfRanksInOtherCallsRecordsTheDisagreement) {
  auto group = make_group();
  if (group.size() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const int world = static_cast<int>(group.size());
  std::vector<WaitRecord> seen(static_cast<size_t>(world));
  for_each_rank(group, [&](Communicator& comm) {
    SignalSet signals(comm, 1);
    MappedWaitRecord record;
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const uint64_t signature = comm.rank() == world - 1 ? 99 : 42;  // the last rank is in another call
    signals.barrier(stream, record.device, 10'000'000'000ull, signature);
    EXPECT_TRUE(synchronize_with_timeout(stream, 10000)) << "a disagreement does not wait";
    seen[static_cast<size_t>(comm.rank())] = *record.host;
    cudaStreamDestroy(stream);
  });
  for (int r = 0; r < world; ++r) {
    const WaitRecord& e = seen[static_cast<size_t>(r)];
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(e.failed, 1u);
    EXPECT_EQ(e.source, tile::kOtherCallInBarrier);
    if (r == world - 1) {
      EXPECT_NE(e.signal, world - 1) << "the last rank names a peer";
      EXPECT_EQ(e.expected, 99u);
      EXPECT_EQ(e.observed, 42u);
    } else {
      EXPECT_EQ(e.signal, world - 1) << "the rank in the other call";
      EXPECT_EQ(e.expected, 42u);
      EXPECT_EQ(e.observed, 99u);
    }
  }
}

TEST(Runtime, UnmetWaitTimesOutAndIsDiagnosable) {
  auto group = make_group();
  for_each_rank(group, [&](Communicator& comm) {
    SignalSet signals(comm, 2);
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    signals.wait(stream, 1, 1);
    EXPECT_FALSE(synchronize_with_timeout(stream, 200));
    EXPECT_EQ(signals.read_values()[1], 0u);
    cudaStream_t other;  // release the waiting stream from another one
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    signals.notify(other, comm.rank(), 1, 1);
    EXPECT_TRUE(synchronize_with_timeout(stream, 10000));
    cudaStreamDestroy(other);
    cudaStreamDestroy(stream);
  });
}

TEST(Runtime, DisagreementIsAnErrorNotAHang) {
  auto group = make_group();
  if (group.size() < 2) GTEST_SKIP() << "needs 2 GPUs: one rank cannot disagree with itself";
  std::vector<int> agreed(group.size(), 0), threw(group.size(), 0);
  for_each_rank(group, [&](Communicator& comm) {
    comm.require_agreement(7, "a value every rank has");  // throws only where ranks differ
    agreed[static_cast<size_t>(comm.rank())] = 1;
    try {
      comm.require_agreement(static_cast<uint64_t>(comm.rank()), "a test value");
    } catch (const std::invalid_argument& e) {  // an argument error: the ranks were given different things
      threw[static_cast<size_t>(comm.rank())] = std::string(e.what()).find("ranks disagree on a test value") != std::string::npos;
    }
  });
  for (size_t r = 0; r < group.size(); ++r) {
    EXPECT_EQ(agreed[r], 1) << "rank " << r;
    EXPECT_EQ(threw[r], 1) << "rank " << r << " must throw naming what the ranks disagree on";
  }
}

}  // namespace
}  // namespace weft
