// The overlap GEMM, feature by feature, against a double-precision host GEMM: empty tables on ragged
// shapes for every compiled tile (B K-major and N-major), bulk-copied and warp-copied tiles in one launch, remapped stores
// into several targets, notifies and the waits that see them, waits released by another stream, a
// wait that times out and is reported, operands retargeted between launches, A rows read from a
// second operand, addends added in the epilogue after their wait, split K, tail splits and
// stream-K, host-side checks, and (on 2+ GPUs) peer stores with peer notifies through the executor.
#include <gtest/gtest.h>

#include <cmath>

#include "../support/grid_table.hpp"
#include "../support/host_gemm.hpp"
#include "../support/ring_push_plan.hpp"
#include "check_against_host.hpp"
#include "element_check.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/overlap_gemm.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/rank_threads.hpp"

namespace weft {
namespace {

using bench::download;
using test_support::host_gemm;

struct DeviceMatrix {
  void* data = nullptr;
  int64_t rows = 0, cols = 0;
  DeviceMatrix(int64_t r, int64_t c) : rows(r), cols(c) { WEFT_CUDA_CHECK(cudaMalloc(&data, static_cast<size_t>(r * c) * 2)); }
  ~DeviceMatrix() { cudaFree(data); }
  DeviceMatrix(const DeviceMatrix&) = delete;
  DeviceMatrix& operator=(const DeviceMatrix&) = delete;
  DeviceRegion region() const { return DeviceRegion{data, rows, cols, cols}; }
};

// A, B random; C poisoned; every tile of the grid in row-major order, stored in place.
struct Fixture {
  OverlapGemmConfig config;
  OverlapGemmShape tile;
  DeviceMatrix a, b, c;
  HostMatrix want, scale;  // the host GEMM, and the same on |A| and |B| (each element's error bound)
  std::vector<OverlapGemmTile> table;
  OverlapGemmTile* device_table = nullptr;
  uint64_t* signals = nullptr;  // 4 counters
  WaitRecord* error = nullptr;
  cudaStream_t stream{};
  int cluster_m = 1, cluster_n = 1;  // the launch's clusters

  Fixture(OverlapGemmConfig cfg, int64_t m, int64_t n, int64_t k, uint64_t seed)
      : config(cfg), tile(shape_of(cfg)), a(m, k), b(n, k), c(m, n) {
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    fill_random_bf16(a.data, m * k, seed, stream);
    fill_random_bf16(b.data, n * k, seed + 1, stream);
    fill_u16(c.data, m * n, kBf16Nan, stream);
    HostMatrix host_a = download(a.region(), stream), host_b = download(b.region(), stream);
    want = host_gemm(host_a, host_b);
    for (HostMatrix* h : {&host_a, &host_b})
      for (float& v : h->data) v = std::fabs(v);
    scale = host_gemm(host_a, host_b);
    table = test_support::grid_table(m, n, tile);
    WEFT_CUDA_CHECK(cudaMalloc(&signals, 4 * sizeof(uint64_t)));
    WEFT_CUDA_CHECK(cudaMemset(signals, 0, 4 * sizeof(uint64_t)));
    WEFT_CUDA_CHECK(cudaMalloc(&error, sizeof(WaitRecord)));
    WEFT_CUDA_CHECK(cudaMemset(error, 0, sizeof(WaitRecord)));
  }
  ~Fixture() {
    cudaStreamSynchronize(stream);
    cudaFree(device_table);
    cudaFree(signals);
    cudaFree(error);
    cudaStreamDestroy(stream);
  }

  OverlapGemmLaunch launch() {
    OverlapGemmLaunch l;
    l.a = a.data;
    l.lda = a.cols;
    l.b = b.data;
    l.ldb = b.cols;
    l.m = a.rows;
    l.n = b.rows;
    l.k = a.cols;
    l.targets[0] = OverlapGemmTarget{c.data, c.cols, c.rows, c.cols};
    l.target_count = 1;
    l.wait_signals = signals;
    l.notify_signals[0] = signals;
    l.error = error;
    l.cluster_m = cluster_m;
    l.cluster_n = cluster_n;
    return l;
  }
  // Uploads `table`, points `l` at it and checks it.
  void upload(OverlapGemmLaunch& l) {
    cudaFree(device_table);
    WEFT_CUDA_CHECK(cudaMalloc(&device_table, table.size() * sizeof(OverlapGemmTile)));
    WEFT_CUDA_CHECK(cudaMemcpy(device_table, table.data(), table.size() * sizeof(OverlapGemmTile), cudaMemcpyHostToDevice));
    l.tiles = device_table;
    l.tile_count = static_cast<int>(table.size());
    require_valid_table(l, config, table);
  }
  // Uploads `table` and launches on `on` (the fixture's stream unless given).
  void run(OverlapGemmLaunch l, cudaStream_t on = nullptr) {
    upload(l);
    launch_overlap_gemm(l, config, on ? on : stream);
  }
  // Prepares the (split) table once with `splits` as the launch's most splits, then runs it twice
  // into a poisoned C: no split may give up, C must match the host GEMM, and each of the
  // `notifying_tiles` must notify once per call (after its last split).
  void expect_two_calls_match(int splits, size_t notifying_tiles, const std::string& what) {
    OverlapGemmLaunch l = launch();
    l.k_splits = splits;
    l.wait_timeout_ns = 2'000'000'000ull;
    upload(l);
    OverlapGemm gemm(l, config);
    // The signal counts on from earlier launches of this fixture (a test may call this more than once).
    const uint64_t before = read_signals()[1];
    for (int call = 0; call < 2; ++call) {
      fill_u16(c.data, c.rows * c.cols, kBf16Nan, stream);
      gemm.launch(stream);
      ASSERT_TRUE(synchronize_with_timeout(stream, 20000)) << what;
      EXPECT_EQ(read_error().failed, 0u) << what << ": a split gave up waiting";
      EXPECT_TRUE(matches(download(c.region(), stream))) << what;
      EXPECT_EQ(read_signals()[1] - before, static_cast<uint64_t>(call + 1) * notifying_tiles) << what << ": one notify per tile, after its last split";
    }
  }
  // `got` against the host GEMM (or `expected` with its `bound_scale`), element by element.
  testing::AssertionResult matches(const HostMatrix& got) const { return matches(got, want, scale); }
  testing::AssertionResult matches(const HostMatrix& got, const HostMatrix& expected, const HostMatrix& bound_scale) const {
    // The bound of one GEMM: gemm_ar at world 1 is a GEMM alone.
    const Problem gemm{OpKind::gemm_ar, a.rows, b.rows, a.cols, 1, DType::bf16, DType::bf16, {}};
    const bench::ElementCheck check = bench::check_elements(got, expected, bound_scale, bench::bf16_error_factor(gemm));
    if (check.passed()) return testing::AssertionSuccess();
    return testing::AssertionFailure() << check.explain();
  }
  WaitRecord read_error() {
    WaitRecord e;
    WEFT_CUDA_CHECK(cudaMemcpy(&e, error, sizeof e, cudaMemcpyDeviceToHost));
    return e;
  }
  std::vector<uint64_t> read_signals() {
    std::vector<uint64_t> v(4);
    WEFT_CUDA_CHECK(cudaMemcpy(v.data(), signals, 4 * sizeof(uint64_t), cudaMemcpyDeviceToHost));
    return v;
  }
};

class OverlapGemmConfigs : public testing::TestWithParam<OverlapGemmConfig> {};

TEST_P(OverlapGemmConfigs, EmptyTableMatchesTheHostGemmOnRaggedShapes) {
  for (auto [m, n, k] : {std::tuple{256, 512, 128}, {200, 136, 72}, {8, 24, 16}, {300, 700, 264}, {1024, 1024, 1024}}) {
    Fixture f(GetParam(), m, n, k, static_cast<uint64_t>(m * 7 + n));
    f.run(f.launch());
    ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000));
    EXPECT_TRUE(f.matches(download(f.c.region(), f.stream))) << m << "x" << n << "x" << k << " " << to_string(GetParam());
  }
}

