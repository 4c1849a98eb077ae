// weft's attention kernel (kernels/attention.hpp) against softmax(Q K^T / sqrt(d)) V computed in
// double on the host, element by element, on fresh random inputs with the outputs poisoned (NaN)
// before every launch: head dims 64 and 128, MHA and GQA, causal by global position and not, lengths
// that are and are not multiples of the kernel's tiles, KV tiles whose heights are not (pieces ending
// inside the box, next to rows holding NaN), rows that see no key, the log-sum-exp, merging into a
// previous partial result, persistent CTAs taking several units, per-tile waits released by another
// stream and one that times out. Then the CUDA executor running ag_attention's sequential,
// decomposed and tilelink plans on the visible GPUs (WEFT_TEST_WORLD) against the host reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>

#include "attention_check.hpp"
#include "check_against_host.hpp"
#include "element_check.hpp"
#include "measure.hpp"
#include "weft/kernels/attention.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/runtime/attention_op.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/rank_threads.hpp"

namespace weft {
namespace {

uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even (finite inputs)
  return static_cast<uint16_t>(bits >> 16);
}
float from_bf16(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <class T>
struct Device {
  T* data = nullptr;
  size_t count = 0;
  explicit Device(size_t n) : count(n) { WEFT_CUDA_CHECK(cudaMalloc(&data, std::max<size_t>(n, 1) * sizeof(T))); }
  ~Device() { cudaFree(data); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  void upload(const std::vector<T>& host) { WEFT_CUDA_CHECK(cudaMemcpy(data, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice)); }
  std::vector<T> download() const {
    std::vector<T> host(count);
    WEFT_CUDA_CHECK(cudaMemcpy(host.data(), data, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
};

struct Case {
  int head_dim;
  int heads, kv_heads;
  int64_t q_rows, kv_rows;
  bool causal;
  int64_t q_position, kv_position;
  int64_t kv_tile_rows;   // KV tiles of this height over [0, kv_covered)
  int64_t kv_covered;     // rows of k/v the tiles cover; the rest hold NaN and must not matter
  int max_ctas;
  std::string name;
};

std::vector<Case> cases() {
  return {
      {64, 4, 4, 256, 256, false, 0, 0, 128, 256, 0, "d64_mha_aligned"},
      {128, 4, 1, 200, 200, true, 0, 0, 128, 200, 0, "d128_gqa4_causal_ragged"},
      {64, 8, 2, 333, 633, true, 300, 0, 96, 633, 5, "d64_gqa4_causal_block_after_keys_tiles96"},
      {128, 2, 2, 77, 500, false, 0, 0, 200, 450, 0, "d128_mha_short_queries_uncovered_tail"},
      {64, 2, 1, 150, 300, true, 0, 64, 128, 300, 3, "d64_causal_keys_after_first_queries"},
      {128, 6, 3, 129, 129, true, 0, 0, 64, 129, 2, "d128_gqa2_causal_persistent"},
      {64, 1, 1, 1, 7, false, 0, 0, 128, 7, 0, "d64_one_query_seven_keys"},
  };
}

std::string case_name(const testing::TestParamInfo<Case>& info) { return info.param.name; }
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Random inputs (row strides padded past their widths), the KV tiles, and the host's answer.
struct Fixture {
  Case c;
  int64_t ldq, ldk, ldo, ldlse;
  std::vector<uint16_t> q, k, v;
  std::vector<AttentionKvTile> tiles;
  Device<uint16_t> dq, dk, dv, dout;
  Device<float> dlse;
  Device<AttentionKvTile> dtiles;
  Device<uint64_t> signals;
  Device<WaitRecord> error;
  cudaStream_t stream{};

  Fixture(const Case& cs, uint64_t seed)
      : c(cs),
        ldq(int64_t{cs.heads} * cs.head_dim + 8),
        ldk(int64_t{cs.kv_heads} * cs.head_dim + 16),
        ldo(int64_t{cs.heads} * cs.head_dim + 8),
        ldlse(cs.heads + 3),
        dq(static_cast<size_t>(cs.q_rows * ldq)),
        dk(static_cast<size_t>(cs.kv_rows * ldk)),
        dv(static_cast<size_t>(cs.kv_rows * ldk)),
        dout(static_cast<size_t>(cs.q_rows * ldo)),
        dlse(static_cast<size_t>(cs.q_rows * ldlse)),
        dtiles(static_cast<size_t>((cs.kv_covered + cs.kv_tile_rows - 1) / cs.kv_tile_rows)),
        signals(4),
        error(1) {
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.f, 1.f);
    auto fill = [&](std::vector<uint16_t>& m, int64_t rows, int64_t ld, float amplitude) {
      m.assign(static_cast<size_t>(rows * ld), 0);
      for (uint16_t& x : m) x = to_bf16(amplitude * uniform(rng));
    };
    fill(q, c.q_rows, ldq, 2.f);  // scores of a few units: a softmax that is neither flat nor one-hot
    fill(k, c.kv_rows, ldk, 2.f);
    fill(v, c.kv_rows, ldk, 1.f);
    for (int64_t row = c.kv_covered; row < c.kv_rows; ++row)
      for (int64_t j = 0; j < ldk; ++j) k[static_cast<size_t>(row * ldk + j)] = v[static_cast<size_t>(row * ldk + j)] = kBf16Nan;
    for (int64_t row = 0; row < c.kv_covered; row += c.kv_tile_rows)
      tiles.push_back(AttentionKvTile{row, std::min(c.kv_tile_rows, c.kv_covered - row)});
    dq.upload(q);
    dk.upload(k);
    dv.upload(v);
    WEFT_CUDA_CHECK(cudaMemset(signals.data, 0, 4 * sizeof(uint64_t)));
    WEFT_CUDA_CHECK(cudaMemset(error.data, 0, sizeof(WaitRecord)));
  }
  ~Fixture() {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }

  AttentionLaunch launch() {
    dtiles.upload(tiles);
    AttentionLaunch l;
    l.q = dq.data;
    l.k = dk.data;
    l.v = dv.data;
    l.o = dout.data;
    l.lse = dlse.data;
    l.ldq = ldq;
    l.ldk = ldk;
    l.ldv = ldk;
    l.ldo = ldo;
    l.ldlse = ldlse;
    l.q_rows = c.q_rows;
    l.kv_rows = c.kv_rows;
    l.heads = c.heads;
    l.kv_heads = c.kv_heads;
    l.head_dim = c.head_dim;
    l.q_position = c.q_position;
    l.kv_position = c.kv_position;
    l.causal = c.causal;
    l.kv_tiles = dtiles.data;
    l.kv_tile_count = static_cast<int>(tiles.size());
    l.wait_signals = signals.data;
    l.error = error.data;
    l.wait_timeout_ns = 5'000'000'000ull;
    l.max_ctas = c.max_ctas;
    require_launchable(l);
    require_valid_kv_tiles(l, tiles);
    return l;
  }

  // Scores that rise along the keys, by `rise` (log2 units, at a row of amplitude 1) per 128 keys:
  // query row i is a_i (0.25 .. 4 by row) in every column, key row j the ramp j * delta in every
  // column plus a little noise, so that each 128-key piece's row maximum exceeds the last one's by
  // about a_i * rise (log2): from a few binary orders to far beyond what fp32 exponentials hold.
  void ramp_scores(double rise, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> noise(-0.05f, 0.05f);
    const double per_key = rise / 128.0 / (std::sqrt(static_cast<double>(c.head_dim)) * 1.4426950408889634);
    for (int64_t i = 0; i < c.q_rows; ++i)
      for (int64_t j = 0; j < int64_t{c.heads} * c.head_dim; ++j) q[static_cast<size_t>(i * ldq + j)] = to_bf16(0.25f * static_cast<float>(1 + i % 16));
    for (int64_t r = 0; r < c.kv_covered; ++r)
      for (int64_t j = 0; j < int64_t{c.kv_heads} * c.head_dim; ++j)
        k[static_cast<size_t>(r * ldk + j)] = to_bf16(static_cast<float>(per_key * static_cast<double>(r)) + noise(rng));
    dq.upload(q);
    dk.upload(k);
  }

  void poison() {
    fill_u16(dout.data, static_cast<int64_t>(dout.count), kBf16Nan, stream);
    std::vector<float> nan(dlse.count, std::numeric_limits<float>::quiet_NaN());
    dlse.upload(nan);
  }

  WaitRecord read_error() const { return error.download()[0]; }

  // The host's answer in double over the KV tiles `first` .. `last` - 1: o, lse and the error scale
  // of o (softmax-weighted |v|) per (row, head).
  struct Expected {
    std::vector<double> o, scale, lse;
  };
  Expected expected(size_t first, size_t last) const {
    const int d = c.head_dim, group = c.heads / c.kv_heads;
    Expected e;
    e.o.assign(static_cast<size_t>(c.q_rows * c.heads * d), 0.0);
    e.scale = e.o;
    e.lse.assign(static_cast<size_t>(c.q_rows * c.heads), -std::numeric_limits<double>::infinity());
    std::vector<double> s;
    std::vector<int64_t> keys;
    for (int64_t i = 0; i < c.q_rows; ++i)
      for (int h = 0; h < c.heads; ++h) {
        const int g = h / group;
        s.clear();
        keys.clear();
        for (size_t t = first; t < last; ++t)
          for (int64_t j = tiles[t].row; j < tiles[t].row + tiles[t].rows; ++j) {
            if (c.causal && c.kv_position + j > c.q_position + i) continue;
            double dot = 0;
            for (int x = 0; x < d; ++x)
              dot += static_cast<double>(from_bf16(q[static_cast<size_t>(i * ldq + h * d + x)])) * from_bf16(k[static_cast<size_t>(j * ldk + g * d + x)]);
            s.push_back(dot / std::sqrt(static_cast<double>(d)));
            keys.push_back(j);
          }
        if (s.empty()) continue;
        const double top = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - top));
        e.lse[static_cast<size_t>(i * c.heads + h)] = top + std::log(sum);
        for (size_t n = 0; n < s.size(); ++n)
          for (int x = 0; x < d; ++x) {
            const double value = from_bf16(v[static_cast<size_t>(keys[n] * ldk + g * d + x)]);
            e.o[static_cast<size_t>((i * c.heads + h) * d + x)] += s[n] / sum * value;
            e.scale[static_cast<size_t>((i * c.heads + h) * d + x)] += s[n] / sum * std::fabs(value);
          }
      }
    return e;
  }

  // o within `roundings` bf16 rounding units of its scale (and 1e-6 absolute); lse within 1e-3 of
  // its magnitude (fp32 scores over d products, with room for the tensor cores' accumulation), -inf
  // exactly where no key is visible. Returns the first mismatches, "" if none.
  std::string mismatches(const Expected& want, double roundings) const {
    const std::vector<uint16_t> got_o = dout.download();
    const std::vector<float> got_lse = dlse.download();
    const int d = c.head_dim;
    std::string out;
    int reported = 0;
    auto report = [&](const std::string& what) {
      if (++reported <= 8) out += what + "\n";
    };
    for (int64_t i = 0; i < c.q_rows; ++i)
      for (int h = 0; h < c.heads; ++h) {
        const double want_lse = want.lse[static_cast<size_t>(i * c.heads + h)];
        const float lse = got_lse[static_cast<size_t>(i * ldlse + h)];
        const bool lse_ok = std::isinf(want_lse) ? (std::isinf(lse) && lse < 0) : std::fabs(lse - want_lse) <= 1e-3 * std::max(1.0, std::fabs(want_lse));
        if (!lse_ok) report("lse row " + std::to_string(i) + " head " + std::to_string(h) + ": got " + std::to_string(lse) + ", want " + std::to_string(want_lse));
        for (int x = 0; x < d; ++x) {
          const size_t at = static_cast<size_t>((i * c.heads + h) * d + x);
          const double got = from_bf16(got_o[static_cast<size_t>(i * ldo + h * d + x)]);
          const double bound = roundings * std::ldexp(1.0, -9) * want.scale[at] + 1e-6;
          if (!(std::fabs(got - want.o[at]) <= bound))
            report("o row " + std::to_string(i) + " head " + std::to_string(h) + " col " + std::to_string(x) + ": got " + std::to_string(got) +
                   ", want " + std::to_string(want.o[at]) + " (bound " + std::to_string(bound) + ")");
        }
      }
    if (reported > 8) out += "... " + std::to_string(reported) + " mismatches in all\n";
    return out;
  }
};

class AttentionKernel : public testing::TestWithParam<Case> {};

// P rounded to bf16 (2^-9 of the weighted |v|), o rounded once (2^-9), and margin.
constexpr double kRoundings = 4.0;

TEST_P(AttentionKernel, MatchesTheHostOnFreshInputsTwice) {
  for (uint64_t seed : {11u, 12u}) {
    Fixture f(GetParam(), seed + 100 * static_cast<uint64_t>(GetParam().head_dim));
    Attention attention(f.launch());
    const auto want = f.expected(0, f.tiles.size());
    for (int call = 0; call < 2; ++call) {
      f.poison();
      attention.launch(f.stream);
      ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000)) << "the kernel did not finish";
      EXPECT_EQ(f.read_error().failed, 0u);
      const std::string bad = f.mismatches(want, kRoundings);
      EXPECT_TRUE(bad.empty()) << "seed " << seed << " call " << call << ":\n" << bad;
    }
  }
}

// The online softmax where each piece raises the rows' maxima: O, the sums and the log-sum-exp are
// rescaled consistently (one applied with the wrong factor is off by it; at a rise of 64 a kernel
// that never rescales overflows its exponentials and fails 5 of the 7 cases). The cases with one
// piece, or whose queries see only the first keys, pass either way.
TEST_P(AttentionKernel, ScoresRisingAlongTheKeysAreRescaledAsTheyRise) {
  for (double rise : {5.0, 12.0, 64.0}) {
    Fixture f(GetParam(), 21);
    f.ramp_scores(rise, 22);
    Attention attention(f.launch());
    f.poison();
    attention.launch(f.stream);
    ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000)) << "the kernel did not finish";
    EXPECT_EQ(f.read_error().failed, 0u);
    const std::string bad = f.mismatches(f.expected(0, f.tiles.size()), kRoundings);
    EXPECT_TRUE(bad.empty()) << "rise " << rise << " per 128 keys:\n" << bad;
  }
}

