// Host side of the overlap GEMM: the compiled configurations, the checks that turn a bad launch
// into an error message instead of a fault, and the dispatch. Which configuration a GEMM runs with
// is the model's decision (model/tiling.hpp).
#include "weft/kernels/overlap_gemm.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

#include "weft/cuda/check.hpp"

#include "overlap_gemm_launchers.hpp"

namespace weft {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

[[noreturn]] void reject(const std::string& what) { throw std::invalid_argument("overlap GEMM: " + what); }

// Entry `e` as split `split` of `splits`: only the last split notifies, and an entry with addends
// keeps them and their (epilogue) wait on its last split only, the one that stores.
void make_split(OverlapGemmTile& e, int split, int splits) {
  e.split = split;
  e.splits = splits;
  if (split + 1 == splits) return;
  e.notify_rank = -1;
  e.notify_increment = 0;
  if (e.addend_count > 0) {
    e.wait_signal = -1;
    e.wait_value = 0;
    e.addend_target = -1;
    e.addend_count = 0;
  }
}

}  // namespace

OverlapGemmShape shape_of(OverlapGemmConfig config) {
  switch (config) {
    case OverlapGemmConfig::tile_64x64: return {64, 64, 128};
    case OverlapGemmConfig::tile_64x128: return {64, 128, 128};
    case OverlapGemmConfig::tile_64x192: return {64, 192, 128};
    case OverlapGemmConfig::tile_64x256: return {64, 256, 64};
    case OverlapGemmConfig::tile_128x96: return {128, 96, 64};
    case OverlapGemmConfig::tile_128x112: return {128, 112, 64};
    case OverlapGemmConfig::tile_128x128: return {128, 128, 64};
    case OverlapGemmConfig::tile_128x192: return {128, 192, 64};
    case OverlapGemmConfig::tile_128x256: return {128, 256, 64};
    case OverlapGemmConfig::tile_128x128x128_fp8: return {128, 128, 128};
  }
  reject("unknown configuration");
}

OverlapGemmConfig config_for(int tile_m, int tile_n) {
  std::string compiled;
  for (OverlapGemmConfig config : overlap_gemm_configs()) {
    const OverlapGemmShape s = shape_of(config);
    if (s.tile_m == tile_m && s.tile_n == tile_n) return config;
    compiled += " " + to_string(config);
  }
  reject("no configuration compiled for tile " + std::to_string(tile_m) + "x" + std::to_string(tile_n) + " (compiled:" + compiled + ")");
}

OverlapGemmConfig fp8_config_for(int tile_m, int tile_n) {
  if (tile_m == 64 && tile_n == 128) return OverlapGemmConfig::tile_64x128;
  if (tile_m != 128 || tile_n != 128)
    reject("no FP8 configuration compiled for tile " + std::to_string(tile_m) + "x" + std::to_string(tile_n) + " (compiled: 128x128x128, 64x128x128)");
  return OverlapGemmConfig::tile_128x128x128_fp8;
}

std::string to_string(OverlapGemmConfig config) {
  const OverlapGemmShape s = shape_of(config);
  return std::to_string(s.tile_m) + "x" + std::to_string(s.tile_n) + "x" + std::to_string(s.tile_k);
}

std::vector<OverlapGemmConfig> overlap_gemm_configs() {
  return {OverlapGemmConfig::tile_64x64, OverlapGemmConfig::tile_64x128, OverlapGemmConfig::tile_64x192, OverlapGemmConfig::tile_64x256, OverlapGemmConfig::tile_128x96, OverlapGemmConfig::tile_128x112, OverlapGemmConfig::tile_128x128,
          OverlapGemmConfig::tile_128x192, OverlapGemmConfig::tile_128x256};
}

std::vector<OverlapGemmConfig> fp8_overlap_gemm_configs() { return {OverlapGemmConfig::tile_128x128x128_fp8, OverlapGemmConfig::tile_64x128}; }

bool compiled_in_clusters(OverlapGemmConfig config) {
  return config == OverlapGemmConfig::tile_128x128 || config == OverlapGemmConfig::tile_128x256 || config == OverlapGemmConfig::tile_128x128x128_fp8 ||
         config == OverlapGemmConfig::tile_128x112;
}

std::vector<std::pair<int, int>> compiled_cluster_shapes() { return {{2, 1}, {1, 2}, {2, 2}, {2, 4}, {4, 2}}; }