// B given as B^T [K, N] row-major (N-major, the layout kn): the same GEMM through the N-major
// mainloop, on ragged shapes, with B's rows tight (ldb = n) and padded (ldb > n), split K included.
TEST_P(OverlapGemmConfigs, NMajorBMatchesTheHostGemmOnRaggedShapes) {
  for (auto [m, n, k, ldb] : {std::tuple{256, 512, 128, 512}, {200, 136, 72, 136}, {8, 24, 16, 24}, {300, 700, 264, 704}}) {
    Fixture f(GetParam(), m, n, k, static_cast<uint64_t>(m * 5 + n));
    // B's memory: B^T, rows of n elements ldb apart, the padding poisoned (a read of it shows).
    DeviceMatrix bt(k, ldb);
    fill_u16(bt.data, k * ldb, kBf16Nan, f.stream);
    const HostMatrix host_b = download(f.b.region(), f.stream);
    std::vector<uint16_t> raw_b(static_cast<size_t>(n * k)), raw_bt(static_cast<size_t>(k * n));
    WEFT_CUDA_CHECK(cudaMemcpy(raw_b.data(), f.b.data, raw_b.size() * 2, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) raw_bt[static_cast<size_t>(j * n + i)] = raw_b[static_cast<size_t>(i * k + j)];
    WEFT_CUDA_CHECK(cudaMemcpy2D(bt.data, static_cast<size_t>(ldb) * 2, raw_bt.data(), static_cast<size_t>(n) * 2, static_cast<size_t>(n) * 2,
                                 static_cast<size_t>(k), cudaMemcpyHostToDevice));
    ASSERT_EQ(host_b.rows, n);
    OverlapGemmLaunch l = f.launch();
    l.b = bt.data;
    l.ldb = ldb;
    l.b_n_major = true;
    f.run(l);
    ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000));
    EXPECT_TRUE(f.matches(download(f.c.region(), f.stream))) << m << "x" << n << "x" << k << " ldb " << ldb << " " << to_string(GetParam());
    // Split along K (two calls: the split counters start over).
    if (k >= 2 * f.tile.tile_k) {
      f.table = split_along_k(f.table, 2, k, f.config);
      OverlapGemmLaunch split = l;
      split.k_splits = 2;
      f.upload(split);
      OverlapGemm gemm(split, f.config);
      for (int call = 0; call < 2; ++call) {
        fill_u16(f.c.data, m * n, kBf16Nan, f.stream);
        gemm.launch(f.stream);
        ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000));
        EXPECT_TRUE(f.matches(download(f.c.region(), f.stream))) << "split K, call " << call << ", " << to_string(GetParam());
      }
    }
    // The N-major B's rows must hold n elements.
    OverlapGemmLaunch short_rows = l;
    short_rows.ldb = n - 8;
    EXPECT_THROW(require_launchable(short_rows, f.config), std::invalid_argument);
  }
}

TEST_P(OverlapGemmConfigs, BulkCopiedAndWarpCopiedTilesMixInOneLaunch) {
  // C in a buffer with padded rows (a 16-byte aligned stride): whole tiles leave as bulk copies of
  // rows, the last tile column (300 - k * tile_n columns, not a multiple of 8) through the storing
  // warps; the padding must stay untouched.
  const int64_t m = 200, n = 300, stride = 304;
  Fixture f(GetParam(), m, n, 64, 17);
  DeviceMatrix padded(m, stride);
  fill_u16(padded.data, m * stride, kBf16Nan, f.stream);
  OverlapGemmLaunch l = f.launch();
  l.targets[0] = OverlapGemmTarget{padded.data, stride, m, n};
  f.run(l);
  ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000));
  const HostMatrix whole = download(padded.region(), f.stream);
  HostMatrix got(m, n);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < stride; ++c) {
      if (c < n) got.at(r, c) = whole.at(r, c);
      else ASSERT_TRUE(std::isnan(whole.at(r, c))) << "padding overwritten at row " << r << ", column " << c;
    }
  EXPECT_TRUE(f.matches(got)) << to_string(GetParam());
}