TEST_P(AttentionKernel, MergesASecondPartOfTheKeysByItsLogSumExp) {
  Fixture f(GetParam(), 77);
  if (f.tiles.size() < 2) GTEST_SKIP() << "one KV tile: nothing to split";
  const size_t split = f.tiles.size() / 2;
  const std::vector<AttentionKvTile> all = f.tiles;
  f.poison();
  f.tiles.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(split));
  launch_attention(f.launch(), f.stream);
  ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000));  // before the table is overwritten
  f.tiles.assign(all.begin() + static_cast<std::ptrdiff_t>(split), all.end());
  AttentionLaunch second = f.launch();
  second.merge = true;
  launch_attention(second, f.stream);
  ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000));
  f.tiles = all;
  // One more rounding of o (the first part's, stored in bf16 before the merge reads it back).
  const std::string bad = f.mismatches(f.expected(0, all.size()), kRoundings + 2);
  EXPECT_TRUE(bad.empty()) << bad;
}

TEST_P(AttentionKernel, WaitsPerKvTileAreReleasedByAnotherStream) {
  Fixture f(GetParam(), 5);
  for (size_t t = 0; t < f.tiles.size(); ++t) {
    f.tiles[t].wait_signal = static_cast<int32_t>(t % 2);
    f.tiles[t].wait_value = 1 + t % 3;
  }
  AttentionLaunch l = f.launch();
  f.poison();
  cudaStream_t other;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  launch_attention(l, f.stream);
  // Keep the other stream busy for a while first, so that the kernel really waits.
  Device<uint16_t> busy(size_t{1} << 26);
  for (int i = 0; i < 8; ++i) fill_random_bf16(busy.data, static_cast<int64_t>(busy.count), static_cast<uint64_t>(i), other);
  signal_add(f.signals.data + 0, 3, other);
  signal_add(f.signals.data + 1, 3, other);
  ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000));
  EXPECT_EQ(f.read_error().failed, 0u);
  const std::string bad = f.mismatches(f.expected(0, f.tiles.size()), kRoundings);
  EXPECT_TRUE(bad.empty()) << bad;
  cudaStreamSynchronize(other);
  cudaStreamDestroy(other);
}