bool compiled_in_cluster(OverlapGemmConfig config, int cluster_m, int cluster_n, bool exchanged) {
  if (!compiled_in_clusters(config)) return false;
  // The exchanged product on 128x112: the kernel's 1x2 (C's two row tiles of a tile column), and 2x2
  // and 4x2 (two and four tile columns of C besides).
  if (exchanged || config == OverlapGemmConfig::tile_128x112)
    return exchanged && config == OverlapGemmConfig::tile_128x112 && cluster_n == 2 && (cluster_m == 1 || cluster_m == 2 || cluster_m == 4);
  if ((cluster_m == 2 && cluster_n == 1) || (cluster_m == 1 && cluster_n == 2)) return true;
  // Clusters of four and eight: bf16 128x128 (its loads of 32 KB a stage are the ones cuBLASLt
  // multicasts over 4x2 at small m).
  const bool larger = (cluster_m == 2 && cluster_n == 2) || (cluster_m == 2 && cluster_n == 4) || (cluster_m == 4 && cluster_n == 2);
  return larger && config == OverlapGemmConfig::tile_128x128;
}

std::vector<OverlapGemmTile> split_along_k(const std::vector<OverlapGemmTile>& table, int splits, int64_t k,
                                           OverlapGemmConfig config, int group) {
  const int64_t k_tiles = ceil_div(k, shape_of(config).tile_k);
  if (splits < 1 || splits > k_tiles)
    reject("cannot split " + std::to_string(k_tiles) + " K-tiles " + std::to_string(splits) + " ways");
  if (group < 1 || table.size() % static_cast<size_t>(group) != 0)
    reject("split_along_k: " + std::to_string(table.size()) + " entries are not groups of " + std::to_string(group));
  std::vector<OverlapGemmTile> split;
  split.reserve(table.size() * static_cast<size_t>(splits));
  for (size_t first = 0; first < table.size(); first += static_cast<size_t>(group))
    for (int part = 0; part < splits; ++part)
      for (size_t i = first; i < first + static_cast<size_t>(group); ++i) {
        if (table[i].splits != 1) reject("split_along_k: the table is split already");
        OverlapGemmTile e = table[i];
        e.k_begin = static_cast<int32_t>(k_tiles * part / splits);
        e.k_tiles = static_cast<int32_t>(k_tiles * (part + 1) / splits) - e.k_begin;
        make_split(e, part, splits);
        split.push_back(e);
      }
  return split;
}

std::vector<OverlapGemmTile> split_tail_along_k(const std::vector<OverlapGemmTile>& table, int splits, int64_t k,
                                                OverlapGemmConfig config, int ctas) {
  if (ctas < 1 || static_cast<int64_t>(table.size()) <= ctas) return table;
  const size_t whole = table.size() / static_cast<size_t>(ctas) * static_cast<size_t>(ctas);
  const size_t tail = table.size() - whole;
  if (tail == 0 || tail * static_cast<size_t>(splits) > static_cast<size_t>(ctas)) return table;
  std::vector<OverlapGemmTile> split(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(whole));
  const std::vector<OverlapGemmTile> last(table.begin() + static_cast<std::ptrdiff_t>(whole), table.end());
  for (const OverlapGemmTile& e : split_along_k(last, splits, k, config)) split.push_back(e);
  return split;
}

