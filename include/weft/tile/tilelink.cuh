// TileLink's tile-centric primitives (tilelink.txt §3–4) as a device API: include this header in
// your own kernels (nvcc, sm_90) to make tiles of one kernel wait for tiles of another, on this GPU
// or on a peer reachable by NVLink loads and stores, and to move tiles between ranks by SMs.
//
//   signals            64-bit counters, one array per rank (weft's symmetric signal memory, or any
//                      memory every side can address); a notify adds, a wait blocks until the
//                      counter reaches a value. Counters only grow within a call: reset them between
//                      calls (weft's executor does, per call).
//   producer_tile_notify / consumer_tile_wait   within a rank: release / acquire at GPU scope.
//   peer_tile_notify / peer_tile_wait           across ranks: release on the peer's counter / acquire
//                                               on our own, at system scope.
//   rank_notify / rank_wait                     a whole rank's progress (a counter per rank), e.g.
//                                               "my shard is in place" before any tile is pulled.
//   tile_push_data / tile_pull_data             a 2-D bf16 box copied by a CTA's threads with 16-byte
//                                               loads and stores (peer memory through NVLink).
//   StaticTileMap / DynamicTileMap              §4's mappings from a tile id to its rank, channel and
//                                               rows: affine maps, or tables filled at run time
//                                               (MoE routing: weft::build_expert_tiles on the host).
//
// Memory order. A notify is made by one thread after a CTA barrier, with a release that is
// cumulative over what the barrier ordered before it (every thread's stores of the tile). A wait is
// made by one thread, whose acquire the following CTA barrier extends to every thread. Data that a
// TMA load (async proxy) reads after a wait needs fence_proxy_async() after the wait; data a TMA
// store wrote needs cp.async.bulk.wait_group 0 and fence_proxy_async() before the notify. Waits are
// bounded: a wait that times out records its signal, the expected and the observed value in a
// WaitRecord (the first one of the launch wins), returns false and lets the kernel go on, so that a
// lost notify is an error the host reports with the signal's name, never a hang.
//
// A worked example: a producer kernel computes tiles of Y while a consumer kernel, launched on
// another stream (or in the same launch, on other CTAs), reduces each tile as soon as it is ready.
//
//   __global__ void produce(TileBox y, SignalArray signals) {
//     const int tile = blockIdx.x;                   // one tile per CTA
//     compute_tile(y, tile);                         // every thread stores its part
//     weft::tile::producer_tile_notify(signals, tile);
//   }
//   __global__ void consume(TileBox y, TileBox out, SignalArray signals, WaitPolicy policy) {
//     const int tile = blockIdx.x;
//     if (!weft::tile::consumer_tile_wait(signals, tile, 1, policy)) return;  // recorded: the host raises
//     use_tile(y, out, tile);                        // sees every store the producer's CTA made
//   }
//
// Across ranks the same shape holds with peer_tile_notify(signals, owner, tile) after a
// tile_push_data into the owner's buffer, and peer_tile_wait on the owner. weft's `tilelink` strategy
// and its companion kernel (src/kernels/tile_program.cu) are built on exactly these calls.
#pragma once

#include <cstdint>

#include "weft/tile/tile_map.hpp"
#include "weft/tile/wait_record.hpp"

namespace weft::tile {

// ---- time and memory order -------------------------------------------------------------------

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

__device__ __forceinline__ uint64_t load_acquire_gpu(const uint64_t* address) {
  uint64_t value;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(value) : "l"(address) : "memory");
  return value;
}

__device__ __forceinline__ uint64_t load_acquire_system(const uint64_t* address) {
  uint64_t value;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(value) : "l"(address) : "memory");
  return value;
}

__device__ __forceinline__ void add_release_gpu(uint64_t* address, uint64_t increment) {
  asm volatile("red.release.gpu.global.add.u64 [%0], %1;" ::"l"(address), "l"(increment) : "memory");
}