// Every tile waits on one signal, tile t for value t + 1, and tile t's K and V land just before the
// signal reaches it (NaN until then): a producer that took a later tile's wait as met by an earlier
// one on the same signal reads NaN.
TEST_P(AttentionKernel, ALaterTileOnTheSameSignalWaitsForItsLargerValue) {
  Fixture f(GetParam(), 7);
  if (f.tiles.size() < 2) GTEST_SKIP() << "one KV tile";
  for (size_t t = 0; t < f.tiles.size(); ++t) {
    f.tiles[t].wait_signal = 0;
    f.tiles[t].wait_value = t + 1;
  }
  // The true K and V stay in a copy; the kernel's K and V rows of tiles 1.. are NaN until they land.
  const size_t ldk = static_cast<size_t>(f.ldk);
  Device<uint16_t> true_k(f.dk.count), true_v(f.dv.count);
  true_k.upload(f.k);
  true_v.upload(f.v);
  const size_t landed_from = static_cast<size_t>(f.tiles[1].row) * ldk;
  fill_u16(f.dk.data + landed_from, static_cast<int64_t>(f.dk.count - landed_from), kBf16Nan, f.stream);
  fill_u16(f.dv.data + landed_from, static_cast<int64_t>(f.dv.count - landed_from), kBf16Nan, f.stream);
  AttentionLaunch l = f.launch();
  f.poison();
  WEFT_CUDA_CHECK(cudaStreamSynchronize(f.stream));
  cudaStream_t other;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  launch_attention(l, f.stream);
  Device<uint16_t> busy(size_t{1} << 24);
  for (size_t t = 0; t < f.tiles.size(); ++t) {
    for (int i = 0; i < 4; ++i) fill_random_bf16(busy.data, static_cast<int64_t>(busy.count), t * 4 + static_cast<uint64_t>(i), other);
    if (t > 0) {
      const size_t at = static_cast<size_t>(f.tiles[t].row) * ldk, count = static_cast<size_t>(f.tiles[t].rows) * ldk;
      WEFT_CUDA_CHECK(cudaMemcpyAsync(f.dk.data + at, true_k.data + at, count * sizeof(uint16_t), cudaMemcpyDeviceToDevice, other));
      WEFT_CUDA_CHECK(cudaMemcpyAsync(f.dv.data + at, true_v.data + at, count * sizeof(uint16_t), cudaMemcpyDeviceToDevice, other));
    }
    signal_add(f.signals.data + 0, 1, other);
  }
  ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000));
  EXPECT_EQ(f.read_error().failed, 0u);
  const std::string bad = f.mismatches(f.expected(0, f.tiles.size()), kRoundings);
  EXPECT_TRUE(bad.empty()) << bad;
  cudaStreamSynchronize(other);
  cudaStreamDestroy(other);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionKernel, testing::ValuesIn(cases()), case_name);