std::vector<OverlapGemmTile> stream_k_tail(const std::vector<OverlapGemmTile>& table, int64_t k, OverlapGemmConfig config, int ctas) {
  const int64_t count = static_cast<int64_t>(table.size());
  if (ctas < 2 || count == 0 || count % ctas == 0) return table;
  const int64_t k_tiles = ceil_div(k, shape_of(config).tile_k);
  for (size_t i = 0; i < table.size(); ++i) {
    const OverlapGemmTile& e = table[i];
    if (e.splits != 1) return table;  // split already: its own schedule
    if (e.k_tiles == kNoWorkKTiles || !(e.k_tiles == 0 || (e.k_begin == 0 && e.k_tiles == k_tiles)))
      reject("stream_k_tail: entry " + std::to_string(i) + " covers K-tiles [" + std::to_string(e.k_begin) + ", " +
             std::to_string(e.k_begin + e.k_tiles) + ") of " + std::to_string(k_tiles) + ", not all of K");
  }
  // The whole waves but the last stay as they are; the rest is streamed.
  const int64_t kept = std::max<int64_t>(count / ctas - 1, 0) * ctas;
  const int64_t streamed = count - kept, total = streamed * k_tiles;
  if (total < ctas) return table;  // fewer K-tiles than CTAs: nothing to balance
  // Left alone: a table whose streamed tiles add peers' partial sums (their epilogue wait is for
  // other ranks' GEMMs, which may wait for this one's tiles stored before them in the table: a CTA's
  // pieces reorder its stores, and a store stuck behind such a wait holds the peers' waits in turn),
  // and one that names a tile twice (its splits share one partial-sum slot).
  std::set<std::pair<int32_t, int32_t>> tiles;
  for (int64_t i = kept; i < count; ++i) {
    const OverlapGemmTile& e = table[static_cast<size_t>(i)];
    if (e.addend_count > 0 || !tiles.emplace(e.tile_m, e.tile_n).second) return table;
  }
  // Each CTA's pieces, in the order of the (entry, K-tile) sequence.
  struct Piece {
    int64_t entry;  // index into table
    int32_t k_begin, k_tiles;
  };
  std::vector<std::vector<Piece>> pieces(static_cast<size_t>(ctas));
  size_t most = 0;
  // CTA c takes the c-th run and starts with what starts at K-tile 0 there (whole tiles, then the
  // piece that starts a tile); the piece that ends a tile begun by the CTA before, which comes first
  // in the run, goes last. Every CTA then reads K-tile (time) of its tiles until its last piece, and
  // K-tile (time - share) from then on: two fronts over K, so that CTAs on tiles of one row or
  // column block read the same K-slices of A or B while they are in L2, as whole tiles in waves do
  // (in run order they read K at offsets scattered over all of K, and lose that reuse).
  // A tile's pieces then sit in table order from its start to its end (a CTA's whole share in
  // between), so its splits run from the piece done first to the one done last: none waits for a
  // piece that finishes after it.
  for (int64_t c = 0; c < ctas; ++c) {
    std::vector<Piece>& mine = pieces[static_cast<size_t>(c)];
    const int64_t begin = total * c / ctas, end = total * (c + 1) / ctas;
    for (int64_t at = begin; at < end;) {
      const int64_t entry = kept + at / k_tiles, first = at % k_tiles, last = std::min(k_tiles, first + (end - at));
      mine.push_back(Piece{entry, static_cast<int32_t>(first), static_cast<int32_t>(last - first)});
      at += last - first;
    }
    if (mine.size() > 1 && mine.front().k_begin > 0) std::rotate(mine.begin(), mine.begin() + 1, mine.end());
    most = std::max(most, mine.size());
  }
  std::vector<OverlapGemmTile> out(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(kept));
  OverlapGemmTile padding;
  padding.k_tiles = kNoWorkKTiles;
  padding.rows = padding.cols = 0;
  out.resize(static_cast<size_t>(kept) + most * static_cast<size_t>(ctas), padding);
  std::vector<std::vector<size_t>> at_of(static_cast<size_t>(streamed));  // each streamed entry's pieces' indices, ascending
  for (size_t j = 0; j < most; ++j)
    for (int64_t c = 0; c < ctas; ++c) {
      const std::vector<Piece>& mine = pieces[static_cast<size_t>(c)];
      if (j >= mine.size()) continue;
      const size_t index = static_cast<size_t>(kept) + j * static_cast<size_t>(ctas) + static_cast<size_t>(c);
      OverlapGemmTile& e = out[index];
      e = table[static_cast<size_t>(mine[j].entry)];
      e.k_begin = mine[j].k_begin;
      e.k_tiles = mine[j].k_tiles;
      at_of[static_cast<size_t>(mine[j].entry - kept)].push_back(index);
    }
  // A tile's pieces are its splits in table order; the last stores, notifies and adds.
  for (const std::vector<size_t>& indices : at_of) {
    const int splits = static_cast<int>(indices.size());
    for (int s = 0; s < splits; ++s) {
      OverlapGemmTile& e = out[indices[static_cast<size_t>(s)]];
      if (splits == 1) {
        e.k_begin = 0;
        e.k_tiles = 0;  // all of K
        continue;
      }
      make_split(e, s, splits);
    }
  }
  return out;
}

int most_splits(const std::vector<OverlapGemmTile>& table) {
  int most = 1;
  for (const OverlapGemmTile& e : table) most = std::max(most, e.splits);
  return most;
}