__device__ __forceinline__ void add_release_system(uint64_t* address, uint64_t increment) {
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(address), "l"(increment) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_gpu(const uint32_t* address) {
  uint32_t value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
  return value;
}

__device__ __forceinline__ void store_release_gpu(uint32_t* address, uint32_t value) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(address), "r"(value) : "memory");
}

// Orders generic-proxy accesses (what an acquire made visible, or plain stores) against the async
// proxy's (TMA loads and stores) that follow.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

// ---- bounded waits ---------------------------------------------------------------------------

struct WaitPolicy {
  uint64_t timeout_ns = 10'000'000'000ull;
  WaitRecord* record = nullptr;  // may be null: a timeout then only returns false
  int32_t source = kWaitInUserKernel;
};

// Fills the record unless a wait of the launch already did (the first one wins).
__device__ __forceinline__ void record_timeout(WaitRecord* record, int32_t source, int32_t signal, int32_t where, uint64_t expected,
                                               uint64_t observed) {
  if (record && atomicCAS(&record->failed, 0u, 1u) == 0u) {
    record->signal = signal;
    record->where = where;
    record->source = source;
    record->expected = expected;
    record->observed = observed;
    __threadfence_system();
  }
}

// One thread: spins until *flag >= expected (acquire at the given scope), at most
// policy.timeout_ns; false on timeout, with the wait recorded as signal `signal` at `where`.
template <bool System>
__device__ __forceinline__ bool wait_at_least(const uint64_t* flag, int32_t signal, uint64_t expected, const WaitPolicy& policy,
                                              int32_t where) {
  uint64_t value = System ? load_acquire_system(flag) : load_acquire_gpu(flag);
  if (value >= expected) return true;
  const uint64_t start = global_timer_ns();
  while ((value = System ? load_acquire_system(flag) : load_acquire_gpu(flag)) < expected) {
    if (global_timer_ns() - start > policy.timeout_ns) {
      record_timeout(policy.record, policy.source, signal, where, expected, value);
      return false;
    }
    __nanosleep(128);  // the overlap GEMM's tiles wait here too: short, so that a met signal is seen soon
  }
  return true;
}

// ---- tile-level notify and wait ----------------------------------------------------------------

// This rank's counters and every rank's (peers[r] addresses rank r's array; peers[rank] == local).
struct SignalArray {
  uint64_t* local = nullptr;
  uint64_t* const* peers = nullptr;  // device array of `world` pointers; may be null at world 1
  int rank = 0;
  int world = 1;
};

// CTA-wide: every thread of the CTA calls these (they contain __syncthreads()).
__device__ __forceinline__ void producer_tile_notify(const SignalArray& s, int tile, uint64_t increment = 1) {
  __syncthreads();  // every thread's stores of the tile happen-before thread 0's release
  if (threadIdx.x == 0) add_release_gpu(s.local + tile, increment);
}

__device__ __forceinline__ bool consumer_tile_wait(const SignalArray& s, int tile, uint64_t expected, const WaitPolicy& policy,
                                                   bool then_async_proxy = false) {
  __shared__ int ok;
  if (threadIdx.x == 0) {
    ok = wait_at_least<false>(s.local + tile, tile, expected, policy, tile);
    if (then_async_proxy) fence_proxy_async();
  }
  __syncthreads();
  return ok;
}

__device__ __forceinline__ void peer_tile_notify(const SignalArray& s, int peer, int tile, uint64_t increment = 1) {
  __syncthreads();
  if (threadIdx.x == 0) add_release_system((s.peers ? s.peers[peer] : s.local) + tile, increment);
}

__device__ __forceinline__ bool peer_tile_wait(const SignalArray& s, int tile, uint64_t expected, const WaitPolicy& policy,
                                               bool then_async_proxy = false) {
  __shared__ int ok;
  if (threadIdx.x == 0) {
    ok = wait_at_least<true>(s.local + tile, tile, expected, policy, tile);
    if (then_async_proxy) fence_proxy_async();
  }
  __syncthreads();
  return ok;
}