TEST(AttentionKernelWaits, AnUnmetWaitTimesOutAndNamesItsKvTile) {
  Fixture f(cases()[0], 3);
  f.tiles.back().wait_signal = 2;
  f.tiles.back().wait_value = 5;
  AttentionLaunch l = f.launch();
  l.wait_timeout_ns = 20'000'000;  // 20 ms
  launch_attention(l, f.stream);
  ASSERT_TRUE(synchronize_with_timeout(f.stream, 20000)) << "the kernel must give up, not hang";
  const WaitRecord e = f.read_error();
  EXPECT_EQ(e.failed, 1u);
  EXPECT_EQ(e.source, tile::kWaitInAttention);
  EXPECT_EQ(e.where, static_cast<int>(f.tiles.size()) - 1);
  EXPECT_EQ(e.signal, 2);
  EXPECT_EQ(e.expected, 5u);
  EXPECT_EQ(e.observed, 0u);
}

TEST(AttentionKernelChecks, RefuseWhatTheKernelCannotRun) {
  Fixture f(cases()[0], 1);
  AttentionLaunch good = f.launch();
  auto refused = [&](AttentionLaunch l, const std::string& words) {
    try {
      require_launchable(l);
      ADD_FAILURE() << "accepted; expected a refusal naming '" << words << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  AttentionLaunch l = good;
  l.head_dim = 96;
  refused(l, "head dim 96");
  l = good;
  l.kv_heads = 3;
  refused(l, "multiple of key/value heads 3");
  l = good;
  l.q = static_cast<const char*>(good.q) + 2;
  refused(l, "16-byte aligned");
  l = good;
  l.ldk = good.ldk - 4;
  refused(l, "row stride");
  std::vector<AttentionKvTile> outside = f.tiles;
  outside.back().rows += 1;
  EXPECT_THROW(require_valid_kv_tiles(good, outside), std::invalid_argument);
}

// At the benchmark's sizes (many units per persistent CTA, tables of one-piece tiles as the
// benchmark and the plans cut them), which the small cases above never reach: five launches back
// to back, bounded, so that a kernel that deadlocks there fails here instead of hanging the run;
// then sampled rows (the first and last query of tiles at both ends and in the middle, heads at both
// ends and at a kv-head boundary) against the host in double.
TEST(AttentionKernelAtScale, BackToBackLaunchesFinishAndMatchSampledRows) {
  struct Shape {
    int64_t tokens;
    int heads, kv_heads, head_dim;
  };
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const Shape& s : {Shape{8192, 32, 8, 128}, Shape{16384, 32, 4, 64}})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::to_string(s.tokens) + " tokens, " + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " heads, d" +
                   std::to_string(s.head_dim) + (causal ? ", causal" : ""));
      const bench::SelfAttentionRun run({s.tokens, s.heads, s.kv_heads, s.head_dim, causal}, 11, stream);
      const AttentionTiling tiling = attention_tiling(s.head_dim);
      const AttentionLaunch& l = run.launch;
      Attention attention(l);
      for (int launch = 0; launch < 5; ++launch) {
        run.poison_output(stream);
        attention.launch(stream);
      }
      // A deadlocked kernel stays on the GPU: this process cannot go on (the tests after it would
      // queue behind it), so the failure ends it with the reason.
      if (!synchronize_with_timeout(stream, 30000)) {
        std::fprintf(stderr, "AttentionKernelAtScale: five launches did not finish in 30 s: the kernel is stuck\n");
        std::fflush(stderr);
        std::_Exit(1);
      }
      const int64_t T = s.tokens, tile_q = tiling.tile_q;
      std::vector<std::pair<int64_t, int>> samples;
      for (int64_t row : {int64_t{0}, tile_q - 1, tile_q, T / 2 - 1, T / 2, T - tile_q - 1, T - tile_q, T - 1})
        for (int head : {0, s.heads / s.kv_heads - 1, s.heads / s.kv_heads, s.heads - 1}) samples.push_back({row, head});
      const double error = bench::attention_sampled_error(run.shape, run.q.data, run.k.data, run.v.data, run.o.data, samples);
      EXPECT_LE(error, 4 * std::ldexp(1.0, -9)) << "the largest error at " << samples.size() << " sampled (row, head) pairs, in units of the "
                                                  "row's softmax-weighted |v| (NaN: an element not written)";
    }
  cudaStreamDestroy(stream);
}