void require_launchable(const OverlapGemmLaunch& launch, OverlapGemmConfig config) {
  (void)shape_of(config);
  if (launch.m <= 0 || launch.n <= 0 || launch.k <= 0)
    reject("m, n, k must be positive (m=" + std::to_string(launch.m) + " n=" + std::to_string(launch.n) + " k=" +
           std::to_string(launch.k) + ")");
  if (launch.m > INT32_MAX || launch.n > INT32_MAX || launch.k > INT32_MAX) reject("m, n and k must fit in 32 bits");
  // Elements per 16 bytes: TMA moves rows of whole 16-byte units from 16-byte aligned addresses.
  const int64_t per_16_bytes = launch.fp8 ? 16 : 8;
  if (launch.k % per_16_bytes != 0)
    reject("k=" + std::to_string(launch.k) + " is not a multiple of " + std::to_string(per_16_bytes) + ": TMA needs 16-byte rows; pad K");
  struct Operand {
    const char* name;
    const void* pointer;
    int64_t stride;
    int64_t row;  // elements in a row of its memory: k, or n for an N-major B
    const char* row_name;
  };
  std::vector<Operand> operands = {Operand{"A", launch.a, launch.lda, launch.k, "k"},
                                   launch.b_n_major ? Operand{"B (N-major)", launch.b, launch.ldb, launch.n, "n"}
                                                    : Operand{"B", launch.b, launch.ldb, launch.k, "k"}};
  if (launch.a2) {
    if (launch.m2 <= 0 || launch.m2 > INT32_MAX) reject("the second A operand has " + std::to_string(launch.m2) + " rows");
    operands.push_back(Operand{"the second A operand", launch.a2, launch.lda2, launch.k, "k"});
  }
  for (const auto& [name, pointer, stride, row, row_name] : operands) {
    if (!pointer) reject(std::string(name) + " is null");
    if (reinterpret_cast<uintptr_t>(pointer) % 16 != 0)
      reject(std::string(name) + " starts at an address that is not 16-byte aligned; TMA needs it (a region starting at an "
                                 "odd row or column of a buffer can cause this)");
    if (stride % per_16_bytes != 0 || stride < row)
      reject(std::string(name) + "'s row stride " + std::to_string(stride) + " must be a multiple of " + std::to_string(per_16_bytes) +
             " elements and >= " + row_name + "=" + std::to_string(row));
  }
  if (launch.target_count < 1 || launch.target_count > kMaxStoreTargets)
    reject("target_count must be 1.." + std::to_string(kMaxStoreTargets) + ", is " + std::to_string(launch.target_count));
  for (int t = 0; t < launch.target_count; ++t)
    if (!launch.targets[t].data || launch.targets[t].stride < launch.targets[t].cols)
      reject("store target " + std::to_string(t) + " has no data or a row stride shorter than its rows");
  if (launch.tile_count < 0 || (launch.tile_count > 0 && !launch.tiles)) reject("tile table missing");
  if (launch.store_transposed && (launch.b_n_major || launch.a2))
    reject("the exchanged product (store_transposed) reads K-major operands and no second A operand");
  const bool clustered = launch.cluster_m != 1 || launch.cluster_n != 1;
  const int cluster_size = launch.cluster_m * launch.cluster_n;
  const std::string cluster = "clusters of " + std::to_string(launch.cluster_m) + "x" + std::to_string(launch.cluster_n);
  if (clustered && launch.b_n_major) reject(cluster + " run K-major operands (B stored [N, K]) only");
  if (clustered && !compiled_in_clusters(config))
    reject("no " + to_string(config) + " kernel runs in clusters; 128x128x64, 128x256x64, 128x128x128 (FP8) and 128x112x64 (exchanged) do");
  if (clustered && launch.store_transposed && !compiled_in_cluster(config, launch.cluster_m, launch.cluster_n, true))
    reject("no " + to_string(config) + " kernel of the exchanged product runs in " + cluster + "; 128x112x64 does in 1x2, 2x2 and 4x2");
  if (clustered && !launch.store_transposed && config == OverlapGemmConfig::tile_128x112)
    reject("128x112x64 runs in clusters for the exchanged product (store_transposed) only");
  if (clustered && !launch.store_transposed && !compiled_in_cluster(config, launch.cluster_m, launch.cluster_n))
    reject("no " + to_string(config) + " kernel runs in " + cluster + "; 2x1 and 1x2 are compiled for it" +
           (config == OverlapGemmConfig::tile_128x256 || config == OverlapGemmConfig::tile_128x128x128_fp8 ? " (2x2, 2x4, 4x2 for bf16 128x128x64)" : ", and 2x2, 2x4, 4x2"));
  // Every CTA of a cluster walks as many entries (a CTA without its group's entry would leave its
  // peers waiting for its share of a tile forever); require_valid_table checks the groups themselves.
  if (clustered && launch.tile_count % cluster_size != 0)
    reject("a table for " + cluster + " is whole groups of " + std::to_string(cluster_size) + " entries, this one has " + std::to_string(launch.tile_count));
  if (clustered && launch.max_ctas > 0 && launch.max_ctas < cluster_size)
    reject("max_ctas " + std::to_string(launch.max_ctas) + " leaves no room for a cluster of " + std::to_string(cluster_size) + " CTAs");
  if (launch.fp8) {
    if (launch.store_transposed || launch.b_n_major) reject("FP8 operands run the K-major (B stored [N, K]), untransposed product only");
    // 128x256: the FP8 main loop's two fragments of partial sums beside the accumulators would not fit in registers.
    const std::vector<OverlapGemmConfig> fp8_configs = fp8_overlap_gemm_configs();
    if (std::find(fp8_configs.begin(), fp8_configs.end(), config) == fp8_configs.end())
      reject("no " + to_string(config) + " kernel has FP8 operands; 128x128x128 and 64x128x128 do");
    if (config == OverlapGemmConfig::tile_64x128 && clustered) reject("FP8 on 64x128x128 runs unclustered; 128x128x128 runs in clusters");
    if (!launch.a_scales || !launch.b_scales || (launch.a2 && !launch.a2_scales))
      reject("FP8 operands without their scales (a_scales, b_scales, and a2_scales with a second A operand)");
  } else if (config == OverlapGemmConfig::tile_128x128x128_fp8) {
    reject("128x128x128 is compiled for FP8 operands (OverlapGemmLaunch::fp8) only");
  } else if (launch.row_scales || launch.a_scales || launch.a2_scales || launch.b_scales) {
    reject("scales given for bf16 operands; they are FP8's (OverlapGemmLaunch::fp8)");
  }
}