// Rank level: counter `slot` of every peer (or of one) counts ranks that reached a point.
__device__ __forceinline__ void rank_notify(const SignalArray& s, int slot, int peer = -1) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (peer >= 0) {
    add_release_system((s.peers ? s.peers[peer] : s.local) + slot, 1);
    return;
  }
  for (int r = 0; r < s.world; ++r) add_release_system((s.peers ? s.peers[r] : s.local) + slot, 1);
}

__device__ __forceinline__ bool rank_wait(const SignalArray& s, int slot, uint64_t ranks, const WaitPolicy& policy) {
  return peer_tile_wait(s, slot, ranks, policy);
}

// ---- data ------------------------------------------------------------------------------------

// A 2-D box of 16-bit elements: rows x cols, `stride` elements between row starts.
struct TileBox {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;

  __host__ __device__ TileBox sub(int64_t row, int64_t col, int64_t r, int64_t c) const {
    return TileBox{static_cast<uint16_t*>(data) + row * stride + col, r, c, stride};
  }
};

// CTA-wide copy dst = src (same shape): 16-byte accesses where the boxes allow, else 2-byte. Either
// side may be a peer's memory. No ordering: follow with a notify to publish. Each thread has
// kCopyUnroll loads in flight before it stores: one load at a time per thread leaves a CTA at a few
// GB/s (HBM and NVLink latency, measured with weft bench tilelink).
constexpr int kCopyUnroll = 8;

// The flat copy of `count` 16-byte vectors (a box whose rows are contiguous on both sides).
__device__ __forceinline__ void copy_vectors(uint4* to, const uint4* from, int64_t count) {
  for (int64_t base = threadIdx.x; base < count; base += static_cast<int64_t>(blockDim.x) * kCopyUnroll) {
    uint4 v[kCopyUnroll];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
      if (i < count) v[u] = from[i];
    }
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
      if (i < count) to[i] = v[u];
    }
  }
}

__device__ __forceinline__ void tile_copy(const TileBox& dst, const TileBox& src) {
  const auto* from = static_cast<const uint16_t*>(src.data);
  auto* to = static_cast<uint16_t*>(dst.data);
  const bool vectors = src.cols % 8 == 0 && src.stride % 8 == 0 && dst.stride % 8 == 0 && reinterpret_cast<uintptr_t>(from) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(to) % 16 == 0;
  if (vectors && (src.rows == 1 || (src.stride == src.cols && dst.stride == src.cols))) {
    copy_vectors(reinterpret_cast<uint4*>(to), reinterpret_cast<const uint4*>(from), src.rows * src.cols / 8);
  } else if (vectors) {
    // Row by row: no division per vector (64-bit division costs more than the copy's memory time).
    const int64_t per_row = src.cols / 8;
    for (int64_t r = 0; r < src.rows; ++r)
      copy_vectors(reinterpret_cast<uint4*>(to + r * dst.stride), reinterpret_cast<const uint4*>(from + r * src.stride), per_row);
  } else {
    for (int64_t r = 0; r < src.rows; ++r)
      for (int64_t c = threadIdx.x; c < src.cols; c += blockDim.x) to[r * dst.stride + c] = from[r * src.stride + c];
  }
}

// Push: our tile into a peer's (symmetric) buffer. Pull: a peer's tile into ours. The same copy;
// two names because the plan (and the reader) care which side is remote.
__device__ __forceinline__ void tile_push_data(const TileBox& peer_dst, const TileBox& local_src) { tile_copy(peer_dst, local_src); }
__device__ __forceinline__ void tile_pull_data(const TileBox& local_dst, const TileBox& peer_src) { tile_copy(local_dst, peer_src); }

// The mappings of §4 (StaticTileMap, DynamicTileMap) are in weft/tile/tile_map.hpp, shared with
// the host-side plan builders.

}  // namespace weft::tile