// ---- the executor: ag_attention's plans --------------------------------------------------------

const std::vector<std::unique_ptr<Communicator>>& group() { return bench::test_group(); }

struct PlanCase {
  std::string strategy;
  int64_t tokens;
  int batch, heads, kv_heads, head_dim;
  bool causal;
  int tile_n;           // KV tile rows (the plan's tile_n)
  int comm_tile_rows;   // tilelink's communication tiles (0: a rank's block)
};

class AttentionPlans : public testing::TestWithParam<std::string> {};

TEST_P(AttentionPlans, MatchTheHostReferenceOnEveryRank) {
  const int world = static_cast<int>(group().size());
  const std::string strategy = GetParam();
  const PlanCase shapes[] = {
      {strategy, 256, 1, 4, 4, 64, false, 128, 0},
      {strategy, 200, 2, 4, 2, 64, true, 128, 64},   // ragged blocks: pieces ending inside the gathered K/V
      {strategy, 130, 1, 4, 1, 128, true, 64, 0},
      {strategy, 96, 1, 2, 2, 128, false, 96, 32},
  };
  for (const PlanCase& s : shapes) {
    Problem p;
    p.op = OpKind::ag_attention;
    p.world_size = world;
    p.m = s.tokens;
    p.batch = s.batch;
    p.heads = s.heads;
    p.kv_heads = s.kv_heads;
    p.head_dim = s.head_dim;
    p.causal = s.causal;
    PlanOptions options;
    options.tile_n = s.tile_n;
    options.tilelink.comm_tile_rows = s.comm_tile_rows;
    const Plan plan = find_strategy(strategy).build(p, options);
    std::vector<bench::ElementCheck> checks(static_cast<size_t>(world));
    // Three calls: the copy engine's counters and the signals start each call from a new epoch.
    for_each_rank(group(), [&](Communicator& comm) {
      checks[static_cast<size_t>(comm.rank())] = bench::run_against_host_reference(comm, plan, static_cast<uint64_t>(s.tokens), 3);
    });
    for (int r = 0; r < world; ++r)
      EXPECT_TRUE(checks[static_cast<size_t>(r)].passed()) << describe(p) << " rank " << r << ": " << checks[static_cast<size_t>(r)].explain();
  }
}

