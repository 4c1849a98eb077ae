// weft's own kernel layer around CUTLASS's Hopper TMA + WGMMA main loop (the collective is used
// as is; this file replaces CUTLASS's kernel and epilogue). In the producer warp group one warp
// loads A/B tiles with TMA, two hand finished tiles to the TMA engine (or store them) wherever the
// table says and one notifies; consumer warp groups run the WGMMA main loop on one tile and stage
// it for the storers. A 128-row tile has two consumer warp groups working cooperatively (64 rows
// each); a 64-row tile has one. 64-row tiles are for small M: a 128-row tile over m <= 64 does
// twice the MMA work, which is what bounds a memory-bound GEMM whose tiles cover only part of the
// SMs (m = 64, n = k = 12288 with 128x192 tiles: 64 CTAs, ~80 us of MMA).
//
// The store goes through shared memory: the consumers write the tile's accumulators to a padded
// staging buffer that holds the whole tile and go on to the next tile's MMAs; two storing warps of
// the producer warp group hand its rows to the TMA engine as bulk copies (one per row, no tensor
// map: cp.async.bulk from shared to global memory, local or a peer's) meanwhile, and free the
// buffer once the engine has read it. A tile with addends, or rows a bulk copy cannot move (not
// 16-byte aligned, a width not a multiple of 8), is copied by the storing warps themselves in
// 16-byte runs (adding the addends, after their wait). Why this path (bench/results): stored
// straight from registers, WGMMA's layout (4-byte column pairs spread over 8 rows) leaves every
// warp store 8 half-used sectors, 8-14% slower than cuBLASLt on the suites' large shapes; copied
// out by the consumers, the stores held up the next tile's MMAs, since every CTA finishes its
// tiles at about the same time and a wave's writes drain slower than the SMs issue them; copied
// out with the storing warps' own st.global, the stores still went through the SMs' load/store
// path beside the main loop's traffic (up to 8% on short-K shapes). The whole-tile buffer leaves a
// 128x256 tile 3 pipeline stages instead of 4, which costs less than any of those did. Bulk copies
// rather than tensor-map TMA stores: the target changes per tile (a peer's buffer, a remapped
// position), and a tensor map per target would be a descriptor per buffer and tile shape. Memory
// order: the consumers' staging writes are ordered before the bulk copies' reads by a proxy fence
// and the staged-tile barrier; a notifying tile's copies are waited for until written (not only
// read) and fenced against the generic proxy before the hand-off below.
//
// The notify is not made by a storing warp: a release at system scope waits until the tile's
// stores are performed, which would hold up the next tile's copy-out (and, on a consumer, measured
// on H100 at 16384x16384x8192: +3.2 to +5.1% with a notify on every tile). The storing warps hand
// the stored tile to a notifying warp through a ring of mbarriers (each storing thread's arrive
// releases its stores, the notifier's wait acquires them at CTA scope), and that warp makes the
// release.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/pipeline/pipeline.hpp>

#include "fp8_mainloop.cuh"
#include "weft/kernels/overlap_gemm.hpp"
#include "weft/tile/tilelink.cuh"
#include "weft/cuda/check.hpp"

namespace weft::overlap_gemm_detail {

using tile::add_release_system;
using tile::global_timer_ns;
using tile::load_acquire_gpu;
using tile::load_acquire_system;
using tile::store_release_gpu;

CUTLASS_DEVICE void record_timeout(const OverlapGemmLaunch& launch, int tile_index, int32_t signal, uint64_t expected, uint64_t observed) {
  tile::record_timeout(launch.error, tile::kWaitInOverlapGemm, signal, tile_index, expected, observed);
}

// Called by the whole producer warp (tile::producer_warp_wait: lane 0 waits, bounded, then the
// warp fences the async proxy before its TMA loads).
CUTLASS_DEVICE void wait_for_signal(const OverlapGemmLaunch& launch, int tile_index, const OverlapGemmTile& entry) {
  tile::producer_warp_wait(launch.wait_signals + entry.wait_signal, entry.wait_signal, entry.wait_value,
                           tile::WaitPolicy{launch.wait_timeout_ns, launch.error, tile::kWaitInOverlapGemm}, tile_index);
}

// BNMajor: B arrives as B^T [K, N] row-major (OverlapGemmLaunch::b_n_major). Only the main loop
// differs: CUTLASS's collective is built for a row-major [K, N] B (CUTLASS's names it by the K x N
// matrix: RowMajor is N-major), whose TMA loads N-contiguous boxes into an MN-major shared-memory
// layout that bf16 WGMMA reads as it is; the table walk, waits, stores and notifies are the same.
// Transposed: the launch computes the exchanged product C^T = B A^T (OverlapGemmLaunch::store_transposed:
// its A is the caller's B, its B the caller's A, m and n exchanged) and each tile is staged
// transposed, so that the storers write rows of C: a tile of the kernel's TileM x TileN is TileN
// rows by TileM columns of C. For small m, where the m rows fit in one tile column and B is read
// once (cuBLASLt runs such products this way).
// ClusterM x ClusterN (1x1, 2x1, 1x2, 2x2, 2x4, 4x2): CTAs run in clusters whose entries of one
// cluster column share a B tile (the same tile column) and of one cluster row an A tile (the same
// tile row), loaded once from L2 by TMA multicast, each CTA loading its share and every CTA of the
// row or column receiving it (OverlapGemmLaunch::cluster_m/cluster_n: the table comes in such
// groups). The grid is ClusterM wide along x and clusters of ClusterN along y, so that a cluster's
// CTAs have consecutive linear indices x + ClusterM y, in the order of CuTe's block_rank_in_cluster();
// the CTA's index in the table walk is its linear block index.
// ElementIn: the operands' type, bf16 or FP8 (e4m3; OverlapGemmLaunch::fp8): FP8 operands are loaded
// by CUTLASS's FP8 collective and multiplied by weft's FP8 main loop (fp8_mainloop.cuh: each k-tile's
// partial sums promoted into fp32 accumulators behind the next k-tile's WGMMAs, as cuBLASLt promotes
// with fast accumulation off), and the epilogue multiplies each accumulator by its row's and column's
// dequantization scales before rounding to bf16.
// OneTilePerCta: every CTA runs at most one entry of the table (the launch's entries no more than its
// CTAs; PreparedWithTile checks it), so the epilogue stages its tile in the main loop's shared memory,
// free once the entry's last k-tile is read, and the pipeline gets that memory as stages: more loads
// in flight where a CTA's one tile streams its operands from L2 (a 128x256 tile has 4 stages instead
// of 3 beside its own staging buffer).
template <int TileM, int TileN, int TileK, bool BNMajor, bool Transposed = false, int ClusterM = 1, int ClusterN = 1,
          class ElementIn = cutlass::bfloat16_t, bool OneTilePerCta = false>
struct OverlapGemmKernel {
  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::_1>;
  static constexpr int kClusterSize = ClusterM * ClusterN;
  static_assert((ClusterM == 1 || ClusterM == 2 || ClusterM == 4) && (ClusterN == 1 || ClusterN == 2 || ClusterN == 4) && kClusterSize <= 8,
                "clusters of up to 8 CTAs, 1, 2 or 4 along each side");
  static_assert(kClusterSize == 1 || !BNMajor, "clusters for K-major operands only");
  // The CTA's place in the table walk: CTA c takes entries c, c + ctas, c + 2 ctas, ...
  CUTLASS_DEVICE static int cta_index() { return static_cast<int>(blockIdx.x + blockIdx.y * gridDim.x); }
  CUTLASS_DEVICE static int cta_count() { return static_cast<int>(gridDim.x * gridDim.y); }
  using Element = cutlass::bfloat16_t;  // C, staging and addends
  static constexpr bool kFp8 = !std::is_same_v<ElementIn, cutlass::bfloat16_t>;
  static_assert(!kFp8 || (!BNMajor && !Transposed), "FP8 for the K-major, untransposed product only");
  static constexpr int kAlignment = 16 / static_cast<int>(sizeof(ElementIn));  // elements: TMA wants 16-byte rows
  static_assert(TileM == 64 || TileM == 128, "a tile has one or two 64-row consumer warp groups");
  static constexpr int kConsumerGroups = TileM / 64;
  using MainloopSchedule = std::conditional_t<kConsumerGroups == 2, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                              cutlass::gemm::KernelTmaWarpSpecialized>;

