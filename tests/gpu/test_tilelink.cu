// TileLink's primitives (weft/tile/tilelink.cuh) on one GPU: producer/consumer across the CTAs of
// one launch and across streams, push and pull through a second buffer standing for a peer's, rank
// notify/wait, the mappings on the device, bounded waits that time out with their signal, and the
// companion kernel (weft/kernels/tile_program.hpp) keeping its steps' order and signals.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "weft/kernels/tile_program.hpp"
#include "weft/cuda/check.hpp"
#include "weft/errors.hpp"
#include "weft/runtime/cuda_executor.hpp"
#include "weft/runtime/rank_threads.hpp"
#include "weft/tile/tilelink.cuh"
#include "check_against_host.hpp"

namespace weft {
namespace {

using tile::SignalArray;
using tile::TileBox;
using tile::WaitPolicy;

constexpr int kTiles = 8;
constexpr int kTileElems = 64 * 64;
constexpr uint64_t kTimeoutNs = 5'000'000'000ull;

template <class T>
T* device_zeros(size_t count) {
  T* p = nullptr;
  WEFT_CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)));
  WEFT_CUDA_CHECK(cudaMemset(p, 0, count * sizeof(T)));
  return p;
}

template <class T>
std::vector<T> to_host(const T* p, size_t count) {
  std::vector<T> h(count);
  WEFT_CUDA_CHECK(cudaMemcpy(h.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

WaitRecord* mapped_record() {
  WaitRecord* r = nullptr;
  WEFT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&r), sizeof(WaitRecord), cudaHostAllocMapped));
  *r = WaitRecord{};
  return r;
}

__device__ void spin_ns(uint64_t ns) {
  const uint64_t start = tile::global_timer_ns();
  while (tile::global_timer_ns() - start < ns) {
  }
}

__device__ uint32_t value_of(int tile, int i) { return static_cast<uint32_t>(tile) * 1000003u + static_cast<uint32_t>(i) * 7u + 1u; }

// Producers write tile t (later tiles first, each after a delay), then notify; consumers wait and
// sum what they read. With the order reversed, a consumer that did not wait would read zeros.
__device__ void produce(uint32_t* data, const SignalArray& s, int tile, uint64_t delay_ns) {
  if (threadIdx.x == 0) spin_ns(delay_ns);
  __syncthreads();
  for (int i = threadIdx.x; i < kTileElems; i += blockDim.x) data[tile * kTileElems + i] = value_of(tile, i);
  tile::producer_tile_notify(s, tile);
}

__device__ void consume(const uint32_t* data, uint64_t* sums, const SignalArray& s, int tile, const WaitPolicy& policy) {
  if (!tile::consumer_tile_wait(s, tile, 1, policy)) return;
  __shared__ unsigned long long sum;
  if (threadIdx.x == 0) sum = 0;
  __syncthreads();
  unsigned long long mine = 0;
  for (int i = threadIdx.x; i < kTileElems; i += blockDim.x) mine += data[tile * kTileElems + i];
  atomicAdd(&sum, mine);
  __syncthreads();
  if (threadIdx.x == 0) sums[tile] = sum;
}