std::string strategy_name(const testing::TestParamInfo<std::string>& info) { return info.param; }

INSTANTIATE_TEST_SUITE_P(Strategies, AttentionPlans, testing::Values("sequential", "decomposed", "tilelink"), strategy_name);

// ---- the op API: weft::AttentionOp on the caller's buffers ---------------------------------------

// Every strategy (and default: auto), GQA, causal, two batch entries, with token counts that change
// from call to call (the largest, a ragged one, the largest again from the cache, a small one): each
// call on fresh random inputs in the caller's memory, the output poisoned (NaN) before it, and every
// rank's result checked element by element against the host reference of all ranks' inputs. At world
// 1 the strategy's own plan runs (keep_strategy_at_world_one: its copies and waits on one GPU).
class AttentionOpOnCallerBuffers : public testing::TestWithParam<std::string> {};

TEST_P(AttentionOpOnCallerBuffers, MatchesTheReferenceAsTokensChange) {
  const int world = static_cast<int>(group().size());
  AttentionSpec spec;
  spec.shape = AttentionShape{2, 4, 2, 64, true, 256};
  spec.strategy = GetParam();
  spec.plan.keep_strategy_at_world_one = true;
  const int64_t q_cols = 2 * 4 * 64, kv_cols = 2 * 2 * 64;
  const std::vector<int64_t> tokens = {256, 200, 256, 40};
  std::vector<std::vector<bench::ElementCheck>> checks(static_cast<size_t>(world));
  std::vector<std::string> picked(static_cast<size_t>(world));
  for_each_rank(group(), [&](Communicator& comm) {
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    {
      AttentionOp op(comm, spec);
      bench::DeviceBuffer q(static_cast<size_t>(256 * q_cols) * 2), k(static_cast<size_t>(256 * kv_cols) * 2),
          v(static_cast<size_t>(256 * kv_cols) * 2), o(static_cast<size_t>(256 * q_cols) * 2);
      for (size_t call = 0; call < tokens.size(); ++call) {
        const int64_t t = tokens[call];
        const uint64_t seed = 1000 * call + 17 * static_cast<uint64_t>(comm.rank());
        fill_random_bf16(q.data, t * q_cols, seed + 1, stream);
        fill_random_bf16(k.data, t * kv_cols, seed + 2, stream);
        fill_random_bf16(v.data, t * kv_cols, seed + 3, stream);
        fill_u16(o.data, 256 * q_cols, kBf16Nan, stream);
        op.run({q.data, k.data, v.data, o.data, t}, stream);
        op.finish(stream);
        const Problem& problem = op.plan(t).problem;  // cached: the plan the call ran
        picked[static_cast<size_t>(comm.rank())] = op.plan(t).strategy;
        RankTensors mine;
        mine["Q"] = bench::download(DeviceRegion{q.data, t, q_cols, q_cols}, stream);
        mine["K"] = bench::download(DeviceRegion{k.data, t, kv_cols, kv_cols}, stream);
        mine["V"] = bench::download(DeviceRegion{v.data, t, kv_cols, kv_cols}, stream);
        const std::vector<RankTensors> all = bench::gather_inputs(comm, mine);
        const size_t rank = static_cast<size_t>(comm.rank());
        checks[rank].push_back(bench::check_elements(bench::download(DeviceRegion{o.data, t, q_cols, q_cols}, stream),
                                                     expected_output(problem, all, comm.rank()), expected_magnitude(problem, all, comm.rank()),
                                                     bench::bf16_error_factor(problem)));
      }
    }
    cudaStreamDestroy(stream);
  });
  for (int r = 0; r < world; ++r)
    for (size_t call = 0; call < tokens.size(); ++call) {
      const bench::ElementCheck& check = checks[static_cast<size_t>(r)][call];
      EXPECT_TRUE(check.passed()) << picked[static_cast<size_t>(r)] << " rank " << r << " tokens " << tokens[call] << ": " << check.explain();
    }
}