  // Epilogue staging: the whole tile, rows padded so that the column-pair writes of 8 rows by a warp
  // fall in 32 distinct banks (a row is 4 or 20 banks on from the last: 8 elements of padding give 4
  // at 64, 128, 192 and 256 columns and 20 at 96; 112 takes 24 for 4). Its bytes are carved out of
  // what the main loop's pipeline stages may use.
  // Transposed: staged as TileN rows of TileM (a warp's writes of one column pair then fall in 16
  // distinct words of 8 rows' columns, two lanes to a word).
  static_assert(!Transposed || !BNMajor, "the exchanged product reads the caller's B as its A: K-major only");
  static constexpr int kStagingRows = Transposed ? TileN : TileM;
  static constexpr int kStagingCols = Transposed ? TileM : TileN;
  // The padding: 8 elements, or the next multiple of 8 that spreads them (24 elements at 112 columns).
  static constexpr int staging_stride() {
    for (int pad = 8;; pad += 8)
      if (((kStagingCols + pad) / 2) % 32 == 4 || ((kStagingCols + pad) / 2) % 32 == 20) return kStagingCols + pad;
  }
  static constexpr int kStagingStride = staging_stride();
  static_assert((kStagingStride / 2) % 32 == 4 || (kStagingStride / 2) % 32 == 20, "staging rows must spread a warp's writes over all banks");
  static_assert(kStagingStride * 2 % 16 == 0, "a bulk copy reads a 16-byte aligned staging row");
  static constexpr int kStagingBytes = kStagingRows * kStagingStride * 2;
  // OneTilePerCta: what SharedStorage holds beside the stages and their barriers (the hand-off
  // barriers, the vestigial staging array).
  static constexpr int kBarrierBytes = 256;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementIn, cutlass::layout::RowMajor, kAlignment, ElementIn,
      std::conditional_t<BNMajor, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>, kAlignment, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<OneTilePerCta ? kBarrierBytes : kStagingBytes>, MainloopSchedule>::CollectiveOp;
  using MainloopPipeline = typename CollectiveMainloop::MainloopPipeline;
  using PipelineState = typename CollectiveMainloop::PipelineState;
  using TiledMma = typename CollectiveMainloop::TiledMma;
  using StrideA = typename CollectiveMainloop::StrideA;
  using StrideB = typename CollectiveMainloop::StrideB;

  static constexpr int kMmaThreads = 128 * kConsumerGroups;
  static constexpr int kThreads = 128 + kMmaThreads;
  // Warps 2 and 3 of the producer warp group copy staged tiles out (warp 0 loads, warp 1 notifies).
  static constexpr int kStorerThreads = 64;
  // Registers per thread after the warp groups' setmaxnreg: two consumer groups need 232 each, which
  // leaves the producer group 40 of the SM's 64K; with one consumer group (64-row tiles) there is
  // room to spare, and at 40 the storing warps' copy-out spills.
  static constexpr int kProducerRegisters = kConsumerGroups == 2 ? 40 : 96;
  static constexpr int kConsumerRegisters = 232;
  // User barriers: NamedBarrier::sync(n, id) adds CUTLASS's reserved count (8) itself, and PTX has
  // 16 IDs (hardware 8 and 9 here; FirstUserBarrier + 1 gave 16 and 17, beyond the range).
  static constexpr uint32_t kStorerBarrier = 0;
  static constexpr uint32_t kSplitBarrier = 1;
  // OneTilePerCta: both consumer groups' WGMMAs done reading the stages before either stages over them.
  static constexpr uint32_t kStagesReadBarrier = 2;

  static constexpr int kNotifySlots = 4;