TEST_P(OverlapGemmConfigs, RemappedStoresLandWhereTheTableSays) {
  // Every tile into a pool of tile-sized slots, in table order, alternating between two pools
  // (FlashOverlap's reordered layout); then put back on the host and compared.
  Fixture f(GetParam(), 300, 520, 136, 11);
  const int64_t slots = static_cast<int64_t>(f.table.size());
  DeviceMatrix pool0(slots * f.tile.tile_m, f.tile.tile_n), pool1(slots * f.tile.tile_m, f.tile.tile_n);
  fill_u16(pool0.data, pool0.rows * pool0.cols, kBf16Nan, f.stream);
  fill_u16(pool1.data, pool1.rows * pool1.cols, kBf16Nan, f.stream);
  OverlapGemmLaunch l = f.launch();
  l.targets[0] = OverlapGemmTarget{pool0.data, pool0.cols, pool0.rows, pool0.cols};
  l.targets[1] = OverlapGemmTarget{pool1.data, pool1.cols, pool1.rows, pool1.cols};
  l.target_count = 2;
  for (size_t i = 0; i < f.table.size(); ++i) {
    f.table[i].store_target = static_cast<int32_t>(i % 2);
    f.table[i].store_row = static_cast<int64_t>(i) * f.tile.tile_m;
    f.table[i].store_col = 0;
  }
  f.run(l);
  ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000));
  const HostMatrix p0 = download(pool0.region(), f.stream), p1 = download(pool1.region(), f.stream);
  HostMatrix got(f.c.rows, f.c.cols, NAN);
  for (size_t i = 0; i < f.table.size(); ++i) {
    const OverlapGemmTile& e = f.table[i];
    const HostMatrix& pool = i % 2 ? p1 : p0;
    for (int r = 0; r < e.rows; ++r)
      for (int c = 0; c < e.cols; ++c)
        got.at(e.tile_m * f.tile.tile_m + r, e.tile_n * f.tile.tile_n + c) = pool.at(e.store_row + r, c);
  }
  EXPECT_TRUE(f.matches(got));
}

TEST_P(OverlapGemmConfigs, NotifiesCountEveryTileAndLaterWaitsSeeThem) {
  Fixture f(GetParam(), 384, 384, 64, 5);
  for (auto& e : f.table) {
    e.notify_rank = 0;
    e.notify_signal = 1;
    e.notify_increment = 2;
  }
  f.run(f.launch());
  f.run(f.launch());
  ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000));
  EXPECT_EQ(f.read_signals()[1], 4 * f.table.size());
  // Second phase: every tile waits for what both launches raised: met at once, no timeout.
  for (auto& e : f.table) {
    e.notify_rank = -1;
    e.wait_signal = 1;
    e.wait_value = 4 * f.table.size();
  }
  OverlapGemmLaunch l = f.launch();
  l.wait_timeout_ns = 2'000'000'000ull;
  f.run(l);
  ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000));
  EXPECT_EQ(f.read_error().failed, 0u);
  EXPECT_TRUE(f.matches(download(f.c.region(), f.stream)));
}

TEST_P(OverlapGemmConfigs, RetargetedOperandsAreReadFromTheirNewPlace) {
  // One prepared launch, then A, B and C moved to other memory (a caller's buffers between calls):
  // the result must be the new operands' product in the new C.
  Fixture f(GetParam(), 200, 264, 136, 13);
  Fixture g(GetParam(), 200, 264, 136, 17);
  OverlapGemmLaunch l = f.launch();
  f.upload(l);
  OverlapGemm prepared(l, f.config);
  prepared.launch(f.stream);
  const OverlapGemmTarget moved[1] = {OverlapGemmTarget{g.c.data, g.c.cols, g.c.rows, g.c.cols}};
  prepared.retarget(g.a.data, g.b.data, moved);
  prepared.launch(f.stream);
  ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000));
  EXPECT_TRUE(f.matches(download(f.c.region(), f.stream)));
  EXPECT_TRUE(g.matches(download(g.c.region(), f.stream)));
  EXPECT_THROW(prepared.retarget(static_cast<char*>(g.a.data) + 2, g.b.data, moved), std::invalid_argument) << "misaligned A";
}

TEST_P(OverlapGemmConfigs, WaitsAreReleasedByAnotherStream) {
  Fixture f(GetParam(), 512, 768, 256, 9);
  for (size_t i = 0; i < f.table.size(); ++i) {
    f.table[i].wait_signal = static_cast<int32_t>(i % 2);  // half the tiles on each of two signals
    f.table[i].wait_value = 1;
  }
  cudaStream_t other;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  f.run(f.launch());
  // Keep the other stream busy for a while first, so the GEMM really waits.
  DeviceMatrix busy(1 << 14, 1 << 12);
  for (int i = 0; i < 8; ++i) fill_random_bf16(busy.data, busy.rows * busy.cols, static_cast<uint64_t>(i), other);
  signal_add(f.signals + 0, 1, other);
  signal_add(f.signals + 1, 1, other);
  ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000));
  EXPECT_EQ(f.read_error().failed, 0u);
  EXPECT_TRUE(f.matches(download(f.c.region(), f.stream)));
  cudaStreamSynchronize(other);
  cudaStreamDestroy(other);
}

