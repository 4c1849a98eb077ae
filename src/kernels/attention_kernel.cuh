// weft's attention forward kernel (kernels/attention.hpp), built from CuTe's Hopper pieces as the
// overlap GEMM is: TMA loads into a multi-stage shared-memory pipeline (CUTLASS's PipelineTmaAsync),
// WGMMA, warp-specialised producer and consumer warp groups.
//
// Work unit: one query tile (TileQ rows) of one query head. Units go to persistent CTAs in rounds of
// one unit per CTA, in snake order, in sections of heads, within a section the last query tiles
// first (weft/kernels/attention_schedule.hpp: the order and why, shared with the host).
//
// Warp roles. Warp group 0 is the producer: its warp 0 loads the unit's Q tile once (TMA, its own
// barrier), then walks the KV tiles of the table in order, each in pieces of TileKv rows, and loads
// the K and V of every piece the causal mask does not hide from the whole query tile into the next
// pipeline stage. Before the first piece of a KV tile that waits it makes the tile's wait
// (tile::producer_warp_wait: lane 0 waits, bounded, then the warp fences the async proxy), as the
// overlap GEMM's producer does before a tile's loads, unless its last wait covers it (the same
// signal, a value no larger). The warp stays converged piece by piece (lane 0 issues the loads).
// Warp groups 1..TileQ/64 are the consumers, 64 query rows each: per piece, S = Q K^T (WGMMA, both
// operands in shared memory), the online softmax in registers (fp32; scores prescaled by
// log2(e)/sqrt(d) so that exp2 gives the exponentials; each thread holds two rows, reduced over the
// 4 threads of a quad), P rounded to bf16 in registers
// as the A operand of O += P V (WGMMA, register-sourced A). As FA3 does, a piece's P V is issued
// behind the next piece's S (intra-warp-group overlap), and the two consumer groups take turns to
// issue their WGMMAs (ping-pong), so that one group's softmax runs while the other's products do.
// Then the epilogue: O divided by the row
// sums, combined with what o and lse hold where the launch merges, stored from registers (bf16
// pairs), and the log-sum-exp stored by one thread per row.
//
// Masking: keys past a piece's valid rows and (causal) keys after a query's global position get a
// score of -infinity. Rows past the k/v boxes are zero-filled by TMA; rows of the box after a
// piece that ends inside it (a KV tile whose height is not a multiple of TileKv) belong to another
// KV tile, possibly not yet arrived: its V rows are zeroed in shared memory before P V reads them,
// so that whatever is there (even a NaN) meets only a zero probability in a zero row.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "weft/kernels/attention.hpp"
#include "weft/kernels/attention_schedule.hpp"
#include "weft/cuda/check.hpp"
#include "weft/tile/tilelink.cuh"

namespace weft::attention_detail {

// The pieces a unit reads, as both roles walk them: KV tile `tile` rows [row, row + rows) of k/v.
struct Piece {
  int64_t row;
  int rows;
};

// Query tile q_tile of head `head`, and its global positions.
struct Unit {
  int q_tile;
  int head;
  int64_t first_row;   // in q
  int valid_rows;      // rows of the tile inside q
  int64_t first_position, last_position;
};

template <int HeadDim, int TileQ, int TileKv, int Stages>
struct AttentionKernel {
  using Element = cutlass::bfloat16_t;
  static_assert(HeadDim == 64 || HeadDim == 128, "compiled head dims: 64, 128");
  static_assert(TileQ == 64 || TileQ == 128 || TileQ == 192, "a query tile has one, two or three 64-row consumer warp groups");
  static_assert(TileKv % 64 == 0 && TileKv <= 256, "a WGMMA's N is at most 256");
  static constexpr int kConsumerGroups = TileQ / 64;
  static constexpr int kMmaThreads = 128 * kConsumerGroups;
  static constexpr int kThreads = 128 + kMmaThreads;
  // The register file (64K) over the warp groups: three consumer groups get 160 each beside a
  // 32-register producer (FA3's split at 192-row query tiles).
  static constexpr int kProducerRegisters = kConsumerGroups == 3 ? 32 : kConsumerGroups == 2 ? 40 : 56;
  static constexpr int kConsumerRegisters = kConsumerGroups == 3 ? 160 : kConsumerGroups == 2 ? 232 : 240;
  static_assert(128 * kProducerRegisters + kMmaThreads * kConsumerRegisters <= 65536, "the warp groups' registers exceed the SM's");
  // A user barrier: NamedBarrier::sync(n, id) adds CUTLASS's reserved count (8), and PTX has 16 IDs.
  static constexpr uint32_t kConsumerBarrier = 0;
  // The consumer groups' turns to issue WGMMAs (take_turn), user barriers 1 .. kConsumerGroups.
  static constexpr uint32_t kTurnBarrier = 1;
  static constexpr bool kPingPong = kConsumerGroups >= 2;