  struct SharedStorage {
    typename CollectiveMainloop::TensorStorage tensors;
    alignas(16) typename CollectiveMainloop::PipelineStorage pipeline;
    alignas(128) Element staging[OneTilePerCta ? 8 : kStagingRows * kStagingStride];  // OneTilePerCta: staging_of
    // The store hand-off: every consumer thread arrives on tile_staged once its part of a tile is
    // in the staging buffer; every storing thread arrives on staging_free once it has copied its
    // part out.
    alignas(8) uint64_t tile_staged;
    uint64_t staging_free;
    // The notify hand-off, a ring of kNotifySlots: every storing thread arrives on
    // tile_stored[j % slots] once its part of notifying tile j is stored; the notifying warp
    // arrives on tile_notified[j % slots] once it has notified, which frees the slot for tile j + slots.
    uint64_t tile_stored[kNotifySlots];
    uint64_t tile_notified[kNotifySlots];
  };
  static constexpr int kSharedBytes = static_cast<int>(sizeof(SharedStorage));
  static_assert(kSharedBytes <= 232448, "more shared memory than an H100/H200 SM has");
  static_assert(!OneTilePerCta || kStagingBytes <= static_cast<int>(sizeof(typename CollectiveMainloop::TensorStorage)),
                "the staged tile must fit in the main loop's stages");
  // Where the epilogue stages a tile: its own buffer, or (OneTilePerCta) the main loop's stages.
  CUTLASS_DEVICE static Element* staging_of(SharedStorage& shared) {
    if constexpr (OneTilePerCta) return reinterpret_cast<Element*>(&shared.tensors);
    else return shared.staging;
  }
  // 3 stages of 64-deep K (a 128x256 tile beside its whole staged tile) are slightly slower than 4
  // on the suites' shapes; fewer would not hide TMA latency behind the WGMMAs.
  static_assert(CollectiveMainloop::DispatchPolicy::Stages >= 3, "the staging buffer left too few pipeline stages");

  // `mainloop` loads A from launch.a, `mainloop_a2` from launch.a2 (the same as `mainloop` when
  // there is no second A operand); both load B from launch.b.
  struct Params {
    typename CollectiveMainloop::Params mainloop;
    typename CollectiveMainloop::Params mainloop_a2;
    OverlapGemmLaunch launch;
  };

  static typename CollectiveMainloop::Params mainloop_params(const void* a, int64_t lda, int64_t m, const OverlapGemmLaunch& launch) {
    using namespace cute;
    const auto problem = make_shape(static_cast<int>(m), static_cast<int>(launch.n), static_cast<int>(launch.k), 1);
    const StrideA stride_a = make_stride(lda, Int<1>{}, int64_t{0});
    // CuTe's B is (N, K, L): K-major steps ldb between n, N-major ldb between k.
    StrideB stride_b;
    if constexpr (BNMajor) stride_b = make_stride(Int<1>{}, launch.ldb, int64_t{0});
    else stride_b = make_stride(launch.ldb, Int<1>{}, int64_t{0});
    typename CollectiveMainloop::Arguments arguments{static_cast<const ElementIn*>(a), stride_a, static_cast<const ElementIn*>(launch.b), stride_b};
    return CollectiveMainloop::to_underlying_arguments(problem, arguments, nullptr);
  }

  static Params make_params(const OverlapGemmLaunch& launch) {
    const auto main = mainloop_params(launch.a, launch.lda, launch.m, launch);
    return Params{main, launch.a2 ? mainloop_params(launch.a2, launch.lda2, launch.m2, launch) : main, launch};
  }

  // FP8: the dequantization scale of the tile's row `row` of A (one for the operand, or its row's) and
  // of its column `col` of C (B's row); 0 outside the operands (such rows and columns are not stored).
  CUTLASS_DEVICE static float a_scale(const OverlapGemmLaunch& launch, const OverlapGemmTile& entry, int row) {
    const float* scales = entry.a_operand == 1 ? launch.a2_scales : launch.a_scales;
    if (!launch.row_scales) return scales[0];
    const int64_t at = int64_t{entry.a_operand == 1 ? entry.a_tile_m : entry.tile_m} * TileM + row;
    return at < (entry.a_operand == 1 ? launch.m2 : launch.m) ? scales[at] : 0.0f;
  }
  CUTLASS_DEVICE static float b_scale(const OverlapGemmLaunch& launch, const OverlapGemmTile& entry, int col) {
    if (!launch.row_scales) return launch.b_scales[0];
    const int64_t at = int64_t{entry.tile_n} * TileN + col;
    return at < launch.n ? launch.b_scales[at] : 0.0f;
  }