TEST_P(OverlapGemmConfigs, AnUnmetWaitTimesOutAndNamesItsSignal) {
  Fixture f(GetParam(), 256, 256, 64, 3);
  f.table.back().wait_signal = 2;
  f.table.back().wait_value = 5;
  OverlapGemmLaunch l = f.launch();
  l.wait_timeout_ns = 20'000'000;  // 20 ms
  f.run(l);
  ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000)) << "the kernel must give up, not hang";
  const WaitRecord e = f.read_error();
  EXPECT_EQ(e.failed, 1u);
  EXPECT_EQ(e.where, static_cast<int>(f.table.size()) - 1);
  EXPECT_EQ(e.signal, 2);
  EXPECT_EQ(e.expected, 5u);
  EXPECT_EQ(e.observed, 0u);
}

TEST_P(OverlapGemmConfigs, SplitKSumsMatchTheHostGemmCallAfterCall) {
  // Ragged M, N and K; 2, 3 and 8 splits; a notify per tile that must fire once, after the last
  // split; two calls of one prepared launch, so the split counters must be back at zero.
  for (auto [m, n, k, splits] : {std::tuple{200, 136, 520, 3}, {300, 700, 264, 2}, {64, 512, 2048, 8}}) {
    Fixture f(GetParam(), m, n, k, static_cast<uint64_t>(m + n + k));
    const size_t tiles = f.table.size();
    for (auto& e : f.table) {
      e.notify_rank = 0;
      e.notify_signal = 1;
      e.notify_increment = 1;
    }
    f.table = split_along_k(f.table, splits, k, f.config);
    ASSERT_EQ(f.table.size(), tiles * static_cast<size_t>(splits));
    f.expect_two_calls_match(splits, tiles, std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " / " + std::to_string(splits));
  }
}

TEST_P(OverlapGemmConfigs, TilesReadTheirARowsFromASecondOperand) {
  // Even tile rows read their A rows from a2, a copy of A one tile row further down (row r of A at
  // row tile_m + r of a2), while A's own copy of those rows is NaN: a tile that read A would show.
  const int64_t m = 300, n = 264, k = 136;  // ragged M and N
  Fixture f(GetParam(), m, n, k, 23);
  const int64_t tm = f.tile.tile_m;
  DeviceMatrix a2(tm + m, k);
  fill_u16(a2.data, a2.rows * a2.cols, kBf16Nan, f.stream);
  WEFT_CUDA_CHECK(cudaMemcpyAsync(static_cast<uint16_t*>(a2.data) + tm * k, f.a.data, static_cast<size_t>(m * k) * 2, cudaMemcpyDeviceToDevice, f.stream));
  for (int64_t i = 0; i * tm < m; i += 2)
    fill_u16(static_cast<uint16_t*>(f.a.data) + i * tm * k, std::min(tm, m - i * tm) * k, kBf16Nan, f.stream);
  OverlapGemmLaunch l = f.launch();
  l.a2 = a2.data;
  l.lda2 = a2.cols;
  l.m2 = a2.rows;
  for (auto& e : f.table)
    if (e.tile_m % 2 == 0) {
      e.a_operand = 1;
      e.a_tile_m = e.tile_m + 1;
    }
  f.run(l);
  ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000));
  EXPECT_TRUE(f.matches(download(f.c.region(), f.stream)));
  // A second A operand entries cannot use, or rows past its end, are rejected before launching.
  std::vector<OverlapGemmTile> past_end = {f.table.front()};
  past_end[0].a_tile_m = static_cast<int32_t>((tm + m + tm - 1) / tm);
  EXPECT_THROW(require_valid_table(l, f.config, past_end), std::invalid_argument);
  OverlapGemmLaunch without = l;
  without.a2 = nullptr;
  EXPECT_THROW(require_valid_table(without, f.config, {f.table.front()}), std::invalid_argument);
}

TEST_P(OverlapGemmConfigs, AddendsAreAddedInTheEpilogueOnceTheirWaitIsMet) {
  // Two addends per tile (rows store_row and store_row + m of D), written by another stream only
  // after a while and then signalled: each tile must wait in its epilogue and read them after the
  // signal (D holds NaN before), once, including when its K is split (only the last split adds).
  for (int splits : {1, 3}) {
    const int64_t m = 300, n = 520, k = 392;  // ragged M and N against every tile
    Fixture f(GetParam(), m, n, k, static_cast<uint64_t>(31 + splits));
    DeviceMatrix d(2 * m, n);
    fill_u16(d.data, d.rows * d.cols, kBf16Nan, f.stream);
    OverlapGemmLaunch l = f.launch();
    l.targets[1] = OverlapGemmTarget{d.data, d.cols, d.rows, d.cols};
    l.target_count = 2;
    l.k_splits = splits;
    l.wait_timeout_ns = 5'000'000'000ull;
    for (auto& e : f.table) {
      e.wait_signal = 0;
      e.wait_value = 1;
      e.addend_target = 1;
      e.addend_count = 2;
      e.addend_row = e.store_row;
      e.addend_row_step = m;
      e.addend_col = e.store_col;
    }
    if (splits > 1) f.table = split_along_k(f.table, splits, k, f.config);
    cudaStream_t other;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    WEFT_CUDA_CHECK(cudaStreamSynchronize(f.stream));  // D poisoned before the GEMM starts
    f.upload(l);
    OverlapGemm gemm(l, f.config);
    gemm.launch(f.stream);
    DeviceMatrix busy(1 << 14, 1 << 12);
    for (int i = 0; i < 8; ++i) fill_random_bf16(busy.data, busy.rows * busy.cols, static_cast<uint64_t>(i), other);
    fill_random_bf16(d.data, d.rows * d.cols, 99, other);
    signal_add(f.signals + 0, 1, other);
    ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000));
    EXPECT_EQ(f.read_error().failed, 0u) << "a tile gave up waiting";
    const HostMatrix addends = download(d.region(), f.stream);
    HostMatrix want = f.want, scale = f.scale;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        want.at(i, j) += addends.at(i, j) + addends.at(m + i, j);
        scale.at(i, j) += std::fabs(addends.at(i, j)) + std::fabs(addends.at(m + i, j));
      }
    EXPECT_TRUE(f.matches(download(f.c.region(), f.stream), want, scale)) << splits << " split(s)";
    cudaStreamSynchronize(other);
    cudaStreamDestroy(other);
  }
}