__global__ void producer_consumer_one_launch(uint32_t* data, uint64_t* sums, SignalArray s, WaitPolicy policy) {
  // CTAs [0, kTiles) consume, [kTiles, 2 kTiles) produce: the consumers start first.
  if (blockIdx.x < kTiles) consume(data, sums, s, blockIdx.x, policy);
  else produce(data, s, blockIdx.x - kTiles, (2 * kTiles - blockIdx.x) * 20'000ull);
}

__global__ void producer_kernel(uint32_t* data, SignalArray s) { produce(data, s, blockIdx.x, (kTiles - blockIdx.x) * 20'000ull); }
__global__ void consumer_kernel(const uint32_t* data, uint64_t* sums, SignalArray s, WaitPolicy policy) {
  consume(data, sums, s, blockIdx.x, policy);
}

std::vector<uint64_t> expected_sums() {
  std::vector<uint64_t> want(kTiles, 0);
  for (int t = 0; t < kTiles; ++t)
    for (int i = 0; i < kTileElems; ++i) want[t] += static_cast<uint32_t>(t) * 1000003u + static_cast<uint32_t>(i) * 7u + 1u;
  return want;
}

TEST(TileLinkPrimitives, ProducerAndConsumerTilesInOneLaunch) {
  uint32_t* data = device_zeros<uint32_t>(kTiles * kTileElems);
  uint64_t* sums = device_zeros<uint64_t>(kTiles);
  uint64_t* signals = device_zeros<uint64_t>(kTiles);
  WaitRecord* record = mapped_record();
  producer_consumer_one_launch<<<2 * kTiles, 256>>>(data, sums, SignalArray{signals, nullptr, 0, 1}, WaitPolicy{kTimeoutNs, record});
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(record->failed, 0u);
  EXPECT_EQ(to_host(sums, kTiles), expected_sums());
  EXPECT_EQ(to_host(signals, kTiles), std::vector<uint64_t>(kTiles, 1));
  cudaFree(data), cudaFree(sums), cudaFree(signals), cudaFreeHost(record);
}

TEST(TileLinkPrimitives, ProducerAndConsumerOnTwoStreams) {
  uint32_t* data = device_zeros<uint32_t>(kTiles * kTileElems);
  uint64_t* sums = device_zeros<uint64_t>(kTiles);
  uint64_t* signals = device_zeros<uint64_t>(kTiles);
  WaitRecord* record = mapped_record();
  cudaStream_t consumer, producer;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  const SignalArray s{signals, nullptr, 0, 1};
  consumer_kernel<<<kTiles, 256, 0, consumer>>>(data, sums, s, WaitPolicy{kTimeoutNs, record});
  producer_kernel<<<kTiles, 256, 0, producer>>>(data, s);
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(record->failed, 0u);
  EXPECT_EQ(to_host(sums, kTiles), expected_sums());
  cudaStreamDestroy(consumer), cudaStreamDestroy(producer);
  cudaFree(data), cudaFree(sums), cudaFree(signals), cudaFreeHost(record);
}

// "Rank 0" pushes its tiles into the buffer standing for rank 1's and notifies rank 1's counters;
// "rank 1" waits on its own counters and pulls each tile into its output.
__global__ void push_tiles(TileBox peer_dst, TileBox src, SignalArray s, int rows_per_tile) {
  const int t = blockIdx.x;
  tile::tile_push_data(peer_dst.sub(t * rows_per_tile, 0, rows_per_tile, src.cols), src.sub(t * rows_per_tile, 0, rows_per_tile, src.cols));
  tile::peer_tile_notify(s, 1, t);
}
__global__ void pull_tiles(TileBox dst, TileBox peer_src, SignalArray s, int rows_per_tile, WaitPolicy policy) {
  const int t = blockIdx.x;
  if (!tile::peer_tile_wait(s, t, 1, policy)) return;
  tile::tile_pull_data(dst.sub(t * rows_per_tile, 0, rows_per_tile, dst.cols), peer_src.sub(t * rows_per_tile, 0, rows_per_tile, dst.cols));
}

TEST(TileLinkPrimitives, PushAndPullThroughAPeersBuffer) {
  for (const int64_t cols : {int64_t{256}, int64_t{100}}) {  // 16-byte vectors, and the element-wise path
    SCOPED_TRACE(cols);
    const int rows_per_tile = 16, rows = rows_per_tile * kTiles;
    const int64_t stride = cols + 8;
    uint16_t* src = device_zeros<uint16_t>(rows * stride);
    uint16_t* peer = device_zeros<uint16_t>(rows * stride);
    uint16_t* out = device_zeros<uint16_t>(rows * stride);
    std::vector<uint16_t> host(static_cast<size_t>(rows * stride));
    std::mt19937 rng(7);
    for (auto& v : host) v = static_cast<uint16_t>(rng());
    WEFT_CUDA_CHECK(cudaMemcpy(src, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
    uint64_t* signals0 = device_zeros<uint64_t>(kTiles);
    uint64_t* signals1 = device_zeros<uint64_t>(kTiles);
    uint64_t** peers = device_zeros<uint64_t*>(2);
    uint64_t* both[2] = {signals0, signals1};
    WEFT_CUDA_CHECK(cudaMemcpy(peers, both, sizeof both, cudaMemcpyHostToDevice));
    WaitRecord* record = mapped_record();
    cudaStream_t puller;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&puller, cudaStreamNonBlocking));
    pull_tiles<<<kTiles, 128, 0, puller>>>(TileBox{out, rows, cols, stride}, TileBox{peer, rows, cols, stride}, SignalArray{signals1, peers, 1, 2},
                                           rows_per_tile, WaitPolicy{kTimeoutNs, record});
    push_tiles<<<kTiles, 128>>>(TileBox{peer, rows, cols, stride}, TileBox{src, rows, cols, stride}, SignalArray{signals0, peers, 0, 2}, rows_per_tile);
    WEFT_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(record->failed, 0u);
    const auto got = to_host(out, host.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(got[r * stride + c], host[r * stride + c]) << r << "," << c;
    EXPECT_EQ(got[stride - 1], 0) << "the padding between rows is not touched";
    EXPECT_EQ(to_host(signals1, kTiles), std::vector<uint64_t>(kTiles, 1));
    EXPECT_EQ(to_host(signals0, kTiles), std::vector<uint64_t>(kTiles, 0));
    cudaStreamDestroy(puller);
    cudaFree(src), cudaFree(peer), cudaFree(out), cudaFree(signals0), cudaFree(signals1), cudaFree(peers), cudaFreeHost(record);
  }
}

__global__ void rank_arrive_and_wait(SignalArray s, int slot, uint64_t ranks, WaitPolicy policy, int* passed) {
  tile::rank_notify(s, slot);
  if (tile::rank_wait(s, slot, ranks, policy) && threadIdx.x == 0) *passed = 1;
}

TEST(TileLinkPrimitives, RankNotifyReachesEveryRanksCounter) {
  uint64_t* signals = device_zeros<uint64_t>(4);
  int* passed = device_zeros<int>(1);
  WaitRecord* record = mapped_record();
  rank_arrive_and_wait<<<1, 64>>>(SignalArray{signals, nullptr, 0, 1}, 3, 1, WaitPolicy{kTimeoutNs, record}, passed);
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(to_host(passed, 1)[0], 1);
  EXPECT_EQ(to_host(signals, 4), (std::vector<uint64_t>{0, 0, 0, 1}));
  EXPECT_EQ(record->failed, 0u);
  cudaFree(signals), cudaFree(passed), cudaFreeHost(record);
}

__global__ void wait_forever(SignalArray s, WaitPolicy policy, int* returned) {
  const bool ok = tile::consumer_tile_wait(s, 5, 1, policy);
  if (threadIdx.x == 0) *returned = ok ? 1 : 2;
}

TEST(TileLinkPrimitives, AWaitNeverMetTimesOutAndNamesItsSignal) {
  uint64_t* signals = device_zeros<uint64_t>(8);
  int* returned = device_zeros<int>(1);
  WaitRecord* record = mapped_record();
  wait_forever<<<1, 64>>>(SignalArray{signals, nullptr, 0, 1}, WaitPolicy{2'000'000, record, tile::kWaitInUserKernel}, returned);
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(to_host(returned, 1)[0], 2) << "the wait returns false instead of hanging";
  EXPECT_EQ(record->failed, 1u);
  EXPECT_EQ(record->signal, 5);
  EXPECT_EQ(record->where, 5);
  EXPECT_EQ(record->expected, 1u);
  EXPECT_EQ(record->observed, 0u);
  cudaFree(signals), cudaFree(returned), cudaFreeHost(record);
}

__global__ void map_on_device(tile::StaticTileMap map, tile::DynamicTileMap dynamic, int64_t* out) {
  const int t = threadIdx.x;
  if (t < map.tiles()) {
    const tile::TileCoord c = map(t);
    out[4 * t] = c.rank, out[4 * t + 1] = c.channel, out[4 * t + 2] = c.row, out[4 * t + 3] = map.tile_of_row(c.row + c.rows - 1);
  }
  if (t < dynamic.tiles) {
    const tile::TileCoord c = dynamic(t);
    out[64 + 3 * t] = c.channel, out[64 + 3 * t + 1] = c.row, out[64 + 3 * t + 2] = c.rows;
  }
}

TEST(TileLinkPrimitives, MappingsAgreeOnHostAndDevice) {
  const tile::StaticTileMap map{3, 100, 32};
  std::vector<int32_t> expert = {0, 0, 2, 3}, rows = {128, 5, 77, 1};
  std::vector<int64_t> first = {0, 128, 133, 210};
  int32_t* d_expert = device_zeros<int32_t>(4);
  int32_t* d_rows = device_zeros<int32_t>(4);
  int64_t* d_first = device_zeros<int64_t>(4);
  WEFT_CUDA_CHECK(cudaMemcpy(d_expert, expert.data(), 16, cudaMemcpyHostToDevice));
  WEFT_CUDA_CHECK(cudaMemcpy(d_rows, rows.data(), 16, cudaMemcpyHostToDevice));
  WEFT_CUDA_CHECK(cudaMemcpy(d_first, first.data(), 32, cudaMemcpyHostToDevice));
  int64_t* out = device_zeros<int64_t>(128);
  map_on_device<<<1, 64>>>(map, tile::DynamicTileMap{d_expert, d_first, d_rows, nullptr, 4}, out);
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = to_host(out, 128);
  for (int t = 0; t < map.tiles(); ++t) {
    const tile::TileCoord c = map(t);
    EXPECT_EQ(got[4 * t], c.rank);
    EXPECT_EQ(got[4 * t + 1], c.channel);
    EXPECT_EQ(got[4 * t + 2], c.row);
    EXPECT_EQ(got[4 * t + 3], t);
  }
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(got[64 + 3 * t], expert[t]);
    EXPECT_EQ(got[64 + 3 * t + 1], first[t]);
    EXPECT_EQ(got[64 + 3 * t + 2], rows[t]);
  }
  cudaFree(d_expert), cudaFree(d_rows), cudaFree(d_first), cudaFree(out);
}

__global__ void raise_late(uint64_t* counter, uint64_t delay_ns) {
  spin_ns(delay_ns);
  tile::add_release_system(counter, 1);
}

float bf16_value(uint16_t bits) {
  uint32_t word = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &word, 4);
  return f;
}

TEST(TileProgram, KeepsItsItemsOrderWaitsForSignalsAndNotifies) {
  // Item 0 copies X into Y once signal 0 is raised (by a kernel on another stream, late); item 1
  // reduces Y + X into Z (it must see item 0's copy: it follows item 0, whose output it reads); items
  // 2 and 3 each accumulate X into Z and raise signal 1 (they follow every earlier item: Z = 4X). Rows and columns ragged against 16-byte vectors in one case.
  for (const int64_t cols : {int64_t{512}, int64_t{100}}) {
    SCOPED_TRACE(cols);
    const int64_t rows = 300;
    uint16_t* x = device_zeros<uint16_t>(rows * cols);
    uint16_t* y = device_zeros<uint16_t>(rows * cols);
    uint16_t* z = device_zeros<uint16_t>(rows * cols);
    std::vector<uint16_t> host(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint16_t>(0x3f80 + (i % 7) * 0x10);  // 1.0 .. 1.375
    WEFT_CUDA_CHECK(cudaMemcpy(x, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
    uint64_t* signals = device_zeros<uint64_t>(2);
    uint64_t* counters = device_zeros<uint64_t>(5);
    WaitRecord* record = mapped_record();
    auto region = [&](int base) { return TileProgramRegion{base, 0, 0, rows, cols, cols}; };
    std::vector<TileProgramItem> items(4);
    items[0].kind = TileProgramItem::copy;
    items[0].dst = region(1), items[0].srcs[0] = region(0);
    items[0].wait_count = 1, items[0].wait_signal[0] = 0, items[0].wait_value[0] = 1;
    items[1].kind = TileProgramItem::reduce;
    items[1].dst = region(2), items[1].source_count = 2, items[1].srcs[0] = region(1), items[1].srcs[1] = region(0);
    items[2].kind = TileProgramItem::reduce;
    items[2].dst = region(2), items[2].source_count = 1, items[2].srcs[0] = region(0), items[2].accumulate = 1;
    items[2].notify_count = 1, items[2].notify[0] = signals + 1, items[2].notify_increment[0] = 2;
    items[3] = items[2];  // follows every earlier item: its walk back stops at item 2
    items[3].notify_increment[0] = 1;
    for (int i = 0; i < 4; ++i) items[i].step = i;
    TileProgramLaunch launch;
    launch.item_count = 4;
    order_tile_program_items(items);  // 1 follows 0 alone (it reads Y), 2 and 3 every earlier item (they notify)
    ASSERT_EQ(items[1].after_all, 0);
    ASSERT_EQ(items[2].after_all, 1);
    ASSERT_EQ(items[3].after_all, 1);
    launch.unit_count = plan_tile_program_pieces(items, 6, 4096);
    EXPECT_GT(launch.unit_count, 4 * 8) << "each item in many pieces";
    TileProgramItem* d_items = nullptr;
    WEFT_CUDA_CHECK(cudaMalloc(&d_items, items.size() * sizeof(TileProgramItem)));
    WEFT_CUDA_CHECK(cudaMemcpy(d_items, items.data(), items.size() * sizeof(TileProgramItem), cudaMemcpyHostToDevice));
    launch.items = d_items;
    launch.bases[0] = x, launch.bases[1] = y, launch.bases[2] = z;
    launch.counters = counters;
    launch.wait_signals = signals;
    launch.error = record;
    launch.wait_timeout_ns = kTimeoutNs;
    launch.ctas = 6;
    cudaStream_t late;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&late, cudaStreamNonBlocking));
    for (int call = 0; call < 2; ++call) {  // the counters start over on every launch
      WEFT_CUDA_CHECK(cudaMemset(signals, 0, 16));
      WEFT_CUDA_CHECK(cudaMemset(y, 0, rows * cols * 2));
      WEFT_CUDA_CHECK(cudaMemset(z, 0, rows * cols * 2));
      launch_tile_program(launch, nullptr);
      raise_late<<<1, 1, 0, late>>>(signals, 200'000);
      WEFT_CUDA_CHECK(cudaDeviceSynchronize());
      EXPECT_EQ(record->failed, 0u);
      const auto got = to_host(z, host.size());
      for (size_t i = 0; i < host.size(); ++i) ASSERT_EQ(bf16_value(got[i]), 4 * bf16_value(host[i])) << "call " << call << " element " << i;
      EXPECT_EQ(to_host(signals, 2)[1], 3u);
    }
    cudaStreamDestroy(late);
    cudaFree(x), cudaFree(y), cudaFree(z), cudaFree(signals), cudaFree(counters), cudaFree(d_items), cudaFreeHost(record);
  }
}

TEST(TileProgram, ACompanionStepThatWaitsInVainIsAnErrorNamingItsSignal) {
  // One rank, a companion copy waiting for a signal no one raises: the executor raises
  // DeviceWaitTimeout naming the step and the signal (the plan is run unvalidated: the validator
  // would reject it).
  auto group = Communicator::local_group({0});
  Communicator& comm = *group[0];
  Plan plan;
  plan.strategy = "hand-written";
  plan.problem = Problem{OpKind::gemm_ar, 64, 64, 64, 1, DType::bf16, DType::bf16, {}};
  RankPlan r;
  r.rank = 0;
  r.stream_count = 1;
  r.buffers = {BufferDecl{"X", BufferRole::input, 64, 64}, BufferDecl{"C", BufferRole::output, 64, 64}};
  r.signals = {"never_raised"};
  Step copy;
  copy.label = "copy waiting in vain";
  copy.engine = Engine::sm;
  copy.companion = 0;
  copy.waits = {Wait{SignalRef{0, 0}, 1}};
  copy.body = CopyStep{Region{0, 0, Rect{0, 0, 64, 64}}, Region{0, 1, Rect{0, 0, 64, 64}}, 4};
  r.steps = {copy};
  r.output = Region{0, 1, Rect{0, 0, 64, 64}};
  plan.ranks = {r};
  CudaExecutor exec(comm, plan, ExecutorOptions{.validate = false, .device_wait_timeout_ms = 20});
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  exec.run(stream);
  try {
    exec.finish(stream);
    FAIL() << "no error";
  } catch (const DeviceWaitTimeout& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("copy waiting in vain"), std::string::npos) << what;
    EXPECT_NE(what.find("never_raised"), std::string::npos) << what;
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace weft