  // Called by every consumer thread: its accumulators, rounded to bf16, into the staging buffer
  // (FP8: each scaled by its row's and column's scales first).
  template <class Accumulators>
  CUTLASS_DEVICE static void stage_tile(const Accumulators& accumulators, int mma_thread_idx, Element* staging,
                                        const OverlapGemmLaunch& launch, const OverlapGemmTile& entry) {
    using namespace cute;
    // The WGMMA fragment of a 64-row warp group: per thread ((2 columns, 2 rows, TileN/8 column groups), 1, 1).
    using FragmentShape = decltype(shape(accumulators.layout()));
    static_assert(is_static_v<FragmentShape>, "fragment shape must be static");
    static_assert(size<1>(FragmentShape{}) == 1 && size<2>(FragmentShape{}) == 1, "one WGMMA per warp group per tile expected");
    static_assert(size<0, 0>(FragmentShape{}) == 2 && size<0, 1>(FragmentShape{}) == 2 &&
                      size<0, 2>(FragmentShape{}) == TileN / 8,
                  "unexpected WGMMA accumulator layout");
    Tensor coordinates = make_identity_tensor(make_shape(Int<TileM>{}, Int<TileN>{}));
    TiledMma tiled_mma;
    Tensor where = tiled_mma.get_thread_slice(mma_thread_idx).partition_C(coordinates);
    // FP8: this thread's scales, all loaded before the first staging store (one round trip, not one
    // per column pair: loads after a store through a generic pointer that may alias them wait for it).
    // A thread's two rows are the same in every column group.
    [[maybe_unused]] float row_scales[2] = {1.0f, 1.0f}, col_scales[TileN / 8][2] = {};
    if constexpr (kFp8) {
      if (launch.row_scales) {
        CUTLASS_PRAGMA_UNROLL
        for (int half = 0; half < 2; ++half) row_scales[half] = a_scale(launch, entry, get<0>(where(make_coord(make_coord(0, half, 0), 0, 0))));
        CUTLASS_PRAGMA_UNROLL
        for (int group = 0; group < TileN / 8; ++group) {
          const int col = get<1>(where(make_coord(make_coord(0, 0, group), 0, 0)));
          col_scales[group][0] = b_scale(launch, entry, col);
          col_scales[group][1] = b_scale(launch, entry, col + 1);
        }
      } else {
        const float scale = a_scale(launch, entry, 0) * b_scale(launch, entry, 0);
        row_scales[0] = row_scales[1] = scale;
        CUTLASS_PRAGMA_UNROLL
        for (int group = 0; group < TileN / 8; ++group) col_scales[group][0] = col_scales[group][1] = 1.0f;
      }
    }
    CUTLASS_PRAGMA_UNROLL
    for (int group = 0; group < TileN / 8; ++group)
      CUTLASS_PRAGMA_UNROLL
      for (int half = 0; half < 2; ++half) {
        const auto first = make_coord(make_coord(0, half, group), 0, 0);
        const auto second = make_coord(make_coord(1, half, group), 0, 0);
        const int row = get<0>(where(first)), col = get<1>(where(first));
        float x = accumulators(first), y = accumulators(second);
        if constexpr (kFp8) {
          x *= row_scales[half] * col_scales[group][0];
          y *= row_scales[half] * col_scales[group][1];
        }
        if constexpr (Transposed) {
          const __nv_bfloat162 pair = __floats2bfloat162_rn(x, y);
          auto* raw = reinterpret_cast<__nv_bfloat16*>(staging);
          raw[col * kStagingStride + row] = pair.x;
          raw[(col + 1) * kStagingStride + row] = pair.y;
        } else {
          *reinterpret_cast<__nv_bfloat162*>(staging + row * kStagingStride + col) = __floats2bfloat162_rn(x, y);
        }
      }
  }

  // Called by every storing thread: the staged tile to where the entry says, as bulk copies of whole
  // rows (committed, not waited for) or else whole 16-byte runs of a row per thread, consecutive
  // threads on consecutive runs. kAddends: whether the entry has
  // addends (two instantiations, so that a plain store pays nothing for them): addend_count boxes
  // of the tile's size, the j-th addend_row_step rows after the first, added in fp32.
  template <bool kAddends>
  CUTLASS_DEVICE static void copy_out(int storer_idx, const OverlapGemmTile& entry, const OverlapGemmLaunch& launch, const Element* staging) {
    const OverlapGemmTarget& target = launch.targets[entry.store_target];
    Element* origin = static_cast<Element*>(target.data) + entry.store_row * target.stride + entry.store_col;
    const OverlapGemmTarget& addend_target = launch.targets[kAddends ? entry.addend_target : entry.store_target];
    const Element* addends = static_cast<const Element*>(addend_target.data) + entry.addend_row * addend_target.stride + entry.addend_col;
    const int64_t addend_step = entry.addend_row_step * addend_target.stride;
    const bool vector_ok = reinterpret_cast<uintptr_t>(origin) % 16 == 0 && target.stride % 8 == 0 &&
                           (!kAddends || (reinterpret_cast<uintptr_t>(addends) % 16 == 0 && addend_target.stride % 8 == 0));
    if constexpr (!kAddends) {
      if (vector_ok && entry.cols % 8 == 0) {
        // Row r by storing thread r % kStorerThreads; the caller waits for the engine's reads.
        for (int row = storer_idx; row < entry.rows; row += kStorerThreads)
          cute::SM90_BULK_COPY_S2G::copy(staging + row * kStagingStride, origin + row * target.stride,
                                         static_cast<int32_t>(entry.cols * sizeof(Element)));
        cute::tma_store_arrive();
        return;
      }
    }
    constexpr int kRunsPerRow = kStagingCols / 8;
    static_assert(kStagingRows * kRunsPerRow % kStorerThreads == 0, "every storing thread copies the same number of runs");
#pragma unroll 4
    for (int pass = 0; pass < kStagingRows * kRunsPerRow / kStorerThreads; ++pass) {
      const int run = pass * kStorerThreads + storer_idx;
      const int row = run / kRunsPerRow, col = (run % kRunsPerRow) * 8;
      if (row >= entry.rows) break;  // runs are in row order: the rest are past the tile's rows too
      const Element* from = staging + row * kStagingStride + col;
      Element* to = origin + row * target.stride + col;
      const int valid = entry.cols - col;
      if (vector_ok && valid >= 8) {
        uint4 value = *reinterpret_cast<const uint4*>(from);
        if constexpr (kAddends) {
          const Element* addend = addends + row * addend_target.stride + col;
          // Peers' partial sums: through L2 (__ldcg), where their NVLink stores landed.
          float sum[8] = {};
          tile::add_bf16_vector(sum, value);
          for (int j = 0; j < entry.addend_count; ++j) tile::add_bf16_vector(sum, __ldcg(reinterpret_cast<const uint4*>(addend + j * addend_step)));
          value = tile::bf16_vector_of(sum);
        }
        *reinterpret_cast<uint4*>(to) = value;
      } else if constexpr (kAddends) {
        const Element* addend = addends + row * addend_target.stride + col;
        for (int e = 0; e < 8 && e < valid; ++e) {
          float sum = static_cast<float>(from[e]);
          for (int j = 0; j < entry.addend_count; ++j)
            sum += __bfloat162float(__ushort_as_bfloat16(__ldcg(reinterpret_cast<const unsigned short*>(addend + j * addend_step + e))));
          to[e] = Element(sum);
        }
      } else {
        for (int e = 0; e < 8 && e < valid; ++e) to[e] = from[e];
      }
    }
  }