  // Shared-memory tiles: Q and K K-major (head dim contiguous), V as V^T (head dim x keys),
  // MN-major, which is how its rows lie in memory and how WGMMA reads P V's B operand; 128-byte
  // swizzles (the head dims are multiples of 64 elements).
  using SmemLayoutQ = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Element>{},
                                                   cute::Shape<cute::Int<TileQ>, cute::Int<HeadDim>>{}));
  using SmemLayoutK = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Element>{},
                                                   cute::Shape<cute::Int<TileKv>, cute::Int<HeadDim>, cute::Int<Stages>>{}));
  using SmemLayoutVt = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<Element>{},
                                                    cute::Shape<cute::Int<HeadDim>, cute::Int<TileKv>, cute::Int<Stages>>{},
                                                    cute::Step<cute::_2, cute::_1, cute::_3>{}));

  // Consumer warp groups side by side along M (64 rows each).
  using AtomLayout = cute::Layout<cute::Shape<cute::Int<kConsumerGroups>, cute::_1, cute::_1>>;
  using TiledMmaQK = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::Int<TileKv>, cute::Int<HeadDim>>>(), AtomLayout{}));
  using TiledMmaPV = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::Int<HeadDim>, cute::Int<TileKv>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>(),
      AtomLayout{}));

  using Pipeline = cutlass::PipelineTmaAsync<Stages>;
  using PipelineState = cutlass::PipelineState<Stages>;

  static constexpr uint32_t kQBytes = TileQ * HeadDim * sizeof(Element);
  static constexpr uint32_t kKvStageBytes = 2 * TileKv * HeadDim * sizeof(Element);

  struct SharedStorage {
    alignas(1024) Element q[cute::cosize_v<SmemLayoutQ>];
    alignas(1024) Element k[cute::cosize_v<SmemLayoutK>];
    alignas(1024) Element v[cute::cosize_v<SmemLayoutVt>];
    typename Pipeline::SharedStorage pipeline;
    // The Q hand-off: q_full completes when a unit's Q tile has landed (TMA transaction bytes);
    // q_free when every consumer thread has made its last MMA that reads it.
    alignas(8) uint64_t q_full;
    uint64_t q_free;
  };
  static constexpr int kSharedBytes = static_cast<int>(sizeof(SharedStorage));
  static_assert(kSharedBytes <= 232448, "more shared memory than an H100/H200 SM has");

  // Global tensors as TMA sees them: q (rows, head dim, heads), k (rows, head dim, kv heads), v^T
  // (head dim, rows, kv heads); heads are head_dim columns apart.
  using GmemLayoutRows = cute::Layout<cute::Shape<int, int, int>, cute::Stride<int64_t, cute::_1, int64_t>>;
  using GmemLayoutCols = cute::Layout<cute::Shape<int, int, int>, cute::Stride<cute::_1, int64_t, int64_t>>;

  static auto make_tma_q(const Element* q, int64_t rows, int64_t ld, int heads) {
    using namespace cute;
    Tensor t = make_tensor(make_gmem_ptr(q), GmemLayoutRows(make_shape(static_cast<int>(rows), HeadDim, heads), make_stride(ld, _1{}, int64_t{HeadDim})));
    return make_tma_copy(SM90_TMA_LOAD{}, t, SmemLayoutQ{}, Shape<Int<TileQ>, Int<HeadDim>>{}, _1{});
  }
  static auto make_tma_k(const Element* k, int64_t rows, int64_t ld, int heads) {
    using namespace cute;
    Tensor t = make_tensor(make_gmem_ptr(k), GmemLayoutRows(make_shape(static_cast<int>(rows), HeadDim, heads), make_stride(ld, _1{}, int64_t{HeadDim})));
    return make_tma_copy(SM90_TMA_LOAD{}, t, take<0, 2>(SmemLayoutK{}), Shape<Int<TileKv>, Int<HeadDim>>{}, _1{});
  }
  static auto make_tma_vt(const Element* v, int64_t rows, int64_t ld, int heads) {
    using namespace cute;
    Tensor t = make_tensor(make_gmem_ptr(v), GmemLayoutCols(make_shape(HeadDim, static_cast<int>(rows), heads), make_stride(_1{}, ld, int64_t{HeadDim})));
    return make_tma_copy(SM90_TMA_LOAD{}, t, take<0, 2>(SmemLayoutVt{}), Shape<Int<HeadDim>, Int<TileKv>>{}, _1{});
  }
  using TmaQ = decltype(make_tma_q(nullptr, 1, HeadDim, 1));
  using TmaK = decltype(make_tma_k(nullptr, 1, HeadDim, 1));
  using TmaVt = decltype(make_tma_vt(nullptr, 1, HeadDim, 1));

  struct Params {
    TmaQ tma_q;
    TmaK tma_k;
    TmaVt tma_vt;
    AttentionLaunch launch;
    float scale_log2;  // log2(e) / sqrt(head_dim): exp2 of score * this is exp of the scaled score
    float scale;       // 1 / sqrt(head_dim)
    AttentionSchedule schedule;  // which unit each CTA takes in each round
  };

  static AttentionSchedule schedule_of(const AttentionLaunch& launch) {
    return AttentionSchedule::of(launch.q_rows, TileQ, launch.heads, launch.kv_heads, launch.causal);
  }

  static Params make_params(const AttentionLaunch& launch) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(HeadDim));
    return Params{make_tma_q(static_cast<const Element*>(launch.q), launch.q_rows, launch.ldq, launch.heads),
                  make_tma_k(static_cast<const Element*>(launch.k), launch.kv_rows, launch.ldk, launch.kv_heads),
                  make_tma_vt(static_cast<const Element*>(launch.v), launch.kv_rows, launch.ldv, launch.kv_heads),
                  launch,
                  scale * 1.4426950408889634f,
                  scale,
                  schedule_of(launch)};
  }

  // This CTA's unit of round `round` (AttentionSchedule: past the last unit in the last round only).
  CUTLASS_DEVICE static int unit_index(int round) {
    return AttentionSchedule::unit_index(static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x), round);
  }

  CUTLASS_DEVICE static Unit unit_of(const Params& params, int index) {
    const AttentionLaunch& launch = params.launch;
    const UnitCoord c = params.schedule.unit(index);
    Unit u;
    u.q_tile = c.q_tile;
    u.head = c.head;
    u.first_row = int64_t{u.q_tile} * TileQ;
    u.valid_rows = static_cast<int>(min(int64_t{TileQ}, launch.q_rows - u.first_row));
    u.first_position = launch.q_position + u.first_row;
    u.last_position = u.first_position + u.valid_rows - 1;
    return u;
  }

  // Whether the causal mask hides a piece from every query of the unit (it is then neither waited
  // for nor read).
  CUTLASS_DEVICE static bool hidden(const AttentionLaunch& launch, const Unit& u, const Piece& p) {
    return launch.causal && launch.kv_position + p.row > u.last_position;
  }

  // Calls f(tile index, piece, first piece of its tile) for every piece of the table, in order.
  // The next tile's entry is loaded a tile ahead: a plan's tiles are often one piece each, and a
  // wait's acquire invalidates the SM's L1 (CCTL.IVALL), so an entry read when needed would put an
  // L2 round trip in every warp's path at every piece after a wait.
  template <class F>
  CUTLASS_DEVICE static void for_each_piece(const AttentionLaunch& launch, F&& f) {
    if (launch.kv_tile_count == 0) return;
    AttentionKvTile next = launch.kv_tiles[0];
    for (int t = 0; t < launch.kv_tile_count; ++t) {
      const AttentionKvTile tile = next;
      if (t + 1 < launch.kv_tile_count) next = launch.kv_tiles[t + 1];
      for (int64_t row = tile.row; row < tile.row + tile.rows; row += TileKv)
        f(t, tile, Piece{row, static_cast<int>(min(int64_t{TileKv}, tile.row + tile.rows - row))});
    }
  }

  // ---- producer ----------------------------------------------------------------------------------

  CUTLASS_DEVICE static void produce(const Params& params, SharedStorage& shared, Pipeline& pipeline) {
    using namespace cute;
    const AttentionLaunch& launch = params.launch;
    const int lane = cutlass::canonical_lane_idx();
    Tensor sQ = make_tensor(make_smem_ptr(shared.q), SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(shared.k), SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(shared.v), SmemLayoutVt{});
    const int q_rows = static_cast<int>(launch.q_rows), kv_rows = static_cast<int>(launch.kv_rows);
    Tensor mQ = params.tma_q.get_tma_tensor(make_shape(q_rows, HeadDim, launch.heads));
    Tensor mK = params.tma_k.get_tma_tensor(make_shape(kv_rows, HeadDim, launch.kv_heads));
    Tensor mVt = params.tma_vt.get_tma_tensor(make_shape(HeadDim, kv_rows, launch.kv_heads));
    const int group = launch.heads / launch.kv_heads;

    PipelineState write = cutlass::make_producer_start_state<Pipeline>();
    // The last wait made: a later tile waiting on the same signal for no more is met already (signals
    // only grow during a launch) and its data ordered before the TMA loads by that wait's fence. The
    // KV tiles of one arrival share its signal (a plan's tiles are pieces of a rank's block), so
    // the producer waits once per arrival and unit, not once per tile.
    int32_t met_signal = -1;
    uint64_t met_value = 0;
    int units_done = 0;
    for (int index = unit_index(0); index < params.schedule.unit_count(); index = unit_index(units_done + 1), ++units_done) {
      const Unit u = unit_of(params, index);
      const int kv_head = u.head / group;
      // The previous unit's consumers are done with sQ before it is overwritten.
      if (units_done > 0) cutlass::arch::ClusterBarrier::wait(&shared.q_free, (units_done - 1) & 1);
      if (lane == 0) {
        Tensor gQ = local_tile(mQ(_, _, u.head), Shape<Int<TileQ>, Int<HeadDim>>{}, make_coord(u.q_tile, 0));
        auto [tQgQ, tQsQ] = tma_partition(params.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
        cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&shared.q_full, kQBytes);
        copy(params.tma_q.with(shared.q_full), tQgQ, tQsQ);
      }
      for_each_piece(launch, [&](int t, const AttentionKvTile& tile, const Piece& piece) {
        if (hidden(launch, u, piece)) return;
        if (tile.wait_signal >= 0 && (tile.wait_signal != met_signal || tile.wait_value > met_value)) {
          tile::producer_warp_wait(launch.wait_signals + tile.wait_signal, tile.wait_signal, tile.wait_value,
                                   tile::WaitPolicy{launch.wait_timeout_ns, launch.error, tile::kWaitInAttention}, t);
          met_signal = tile.wait_signal;
          met_value = tile.wait_value;
        }
        if (lane == 0) {
          const int row = static_cast<int>(piece.row);
          Tensor gK = local_tile(domain_offset(make_coord(row, 0), mK(_, _, kv_head)), Shape<Int<TileKv>, Int<HeadDim>>{}, make_coord(0, 0));
          Tensor gVt = local_tile(domain_offset(make_coord(0, row), mVt(_, _, kv_head)), Shape<Int<HeadDim>, Int<TileKv>>{}, make_coord(0, 0));
          pipeline.producer_acquire(write);
          auto* full = pipeline.producer_get_barrier(write);
          auto [tKgK, tKsK] = tma_partition(params.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK(_, _, write.index())), group_modes<0, 2>(gK));
          auto [tVgV, tVsV] = tma_partition(params.tma_vt, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sVt(_, _, write.index())), group_modes<0, 2>(gVt));
          copy(params.tma_k.with(*full), tKgK, tKsK);
          copy(params.tma_vt.with(*full), tVgV, tVsV);
        }
        // The warp stays converged, piece by piece: lanes 1-31 left to run ahead spin on the next
        // unit's q_free barrier, a divergent path of lane 0's own warp that takes its turns from lane
        // 0's stage acquisitions (the K/V waits' latency tail).
        __syncwarp();
        ++write;
      });
    }
    if (lane == 0) pipeline.producer_tail(write);  // the consumers have released every stage
  }

  // ---- consumers ---------------------------------------------------------------------------------

  // C += A B over the k-blocks (or C = A B with zero_init), one WGMMA batch, issued and committed;
  // the caller waits for it (warpgroup_wait) before it reads C or writes a register operand.
  template <class Mma, class A, class B, class C>
  CUTLASS_DEVICE static void warpgroup_issue(Mma& mma, const A& a, const B& b, C& c, bool zero_init) {
    using namespace cute;
    warpgroup_fence_operand(c);
    warpgroup_arrive();
    mma.accumulate_ = zero_init ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
    CUTLASS_PRAGMA_UNROLL
    for (int kb = 0; kb < size<2>(a); ++kb) {
      cute::gemm(mma, a(_, _, kb), b(_, _, kb), c);
      mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
  }

  // 2^x in one MUFU.EX2: exp2f without -ftz wraps the instruction in range fix-ups for denormal
  // results (three more instructions per exponential, a third of the softmax's instructions), and
  // a probability below 2^-126 of the row's largest is 0 to bf16's P V either way.
  CUTLASS_DEVICE static float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  }

  CUTLASS_DEVICE static float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
  }
  CUTLASS_DEVICE static float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffff, x, 1);
    return x + __shfl_xor_sync(0xffffffff, x, 2);
  }

  // The consumer warp groups take turns to issue their WGMMAs (FA3's ping-pong; round robin with
  // three): while one group's softmax runs on the CUDA cores, another's products run on the tensor
  // cores. Group g waits on barrier kTurnBarrier + g, then hands the turn to the next group's barrier.
  CUTLASS_DEVICE static void take_turn(int consumer_group) {
    if constexpr (kPingPong) cutlass::arch::NamedBarrier::sync(2 * cutlass::NumThreadsPerWarpGroup, kTurnBarrier + consumer_group);
  }
  CUTLASS_DEVICE static void pass_turn(int consumer_group) {
    if constexpr (kPingPong)
      cutlass::arch::NamedBarrier::arrive(2 * cutlass::NumThreadsPerWarpGroup, kTurnBarrier + (consumer_group + 1) % kConsumerGroups);
  }

  CUTLASS_DEVICE static void consume(const Params& params, SharedStorage& shared, Pipeline& pipeline, int mma_thread_idx) {
    using namespace cute;
    const AttentionLaunch& launch = params.launch;
    constexpr float kMinusInf = -INFINITY;
    Tensor sQ = make_tensor(make_smem_ptr(shared.q), SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(shared.k), SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(shared.v), SmemLayoutVt{});
    TiledMmaQK mma_qk;
    TiledMmaPV mma_pv;
    auto thr_qk = mma_qk.get_thread_slice(mma_thread_idx);
    auto thr_pv = mma_pv.get_thread_slice(mma_thread_idx);
    Tensor tSrQ = thr_qk.partition_fragment_A(sQ);   // descriptors
    Tensor tSrK = thr_qk.partition_fragment_B(sK);   // (MMA, N, K, stage)
    Tensor tOrVt = thr_pv.partition_fragment_B(sVt); // (MMA, N, K, stage)
    // (row, column) of every accumulator a thread holds: its two rows (half 0 and 1) and columns.
    Tensor cS = thr_qk.partition_C(make_identity_tensor(Shape<Int<TileQ>, Int<TileKv>>{}));
    Tensor cO = thr_pv.partition_C(make_identity_tensor(Shape<Int<TileQ>, Int<HeadDim>>{}));
    Tensor scores = partition_fragment_C(mma_qk, Shape<Int<TileQ>, Int<TileKv>>{});
    Tensor out = partition_fragment_C(mma_pv, Shape<Int<TileQ>, Int<HeadDim>>{});
    Tensor probabilities = make_tensor<Element>(partition_shape_A(mma_pv, Shape<Int<TileQ>, Int<TileKv>>{}));
    // WGMMA's accumulator of a 64-row warp group: per thread ((2 columns, 2 rows, N/8 column groups), 1, 1);
    // its A operand from registers: ((2 columns, 2 rows, 2 column groups), 1, K/16). The same thread
    // holds the same rows and columns in both, which is what lets P stay in registers.
    static_assert(decltype(size<0, 0>(scores))::value == 2 && decltype(size<0, 1>(scores))::value == 2 &&
                  decltype(size<0, 2>(scores))::value == TileKv / 8 && decltype(size<1>(scores))::value == 1 &&
                  decltype(size<2>(scores))::value == 1, "unexpected WGMMA accumulator layout for S");
    static_assert(decltype(size<0, 2>(out))::value == HeadDim / 8 && decltype(size<1>(out))::value == 1 && decltype(size<2>(out))::value == 1,
                  "unexpected WGMMA accumulator layout for O");
    static_assert(decltype(size<0, 0>(probabilities))::value == 2 && decltype(size<0, 1>(probabilities))::value == 2 &&
                  decltype(size<0, 2>(probabilities))::value == 2 && decltype(size<1>(probabilities))::value == 1 &&
                  decltype(size<2>(probabilities))::value == TileKv / 16, "unexpected WGMMA register A layout for P");
    const int consumer_group = mma_thread_idx / cutlass::NumThreadsPerWarpGroup;
    // The first group holds the first turn: its own arrival stands in for the last group's hand-off.
    if constexpr (kPingPong)
      if (consumer_group == 0) cutlass::arch::NamedBarrier::arrive(2 * cutlass::NumThreadsPerWarpGroup, kTurnBarrier);

    PipelineState read;
    int units_done = 0;
    for (int index = unit_index(0); index < params.schedule.unit_count(); index = unit_index(units_done + 1), ++units_done) {
      const Unit u = unit_of(params, index);
      int local_row[2];
      for (int half = 0; half < 2; ++half) local_row[half] = get<0>(cS(make_coord(make_coord(0, half, 0), 0, 0)));
      float row_max[2] = {kMinusInf, kMinusInf};
      float row_sum[2] = {0.f, 0.f};  // this thread's columns only; summed over the quad at the end
      clear(out);
      cutlass::arch::ClusterBarrier::wait(&shared.q_full, units_done & 1);

      // A piece's P V is issued behind the next piece's S = Q K^T (FA3's intra-warp-group overlap):
      // the softmax of one piece runs while the tensor cores multiply the previous piece's P by its V.
      // `pending`: a piece's P waits in `probabilities` for its P V, its stage held until that is done,
      // and O is to be rescaled by that piece's factor before its P V adds in.
      bool pending = false;
      PipelineState pending_read;
      float pending_rescale[2] = {1.f, 1.f};
      // O is rescaled before the turn's first WGMMA is issued: ptxas serialises every WGMMA of a
      // batch whose accumulators are written between the batch's first arrive and its wait.
      auto rescale_out = [&] {
        CUTLASS_PRAGMA_UNROLL
        for (int half = 0; half < 2; ++half)
          CUTLASS_PRAGMA_UNROLL
          for (int g = 0; g < HeadDim / 8; ++g)
            CUTLASS_PRAGMA_UNROLL
            for (int c = 0; c < 2; ++c) out(make_coord(make_coord(c, half, g), 0, 0)) *= pending_rescale[half];
        warpgroup_fence_operand(out);  // the multiplies stay before the next WGMMA's arrive
      };
      auto issue_pending_pv = [&] {
        warpgroup_fence_operand(probabilities);
        warpgroup_issue(mma_pv, probabilities, tOrVt(_, _, _, pending_read.index()), out, false);
      };
      auto retire_pending_pv = [&] {
        warpgroup_fence_operand(out);
        warpgroup_fence_operand(probabilities);  // a register A operand stays fenced until its WGMMA is waited for
        pipeline.consumer_release(pending_read);
      };

      // Masks (keys past the piece; causal: keys after the query's position), then the online
      // softmax per row half: the new maximum, the old terms' factor (`rescale`), the new terms'
      // exponentials in place of their scores, and their sum added.
      auto softmax = [&](const Piece& piece, float (&rescale)[2]) {
        const float scale_log2 = params.scale_log2;
        const int64_t first_key = launch.kv_position + piece.row;
        const bool mask = piece.rows < TileKv || (launch.causal && first_key + TileKv - 1 > u.first_position);
        if (mask) {
          CUTLASS_PRAGMA_UNROLL
          for (int i = 0; i < size(scores); ++i) {
            const int row = get<0>(cS(i)), col = get<1>(cS(i));
            if (col >= piece.rows || (launch.causal && first_key + col > u.first_position + row)) scores(i) = kMinusInf;
          }
        }
        CUTLASS_PRAGMA_UNROLL
        for (int half = 0; half < 2; ++half) {
          float top = row_max[half];
          CUTLASS_PRAGMA_UNROLL
          for (int g = 0; g < TileKv / 8; ++g)
            CUTLASS_PRAGMA_UNROLL
            for (int c = 0; c < 2; ++c) top = fmaxf(top, scores(make_coord(make_coord(c, half, g), 0, 0)));
          top = quad_max(top);
          // A row that has seen no visible key yet keeps a maximum of -inf: its terms are all 0.
          rescale[half] = row_max[half] == kMinusInf ? 0.f : exp2_ftz((row_max[half] - top) * scale_log2);
          const float base = top == kMinusInf ? 0.f : top * scale_log2;
          float sum = 0.f;
          CUTLASS_PRAGMA_UNROLL
          for (int g = 0; g < TileKv / 8; ++g)
            CUTLASS_PRAGMA_UNROLL
            for (int c = 0; c < 2; ++c) {
              float& s = scores(make_coord(make_coord(c, half, g), 0, 0));
              s = exp2_ftz(fmaf(s, scale_log2, -base));
              sum += s;
            }
          row_sum[half] = row_sum[half] * rescale[half] + sum;
          row_max[half] = top;
        }
      };

      for_each_piece(launch, [&](int, const AttentionKvTile&, const Piece& piece) {
        if (hidden(launch, u, piece)) return;
        pipeline.consumer_wait(read);
        const int stage = read.index();
        // Rows of the box after a piece that ends inside it: zero their V (see the file's comment).
        if (piece.rows < TileKv && piece.row + piece.rows < launch.kv_rows) {
          Tensor stage_vt = sVt(_, _, stage);
          for (int i = mma_thread_idx; i < HeadDim * (TileKv - piece.rows); i += kMmaThreads)
            stage_vt(i % HeadDim, piece.rows + i / HeadDim) = Element(0.f);
          cutlass::arch::fence_view_async_shared();  // generic-proxy writes before WGMMA's reads
          cutlass::arch::NamedBarrier::sync(kMmaThreads, kConsumerBarrier);
        }
        // Two straight paths, the first piece and the others, each ending with nothing in flight:
        // ptxas follows WGMMA batches along a path, and one that merges paths with a different
        // number of batches in flight serialises every WGMMA of the kernel.
        if (!pending) {
          take_turn(consumer_group);
          warpgroup_issue(mma_qk, tSrQ, tSrK(_, _, _, stage), scores, true);
          pass_turn(consumer_group);
          warpgroup_wait<0>();
          warpgroup_fence_operand(scores);
          softmax(piece, pending_rescale);
        } else {
          rescale_out();
          take_turn(consumer_group);
          warpgroup_issue(mma_qk, tSrQ, tSrK(_, _, _, stage), scores, true);
          issue_pending_pv();
          pass_turn(consumer_group);
          warpgroup_wait<1>();  // S is done; the previous piece's P V may still run
          warpgroup_fence_operand(scores);
          float rescale[2];
          softmax(piece, rescale);
          // ptxas schedules this wait right after the row maxima, ahead of the exponentials; a
          // branch that pinned it after them measured no faster (the other warp group's WGMMAs
          // fill the tensor cores meanwhile).
          warpgroup_wait<0>();  // the previous piece's P V: its P registers and its stage are free
          retire_pending_pv();
          pending_rescale[0] = rescale[0];
          pending_rescale[1] = rescale[1];
        }
        // P to bf16 as P V's A operand: k-block kb holds the scores' column groups 2kb and 2kb + 1.
        CUTLASS_PRAGMA_UNROLL
        for (int kb = 0; kb < TileKv / 16; ++kb)
          CUTLASS_PRAGMA_UNROLL
          for (int kh = 0; kh < 2; ++kh)
            CUTLASS_PRAGMA_UNROLL
            for (int half = 0; half < 2; ++half) {  // a pair of columns in one packed conversion
              cutlass::Array<float, 2> pair;
              pair[0] = scores(make_coord(make_coord(0, half, 2 * kb + kh), 0, 0));
              pair[1] = scores(make_coord(make_coord(1, half, 2 * kb + kh), 0, 0));
              const cutlass::Array<Element, 2> rounded = cutlass::NumericArrayConverter<Element, float, 2>::convert(pair);
              probabilities(make_coord(make_coord(0, half, kh), 0, kb)) = rounded[0];
              probabilities(make_coord(make_coord(1, half, kh), 0, kb)) = rounded[1];
            }
        pending = true;
        pending_read = read;
        ++read;
      });
      if (pending) {  // the last piece's P V
        rescale_out();
        take_turn(consumer_group);
        issue_pending_pv();
        pass_turn(consumer_group);
        warpgroup_wait<0>();
        retire_pending_pv();
      }
      // Every MMA that reads this unit's Q is done (or there was none).
      cutlass::arch::ClusterBarrier::arrive(&shared.q_free);
      store(params, u, out, cO, row_max, row_sum, local_row);
    }
  }

  // The epilogue of a unit: O / row sum and the log-sum-exp, merged with what o and lse hold where
  // the launch says, stored from registers.
  template <class Out, class Coordinates>
  CUTLASS_DEVICE static void store(const Params& params, const Unit& u, Out& out, const Coordinates& cO, const float (&row_max)[2],
                                   const float (&row_sum)[2], const int (&local_row)[2]) {
    using namespace cute;
    const AttentionLaunch& launch = params.launch;
    constexpr float kMinusInf = -INFINITY;
    auto* o = static_cast<__nv_bfloat16*>(launch.o);
    float lse[2], mine[2], theirs[2];
    bool inside[2];
    CUTLASS_PRAGMA_UNROLL
    for (int half = 0; half < 2; ++half) {
      const float total = quad_sum(row_sum[half]);
      const float step_lse = total > 0.f ? row_max[half] * params.scale + logf(total) : kMinusInf;
      const float inverse = total > 0.f ? 1.f / total : 0.f;
      inside[half] = local_row[half] < u.valid_rows;
      const int64_t row = u.first_row + local_row[half];
      lse[half] = step_lse;
      mine[half] = inverse;
      theirs[half] = 0.f;
      if (launch.merge && inside[half]) {
        // RingAttention's combine, as the reference executor makes it (an empty side weighs nothing).
        const float before = launch.lse[row * launch.ldlse + u.head];
        const float merged = before == kMinusInf ? step_lse
                             : step_lse == kMinusInf ? before
                                                     : fmaxf(before, step_lse) + log1pf(expf(-fabsf(before - step_lse)));
        mine[half] = step_lse == kMinusInf ? 0.f : inverse * expf(step_lse - merged);
        theirs[half] = before == kMinusInf ? 0.f : expf(before - merged);
        lse[half] = merged;
      }
    }
    __syncwarp();  // every thread of a quad has read the row's old lse before one overwrites it
    CUTLASS_PRAGMA_UNROLL
    for (int half = 0; half < 2; ++half) {
      if (!inside[half]) continue;
      const int64_t row = u.first_row + local_row[half];
      __nv_bfloat16* o_row = o + row * launch.ldo + int64_t{u.head} * HeadDim;
      CUTLASS_PRAGMA_UNROLL
      for (int g = 0; g < HeadDim / 8; ++g) {
        const int col = get<1>(cO(make_coord(make_coord(0, half, g), 0, 0)));
        auto* pair = reinterpret_cast<__nv_bfloat162*>(o_row + col);
        float first = out(make_coord(make_coord(0, half, g), 0, 0)) * mine[half];
        float second = out(make_coord(make_coord(1, half, g), 0, 0)) * mine[half];
        if (launch.merge) {
          const float2 old = __bfloat1622float2(*pair);
          first += theirs[half] * old.x;
          second += theirs[half] * old.y;
        }
        *pair = __floats2bfloat162_rn(first, second);
      }
      if (cutlass::canonical_lane_idx() % 4 == 0) launch.lse[row * launch.ldlse + u.head] = lse[half];
    }
  }

  CUTLASS_DEVICE void operator()(const Params& params, char* shared_memory) const {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    SharedStorage& shared = *reinterpret_cast<SharedStorage*>(shared_memory);
    const int thread_idx = static_cast<int>(threadIdx.x);
    const int warp_group = cutlass::canonical_warp_group_idx();
    const int warp_in_group = cutlass::canonical_warp_idx_sync() % cutlass::NumWarpsPerWarpGroup;

    if (warp_group == 0 && warp_in_group == 0 && cute::elect_one_sync()) {
      cute::prefetch_tma_descriptor(params.tma_q.get_tma_descriptor());
      cute::prefetch_tma_descriptor(params.tma_k.get_tma_descriptor());
      cute::prefetch_tma_descriptor(params.tma_vt.get_tma_descriptor());
    }
    typename Pipeline::Params pipeline_params;
    if (warp_group == 0 && warp_in_group == 0) pipeline_params.role = Pipeline::ThreadCategory::Producer;
    if (warp_group > 0) pipeline_params.role = Pipeline::ThreadCategory::Consumer;
    pipeline_params.is_leader = thread_idx % cutlass::NumThreadsPerWarpGroup == 0;
    pipeline_params.num_consumers = kMmaThreads;
    pipeline_params.transaction_bytes = kKvStageBytes;
    Pipeline pipeline(shared.pipeline, pipeline_params, cute::Shape<cute::_1, cute::_1, cute::_1>{});
    if (thread_idx == 0) {
      cutlass::arch::ClusterTransactionBarrier::init(&shared.q_full, 1);
      cutlass::arch::ClusterBarrier::init(&shared.q_free, kMmaThreads);
    }
    cutlass::arch::fence_barrier_init();
    __syncthreads();  // barriers initialised before anyone uses them

    if (warp_group == 0) {
      cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
      if (warp_in_group == 0) produce(params, shared, pipeline);
      return;
    }
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegisters>();
    consume(params, shared, pipeline, thread_idx - 128);
#else
    if (threadIdx.x == 0 && blockIdx.x == 0) printf("weft attention: built without sm_90a; nothing computed\n");
#endif
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, 1) attention_entry(const __grid_constant__ typename Kernel::Params params) {
  extern __shared__ __align__(1024) char shared_memory[];
  Kernel{}(params, shared_memory);
}