namespace {

// Clusters (OverlapGemmLaunch::cluster_m / cluster_n): the table in groups of cluster_m x cluster_n
// entries over the same K-tiles, neither waiting nor padding, whose entries of one cluster column
// share a tile of B and those of one cluster row a tile of A.
void require_cluster_groups(const OverlapGemmLaunch& launch, const std::vector<OverlapGemmTile>& table) {
  const int cm = launch.cluster_m, cn = launch.cluster_n, size = cm * cn;
  if (size == 1) return;
  const std::string cluster = "clusters of " + std::to_string(cm) + "x" + std::to_string(cn);
  if (table.size() % static_cast<size_t>(size) != 0)
    reject("a table for " + cluster + " is whole groups of " + std::to_string(size) + " entries, this one has " + std::to_string(table.size()));
  for (size_t first = 0; first < table.size(); first += static_cast<size_t>(size)) {
    const std::string group = "tile table entries " + std::to_string(first) + ".." + std::to_string(first + static_cast<size_t>(size) - 1) + " (a cluster's group) ";
    const OverlapGemmTile& x = table[first];
    for (int j = 0; j < size; ++j) {
      const OverlapGemmTile& e = table[first + static_cast<size_t>(j)];
      if (e.k_tiles == kNoWorkKTiles || e.wait_signal >= 0) reject(group + "must all do work and wait for nothing: a wait holds the peers' loads too");
      if (e.k_begin != x.k_begin || e.k_tiles != x.k_tiles) reject(group + "cover different K-tiles; the cluster loads each shared tile once");
      // Splits of a group's tiles in step (split_along_k with the group's size): a split waits only
      // for earlier splits of its tile, which every CTA of the earlier group ran, so the grouping
      // adds no cycle.
      if (e.split != x.split || e.splits != x.splits) reject(group + "are different splits; a group's tiles are split in step (split_along_k)");
      // Entry j sits at (j % cm, j / cm): the one at (j % cm, 0) heads its cluster row, (0, j / cm) its column.
      const OverlapGemmTile& row_head = table[first + static_cast<size_t>(j % cm)];
      const OverlapGemmTile& column_head = table[first + static_cast<size_t>(j / cm * cm)];
      if (e.tile_n != column_head.tile_n)
        reject(group + "put tile columns " + std::to_string(column_head.tile_n) + " and " + std::to_string(e.tile_n) + " in one cluster column (entries " +
               std::to_string(first + static_cast<size_t>(j / cm * cm)) + ", " + std::to_string(first + static_cast<size_t>(j)) +
               "), which share B's tile (plan::order_tiles_in_clusters orders a table so)");
      if (e.tile_m != row_head.tile_m || e.a_operand != row_head.a_operand || (e.a_operand == 1 && e.a_tile_m != row_head.a_tile_m))
        reject(group + "read different rows of A in one cluster row (entries " + std::to_string(first + static_cast<size_t>(j % cm)) + ", " +
               std::to_string(first + static_cast<size_t>(j)) + "), which share A's tile (plan::order_tiles_in_clusters orders a table so)");
    }
  }
}

}  // namespace