  // Split K, called by all consumer threads: adds the previous split's partial sums (waiting for
  // them), then either hands the sum to the next split (returns false: nothing to store) or, for
  // the last split, returns true with the whole sum in `accumulators`. Each thread writes and
  // reads back its own fragment, as float4 runs interleaved across threads so that a warp's
  // accesses are contiguous.
  template <class Accumulators>
  CUTLASS_DEVICE static bool combine_splits(Accumulators& accumulators, int mma_thread_idx, int tile_index,
                                            const OverlapGemmTile& entry, const OverlapGemmLaunch& launch) {
    using namespace cute;
    constexpr int kValues = decltype(size(accumulators))::value;
    static_assert(kValues % 4 == 0, "fragments are read and written as float4");
    const int64_t tiles_n = (launch.n + TileN - 1) / TileN;
    const int64_t slot = int64_t{entry.tile_m} * tiles_n + entry.tile_n;
    float4* partial = reinterpret_cast<float4*>(launch.split_workspace + slot * (TileM * TileN));
    uint32_t* counter = launch.split_counters + slot;
    if (entry.split > 0) {
      if (mma_thread_idx == 0) {
        uint32_t seen = load_acquire_gpu(counter);
        const uint64_t start = global_timer_ns();
        while (seen != static_cast<uint32_t>(entry.split)) {
          if (global_timer_ns() - start > launch.wait_timeout_ns) {
            record_timeout(launch, tile_index, kSplitFixupSignal, static_cast<uint64_t>(entry.split), seen);
            break;
          }
          __nanosleep(64);
          seen = load_acquire_gpu(counter);
        }
      }
      cutlass::arch::NamedBarrier::sync(kMmaThreads, kSplitBarrier);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kValues / 4; ++i) {
        const float4 v = __ldcg(partial + i * kMmaThreads + mma_thread_idx);  // L2, not a stale L1 line
        accumulators(4 * i) += v.x;
        accumulators(4 * i + 1) += v.y;
        accumulators(4 * i + 2) += v.z;
        accumulators(4 * i + 3) += v.w;
      }
    }
    if (entry.split + 1 < entry.splits) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kValues / 4; ++i)
        __stcg(partial + i * kMmaThreads + mma_thread_idx,
               make_float4(accumulators(4 * i), accumulators(4 * i + 1), accumulators(4 * i + 2), accumulators(4 * i + 3)));
      // Every thread's partial sums happen-before the release (bar.sync, then a cumulative release).
      cutlass::arch::NamedBarrier::sync(kMmaThreads, kSplitBarrier);
      if (mma_thread_idx == 0) store_release_gpu(counter, static_cast<uint32_t>(entry.split + 1));
      return false;
    }
    // The last split: nobody reads the counter again this call; the next call starts from zero.
    if (mma_thread_idx == 0) *counter = 0;
    return true;
  }

  // Waits (bounded) for the phase of `barrier` with this parity to complete.
  CUTLASS_DEVICE static bool wait_for_phase(const uint64_t* barrier, uint32_t parity, uint64_t timeout_ns) {
    if (cutlass::arch::ClusterBarrier::try_wait(barrier, parity)) return true;
    const uint64_t start = global_timer_ns();
    while (!cutlass::arch::ClusterBarrier::try_wait(barrier, parity))  // try_wait itself suspends a while
      if (global_timer_ns() - start > timeout_ns) return false;
    return true;
  }

  // One thread: walks this CTA's entries as the consumers do and, for each one that notifies,
  // waits (bounded) until the consumers have stored it, then makes the release and frees its slot.
  CUTLASS_DEVICE static void notify_stored_tiles(const OverlapGemmLaunch& launch, SharedStorage& shared) {
    uint32_t handed = 0;
    for (int t = cta_index(); t < launch.tile_count; t += cta_count()) {
      const OverlapGemmTile& entry = launch.tiles[t];
      if (entry.notify_rank < 0 || entry.k_tiles == kNoWorkKTiles) continue;
      const uint32_t slot = handed % kNotifySlots, use = handed / kNotifySlots;
      if (!wait_for_phase(&shared.tile_stored[slot], use & 1, launch.wait_timeout_ns))
        record_timeout(launch, t, kNotifyHandoffSignal, handed + 1, handed);
      add_release_system(launch.notify_signals[entry.notify_rank] + entry.notify_signal, entry.notify_increment);
      cutlass::arch::ClusterBarrier::arrive(&shared.tile_notified[slot]);
      ++handed;
    }
  }

  // Whether the consumers store an entry (stage it): unsplit entries and the last split of a tile,
  // not stream-K's padding.
  CUTLASS_DEVICE static bool stores(const OverlapGemmTile& entry) {
    return entry.k_tiles != kNoWorkKTiles && (entry.splits <= 1 || entry.split + 1 == entry.splits);
  }

  // Called by every storing thread: walks this CTA's entries as the consumers do and copies each
  // staged tile out, then frees the staging buffer and hands a notifying tile to the notifier.
  // An entry with addends waits for them here (bounded, system-scope acquire by one thread, then
  // the storers' barrier orders the others' addend loads after it), off the consumers' path.
  CUTLASS_DEVICE static void store_staged_tiles(const OverlapGemmLaunch& launch, SharedStorage& shared, int storer_idx) {
    uint32_t staged = 0, handed = 0;
    for (int t = cta_index(); t < launch.tile_count; t += cta_count()) {
      const OverlapGemmTile& entry = launch.tiles[t];
      if (!stores(entry)) continue;
      if (entry.addend_count > 0 && entry.wait_signal >= 0) {
        if (storer_idx == 0)
          tile::wait_at_least<true>(launch.wait_signals + entry.wait_signal, entry.wait_signal, entry.wait_value,
                                    tile::WaitPolicy{launch.wait_timeout_ns, launch.error, tile::kWaitInOverlapGemm}, t);
        cutlass::arch::NamedBarrier::sync(kStorerThreads, kStorerBarrier);
      }
      if (!wait_for_phase(&shared.tile_staged, staged & 1, launch.wait_timeout_ns))
        record_timeout(launch, t, kStoreHandoffSignal, staged + 1, staged);
      if (entry.addend_count > 0) copy_out<true>(storer_idx, entry, launch, staging_of(shared));
      else copy_out<false>(storer_idx, entry, launch, staging_of(shared));
      cute::tma_store_wait<0>();  // the engine has read this thread's rows (at once if it copied none)
      ++staged;
      // Its reads of the staging buffer are done: the arrive orders them before the consumers' next
      // writes (before the notify hand-off, so that a notifier behind does not hold up the MMAs).
      cutlass::arch::ClusterBarrier::arrive(&shared.staging_free);
      if (entry.notify_rank >= 0) {
        // Each storing thread's arrive releases its own stores; the notifier's wait completes once
        // all have arrived and acquires them all, then it releases at system scope, cumulatively
        // over those stores. A thread first waits until the slot's previous tile has been notified
        // (at once unless the notifier is behind), so no arrival falls into a phase of an older tile.
        // Bulk copies first written, then ordered before this thread's arrive.
        tile::wait_bulk_stores_complete();
        tile::fence_proxy_async();
        const uint32_t slot = handed % kNotifySlots, use = handed / kNotifySlots;
        if (use > 0 && !wait_for_phase(&shared.tile_notified[slot], (use - 1) & 1, launch.wait_timeout_ns))
          record_timeout(launch, t, kNotifyHandoffSignal, handed + 1 - kNotifySlots, handed);
        cutlass::arch::ClusterBarrier::arrive(&shared.tile_stored[slot]);
        ++handed;
      }
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

    if (warp_group == 0 && warp_in_group == 0 && cute::elect_one_sync()) {
      CollectiveMainloop::prefetch_tma_descriptors(params.mainloop);
      if (params.launch.a2) CollectiveMainloop::prefetch_tma_descriptors(params.mainloop_a2);
    }

    typename MainloopPipeline::Params pipeline_params;
    if (warp_group == 0 && warp_in_group == 0) pipeline_params.role = MainloopPipeline::ThreadCategory::Producer;
    if (warp_group > 0) pipeline_params.role = MainloopPipeline::ThreadCategory::Consumer;
    pipeline_params.is_leader = thread_idx % cutlass::NumThreadsPerWarpGroup == 0;
    pipeline_params.num_consumers = kMmaThreads;
    pipeline_params.transaction_bytes = params.mainloop.tma_transaction_bytes;
    MainloopPipeline pipeline(shared.pipeline, pipeline_params, ClusterShape{});
    if (thread_idx == 0) {
      cutlass::arch::ClusterBarrier::init(&shared.tile_staged, kMmaThreads);
      cutlass::arch::ClusterBarrier::init(&shared.staging_free, kStorerThreads);
      for (int slot = 0; slot < kNotifySlots; ++slot) {
        cutlass::arch::ClusterBarrier::init(&shared.tile_stored[slot], kStorerThreads);
        cutlass::arch::ClusterBarrier::init(&shared.tile_notified[slot], 1);
      }
    }
    cutlass::arch::fence_barrier_init();
    // Barriers initialised before anyone uses them; in a cluster, the peer's too (its consumers
    // release this CTA's stages and its multicast loads complete on this CTA's barriers).
    if constexpr (kClusterSize > 1) {
      cute::cluster_arrive_relaxed();
      cute::cluster_wait();
    } else {
      __syncthreads();
    }

    const auto problem = make_shape(static_cast<int>(launch.m), static_cast<int>(launch.n), static_cast<int>(launch.k), 1);
    const int k_tiles = static_cast<int>((launch.k + TileK - 1) / TileK);
    CollectiveMainloop mainloop;

    if (warp_group == 0) {
      cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
      if (warp_in_group == 1) {
        if (lane == 0) notify_stored_tiles(launch, shared);
        return;
      }
      if (warp_in_group >= 2) {
        store_staged_tiles(launch, shared, thread_idx - 64);
        return;
      }
      const auto problem_a2 = make_shape(static_cast<int>(launch.a2 ? launch.m2 : launch.m), static_cast<int>(launch.n), static_cast<int>(launch.k), 1);
      const auto load_inputs = mainloop.load_init(problem, params.mainloop);
      PipelineState write_state = cutlass::make_producer_start_state<MainloopPipeline>();
      for (int t = cta_index(); t < launch.tile_count; t += cta_count()) {
        const OverlapGemmTile entry = launch.tiles[t];
        if (entry.k_tiles == kNoWorkKTiles) continue;  // padding: every role skips it
        if (entry.wait_signal >= 0 && entry.addend_count == 0) wait_for_signal(launch, t, entry);  // else in the epilogue
        const int first = entry.k_tiles > 0 ? entry.k_begin : 0, count = entry.k_tiles > 0 ? entry.k_tiles : k_tiles;
        auto k_iterator = cute::make_coord_iterator(idx2crd(first, shape<3>(get<0>(load_inputs))), shape<3>(get<0>(load_inputs)));
        // The entry's A rows: its own tile row of A, or tile a_tile_m of the second A operand.
        if (entry.a_operand == 0)
          mainloop.load(params.mainloop, pipeline, write_state, load_inputs, make_coord(entry.tile_m, entry.tile_n, _, 0), k_iterator, count,
                        lane, cute::block_rank_in_cluster(), shared.tensors);
        else
          mainloop.load(params.mainloop_a2, pipeline, write_state, mainloop.load_init(problem_a2, params.mainloop_a2),
                        make_coord(entry.a_tile_m, entry.tile_n, _, 0), k_iterator, count, lane, cute::block_rank_in_cluster(), shared.tensors);
        write_state.advance(count);
      }
      mainloop.load_tail(pipeline, write_state);
      return;
    }

    cutlass::arch::warpgroup_reg_alloc<kConsumerRegisters>();
    const int mma_thread_idx = thread_idx % kMmaThreads;
    PipelineState read_state;
    TiledMma tiled_mma;
    uint32_t staged = 0;  // tiles staged so far (every consumer thread counts)
    for (int t = cta_index(); t < launch.tile_count; t += cta_count()) {
      const OverlapGemmTile entry = launch.tiles[t];
      if (entry.k_tiles == kNoWorkKTiles) continue;
      auto accumulators = partition_fragment_C(tiled_mma, take<0, 2>(TileShape{}));
      const int count = entry.k_tiles > 0 ? entry.k_tiles : k_tiles;
      if constexpr (kFp8) {
        // weft's FP8 main loop (fp8_mainloop.cuh) adds the promoted partial sums into the
        // accumulators and releases every stage itself.
        clear(accumulators);
        fp8_mma_promoting_behind<CollectiveMainloop>(pipeline, read_state, accumulators, count, mma_thread_idx, shared.tensors);
      } else {
        mainloop.mma(pipeline, read_state, accumulators, count, mma_thread_idx, shared.tensors, params.mainloop);
        mainloop.mma_tail(pipeline, read_state, count);
      }
      read_state.advance(count);
      if (entry.splits > 1 && !combine_splits(accumulators, mma_thread_idx, t, entry, launch)) continue;
      // The previous tile copied out of the staging buffer, then this one written into it and handed
      // to the storing warps (the arrive releases this thread's writes to them).
      if (staged > 0 && !wait_for_phase(&shared.staging_free, (staged - 1) & 1, launch.wait_timeout_ns))
        record_timeout(launch, t, kStoreHandoffSignal, staged, staged - 1);
      // OneTilePerCta: every stage's loads have landed and been read (this was the CTA's one entry: no
      // load follows); the other consumer group may still be reading the last stages.
      if constexpr (OneTilePerCta) cutlass::arch::NamedBarrier::sync(kMmaThreads, kStagesReadBarrier);
      stage_tile(accumulators, mma_thread_idx, staging_of(shared), launch, entry);
      cute::tma_store_fence();  // the staging writes (generic proxy) before the bulk copies' reads
      cutlass::arch::ClusterBarrier::arrive(&shared.tile_staged);
      ++staged;
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
// shared-memory attribute and the grid size. A call only enqueues.
template <int TileM, int TileN, int TileK, bool BNMajor, bool Transposed = false, int ClusterM = 1, int ClusterN = 1,
          class ElementIn = cutlass::bfloat16_t, bool OneTilePerCta = false>
class PreparedWithTile final : public OverlapGemm::Prepared {
 public:
  using Kernel = OverlapGemmKernel<TileM, TileN, TileK, BNMajor, Transposed, ClusterM, ClusterN, ElementIn, OneTilePerCta>;

  explicit PreparedWithTile(const OverlapGemmLaunch& launch) : params_(Kernel::make_params(launch)), ctas_(grid_ctas(launch)) {
    if (OneTilePerCta) require_one_tile_per_cta(launch);
  }

  // The grid a launch gets: one CTA per entry up to one per SM (or launch.max_ctas); in clusters,
  // whole clusters, no more than fit at once (an SM pair per cluster within a GPC; the query's grid
  // is one cluster, as CUTLASS's max-active-clusters query makes it).
  static int grid_ctas(const OverlapGemmLaunch& launch) {
    int device = 0, sm_count = 0;
    WEFT_CUDA_CHECK(cudaGetDevice(&device));
    WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
    WEFT_CUDA_CHECK(cudaFuncSetAttribute(&overlap_gemm_entry<Kernel>, cudaFuncAttributeMaxDynamicSharedMemorySize, Kernel::kSharedBytes));
    int ctas = std::min(launch.tile_count, launch.max_ctas > 0 ? launch.max_ctas : sm_count);
    if constexpr (Kernel::kClusterSize > 1) {
      cudaLaunchConfig_t config = launch_config(Kernel::kClusterSize, nullptr);
      cudaLaunchAttribute attribute = cluster_attribute();
      config.attrs = &attribute;
      config.numAttrs = 1;
      int clusters = 0;
      WEFT_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, &overlap_gemm_entry<Kernel>, &config));
      ctas = std::max(1, std::min(ctas / Kernel::kClusterSize, clusters)) * Kernel::kClusterSize;
    }
    return ctas;
  }

  void update(const OverlapGemmLaunch& launch) override {
    if (OneTilePerCta) require_one_tile_per_cta(launch);
    params_ = Kernel::make_params(launch);
  }

  void launch(cudaStream_t stream) override {
    if (params_.launch.tile_count == 0) return;
    if constexpr (Kernel::kClusterSize > 1) {
      cudaLaunchConfig_t config = launch_config(ctas_, stream);
      cudaLaunchAttribute attribute = cluster_attribute();
      config.attrs = &attribute;
      config.numAttrs = 1;
      WEFT_CUDA_CHECK(cudaLaunchKernelEx(&config, &overlap_gemm_entry<Kernel>, params_));
    } else {
      overlap_gemm_entry<Kernel><<<ctas_, Kernel::kThreads, Kernel::kSharedBytes, stream>>>(params_);
      WEFT_CUDA_CHECK(cudaGetLastError());
    }
  }

 private:
  // The grid of clusters: ClusterM wide along x, `ctas` / ClusterM along y (Kernel's cluster layout).
  static cudaLaunchConfig_t launch_config(int ctas, cudaStream_t stream) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(ClusterM, static_cast<unsigned>(ctas / ClusterM), 1);
    config.blockDim = dim3(Kernel::kThreads, 1, 1);
    config.dynamicSmemBytes = Kernel::kSharedBytes;
    config.stream = stream;
    return config;
  }
  void require_one_tile_per_cta(const OverlapGemmLaunch& launch) const {
    if (launch.tile_count > ctas_)
      throw std::logic_error("overlap GEMM: the kernel that stages its tile in the pipeline's memory runs one entry per CTA, but the table has " +
                             std::to_string(launch.tile_count) + " entries for " + std::to_string(ctas_) + " CTAs");
  }
  static cudaLaunchAttribute cluster_attribute() {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = ClusterM;
    attribute.val.clusterDim.y = ClusterN;
    attribute.val.clusterDim.z = 1;
    return attribute;
  }

  typename Kernel::Params params_;
  int ctas_ = 0;
};