// The kernel's parameters (TMA descriptors included), its shared-memory attribute and grid, made
// once; a call only enqueues.
template <int HeadDim, int TileQ, int TileKv, int Stages>
class PreparedAttention final : public Attention::Prepared {
 public:
  using Kernel = AttentionKernel<HeadDim, TileQ, TileKv, Stages>;

  explicit PreparedAttention(const AttentionLaunch& launch) : params_(Kernel::make_params(launch)) {
    int device = 0, sm_count = 0;
    WEFT_CUDA_CHECK(cudaGetDevice(&device));
    WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
    WEFT_CUDA_CHECK(cudaFuncSetAttribute(&attention_entry<Kernel>, cudaFuncAttributeMaxDynamicSharedMemorySize, Kernel::kSharedBytes));
    const int units = Kernel::schedule_of(launch).unit_count();
    ctas_ = std::min(units, launch.max_ctas > 0 ? launch.max_ctas : sm_count);
  }

  void update(const AttentionLaunch& launch) override { params_ = Kernel::make_params(launch); }

  void launch(cudaStream_t stream) override {
    if (ctas_ == 0) return;
    attention_entry<Kernel><<<ctas_, Kernel::kThreads, Kernel::kSharedBytes, stream>>>(params_);
    WEFT_CUDA_CHECK(cudaGetLastError());
  }

 private:
  typename Kernel::Params params_;
  int ctas_ = 0;
};

}  // namespace weft::attention_detail