void require_valid_table(const OverlapGemmLaunch& launch, OverlapGemmConfig config, const std::vector<OverlapGemmTile>& table) {
  require_launchable(launch, config);
  require_cluster_groups(launch, table);
  const OverlapGemmShape s = shape_of(config);
  const int64_t tiles_m = ceil_div(launch.m, s.tile_m), tiles_n = ceil_div(launch.n, s.tile_n);
  const int64_t k_tiles = ceil_div(launch.k, s.tile_k);
  // The splits of each split tile seen so far: the next split number, the count, the K ranges.
  struct Chain {
    int next = 0, splits = 0;
    std::vector<std::pair<int32_t, int32_t>> ranges;
  };
  std::map<std::pair<int32_t, int32_t>, Chain> chains;
  auto tile_name = [](const OverlapGemmTile& e) { return "tile (" + std::to_string(e.tile_m) + ", " + std::to_string(e.tile_n) + ")"; };
  for (size_t i = 0; i < table.size(); ++i) {
    const OverlapGemmTile& e = table[i];
    const std::string where = "tile table entry " + std::to_string(i) + " ";
    if (e.k_tiles == kNoWorkKTiles) {
      if (e.wait_signal >= 0 || e.notify_rank >= 0 || e.addend_count != 0 || e.splits != 1 || e.a_operand != 0)
        reject(where + "does no work (k_tiles " + std::to_string(kNoWorkKTiles) + ") but waits, notifies, adds, reads a second A or is split");
      continue;
    }
    if (e.tile_m < 0 || e.tile_m >= tiles_m || e.tile_n < 0 || e.tile_n >= tiles_n)
      reject(where + "names tile (" + std::to_string(e.tile_m) + ", " + std::to_string(e.tile_n) + ") outside the " +
             std::to_string(tiles_m) + "x" + std::to_string(tiles_n) + " grid of " + to_string(config) + " tiles");
    int64_t rows_there = std::min<int64_t>(s.tile_m, launch.m - int64_t{e.tile_m} * s.tile_m);
    int64_t cols_there = std::min<int64_t>(s.tile_n, launch.n - int64_t{e.tile_n} * s.tile_n);
    if (launch.store_transposed) std::swap(rows_there, cols_there);  // the entry's extent is C's
    if (e.rows <= 0 || e.rows > rows_there || e.cols <= 0 || e.cols > cols_there)
      reject(where + "stores " + std::to_string(e.rows) + "x" + std::to_string(e.cols) + " of a tile that has " +
             std::to_string(rows_there) + "x" + std::to_string(cols_there) + " elements");
    if (e.store_target < 0 || e.store_target >= launch.target_count) reject(where + "stores to a target that does not exist");
    const OverlapGemmTarget& target = launch.targets[e.store_target];
    if (e.store_row < 0 || e.store_col < 0 || e.store_row + e.rows > target.rows || e.store_col + e.cols > target.cols)
      reject(where + "stores outside its target (" + std::to_string(target.rows) + "x" + std::to_string(target.cols) + ")");
    if (e.wait_signal >= 0 && !launch.wait_signals) reject(where + "waits but no signal array was given");
    if (e.a_operand != 0 && e.a_operand != 1) reject(where + "names A operand " + std::to_string(e.a_operand) + " (0: a, 1: a2)");
    if (e.a_operand == 1) {
      if (!launch.a2) reject(where + "reads its A rows from a second A operand, and the launch has none");
      if (e.a_tile_m < 0 || e.a_tile_m >= ceil_div(launch.m2, s.tile_m) || int64_t{e.a_tile_m} * s.tile_m + e.rows > launch.m2)
        reject(where + "reads A rows of tile " + std::to_string(e.a_tile_m) + " of the second A operand (" + std::to_string(launch.m2) + " rows)");
    }
    if (e.addend_count < 0) reject(where + "has a negative addend count");
    if (e.addend_count > 0) {
      if (e.addend_target < 0 || e.addend_target >= launch.target_count) reject(where + "reads addends from a target that does not exist");
      const OverlapGemmTarget& from = launch.targets[e.addend_target];
      const int64_t last_row = e.addend_row + int64_t{e.addend_count - 1} * e.addend_row_step;
      if (e.addend_row < 0 || e.addend_row_step < 0 || e.addend_col < 0 || last_row + e.rows > from.rows || e.addend_col + e.cols > from.cols)
        reject(where + "reads addends outside their target (" + std::to_string(from.rows) + "x" + std::to_string(from.cols) + ")");
    }
    if (e.notify_rank >= 0 && (e.notify_rank >= kMaxSignalRanks || !launch.notify_signals[e.notify_rank]))
      reject(where + "notifies rank " + std::to_string(e.notify_rank) + " whose signal array was not given");
    if (e.notify_rank >= 0 && e.notify_increment == 0) reject(where + "notifies with increment 0");
    if (e.k_begin < 0 || e.k_tiles < 0 || e.k_begin + e.k_tiles > k_tiles || (e.k_tiles == 0 && e.k_begin != 0))
      reject(where + "covers K-tiles [" + std::to_string(e.k_begin) + ", " + std::to_string(e.k_begin + e.k_tiles) + ") of " +
             std::to_string(k_tiles));
    if (e.splits < 1 || e.split < 0 || e.split >= e.splits || e.splits > launch.k_splits)
      reject(where + "is split " + std::to_string(e.split) + " of " + std::to_string(e.splits) + " (launch.k_splits is " +
             std::to_string(launch.k_splits) + ")");
    if (e.splits > 1) {
      // Split s waits for split s - 1 of the same tile: it must come earlier in the table, or CTAs
      // walking the table forward could wait on each other in a cycle.
      Chain& chain = chains[{e.tile_m, e.tile_n}];
      if (chain.next == 0) chain.splits = e.splits;
      if (chain.next == chain.splits)
        reject(where + "splits " + tile_name(e) + " a second time (its partial sums have one slot)");
      if (e.split != chain.next || e.splits != chain.splits)
        reject(where + "is split " + std::to_string(e.split) + " of " + std::to_string(e.splits) + " of " + tile_name(e) +
               ", but the table's earlier entries hold its splits 0.." + std::to_string(chain.next - 1) + " of " + std::to_string(chain.splits) +
               ": a tile's splits must appear in table order");
      if (e.k_tiles == 0) reject(where + "is a split of " + tile_name(e) + " over all of K");
      if (e.split + 1 < e.splits && e.notify_rank >= 0) reject(where + "notifies before its last split");
      chain.ranges.emplace_back(e.k_begin, e.k_tiles);
      if (++chain.next == chain.splits) {
        std::sort(chain.ranges.begin(), chain.ranges.end());
        int64_t covered = 0;
        for (const auto& [begin, count] : chain.ranges) {
          if (begin != covered) break;
          covered += count;
        }
        if (covered != k_tiles) reject(where + "completes " + tile_name(e) + ", whose splits do not cover its " + std::to_string(k_tiles) + " K-tiles exactly once");
      }
    }
  }
  for (const auto& [tile, chain] : chains)
    if (chain.next < chain.splits)
      reject("tile (" + std::to_string(tile.first) + ", " + std::to_string(tile.second) + ") has " + std::to_string(chain.next) + " of its " +
             std::to_string(chain.splits) + " splits in the table");
}