INSTANTIATE_TEST_SUITE_P(Strategies, AttentionOpOnCallerBuffers, testing::Values("sequential", "decomposed", "tilelink", "default"),
                         strategy_name);

// At a size whose attention kernel fills every SM (512 CTAs of 128 queries here) with KV tiles that
// wait inside it: what raises those waits must not need an SM (plan/checks/sm_holding.cpp). The
// small shapes above leave SMs free and cannot show it (a copy of the own block on another stream
// would hang here). Each strategy, three calls on fresh
// inputs, against sequential's result on the same inputs (its kernel is checked against the host
// reference above; the host reference of this size would take minutes).
TEST(AttentionOpAtFullSize, EveryStrategyMatchesSequentialWhenTheKernelFillsEverySm) {
  const int world = static_cast<int>(group().size());
  const int64_t tokens = 2048, q_cols = 32 * 128, kv_cols = 8 * 128;
  std::vector<std::vector<std::string>> failures(static_cast<size_t>(world));
  for_each_rank(group(), [&](Communicator& comm) {
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    {
      bench::DeviceBuffer q(static_cast<size_t>(tokens * q_cols) * 2), k(static_cast<size_t>(tokens * kv_cols) * 2),
          v(static_cast<size_t>(tokens * kv_cols) * 2), o(static_cast<size_t>(tokens * q_cols) * 2);
      std::vector<std::unique_ptr<AttentionOp>> ops;
      const std::vector<std::string> strategies = {"sequential", "decomposed", "tilelink"};
      for (const std::string& strategy : strategies) {
        AttentionSpec spec;
        spec.shape = AttentionShape{1, 32, 8, 128, false, tokens};
        spec.strategy = strategy;
        spec.plan.keep_strategy_at_world_one = true;
        ops.push_back(std::make_unique<AttentionOp>(comm, spec));
      }
      for (uint64_t call = 0; call < 3; ++call) {
        const uint64_t seed = 100 * call + 7 * static_cast<uint64_t>(comm.rank());
        fill_random_bf16(q.data, tokens * q_cols, seed + 1, stream);
        fill_random_bf16(k.data, tokens * kv_cols, seed + 2, stream);
        fill_random_bf16(v.data, tokens * kv_cols, seed + 3, stream);
        HostMatrix want;
        for (size_t i = 0; i < ops.size(); ++i) {
          fill_u16(o.data, tokens * q_cols, kBf16Nan, stream);
          try {
            ops[i]->run({q.data, k.data, v.data, o.data, tokens}, stream);
            ops[i]->finish(stream);
          } catch (const std::exception& e) {
            failures[static_cast<size_t>(comm.rank())].push_back(strategies[i] + " call " + std::to_string(call) + ": " + e.what());
            continue;
          }
          HostMatrix got = bench::download(DeviceRegion{o.data, tokens, q_cols, q_cols}, stream);
          if (i == 0) {
            want = std::move(got);
            continue;
          }
          float largest = 0;
          for (float x : want.data) largest = std::max(largest, std::fabs(x));
          const bench::ElementCheck check = bench::check_elements(got, want, HostMatrix(tokens, q_cols, largest), 2e-2);
          if (!check.passed()) failures[static_cast<size_t>(comm.rank())].push_back(strategies[i] + " call " + std::to_string(call) + ": " + check.explain());
        }
      }
    }
    cudaStreamDestroy(stream);
  });
  for (int r = 0; r < world; ++r)
    for (const std::string& f : failures[static_cast<size_t>(r)]) ADD_FAILURE() << "rank " << r << ": " << f;
}

