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
//   tile_reduce                                 a box summed from several (local or peers') boxes,
//                                               fp32 accumulation, by a CTA's (or a warp's) threads.
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

#include <cuda_bf16.h>

#include <cstdint>

#include "weft/ir/tile_map.hpp"
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

__device__ __forceinline__ uint64_t load_relaxed_gpu(const uint64_t* address) {
  uint64_t value;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(value) : "l"(address) : "memory");
  return value;
}

__device__ __forceinline__ uint64_t load_relaxed_system(const uint64_t* address) {
  uint64_t value;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(value) : "l"(address) : "memory");
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

// Waits until every bulk copy (cp.async.bulk, TMA) this thread committed has written global memory;
// before a notify, follow it with fence_proxy_async().
__device__ __forceinline__ void wait_bulk_stores_complete() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// ---- bounded waits ---------------------------------------------------------------------------

// How often a long wait looks at the call's wait record for a wait that already gave up.
constexpr uint64_t kRecordCheckNs = 1'000'000;

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
// A met signal costs one acquire load. A wait that spins looks with relaxed loads and acquires once
// it sees the value: an acquire invalidates the SM's L1 (CCTL.IVALL), and one per look of a spin
// would take the L1 from every other warp of the SM while this one waits (counters only grow, so
// the acquire reads at least the value seen).
template <bool System>
__device__ __forceinline__ bool wait_at_least(const uint64_t* flag, int32_t signal, uint64_t expected, const WaitPolicy& policy,
                                              int32_t where) {
  uint64_t value = System ? load_acquire_system(flag) : load_acquire_gpu(flag);
  if (value >= expected) return true;
  const uint64_t start = global_timer_ns();
  uint64_t next_record_check = start + kRecordCheckNs;
  while ((value = System ? load_relaxed_system(flag) : load_relaxed_gpu(flag)) < expected) {
    const uint64_t now = global_timer_ns();
    if (now - start > policy.timeout_ns) {
      record_timeout(policy.record, policy.source, signal, where, expected, value);
      return false;
    }
    // A wait of this call already gave up: its result is wrong and reported, so the rest of the call
    // does not wait out a timeout per wait (a persistent CTA would, once per tile or unit it runs).
    // The record is host-mapped memory, so each look is a PCIe round trip: once per kRecordCheckNs
    // of waiting, never on a wait that is met or short (the tiles and items that wait are many).
    if (now >= next_record_check) {
      if (policy.record && *reinterpret_cast<const volatile uint32_t*>(&policy.record->failed) != 0) return false;
      next_record_check = now + kRecordCheckNs;
    }
    __nanosleep(128);  // the overlap GEMM's tiles wait here too: short, so that a met signal is seen soon
  }
  (void)(System ? load_acquire_system(flag) : load_acquire_gpu(flag));
  return true;
}