INSTANTIATE_TEST_SUITE_P(Tiles, OverlapGemmConfigs, testing::ValuesIn(overlap_gemm_configs()),
                         [](const auto& param_info) { return "tile_" + to_string(param_info.param); });

// A table one SM-count of tiles plus a quarter more: the quarter (the partial last wave) is split
// along K to fill that wave, the rest stays whole; every tile notifies once; two calls.
TEST(OverlapGemm, TailSplitsFillTheLastWaveAndMatchTheHostGemm) {
  int device = 0, sms = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t tiles_wanted = sms + sms / 4, tiles_n = 12, tiles_m = (tiles_wanted + tiles_n - 1) / tiles_n;
  const int64_t m = tiles_m * 128 - 40, n = tiles_n * 96, k = 520;  // ragged M and K
  Fixture f(OverlapGemmConfig::tile_128x96, m, n, k, 77);
  const size_t tiles = f.table.size();
  for (auto& e : f.table) {
    e.notify_rank = 0;
    e.notify_signal = 1;
    e.notify_increment = 1;
  }
  const size_t tail = tiles % static_cast<size_t>(sms);
  ASSERT_GT(tail, 0u);
  const std::vector<OverlapGemmTile> whole_table = f.table;
  const int splits = static_cast<int>(std::min<size_t>(4, static_cast<size_t>(sms) / tail));
  ASSERT_GE(splits, 2);
  f.table = split_tail_along_k(f.table, splits, k, f.config, sms);
  ASSERT_EQ(f.table.size(), tiles - tail + tail * static_cast<size_t>(splits)) << "only the last wave's tiles are split";
  f.expect_two_calls_match(splits, tiles, "tail split " + std::to_string(splits) + " ways");
  // A tail that would not fit in one wave once split is left alone.
  if (tail > 1) {
    EXPECT_EQ(split_tail_along_k(whole_table, sms, k, f.config, sms).size(), whole_table.size());
  }
}

// Stream-K over a partial last wave on every 128-row tile: fewer tiles than SMs (each tile's K cut
// over about two CTAs), a wave and a fraction (the whole wave streamed with the rest), ragged M, N
// and K; every tile notifies once, after its last piece; two calls into poisoned C.
TEST(OverlapGemm, StreamKPiecesMatchTheHostGemmOnEveryTile) {
  int device = 0, sms = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  for (OverlapGemmConfig config : overlap_gemm_configs()) {
    const OverlapGemmShape tile = shape_of(config);
    if (tile.tile_m != 128) continue;
    for (const int64_t tiles_wanted : {int64_t{sms} * 3 / 5, int64_t{sms} + sms / 3}) {
      const int64_t tiles_n = 8, tiles_m = (tiles_wanted + tiles_n - 1) / tiles_n;
      const int64_t m = tiles_m * 128 - 24, n = tiles_n * tile.tile_n - 40, k = 584;  // ragged M, N and K (10 K-tiles)
      Fixture f(config, m, n, k, static_cast<uint64_t>(91 + tiles_wanted));
      const size_t tiles = f.table.size();
      ASSERT_NE(tiles % static_cast<size_t>(sms), 0u);
      for (auto& e : f.table) {
        e.notify_rank = 0;
        e.notify_signal = 1;
        e.notify_increment = 1;
      }
      f.table = stream_k_tail(f.table, k, config, sms);
      int no_work = 0;
      for (const auto& e : f.table) no_work += e.k_tiles == kNoWorkKTiles;
      ASSERT_GT(most_splits(f.table), 1) << "the tiles are cut into pieces";
      f.expect_two_calls_match(most_splits(f.table), tiles,
                               "stream-K, " + to_string(config) + ", " + std::to_string(tiles) + " tiles, " + std::to_string(no_work) + " padding entries");
    }
  }
}

// Clusters of two on the tiles compiled for them: 2x1 (pairs in one tile column share B's tile) and
// 1x2 (pairs in one tile row share A's), on fewer tiles than SMs (m = 200: two tile rows, as the
// small-M GEMMs have) and on more (each CTA walks several pairs), ragged M, N and K, unsplit and
// each pair split three ways in step; every tile notifies once, after its last split; two calls
// into poisoned C. A pair's halves of the shared tile come from both CTAs:
// a wrong multicast mask or slice leaves a half of it stale or zero, which the comparison sees.
TEST(OverlapGemm, ClustersOfTwoShareTheirTilesAndMatchTheHostGemm) {
  int device = 0, sms = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  for (OverlapGemmConfig config : {OverlapGemmConfig::tile_128x128, OverlapGemmConfig::tile_128x256}) {
    const OverlapGemmShape tile = shape_of(config);
    for (const int64_t tiles_m : {int64_t{2}, int64_t{6}}) {
      const int64_t tiles_n = tiles_m == 2 ? 8 : (sms + 5) / 6 * 2;  // 16 tiles; over the SM count
      const int64_t m = tiles_m * 128 - 56, n = tiles_n * tile.tile_n - 40, k = 584;
      for (const auto& [cm, cn] : {std::pair{2, 1}, std::pair{1, 2}}) {
        Fixture f(config, m, n, k, static_cast<uint64_t>(131 + tiles_m * 3 + cm));
        f.cluster_m = cm, f.cluster_n = cn;
        if (cm == 2) {  // column by column, rows in pairs
          std::vector<OverlapGemmTile> by_columns;
          for (int64_t j = 0; j < tiles_n; ++j)
            for (int64_t i = 0; i < tiles_m; ++i) by_columns.push_back(f.table[static_cast<size_t>(i * tiles_n + j)]);
          f.table = by_columns;
        }
        for (auto& e : f.table) {
          e.notify_rank = 0;
          e.notify_signal = 1;
          e.notify_increment = 1;
        }
        const size_t tiles = f.table.size();
        const std::vector<OverlapGemmTile> whole = f.table;
        for (const int splits : {1, 3}) {  // 10 K-tiles: 3, 3 and 4
          f.table = split_along_k(whole, splits, k, config, /*group=*/2);
          f.expect_two_calls_match(splits, tiles, "clusters of " + std::to_string(cm) + "x" + std::to_string(cn) + ", " + to_string(config) + ", " +
                                                      std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + ", " +
                                                      std::to_string(splits) + " splits in step");
        }
      }
    }
  }
}