// Refused before anything is allocated or launched: a head dim the kernel has no build for, a
// strategy without ag_attention, and per call a null buffer and a token count above max_tokens.
TEST(AttentionOpErrors, WhatTheOpCannotRunIsRefusedByName) {
  Communicator& comm = *group().front();
  if (group().size() != 1) GTEST_SKIP() << "one rank's refusals (world 1)";
  auto refused = [](const std::function<void()>& f, const std::string& words) {
    try {
      f();
      ADD_FAILURE() << "accepted; expected a refusal naming '" << words << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused([&] { AttentionOp op(comm, {AttentionShape{1, 4, 4, 96, false, 64}}); }, "head_dim=96 has no GPU kernel");
  AttentionSpec fused{AttentionShape{1, 4, 4, 64, false, 64}};
  fused.strategy = "fused";
  refused([&] { AttentionOp op(comm, fused); }, "strategy 'fused' does not implement ag_attention");
  AttentionOp op(comm, {AttentionShape{1, 4, 4, 64, false, 64}});
  bench::DeviceBuffer buffer(64 * 256 * 2);
  refused([&] { op.run({buffer.data, nullptr, buffer.data, buffer.data, 64}, nullptr); }, "k is null");
  refused([&] { op.run({buffer.data, buffer.data, buffer.data, buffer.data, 65}, nullptr); }, "tokens=65 per rank is outside 1..max_tokens=64");
}

}  // namespace
}  // namespace weft
