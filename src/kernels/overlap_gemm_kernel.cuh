// weft's own kernel layer around CUTLASS's Hopper TMA + WGMMA main loop (the collective is used
// as is; this file replaces CUTLASS's kernel and epilogue). One producer warp group loads A/B
// tiles with TMA, two consumer warp groups run the WGMMA main loop cooperatively on one 128-row
// tile, then store it straight from registers to wherever the table says and notify.
//
// Why stores from registers rather than a TMA-store epilogue: the store target changes per tile
// (a peer's buffer, a remapped position) and a generic-proxy st.global followed by a release
// add is visible to a peer in the plain memory model; a TMA store would need a tensor map per
// target and an async-proxy fence before every notify. Measured cost is the open question of
// issue 4; this is the simple correct baseline to measure against cuBLASLt.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/pipeline/pipeline.hpp>

#include "weft/kernels/overlap_gemm.hpp"
#include "weft/runtime/cuda_check.hpp"

namespace weft::overlap_gemm_detail {

CUTLASS_DEVICE uint64_t load_acquire_system(const uint64_t* address) {
  uint64_t value;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(value) : "l"(address) : "memory");
  return value;
}

CUTLASS_DEVICE void add_release_system(uint64_t* address, uint64_t increment) {
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(address), "l"(increment) : "memory");
}