// Warp-wide: a warp-specialised kernel's loading warp, before the TMA loads of a tile that waits
// (the overlap GEMM's producer, the attention kernel's per KV tile). Lane 0 waits (bounded,
// system-scope acquire: the data may come from a peer or the copy engine); then the whole warp
// orders its later async-proxy reads (TMA) after what the acquire made visible. It synchronises this
// warp only: consumer_tile_wait's __syncthreads() would hang a kernel whose warps run apart. On
// timeout it records, returns false (on lane 0) and lets the loads go on: wrong numbers, reported,
// rather than a hang.
__device__ __forceinline__ bool producer_warp_wait(const uint64_t* flag, int32_t signal, uint64_t expected, const WaitPolicy& policy,
                                                   int32_t where) {
  bool met = true;
  if (threadIdx.x % 32 == 0) met = wait_at_least<true>(flag, signal, expected, policy, where);
  __syncwarp();
  fence_proxy_async();
  return met;
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

// Copies and reductions of 16-bit boxes by a group of threads (a CTA: first = threadIdx.x, step =
// blockDim.x; a warp: the lane and 32): 16-byte accesses where the boxes allow, else 2-byte. Either
// side may be a peer's memory. No ordering: follow with a notify to publish. Each thread has
// kCopyUnroll loads in flight (a copy: kCopyBatch of them while it stores the batch before): one
// load at a time per thread leaves a CTA at a few GB/s (HBM and NVLink latency, weft bench
// tilelink). A box whose rows are contiguous on every side is one flat run; otherwise its vectors
// are numbered row-major and each thread finds its vector's row with one 32-bit division (never a
// 64-bit one), so that narrow rows (a 128x256 tile has 32 vectors per row) still keep every thread
// busy.
constexpr int kCopyUnroll = 8;
constexpr int kCopyBatch = kCopyUnroll / 2;
constexpr int kReduceUnroll = 2;  // per source: with several sources, more in flight only adds registers (bench/results)
constexpr int kMaxTileReduceSources = 16;

__device__ __forceinline__ bool vector_box(const TileBox& b) {
  return b.stride % 8 == 0 && reinterpret_cast<uintptr_t>(b.data) % 16 == 0;
}

// Where 16-byte vector i of a box lies, in elements from the box's start: in one flat run, or in
// rows of `per_row` vectors `stride` elements apart (fewer than 2^32 vectors: a 32-bit division).
struct FlatRun {
  __device__ __forceinline__ int64_t operator()(int64_t i) const { return i * 8; }
};
struct BoxRows {
  uint32_t per_row;
  int64_t stride;
  __device__ __forceinline__ int64_t operator()(int64_t i) const {
    const auto v = static_cast<uint32_t>(i);
    const uint32_t r = v / per_row;
    return static_cast<int64_t>(r) * stride + static_cast<int64_t>(v - r * per_row) * 8;
  }
};

// `count` 16-byte vectors from `from` to `to`, each side placed by its own Place, in batches of
// kCopyBatch per thread: the next batch is loaded before this one is stored, so that a thread has
// loads in flight while its stores issue (two batches of 4 beat one of 8 loaded then stored,
// cold L2 on H200: bench/results).
template <class Place>
__device__ __forceinline__ void copy_vectors(uint16_t* to, Place to_at, const uint16_t* from, Place from_at, int64_t count, int first,
                                             int step) {
  uint4 v[kCopyBatch];
#pragma unroll
  for (int u = 0; u < kCopyBatch; ++u) {
    const int64_t i = first + static_cast<int64_t>(u) * step;
    if (i < count) v[u] = *reinterpret_cast<const uint4*>(from + from_at(i));
  }
  for (int64_t base = first; base < count; base += static_cast<int64_t>(step) * kCopyBatch) {
    const int64_t next = base + static_cast<int64_t>(step) * kCopyBatch;
    uint4 w[kCopyBatch];
#pragma unroll
    for (int u = 0; u < kCopyBatch; ++u) {
      const int64_t i = next + static_cast<int64_t>(u) * step;
      if (i < count) w[u] = *reinterpret_cast<const uint4*>(from + from_at(i));
    }
#pragma unroll
    for (int u = 0; u < kCopyBatch; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * step;
      if (i < count) *reinterpret_cast<uint4*>(to + to_at(i)) = v[u];
    }
#pragma unroll
    for (int u = 0; u < kCopyBatch; ++u) v[u] = w[u];
  }
}
// The flat copy of `count` vectors, CTA-wide.
__device__ __forceinline__ void copy_vectors(uint4* to, const uint4* from, int64_t count) {
  copy_vectors(reinterpret_cast<uint16_t*>(to), FlatRun{}, reinterpret_cast<const uint16_t*>(from), FlatRun{}, count,
               static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
}

// dst = src (same shape) by the thread group (first, step).
__device__ __forceinline__ void tile_copy(const TileBox& dst, const TileBox& src, int first, int step) {
  const auto* from = static_cast<const uint16_t*>(src.data);
  auto* to = static_cast<uint16_t*>(dst.data);
  const bool vectors = src.cols % 8 == 0 && vector_box(src) && vector_box(dst);
  if (vectors && (src.rows == 1 || (src.stride == src.cols && dst.stride == src.cols))) {
    copy_vectors(to, FlatRun{}, from, FlatRun{}, src.rows * src.cols / 8, first, step);
  } else if (vectors && src.rows * (src.cols / 8) < (int64_t{1} << 32)) {
    const auto per_row = static_cast<uint32_t>(src.cols / 8);
    copy_vectors(to, BoxRows{per_row, dst.stride}, from, BoxRows{per_row, src.stride}, src.rows * (src.cols / 8), first, step);
  } else if (vectors) {
    for (int64_t r = 0; r < src.rows; ++r)
      copy_vectors(to + r * dst.stride, FlatRun{}, from + r * src.stride, FlatRun{}, src.cols / 8, first, step);
  } else {
    for (int64_t r = 0; r < src.rows; ++r)
      for (int64_t c = first; c < src.cols; c += step) to[r * dst.stride + c] = from[r * src.stride + c];
  }
}
// CTA-wide.
__device__ __forceinline__ void tile_copy(const TileBox& dst, const TileBox& src) {
  tile_copy(dst, src, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
}

__device__ __forceinline__ void add_bf16_vector(float* sum, const uint4& x) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 f = __bfloat1622float2(h[e]);
    sum[2 * e] += f.x;
    sum[2 * e + 1] += f.y;
  }
}

__device__ __forceinline__ uint4 bf16_vector_of(const float* sum) {
  uint4 result;
  auto* h = reinterpret_cast<__nv_bfloat162*>(&result);
#pragma unroll
  for (int e = 0; e < 4; ++e) h[e] = __floats2bfloat162_rn(sum[2 * e], sum[2 * e + 1]);
  return result;
}

// out = sum of in[0..sources) (+ out), fp32 accumulation, over `count` 16-byte vectors of bf16, each
// box placed by its own Place; each thread has kReduceUnroll vectors of every source in flight.
template <class Place>
__device__ __forceinline__ void reduce_vectors(uint16_t* out, Place out_at, const uint16_t* const* in, const Place* in_at, int sources,
                                               bool accumulate, int64_t count, int first, int step) {
  for (int64_t base = first; base < count; base += static_cast<int64_t>(step) * kReduceUnroll) {
    float sum[kReduceUnroll][8];
#pragma unroll
    for (int u = 0; u < kReduceUnroll; ++u)
#pragma unroll
      for (int e = 0; e < 8; ++e) sum[u][e] = 0.0f;
    for (int s = accumulate ? -1 : 0; s < sources; ++s) {
      const uint16_t* from = s < 0 ? out : in[s];
      const Place at = s < 0 ? out_at : in_at[s];
      uint4 x[kReduceUnroll];
#pragma unroll
      for (int u = 0; u < kReduceUnroll; ++u) {
        const int64_t i = base + static_cast<int64_t>(u) * step;
        if (i < count) x[u] = *reinterpret_cast<const uint4*>(from + at(i));
      }
#pragma unroll
      for (int u = 0; u < kReduceUnroll; ++u)
        if (base + static_cast<int64_t>(u) * step < count) add_bf16_vector(sum[u], x[u]);
    }
#pragma unroll
    for (int u = 0; u < kReduceUnroll; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * step;
      if (i < count) *reinterpret_cast<uint4*>(out + out_at(i)) = bf16_vector_of(sum[u]);
    }
  }
}

// out = a + b over `count` 16-byte vectors of bf16 (fp32 sum), each side placed by its own Place:
// the two-operand case (one source accumulated into out: the companion's chained gemm_rs items;
// or two sources), with kPairUnroll vectors of both operands loaded before any is added, so that a
// thread has 2 * kPairUnroll loads in flight. Peer reads over NVLink take microseconds, so a CTA's
// rate follows the bytes it has in flight: reduce_vectors' two loads per operand, one operand
// after the other, left the companion's reductions several times slower (bench/results).
constexpr int kPairUnroll = 8;
template <class Place>
__device__ __forceinline__ void add_vector_pairs(uint16_t* out, Place out_at, const uint16_t* a, Place a_at, const uint16_t* b, Place b_at,
                                                 int64_t count, int first, int step) {
  for (int64_t base = first; base < count; base += static_cast<int64_t>(step) * kPairUnroll) {
    uint4 x[kPairUnroll], y[kPairUnroll];
#pragma unroll
    for (int u = 0; u < kPairUnroll; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * step;
      if (i < count) {
        x[u] = *reinterpret_cast<const uint4*>(a + a_at(i));
        y[u] = *reinterpret_cast<const uint4*>(b + b_at(i));
      }
    }
#pragma unroll
    for (int u = 0; u < kPairUnroll; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * step;
      if (i < count) {
        float sum[8] = {};
        add_bf16_vector(sum, x[u]);
        add_bf16_vector(sum, y[u]);
        *reinterpret_cast<uint4*>(out + out_at(i)) = bf16_vector_of(sum);
      }
    }
  }
}

// reduce_vectors, or add_vector_pairs where there are two operands in all, or copy_vectors for one.
template <class Place>
__device__ __forceinline__ void reduce_or_add_pairs(uint16_t* out, Place out_at, const uint16_t* const* in, const Place* in_at, int sources,
                                                    bool accumulate, int64_t count, int first, int step) {
  if (!accumulate && sources == 1)  // a bf16 value through an fp32 sum is itself (but -0 stays -0)
    copy_vectors(out, out_at, in[0], in_at[0], count, first, step);
  else if (accumulate && sources == 1)
    add_vector_pairs(out, out_at, out, out_at, in[0], in_at[0], count, first, step);
  else if (!accumulate && sources == 2)
    add_vector_pairs(out, out_at, in[0], in_at[0], in[1], in_at[1], count, first, step);
  else
    reduce_vectors(out, out_at, in, in_at, sources, accumulate, count, first, step);
}

// dst = sum of srcs[0..count) (+ dst when accumulate), bf16 with fp32 accumulation, by the thread
// group (first, step); at most kMaxTileReduceSources sources, each of dst's shape. Sources may be
// peers' memory (TileLink's pull-mode reduce-scatter).
__device__ __forceinline__ void tile_reduce(const TileBox& dst, const TileBox* srcs, int count, bool accumulate, int first, int step) {
  bool vectors = dst.cols % 8 == 0 && vector_box(dst);
  bool flat = dst.rows == 1 || dst.stride == dst.cols;
  for (int s = 0; s < count; ++s) {
    vectors = vectors && vector_box(srcs[s]);
    flat = flat && (dst.rows == 1 || srcs[s].stride == dst.cols);
  }
  auto* out = static_cast<__nv_bfloat16*>(dst.data);
  const uint16_t* in[kMaxTileReduceSources];
  for (int s = 0; s < count; ++s) in[s] = static_cast<const uint16_t*>(srcs[s].data);
  auto* to = static_cast<uint16_t*>(dst.data);
  if (vectors && flat) {
    const FlatRun at[kMaxTileReduceSources] = {};
    reduce_or_add_pairs(to, FlatRun{}, in, at, count, accumulate, dst.rows * dst.cols / 8, first, step);
    return;
  }
  if (vectors && dst.rows * (dst.cols / 8) < (int64_t{1} << 32)) {
    const auto per_row = static_cast<uint32_t>(dst.cols / 8);
    BoxRows at[kMaxTileReduceSources];
    for (int s = 0; s < count; ++s) at[s] = BoxRows{per_row, srcs[s].stride};
    reduce_or_add_pairs(to, BoxRows{per_row, dst.stride}, in, at, count, accumulate, dst.rows * (dst.cols / 8), first, step);
    return;
  }
  if (vectors) {
    const FlatRun at[kMaxTileReduceSources] = {};
    for (int64_t r = 0; r < dst.rows; ++r) {
      const uint16_t* row_in[kMaxTileReduceSources];
      for (int s = 0; s < count; ++s) row_in[s] = in[s] + r * srcs[s].stride;
      reduce_or_add_pairs(to + r * dst.stride, FlatRun{}, row_in, at, count, accumulate, dst.cols / 8, first, step);
    }
    return;
  }
  for (int64_t r = 0; r < dst.rows; ++r)
    for (int64_t c = first; c < dst.cols; c += step) {
      float sum = accumulate ? __bfloat162float(out[r * dst.stride + c]) : 0.0f;
      for (int s = 0; s < count; ++s) sum += __bfloat162float(static_cast<const __nv_bfloat16*>(srcs[s].data)[r * srcs[s].stride + c]);
      out[r * dst.stride + c] = __float2bfloat16(sum);
    }
}
// CTA-wide.
__device__ __forceinline__ void tile_reduce(const TileBox& dst, const TileBox* srcs, int count, bool accumulate) {
  tile_reduce(dst, srcs, count, accumulate, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
}

// Push: our tile into a peer's (symmetric) buffer. Pull: a peer's tile into ours. The same copy;
// two names because the plan (and the reader) care which side is remote.
__device__ __forceinline__ void tile_push_data(const TileBox& peer_dst, const TileBox& local_src) { tile_copy(peer_dst, local_src); }
__device__ __forceinline__ void tile_pull_data(const TileBox& local_dst, const TileBox& peer_src) { tile_copy(local_dst, peer_src); }

// The mappings of §4 (StaticTileMap, DynamicTileMap) are in weft/ir/tile_map.hpp, shared with
// the host-side plan builders.

}  // namespace weft::tile