// Clusters of four and eight on 128x128 (2x2, 2x4, 4x2): the table in the clusters' groups (entry j of
// a group at (j % cluster_m, j / cluster_m) of its block of tiles), on fewer tiles than SMs (one
// entry per CTA: the kernel that stages its tile in the pipeline's memory) and on more (each CTA
// walks several groups), ragged M, N and K, unsplit and split three ways in step; a notify per tile
// after its last split; two calls into poisoned C. Each CTA loads a quarter or half of every shared
// tile and multicasts it: a wrong mask or slice leaves part of a tile stale, which the comparison sees.
TEST(OverlapGemm, ClustersOfFourAndEightShareTheirTilesAndMatchTheHostGemm) {
  int device = 0, sms = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const OverlapGemmConfig config = OverlapGemmConfig::tile_128x128;
  for (const auto& [cm, cn] : {std::pair{2, 2}, std::pair{2, 4}, std::pair{4, 2}})
    for (const bool many : {false, true}) {
      const int64_t tiles_m = many ? 8 : cm, tiles_n = many ? (sms / 8 / cn + 2) * cn : 2 * cn;  // 4 groups; over the SM count
      const int64_t m = tiles_m * 128 - 56, n = tiles_n * 128 - 40, k = 584;
      Fixture f(config, m, n, k, static_cast<uint64_t>(171 + cm * 7 + cn + many));
      f.cluster_m = cm, f.cluster_n = cn;
      std::vector<OverlapGemmTile> grouped;  // the fixture's table is row by row
      for (int64_t bi = 0; bi < tiles_m / cm; ++bi)
        for (int64_t bj = 0; bj < tiles_n / cn; ++bj)
          for (int j = 0; j < cm * cn; ++j)
            grouped.push_back(f.table[static_cast<size_t>((bi * cm + j % cm) * tiles_n + bj * cn + j / cm)]);
      for (auto& e : grouped) {
        e.notify_rank = 0;
        e.notify_signal = 1;
        e.notify_increment = 1;
      }
      const size_t tiles = grouped.size();
      for (const int splits : {1, 3}) {  // 10 K-tiles: 3, 3 and 4
        f.table = split_along_k(grouped, splits, k, config, cm * cn);
        f.expect_two_calls_match(splits, tiles, "clusters of " + std::to_string(cm) + "x" + std::to_string(cn) + ", " + std::to_string(m) + "x" +
                                                    std::to_string(n) + "x" + std::to_string(k) + ", " + std::to_string(splits) + " splits in step");
      }
    }
}

// The table of the exchanged product of an m x n C on `tile` (the kernel's): kernel tile (i, j) is
// C's rows [j tile_n, ...) and columns [i tile_m, ...), each notifying signal 1 where asked.
std::vector<OverlapGemmTile> exchanged_table(int64_t m, int64_t n, OverlapGemmShape tile, bool notify) {
  std::vector<OverlapGemmTile> table;
  for (int64_t i = 0; i * tile.tile_m < n; ++i)     // the kernel's rows: C's columns
    for (int64_t j = 0; j * tile.tile_n < m; ++j) {  // the kernel's columns: C's rows
      OverlapGemmTile e;
      e.tile_m = static_cast<int32_t>(i);
      e.tile_n = static_cast<int32_t>(j);
      e.rows = static_cast<int32_t>(std::min<int64_t>(tile.tile_n, m - j * tile.tile_n));
      e.cols = static_cast<int32_t>(std::min<int64_t>(tile.tile_m, n - i * tile.tile_m));
      e.store_row = j * tile.tile_n;
      e.store_col = i * tile.tile_m;
      if (notify) {
        e.notify_rank = 0;
        e.notify_signal = 1;
        e.notify_increment = 1;
      }
      table.push_back(e);
    }
  return table;
}

// The fixture's launch turned into the exchanged product's: the kernel's A is B, its B is A.
OverlapGemmLaunch exchanged_launch(Fixture& f) {
  OverlapGemmLaunch l = f.launch();
  l.a = f.b.data, l.lda = f.b.cols, l.b = f.a.data, l.ldb = f.a.cols, l.m = f.b.rows, l.n = f.a.rows;
  l.store_transposed = true;
  return l;
}