// The kernel of one entry per CTA where the tile has it compiled (Deepenable) and the launch's entries
// fit its grid (OverlapGemmKernel's OneTilePerCta), else the one of these template arguments.
template <int TileM, int TileN, int TileK, bool BNMajor, bool Transposed, int ClusterM, int ClusterN, bool Deepenable,
          class ElementIn = cutlass::bfloat16_t>
std::unique_ptr<OverlapGemm::Prepared> prepare_deepest(const OverlapGemmLaunch& launch) {
  if constexpr (Deepenable) {
    using Deep = PreparedWithTile<TileM, TileN, TileK, BNMajor, Transposed, ClusterM, ClusterN, ElementIn, true>;
    if (launch.tile_count <= Deep::grid_ctas(launch)) return std::make_unique<Deep>(launch);
  }
  return std::make_unique<PreparedWithTile<TileM, TileN, TileK, BNMajor, Transposed, ClusterM, ClusterN, ElementIn>>(launch);
}

// The kernel of this tile shape for the launch's B layout (a launch keeps its layout: retarget moves
// pointers only), for the exchanged product where the tile is compiled for it (Exchangeable), and in
// clusters of two where it is compiled for them (Clusterable; of four and eight with LargerClusters),
// the exchanged product in the kernel's clusters 1x2, 2x2 and 4x2 (ExchangedClusters), one entry per
// CTA where it fits (Deepenable: prepare_deepest). FP8 operands are dispatched by their tiles' own
// preparers (overlap_gemm_128x128x128_fp8.cu, overlap_gemm_64x128.cu), not here.
template <int TileM, int TileN, int TileK, bool Exchangeable = false, bool Clusterable = false, bool Deepenable = false, bool LargerClusters = false,
          bool ExchangedClusters = false>