namespace {

std::unique_ptr<OverlapGemm::Prepared> prepare(const OverlapGemmLaunch& launch, OverlapGemmConfig config) {
  switch (config) {
    case OverlapGemmConfig::tile_64x64: return overlap_gemm_detail::prepare_64x64(launch);
    case OverlapGemmConfig::tile_64x128: return overlap_gemm_detail::prepare_64x128(launch);
    case OverlapGemmConfig::tile_64x192: return overlap_gemm_detail::prepare_64x192(launch);
    case OverlapGemmConfig::tile_64x256: return overlap_gemm_detail::prepare_64x256(launch);
    case OverlapGemmConfig::tile_128x96: return overlap_gemm_detail::prepare_128x96(launch);
    case OverlapGemmConfig::tile_128x112: return overlap_gemm_detail::prepare_128x112(launch);
    case OverlapGemmConfig::tile_128x128: return overlap_gemm_detail::prepare_128x128(launch);
    case OverlapGemmConfig::tile_128x192: return overlap_gemm_detail::prepare_128x192(launch);
    case OverlapGemmConfig::tile_128x256: return overlap_gemm_detail::prepare_128x256(launch);
    case OverlapGemmConfig::tile_128x128x128_fp8: return overlap_gemm_detail::prepare_128x128x128_fp8(launch);
  }
  reject("unknown configuration");
}

}  // namespace