CUTLASS_DEVICE uint64_t global_timer_ns() {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

// Called by the whole producer warp. Lane 0 spins (bounded); the warp then orders its later TMA
// reads (async proxy) after what the acquire made visible (generic proxy).
CUTLASS_DEVICE void wait_for_signal(const OverlapGemmLaunch& launch, int tile_index, const OverlapGemmTile& entry) {
  if (threadIdx.x % 32 == 0) {
    const uint64_t* flag = launch.wait_signals + entry.wait_signal;
    const uint64_t expected =
        entry.wait_value + (launch.raised_per_call ? launch.epoch * launch.raised_per_call[entry.wait_signal] : 0);
    uint64_t value = load_acquire_system(flag);
    if (value < expected) {
      const uint64_t start = global_timer_ns();
      while ((value = load_acquire_system(flag)) < expected) {
        if (global_timer_ns() - start > launch.wait_timeout_ns) {
          OverlapGemmError* error = launch.error;
          if (error && atomicCAS(&error->failed, 0u, 1u) == 0u) {
            error->tile = tile_index;
            error->signal = entry.wait_signal;
            error->expected = expected;
            error->observed = value;
            __threadfence_system();
          }
          break;  // go on with whatever is there: wrong numbers, reported, rather than a hang
        }
        __nanosleep(128);
      }
    }
  }
  __syncwarp();
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

template <int TileM, int TileN, int TileK>
struct OverlapGemmKernel {
  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using Element = cutlass::bfloat16_t;
  static constexpr int kAlignment = 8;  // elements: TMA wants 16-byte rows

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cutlass::layout::RowMajor, kAlignment, Element,
      cutlass::layout::ColumnMajor, kAlignment, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<0>, cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using MainloopPipeline = typename CollectiveMainloop::MainloopPipeline;
  using PipelineState = typename CollectiveMainloop::PipelineState;
  using TiledMma = typename CollectiveMainloop::TiledMma;
  using StrideA = typename CollectiveMainloop::StrideA;
  using StrideB = typename CollectiveMainloop::StrideB;

  static constexpr int kMmaThreads = 256;
  static constexpr int kThreads = 128 + kMmaThreads;
  static constexpr int kProducerRegisters = 40;
  static constexpr int kConsumerRegisters = 232;
  static constexpr uint32_t kNotifyBarrier = static_cast<uint32_t>(cutlass::arch::ReservedNamedBarriers::FirstUserBarrier);

  struct SharedStorage {
    typename CollectiveMainloop::TensorStorage tensors;
    alignas(16) typename CollectiveMainloop::PipelineStorage pipeline;
  };
  static constexpr int kSharedBytes = static_cast<int>(sizeof(SharedStorage));

  struct Params {
    typename CollectiveMainloop::Params mainloop;
    OverlapGemmLaunch launch;
  };

  static Params make_params(const OverlapGemmLaunch& launch) {
    using namespace cute;
    const auto problem = make_shape(static_cast<int>(launch.m), static_cast<int>(launch.n), static_cast<int>(launch.k), 1);
    const StrideA stride_a = make_stride(launch.lda, Int<1>{}, int64_t{0});
    const StrideB stride_b = make_stride(launch.ldb, Int<1>{}, int64_t{0});
    typename CollectiveMainloop::Arguments arguments{static_cast<const Element*>(launch.a), stride_a,
                                                     static_cast<const Element*>(launch.b), stride_b};
    return Params{CollectiveMainloop::to_underlying_arguments(problem, arguments, nullptr), launch};
  }

  template <class Accumulators>
  CUTLASS_DEVICE static void store_tile(const Accumulators& accumulators, int mma_thread_idx, const OverlapGemmTile& entry,
                                        const OverlapGemmLaunch& launch) {
    using namespace cute;
    const OverlapGemmTarget& target = launch.targets[entry.store_target];
    Element* origin = static_cast<Element*>(target.data) + entry.store_row * target.stride + entry.store_col;
    Tensor tile = make_tensor(make_gmem_ptr(origin), make_layout(make_shape(Int<TileM>{}, Int<TileN>{}), make_stride(target.stride, Int<1>{})));
    Tensor coordinates = make_identity_tensor(make_shape(Int<TileM>{}, Int<TileN>{}));
    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_thread_slice(mma_thread_idx);
    Tensor stores = thread_mma.partition_C(tile);
    Tensor where = thread_mma.partition_C(coordinates);
    static_assert(decltype(size(accumulators))::value % 2 == 0, "WGMMA fragments hold column pairs");
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(accumulators); i += 2) {
      const int row = get<0>(where(i)), col = get<1>(where(i));
      const int row_next = get<0>(where(i + 1)), col_next = get<1>(where(i + 1));
      Element* first = &stores(i);
      // WGMMA's accumulator layout keeps values (i, i+1) in adjacent columns of one row: one
      // 4-byte store when both are inside the tile and the address allows it.
      if (row_next == row && col_next == col + 1 && row < entry.rows && col_next < entry.cols &&
          reinterpret_cast<uintptr_t>(first) % 4 == 0) {
        *reinterpret_cast<__nv_bfloat162*>(first) = __floats2bfloat162_rn(accumulators(i), accumulators(i + 1));
        continue;
      }
      if (row < entry.rows && col < entry.cols) stores(i) = Element(accumulators(i));
      if (row_next < entry.rows && col_next < entry.cols) stores(i + 1) = Element(accumulators(i + 1));
    }
  }

  CUTLASS_DEVICE void operator()(const Params& params, char* shared_memory) const {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace cute;
    SharedStorage& shared = *reinterpret_cast<SharedStorage*>(shared_memory);
    const OverlapGemmLaunch& launch = params.launch;
    const int thread_idx = static_cast<int>(threadIdx.x);
    const int warp_group = cutlass::canonical_warp_group_idx();
    const int warp_in_group = cutlass::canonical_warp_idx_sync() % cutlass::NumWarpsPerWarpGroup;
    const int lane = cutlass::canonical_lane_idx();

    if (warp_group == 0 && warp_in_group == 0 && cute::elect_one_sync())
      CollectiveMainloop::prefetch_tma_descriptors(params.mainloop);

    typename MainloopPipeline::Params pipeline_params;
    if (warp_group == 0 && warp_in_group == 0) pipeline_params.role = MainloopPipeline::ThreadCategory::Producer;
    if (warp_group > 0) pipeline_params.role = MainloopPipeline::ThreadCategory::Consumer;
    pipeline_params.is_leader = thread_idx % cutlass::NumThreadsPerWarpGroup == 0;
    pipeline_params.num_consumers = kMmaThreads;
    pipeline_params.transaction_bytes = params.mainloop.tma_transaction_bytes;
    MainloopPipeline pipeline(shared.pipeline, pipeline_params, ClusterShape{});
    __syncthreads();  // barriers initialised before anyone uses them

    const auto problem = make_shape(static_cast<int>(launch.m), static_cast<int>(launch.n), static_cast<int>(launch.k), 1);
    const int k_tiles = static_cast<int>((launch.k + TileK - 1) / TileK);
    CollectiveMainloop mainloop;

    if (warp_group == 0) {
      cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
      if (warp_in_group != 0) return;
      auto load_inputs = mainloop.load_init(problem, params.mainloop);
      PipelineState write_state = cutlass::make_producer_start_state<MainloopPipeline>();
      for (int t = static_cast<int>(blockIdx.x); t < launch.tile_count; t += static_cast<int>(gridDim.x)) {
        const OverlapGemmTile entry = launch.tiles[t];
        if (entry.wait_signal >= 0) wait_for_signal(launch, t, entry);
        const auto block = make_coord(entry.tile_m, entry.tile_n, _, 0);
        auto k_iterator = cute::make_coord_iterator(idx2crd(0, shape<3>(get<0>(load_inputs))), shape<3>(get<0>(load_inputs)));
        mainloop.load(params.mainloop, pipeline, write_state, load_inputs, block, k_iterator, k_tiles, lane, 0u, shared.tensors);
        write_state.advance(k_tiles);
      }
      mainloop.load_tail(pipeline, write_state);
      return;
    }

    cutlass::arch::warpgroup_reg_alloc<kConsumerRegisters>();
    const int mma_thread_idx = thread_idx % kMmaThreads;
    PipelineState read_state;
    TiledMma tiled_mma;
    for (int t = static_cast<int>(blockIdx.x); t < launch.tile_count; t += static_cast<int>(gridDim.x)) {
      const OverlapGemmTile entry = launch.tiles[t];
      auto accumulators = partition_fragment_C(tiled_mma, take<0, 2>(TileShape{}));
      mainloop.mma(pipeline, read_state, accumulators, k_tiles, mma_thread_idx, shared.tensors, params.mainloop);
      mainloop.mma_tail(pipeline, read_state, k_tiles);
      read_state.advance(k_tiles);
      store_tile(accumulators, mma_thread_idx, entry, launch);
      if (entry.notify_rank >= 0) {
        // Every consumer thread's stores happen-before the release below (bar.sync orders them
        // within the CTA; the release at system scope is cumulative over them).
        cutlass::arch::NamedBarrier::sync(kMmaThreads, kNotifyBarrier);
        if (mma_thread_idx == 0)
          add_release_system(launch.notify_signals[entry.notify_rank] + entry.notify_signal, entry.notify_increment);
      }
    }
#else
    if (threadIdx.x == 0 && blockIdx.x == 0) printf("weft overlap GEMM: built without sm_90a; nothing computed\n");
#endif
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, 1) overlap_gemm_entry(const __grid_constant__ typename Kernel::Params params) {
  extern __shared__ char shared_memory[];
  Kernel{}(params, shared_memory);
}

// Everything a call does not need to redo: the kernel's parameters (TMA descriptors included), its
// shared-memory attribute and the grid size. A call only sets the epoch and enqueues.
template <int TileM, int TileN, int TileK>
class PreparedWithTile final : public OverlapGemm::Prepared {
 public:
  using Kernel = OverlapGemmKernel<TileM, TileN, TileK>;

  explicit PreparedWithTile(const OverlapGemmLaunch& launch) : params_(Kernel::make_params(launch)) {
    int device = 0, sm_count = 0;
    WEFT_CUDA_CHECK(cudaGetDevice(&device));
    WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
    WEFT_CUDA_CHECK(cudaFuncSetAttribute(&overlap_gemm_entry<Kernel>, cudaFuncAttributeMaxDynamicSharedMemorySize, Kernel::kSharedBytes));
    ctas_ = std::min(launch.tile_count, launch.max_ctas > 0 ? launch.max_ctas : sm_count);
  }

  void launch(cudaStream_t stream, uint64_t epoch) override {
    if (params_.launch.tile_count == 0) return;
    params_.launch.epoch = epoch;
    overlap_gemm_entry<Kernel><<<ctas_, Kernel::kThreads, Kernel::kSharedBytes, stream>>>(params_);
    WEFT_CUDA_CHECK(cudaGetLastError());
  }

 private:
  typename Kernel::Params params_;
  int ctas_ = 0;
};

}  // namespace weft::overlap_gemm_detail