TEST(OverlapGemm, TheExchangedProductStoresEachTileTransposed) {
  // C = A B^T computed as C^T = B A^T by the kernels compiled for it (store_transposed: the kernel's
  // A is B, its B is A), each tile stored transposed into C: ragged m (one and several tile columns),
  // n and K, unsplit and split along K, a notify per tile that fires once per call, two calls into a
  // poisoned C.
  for (OverlapGemmConfig config : {OverlapGemmConfig::tile_128x96, OverlapGemmConfig::tile_128x112, OverlapGemmConfig::tile_128x128,
                                   OverlapGemmConfig::tile_128x192}) {
    const OverlapGemmShape tile = shape_of(config);
    for (auto [m, n, k, splits] : {std::tuple{200, 700, 264, 1}, {64, 512, 2048, 2}, {192, 136, 72, 1}, {8, 24, 16, 1}, {300, 1000, 520, 3}}) {
      const std::string what = to_string(config) + " exchanged, " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " / " +
                               std::to_string(splits);
      Fixture f(config, m, n, k, static_cast<uint64_t>(m * 3 + n + splits));
      f.table = exchanged_table(m, n, tile, /*notify=*/true);
      const size_t tiles = f.table.size();
      if (splits > 1) f.table = split_along_k(f.table, splits, k, config);
      OverlapGemmLaunch l = exchanged_launch(f);
      l.k_splits = splits;
      l.wait_timeout_ns = 2'000'000'000ull;
      f.upload(l);
      OverlapGemm gemm(l, config);
      for (int call = 0; call < 2; ++call) {
        fill_u16(f.c.data, f.c.rows * f.c.cols, kBf16Nan, f.stream);
        gemm.launch(f.stream);
        ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000)) << what;
        EXPECT_EQ(f.read_error().failed, 0u) << what;
        EXPECT_TRUE(f.matches(download(f.c.region(), f.stream))) << what << ", call " << call;
        EXPECT_EQ(f.read_signals()[1], static_cast<uint64_t>(call + 1) * tiles) << what;
      }
    }
  }
  // C in a buffer with padded rows (stride 304, 16-byte aligned): whole C rows of a tile leave as bulk
  // copies, the last kernel tile row (300 - 256 = 44 of C's columns, not a multiple of 8) through the
  // storing warps' 16-byte runs; the padding must stay untouched.
  for (OverlapGemmConfig config : {OverlapGemmConfig::tile_128x96, OverlapGemmConfig::tile_128x112, OverlapGemmConfig::tile_128x128,
                                   OverlapGemmConfig::tile_128x192}) {
    const OverlapGemmShape tile = shape_of(config);
    const int64_t m = 200, n = 300, k = 64, stride = 304;
    Fixture f(config, m, n, k, 29);
    DeviceMatrix padded(m, stride);
    fill_u16(padded.data, m * stride, kBf16Nan, f.stream);
    f.table = exchanged_table(m, n, tile, /*notify=*/false);
    OverlapGemmLaunch l = exchanged_launch(f);
    l.targets[0] = OverlapGemmTarget{padded.data, stride, m, n};
    f.run(l);
    ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000)) << to_string(config);
    const HostMatrix whole = download(padded.region(), f.stream);
    HostMatrix got(m, n);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < stride; ++c) {
        if (c < n) got.at(r, c) = whole.at(r, c);
        else ASSERT_TRUE(std::isnan(whole.at(r, c))) << to_string(config) << ": padding overwritten at row " << r << ", column " << c;
      }
    EXPECT_TRUE(f.matches(got)) << to_string(config) << " exchanged into a padded C";
  }
  // The tiles not compiled for it say so.
  Fixture f(OverlapGemmConfig::tile_128x256, 64, 256, 64, 5);
  OverlapGemmLaunch l = exchanged_launch(f);
  f.table = exchanged_table(64, 256, shape_of(OverlapGemmConfig::tile_128x256), /*notify=*/false);
  f.upload(l);
  EXPECT_THROW(OverlapGemm(l, OverlapGemmConfig::tile_128x256), std::invalid_argument);
}

// The exchanged product in clusters on 128x112 (the kernel's 1x2, 2x2 and 4x2: C's two 112-row tiles
// of a tile column share the kernel's A tile, C's B rows; two and four of C's tile columns the
// kernel's B tile, C's A rows): the table in the kernel's groups, m = 200 (two kernel tile columns),
// on fewer tiles than SMs (one entry per CTA) and on more, ragged n and K, unsplit and split three
// ways in step, a notify per tile, two calls into poisoned C. A wrong multicast mask or slice, or
// groups in C's order instead of the kernel's, leaves part of a shared tile stale.
TEST(OverlapGemm, TheExchangedProductInClustersSharesItsTilesAndMatchesTheHostGemm) {
  int device = 0, sms = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const OverlapGemmConfig config = OverlapGemmConfig::tile_128x112;
  const OverlapGemmShape tile = shape_of(config);
  for (const auto& [cm, cn] : {std::pair{1, 2}, std::pair{2, 2}, std::pair{4, 2}})
    for (const bool many : {false, true}) {
      const int64_t kernel_rows = many ? (sms / 2 / cm + 2) * cm : 2 * cm;  // the kernel's tile rows: C's tile columns
      const int64_t m = 200, n = kernel_rows * tile.tile_m - 40, k = 584;
      Fixture f(config, m, n, k, static_cast<uint64_t>(191 + cm * 7 + many));
      const std::vector<OverlapGemmTile> by_rows = exchanged_table(m, n, tile, /*notify=*/true);  // kernel row by kernel row, 2 entries each
      std::vector<OverlapGemmTile> grouped;
      for (int64_t bi = 0; bi < kernel_rows / cm; ++bi)
        for (int j = 0; j < cm * cn; ++j) grouped.push_back(by_rows[static_cast<size_t>((bi * cm + j % cm) * 2 + j / cm)]);
      const size_t tiles = grouped.size();
      for (const int splits : {1, 3}) {  // 10 K-tiles: 3, 3 and 4
        const std::string what = "exchanged in clusters of " + std::to_string(cm) + "x" + std::to_string(cn) + ", " + std::to_string(m) + "x" +
                                 std::to_string(n) + "x" + std::to_string(k) + ", " + std::to_string(splits) + " splits in step";
        f.table = split_along_k(grouped, splits, k, config, cm * cn);
        OverlapGemmLaunch l = exchanged_launch(f);
        l.cluster_m = cm, l.cluster_n = cn;
        l.k_splits = splits;
        l.wait_timeout_ns = 2'000'000'000ull;
        f.upload(l);
        OverlapGemm gemm(l, config);
        const uint64_t before = f.read_signals()[1];
        for (int call = 0; call < 2; ++call) {
          fill_u16(f.c.data, f.c.rows * f.c.cols, kBf16Nan, f.stream);
          gemm.launch(f.stream);
          ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000)) << what;
          EXPECT_EQ(f.read_error().failed, 0u) << what;
          EXPECT_TRUE(f.matches(download(f.c.region(), f.stream))) << what << ", call " << call;
          EXPECT_EQ(f.read_signals()[1] - before, static_cast<uint64_t>(call + 1) * tiles) << what << ": one notify per tile, after its last split";
        }
      }
    }
}

