// The consumer side of the overlap GEMM's FP8 main loop: WGMMAs on the shared-memory stages that
// CUTLASS's FP8 collective loads (its TMA producer, pipeline, shared-memory layouts and tiled MMA are
// used as they are), with weft's own promotion.
//
// Hopper's FP8 WGMMA accumulates in a narrower format than fp32, so the partial sums of each k-tile
// (128 e4m3 elements deep) are added into fp32 accumulators ("promoted"), as cuBLASLt does with fast
// accumulation off. CUTLASS's collective waits for all of a k-tile's WGMMAs before adding them
// (warpgroup_wait<0>), so the tensor cores idle through the wait's drain and the adds on every
// k-tile; both consumer warp groups read the same stages, so they idle together. Here two k-tiles are
// issued at once into alternating partial-sum fragments; the first is added (waited for with the
// second's batch still in flight, warpgroup_wait<1>) while the second runs, then the second, and each
// stage is released once its WGMMAs completed: the tensor cores drain once per two k-tiles, not once
// per k-tile, and half the adds run behind WGMMAs. (Waiting across the loop's back edge instead, so
// that a k-tile is always queued, made ptxas serialize the WGMMAs: the fragment in flight at the back
// edge is copied there.) It costs a third accumulator fragment (64x128 per warp group: 3 x 64 fp32
// registers per thread, within the consumers' 232).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cute/arch/mma_sm90_gmma.hpp>

namespace weft::overlap_gemm_detail {

// Adds the product of `k_tile_count` k-tiles, from the stage at `read` on, into `accumulators`, and
// releases every stage it read (there is no separate tail to call).
template <class Collective, class Accumulators>
CUTLASS_DEVICE void fp8_mma_promoting_behind(typename Collective::MainloopPipeline& pipeline, typename Collective::PipelineState read,
                                             Accumulators& accumulators, int k_tile_count, int mma_thread_idx,
                                             typename Collective::TensorStorage& storage) {
  using namespace cute;
  using TiledMma = typename Collective::TiledMma;
  if (k_tile_count <= 0) return;
  Tensor sA = make_tensor(make_smem_ptr(storage.smem_A.data()), typename Collective::SmemLayoutA{});  // (BLK_M, BLK_K, PIPE)
  Tensor sB = make_tensor(make_smem_ptr(storage.smem_B.data()), typename Collective::SmemLayoutB{});  // (BLK_N, BLK_K, PIPE)
  constexpr int kWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
  const Layout warp_group_layout = make_layout(Int<kWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
  const int warp_group = __shfl_sync(0xffffffff, mma_thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
  TiledMma tiled_mma;
  auto thread_mma = tiled_mma.get_slice(warp_group_layout(warp_group));
  Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));  // (MMA, MMA_M, MMA_K, PIPE) descriptors
  Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));  // (MMA, MMA_N, MMA_K, PIPE)
  Tensor even = make_fragment_like(accumulators);  // partial sums of even k-tiles
  Tensor odd = make_fragment_like(accumulators);   // and of odd ones

  // Waits for the stage at `read`, issues its WGMMAs into `partial` (overwriting it) as one batch.
  auto issue = [&](auto& partial) {
    auto token = pipeline.consumer_try_wait(read);
    pipeline.consumer_wait(read, token);
    const int stage = read.index();
    warpgroup_fence_operand(partial);
    warpgroup_arrive();
    tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
    CUTLASS_PRAGMA_UNROLL
    for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
      cute::gemm(tiled_mma, tCrA(_, _, k_block, stage), tCrB(_, _, k_block, stage), partial);
      tiled_mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
    warpgroup_fence_operand(partial);
    ++read;
  };
  // Adds a finished k-tile's partial sums and releases its stage to the producer.
  typename Collective::PipelineState release = read;
  auto promote = [&](auto& partial) {
    warpgroup_fence_operand(partial);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(accumulators); ++i) accumulators(i) += partial(i);
    // Pins the adds here, between this wait and the next: without it the compiler may sink them all
    // past the last wait (nvcc's PTX does; ptxas happened to hoist them back), losing the overlap.
    warpgroup_fence_operand(accumulators);
    pipeline.consumer_release(release);
    ++release;
  };

  warpgroup_fence_operand(accumulators);
  int left = k_tile_count;
  CUTLASS_PRAGMA_NO_UNROLL
  for (; left >= 2; left -= 2) {
    issue(even);
    issue(odd);
    warpgroup_wait<1>();
    promote(even);
    warpgroup_wait<0>();
    promote(odd);
  }
  if (left == 1) {
    issue(even);
    warpgroup_wait<0>();
    promote(even);
  }
  warpgroup_fence_operand(accumulators);
}

}  // namespace weft::overlap_gemm_detail
