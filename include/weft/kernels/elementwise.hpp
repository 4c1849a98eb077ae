// Small device kernels the executors and benchmarks need around the GEMM: poison and random fills,
// reductions and row permutations of bf16 regions, the signal increment, the device barrier, and a device-side
// relative-difference check for results too large to copy to the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "weft/tile/wait_record.hpp"

namespace weft {

constexpr uint16_t kBf16Nan = 0x7fc0;

// A strided 2-D bf16 region: rows x cols elements, `stride` elements between row starts.
struct DeviceRegion {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;
};

constexpr int kMaxReduceSources = 16;

void fill_u16(void* data, int64_t count, uint16_t bits, cudaStream_t stream);
// Uniform in [-1, 1), bf16, a pure function of (seed, index): every rank can regenerate any input.
void fill_random_bf16(void* data, int64_t count, uint64_t seed, cudaStream_t stream);
// e4m3 elements of magnitude 2^-3 to 2^3.9, random sign, never NaN; a pure function of (seed, index).
void fill_random_e4m3(void* data, int64_t count, uint64_t seed, cudaStream_t stream);
// dst = sum(srcs) (+ dst when accumulate), fp32 accumulation; all regions share dst's shape.
void reduce_bf16(const DeviceRegion& dst, const DeviceRegion* srcs, int source_count, bool accumulate, cudaStream_t stream);
// dst row i = src row source_rows[i]; source_rows is a device array of dst.rows entries (int32: a
// MoE route's table, written on the device).
void permute_rows_bf16(const DeviceRegion& dst, const DeviceRegion& src, const int64_t* source_rows, cudaStream_t stream);
void permute_rows_bf16(const DeviceRegion& dst, const DeviceRegion& src, const int32_t* source_rows, cudaStream_t stream);
// dst row i = sum over j < topk of weights[i * weight_stride + j] * src row source_rows[i * topk + j]
// (fp32 accumulation; weights bf16): MoE's top-k reduction. source_rows is a device array of
// dst.rows * topk entries.
void combine_rows_bf16(const DeviceRegion& dst, const DeviceRegion& src, const DeviceRegion& weights, const int64_t* source_rows, int topk,
                       cudaStream_t stream);
void combine_rows_bf16(const DeviceRegion& dst, const DeviceRegion& src, const DeviceRegion& weights, const int32_t* source_rows, int topk,
                       cudaStream_t stream);
// One box move of move_boxes_bf16, in elements relative to the regions' origins.
struct DeviceBoxMove {
  int64_t from_row, from_col, to_row, to_col, rows, cols;
};
// dst box moves[i].to = src box moves[i].from for every i; `moves` is a device array. One CTA per
// box, 16-byte accesses where the boxes allow (FlashOverlap's tiles always do).
void move_boxes_bf16(const DeviceRegion& dst, const DeviceRegion& src, const DeviceBoxMove* moves, int64_t count, cudaStream_t stream);
// dst = src (same shape) by SMs, 16-byte accesses where the regions allow, on at most `max_ctas`
// CTAs (0: as many as the copy fills); either side may be a peer's memory (NVLink loads and stores).
void copy_bf16(const DeviceRegion& dst, const DeviceRegion& src, int max_ctas, cudaStream_t stream);
// Adds `increment` to *counter (local or peer memory) after all earlier work on the stream (release).
void signal_add(uint64_t* counter, uint64_t increment, cudaStream_t stream);
// A barrier of every rank's stream, on the device: each rank adds 1 to its arrival word on every peer
// (release, after the stream's earlier work), then waits until every peer's arrival word on it
// reaches this barrier's number (acquire), counted by the device itself in *epoch, so that a
// captured barrier replays unchanged. Arrival words only grow. A wait that gives up after
// timeout_ns is recorded in `error` (source kWaitInBarrier, signal: the late rank) and the kernel
// returns. Every rank must pass the same barriers in the same order, in the same call: before
// arriving, each rank writes its call's signature on every peer (in one of two slots, by the
// barrier's parity: a peer can be at most one barrier ahead), and after a peer arrives compares the
// peer's with its own; a difference (ranks making calls of other shapes or plans) is recorded as
// kOtherCallInBarrier, so that it fails instead of exchanging buffers laid out for another call.
struct DeviceBarrier {
  uint64_t* const* arrivals_on = nullptr;    // device array: rank q's arrival words (world of them), as this GPU sees them
  uint64_t* const* signatures_on = nullptr;  // device array: rank q's signature words (2 x world of them), as this GPU sees them
  uint64_t signature = 0;                    // this call's: the CudaExecutor's plan fingerprint
  uint64_t* epoch = nullptr;                 // this rank's barrier count (device memory)
  int rank = 0, world = 1;
  WaitRecord* error = nullptr;
  uint64_t timeout_ns = 10'000'000'000ull;
};
void device_barrier(const DeviceBarrier& barrier, cudaStream_t stream);
// Loads the modules of the kernels plan steps launch (signal_add, reduce, row permutation, box
// moves) now: under lazy loading a kernel's first launch can wait for the device to go idle, which
// it never does while a stream waits for that kernel's work (see configure_cuda_for_waits in
// signal_set.hpp). The process may not have set CUDA_MODULE_LOADING=EAGER in time (a framework
// initialised CUDA first), so executors call this whatever the setting.
void preload_step_kernels();
// sums[0] += sum((a-b)^2), sums[1] += sum(b^2), sums[2] += count of NaN in a; doubles in device memory.
void accumulate_difference_bf16(const void* a, const void* b, int64_t count, double* sums, cudaStream_t stream);

}  // namespace weft