std::unique_ptr<OverlapGemm::Prepared> prepare_with_tile(const OverlapGemmLaunch& launch) {
  if (launch.fp8)
    throw std::invalid_argument("overlap GEMM: no " + std::to_string(TileM) + "x" + std::to_string(TileN) + "x" + std::to_string(TileK) +
                                " kernel has FP8 operands (128x128x128 and 64x128x128 do)");
  if (launch.cluster_m * launch.cluster_n > 1 && launch.store_transposed) {
    if constexpr (ExchangedClusters) {
      if (launch.b_n_major)
        throw std::invalid_argument("overlap GEMM: the exchanged product reads the caller's B as its A operand: B must be K-major ([N, K])");
      if (launch.cluster_m == 1 && launch.cluster_n == 2) return prepare_deepest<TileM, TileN, TileK, false, true, 1, 2, Deepenable>(launch);
      if (launch.cluster_m == 2 && launch.cluster_n == 2) return prepare_deepest<TileM, TileN, TileK, false, true, 2, 2, Deepenable>(launch);
      if (launch.cluster_m == 4 && launch.cluster_n == 2) return prepare_deepest<TileM, TileN, TileK, false, true, 4, 2, Deepenable>(launch);
    }
    throw std::invalid_argument("overlap GEMM: no " + std::to_string(TileM) + "x" + std::to_string(TileN) + " kernel of the exchanged product runs in clusters of " +
                                std::to_string(launch.cluster_m) + "x" + std::to_string(launch.cluster_n) + " (compiled_in_cluster)");
  }
  if (launch.cluster_m * launch.cluster_n > 1) {
    if constexpr (Clusterable) {
      if (launch.b_n_major) throw std::invalid_argument("overlap GEMM: clusters run K-major operands only");
      if (launch.cluster_m == 2 && launch.cluster_n == 1) return prepare_deepest<TileM, TileN, TileK, false, false, 2, 1, Deepenable>(launch);
      if (launch.cluster_m == 1 && launch.cluster_n == 2) return prepare_deepest<TileM, TileN, TileK, false, false, 1, 2, Deepenable>(launch);
      if constexpr (LargerClusters) {
        if (launch.cluster_m == 2 && launch.cluster_n == 2) return prepare_deepest<TileM, TileN, TileK, false, false, 2, 2, Deepenable>(launch);
        if (launch.cluster_m == 2 && launch.cluster_n == 4) return prepare_deepest<TileM, TileN, TileK, false, false, 2, 4, Deepenable>(launch);
        if (launch.cluster_m == 4 && launch.cluster_n == 2) return prepare_deepest<TileM, TileN, TileK, false, false, 4, 2, Deepenable>(launch);
      }
      throw std::invalid_argument("overlap GEMM: no " + std::to_string(TileM) + "x" + std::to_string(TileN) + " kernel runs in clusters of " +
                                  std::to_string(launch.cluster_m) + "x" + std::to_string(launch.cluster_n) + " (compiled_in_cluster)");
    } else {
      throw std::invalid_argument("overlap GEMM: no " + std::to_string(TileM) + "x" + std::to_string(TileN) +
                                  " kernel runs in clusters (128x128 and 128x256 do)");
    }
  }
  if (launch.store_transposed) {
    if constexpr (Exchangeable) {
      if (launch.b_n_major)
        throw std::invalid_argument("overlap GEMM: the exchanged product reads the caller's B as its A operand: B must be K-major ([N, K])");
      return std::make_unique<PreparedWithTile<TileM, TileN, TileK, false, true>>(launch);
    } else {
      throw std::invalid_argument("overlap GEMM: no " + std::to_string(TileM) + "x" + std::to_string(TileN) +
                                  " kernel stores its tiles transposed (the exchanged product has 128x96, 128x128 and 128x192)");
    }
  }
  if (launch.b_n_major) return std::make_unique<PreparedWithTile<TileM, TileN, TileK, true>>(launch);
  return prepare_deepest<TileM, TileN, TileK, false, false, 1, 1, Deepenable>(launch);
}

}  // namespace weft::overlap_gemm_detail