TEST(OverlapGemm, BadLaunchesAreRejectedWithAReason) {
  Fixture f(OverlapGemmConfig::tile_128x128, 256, 256, 128, 1);
  OverlapGemmLaunch l = f.launch();
  l.tiles = reinterpret_cast<const OverlapGemmTile*>(f.signals);
  l.tile_count = 1;
  OverlapGemmLaunch odd_k = l;
  odd_k.k = 60;
  EXPECT_THROW(require_launchable(odd_k, f.config), std::invalid_argument);
  OverlapGemmLaunch shifted = l;
  shifted.a = static_cast<const uint16_t*>(f.a.data) + 1;
  EXPECT_THROW(require_launchable(shifted, f.config), std::invalid_argument);
  std::vector<OverlapGemmTile> outside = {f.table.front()};
  outside[0].tile_m = 2;
  EXPECT_THROW(require_valid_table(l, f.config, outside), std::invalid_argument);
  std::vector<OverlapGemmTile> spills = {f.table.front()};
  spills[0].store_row = 200;
  EXPECT_THROW(require_valid_table(l, f.config, spills), std::invalid_argument);
  // Addends: a second one past the target's last row; a target that does not exist.
  std::vector<OverlapGemmTile> addends = {f.table.front()};
  addends[0].addend_target = 0;
  addends[0].addend_count = 2;
  addends[0].addend_row_step = 128;
  EXPECT_NO_THROW(require_valid_table(l, f.config, addends));
  addends[0].addend_row = 1;
  EXPECT_THROW(require_valid_table(l, f.config, addends), std::invalid_argument);
  addends[0].addend_row = 0;
  addends[0].addend_target = 1;
  EXPECT_THROW(require_valid_table(l, f.config, addends), std::invalid_argument);
  // Split K: more splits than the launch allows; the last split before the first; a gap in K.
  std::vector<OverlapGemmTile> split = split_along_k({f.table.front()}, 2, l.k, f.config);
  EXPECT_THROW(require_valid_table(l, f.config, split), std::invalid_argument);
  l.k_splits = 2;
  EXPECT_NO_THROW(require_valid_table(l, f.config, split));
  EXPECT_THROW(require_valid_table(l, f.config, {split[1], split[0]}), std::invalid_argument);
  std::vector<OverlapGemmTile> gap = split;
  gap[1].k_begin += 1;
  gap[1].k_tiles -= 1;
  EXPECT_THROW(require_valid_table(l, f.config, gap), std::invalid_argument);
  EXPECT_THROW(split_along_k({f.table.front()}, 3, l.k, f.config), std::invalid_argument) << "K = 128 has 2 K-tiles";
}

// Through the executor: every rank's tiles go to the next rank's memory, remapped, with a notify
// per tile; the next rank waits for them (tests/support/ring_push_plan.hpp).
TEST(OverlapGemm, PeerStoresAndNotifiesThroughTheExecutor) {
  static auto group = [] {
    int visible = 0;
    WEFT_CUDA_CHECK(cudaGetDeviceCount(&visible));
    std::vector<int> devices;
    for (int d = 0; d < std::min(visible, 4); ++d) devices.push_back(d);
    return Communicator::local_group(devices);
  }();
  const int world = static_cast<int>(group.size());
  if (world < 2) GTEST_SKIP() << "needs 2 GPUs";
  const Plan plan = testing_support::ring_push_plan(world, 384, 264, 136);
  std::vector<bench::ElementCheck> checks(static_cast<size_t>(world));
  std::vector<std::string> device_errors(static_cast<size_t>(world));
  for_each_rank(group, [&](Communicator& comm) {
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CudaExecutor exec(comm, plan);
    const RankTensors mine = bench::fill_inputs(exec, comm.rank(), 21, stream);
    comm.host_barrier();  // every output poisoned before anyone pushes into it
    for (int call = 0; call < 3; ++call) exec.run(stream);  // counters reset per call: each call waits afresh
    if (!synchronize_with_timeout(stream, 30000)) throw std::runtime_error("ring push did not finish:\n" + exec.diagnose());
    const HostMatrix got = download(exec.output(), stream);
    const std::vector<RankTensors> all = bench::gather_inputs(comm, mine);
    // Element by element, each bounded by the bf16 roundings of the op on the inputs' magnitudes.
    std::vector<RankTensors> magnitudes = all;
    for (RankTensors& rank : magnitudes)
      for (auto& [name, matrix] : rank)
        for (float& v : matrix.data) v = std::fabs(v);
    checks[static_cast<size_t>(comm.rank())] =
        bench::check_elements(got, testing_support::ring_push_expected(all, comm.rank()),
                              testing_support::ring_push_expected(magnitudes, comm.rank()), bench::bf16_error_factor(plan.problem));
    try {
      exec.check();
    } catch (const DeviceWaitTimeout& e) {
      device_errors[static_cast<size_t>(comm.rank())] = e.what();
    }
    cudaStreamDestroy(stream);
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(checks[static_cast<size_t>(r)].passed()) << "rank " << r << ": " << checks[static_cast<size_t>(r)].explain();
    EXPECT_EQ(device_errors[static_cast<size_t>(r)], "") << "rank " << r;
  }
}

}  // namespace
}  // namespace weft