OverlapGemm::OverlapGemm(const OverlapGemmLaunch& launch, OverlapGemmConfig config) : config_(config), launch_(launch) {
  OverlapGemmLaunch& prepared = launch_;
  // A kernel for the launch first: it may refuse one (an exchanged product on a tile not compiled
  // for it), and a constructor that throws frees nothing it allocated.
  prepared_ = prepare(prepared, config);
  if (launch.k_splits > 1) {
    // One partial-sum tile and one counter per output tile; the counters start at zero and the
    // last split of each tile puts its counter back to zero.
    const OverlapGemmShape s = shape_of(config);
    const size_t tiles = static_cast<size_t>(ceil_div(launch.m, s.tile_m) * ceil_div(launch.n, s.tile_n));
    const size_t partial_bytes = tiles * static_cast<size_t>(s.tile_m * s.tile_n) * sizeof(float);
    WEFT_CUDA_CHECK(cudaMalloc(&split_memory_, partial_bytes + tiles * sizeof(uint32_t)));
    WEFT_CUDA_CHECK(cudaMemset(static_cast<char*>(split_memory_) + partial_bytes, 0, tiles * sizeof(uint32_t)));
    prepared.split_workspace = static_cast<float*>(split_memory_);
    prepared.split_counters = reinterpret_cast<uint32_t*>(static_cast<char*>(split_memory_) + partial_bytes);
    prepared_->update(prepared);
  }
}
// Frees only when the launch split K (launch_overlap_gemm of a table without splits frees nothing,
// so it never waits for a kernel that waits for the caller).
OverlapGemm::~OverlapGemm() {
  if (split_memory_) cudaFree(split_memory_);
}
OverlapGemm::OverlapGemm(OverlapGemm&& other) noexcept
    : config_(other.config_),
      launch_(other.launch_),
      prepared_(std::move(other.prepared_)),
      split_memory_(std::exchange(other.split_memory_, nullptr)) {}
OverlapGemm& OverlapGemm::operator=(OverlapGemm&& other) noexcept {
  if (this != &other) {
    if (split_memory_) cudaFree(split_memory_);
    config_ = other.config_;
    launch_ = other.launch_;
    prepared_ = std::move(other.prepared_);
    split_memory_ = std::exchange(other.split_memory_, nullptr);
  }
  return *this;
}

void OverlapGemm::launch(cudaStream_t stream) { prepared_->launch(stream); }

void OverlapGemm::retarget(const void* a, const void* b, const OverlapGemmTarget* targets, const void* a2) {
  OverlapGemmLaunch moved = launch_;
  moved.a = a;
  moved.b = b;
  if (launch_.a2 && !a2) reject("retarget: the launch reads a second A operand; its new place is missing");
  moved.a2 = launch_.a2 ? a2 : nullptr;
  for (int t = 0; t < moved.target_count; ++t) moved.targets[t] = targets[t];
  require_launchable(moved, config_);
  prepared_->update(moved);
  launch_ = moved;
}

void OverlapGemm::rescale(const float* a_scales, const float* b_scales, const float* a2_scales) {
  if (!launch_.fp8) reject("rescale: the launch multiplies bf16 operands, which have no scales");
  OverlapGemmLaunch moved = launch_;
  moved.a_scales = a_scales;
  moved.b_scales = b_scales;
  moved.a2_scales = launch_.a2 ? a2_scales : nullptr;
  require_launchable(moved, config_);
  prepared_->update(moved);
  launch_ = moved;
}

void launch_overlap_gemm(const OverlapGemmLaunch& launch, OverlapGemmConfig config, cudaStream_t stream) {
  OverlapGemm(launch, config).launch(stream);
}

}  // namespace weft
