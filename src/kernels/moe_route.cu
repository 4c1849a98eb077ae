#include <climits>
#include <stdexcept>
#include <string>

#include "weft/cuda/check.hpp"
#include "weft/kernels/moe_route.hpp"
#include "weft/tile/tilelink.cuh"

namespace weft {

namespace {

constexpr int kChunk = 1024;  // pairs per CTA of the count and place kernels (one per thread)

int64_t chunks_of(const MoeRouteShape& s) { return (s.pairs() + kChunk - 1) / kChunk; }
int blocks_of(const MoeRouteShape& s) { return s.world * s.experts; }

// The pair's (source, expert) block, -1 for a choice out of range (recorded in error).
__device__ int block_of(const int32_t* choices, int64_t pair, int64_t pairs_per_source, int experts, WaitRecord* error) {
  const int32_t e = choices[pair];
  if (e < 0 || e >= experts) {
    tile::record_timeout(error, tile::kBadMoeChoice, -1, static_cast<int32_t>(pair), static_cast<uint64_t>(experts), static_cast<uint64_t>(static_cast<uint32_t>(e)));
    return -1;
  }
  return static_cast<int>(pair / pairs_per_source) * experts + e;
}

// Chunk c's count of every block: counts[c * blocks + b].
__global__ void count_blocks(const int32_t* choices, int64_t pairs, int64_t pairs_per_source, int experts, int blocks, int32_t* counts,
                             WaitRecord* error) {
  extern __shared__ int32_t histogram[];
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) histogram[b] = 0;
  __syncthreads();
  const int64_t pair = int64_t{blockIdx.x} * kChunk + threadIdx.x;
  if (pair < pairs)
    if (const int b = block_of(choices, pair, pairs_per_source, experts, error); b >= 0) atomicAdd(&histogram[b], 1);
  __syncthreads();
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) counts[int64_t{blockIdx.x} * blocks + b] = histogram[b];
}

// One CTA: each chunk's counts become its offset within its block (exclusive, chunk order); then
// the layout's first row of each block (by source, then expert: source s's pairs fill rows
// [s * pairs_per_source, ...)), each expert's first row of the expert-major scratch (aligned where
// it has rows), and each block's first row there (expert-major, then source).
__global__ void block_offsets(int64_t chunks, int world, int experts, int64_t pairs_per_source, int64_t align, int32_t* counts,
                              int32_t* block_first, int32_t* source_first, int32_t* expert_first) {
  extern __shared__ int32_t total[];  // [blocks]
  const int blocks = world * experts;
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) {
    int32_t sum = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const int32_t n = counts[c * blocks + b];
      counts[c * blocks + b] = sum;
      sum += n;
    }
    total[b] = sum;
  }
  __syncthreads();
  for (int s = threadIdx.x; s < world; s += blockDim.x) {
    int64_t row = int64_t{s} * pairs_per_source;
    for (int e = 0; e < experts; ++e) {
      block_first[s * experts + e] = static_cast<int32_t>(row);
      row += total[s * experts + e];
    }
  }
  if (threadIdx.x == 0) {
    int64_t next = 0;
    for (int e = 0; e < experts; ++e) {
      int64_t rows = 0;
      for (int s = 0; s < world; ++s) rows += total[s * experts + e];
      if (rows > 0) next = (next + align - 1) / align * align;  // no padding for an expert nobody picked
      expert_first[e] = static_cast<int32_t>(next);
      next += rows;
    }
    expert_first[experts] = static_cast<int32_t>(next);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    int64_t row = expert_first[e];
    for (int s = 0; s < world; ++s) {
      source_first[s * experts + e] = static_cast<int32_t>(row);
      row += total[s * experts + e];
    }
  }
}

// Each pair's rank in its block: the chunk's offset plus the pairs of its block earlier in the chunk
// (warp by warp in order, lanes by __match_any_sync), so that a block's pairs keep their order.
__global__ void place_pairs(const int32_t* choices, int64_t pairs, int64_t pairs_per_source, int topk, int experts, int blocks, const int32_t* counts,
                            const int32_t* block_first, const int32_t* source_first, MoeRouteOutputs out) {
  extern __shared__ int32_t running[];  // [blocks]
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) running[b] = counts[int64_t{blockIdx.x} * blocks + b];
  const int64_t pair = int64_t{blockIdx.x} * kChunk + threadIdx.x;
  int b = -1;
  if (pair < pairs) {
    const int32_t e = choices[pair];
    if (e >= 0 && e < experts) b = static_cast<int>(pair / pairs_per_source) * experts + e;  // count_blocks recorded the others
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned same = __match_any_sync(0xffffffffu, b);
  const unsigned earlier = same & ((1u << lane) - 1u);
  int32_t rank = 0;
  __syncthreads();
  for (int w = 0; w < kChunk / 32; ++w) {
    if (warp == w) {
      if (b >= 0) rank = running[b] + __popc(earlier);
      __syncwarp();  // every lane has read before the first lane of each block moves it on
      if (b >= 0 && earlier == 0) running[b] += __popc(same);
    }
    __syncthreads();
  }
  if (pair >= pairs) return;
  if (b < 0) {  // skipped: the index tables read row 0 in its place
    if (out.layout_row) out.layout_row[pair] = -1;
    if (out.pair_scratch) out.pair_scratch[pair] = 0;
    return;
  }
  const int32_t row = block_first[b] + rank, scratch = source_first[b] + rank;
  if (out.layout_row) out.layout_row[pair] = row;
  if (out.expert_row) out.expert_row[scratch] = row;
  if (out.scratch_token) out.scratch_token[scratch] = static_cast<int32_t>(pair / topk);
  if (out.scratch_layout) out.scratch_layout[scratch] = row;
  if (out.layout_scratch) out.layout_scratch[row] = scratch;
  if (out.pair_scratch) out.pair_scratch[pair] = scratch;
}

// One thread per entry of the routed grouped GEMM's table (build_routed_moe_table).
__global__ void routed_table(const int32_t* expert_first, int experts, int64_t capacity, int64_t row_tiles, int64_t col_tiles, int64_t n, int tile_m,
                             int tile_n, OverlapGemmTile* table) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= row_tiles * col_tiles) return;
  const int64_t row_tile = i / col_tiles, col_tile = i % col_tiles, first_row = row_tile * tile_m;
  OverlapGemmTile t;
  t.k_tiles = kNoWorkKTiles;
  // The expert whose rows reach this row tile: experts' rows are in order and start on the grid.
  for (int e = 0; e < experts; ++e) {
    const int64_t begin = expert_first[e], end = expert_first[e + 1];
    if (first_row >= begin && first_row < end) {
      t.tile_m = static_cast<int32_t>(row_tile);
      t.tile_n = static_cast<int32_t>((int64_t{e} * n) / tile_n + col_tile);
      const int64_t last = end < capacity ? end : capacity;  // a table never stores past the scratch
      t.rows = static_cast<int32_t>(last - first_row < tile_m ? last - first_row : tile_m);
      t.cols = static_cast<int32_t>(n - col_tile * tile_n < tile_n ? n - col_tile * tile_n : tile_n);
      t.store_row = first_row;
      t.store_col = col_tile * tile_n;
      t.k_tiles = 0;  // all of K
      break;
    }
  }
  table[i] = t;
}

}  // namespace

size_t moe_route_workspace_bytes(const MoeRouteShape& s) {
  return sizeof(int32_t) * static_cast<size_t>(chunks_of(s) * blocks_of(s) + 2 * int64_t{blocks_of(s)});
}

void require_routable(const MoeRouteShape& s) {
  const std::string what = "the MoE route (world " + std::to_string(s.world) + ", m " + std::to_string(s.m) + ", topk " + std::to_string(s.topk) +
                           ", experts " + std::to_string(s.experts) + ", align " + std::to_string(s.align) + ")";
  if (s.world < 1 || s.m < 0 || s.topk < 1 || s.experts < 1 || s.align < 1) throw std::invalid_argument(what + ": every size must be >= 1 (m >= 0)");
  if (int64_t{s.world} * s.experts > kMaxMoeRouteBlocks)
    throw std::invalid_argument(what + ": " + std::to_string(int64_t{s.world} * s.experts) + " (source, expert) blocks, at most " +
                                std::to_string(kMaxMoeRouteBlocks) + " (its shared-memory histogram)");
  if (s.capacity() > INT32_MAX) throw std::invalid_argument(what + ": " + std::to_string(s.capacity()) + " rows do not fit int32 indices");
}

void route_moe_rows_on_device(const MoeRouteShape& s, const int32_t* choices, const MoeRouteOutputs& out, WaitRecord* error, void* workspace,
                              cudaStream_t stream) {
  require_routable(s);
  if (!out.expert_first) throw std::invalid_argument("route_moe_rows_on_device: expert_first is null");
  const size_t capacity_bytes = sizeof(int32_t) * static_cast<size_t>(s.capacity()), pair_bytes = sizeof(int32_t) * static_cast<size_t>(s.pairs());
  if (out.expert_row) WEFT_CUDA_CHECK(cudaMemsetAsync(out.expert_row, 0xff, capacity_bytes, stream));  // -1: padding
  for (int32_t* zeroed : {out.scratch_token, out.scratch_layout})  // padding rows read row 0
    if (zeroed) WEFT_CUDA_CHECK(cudaMemsetAsync(zeroed, 0, capacity_bytes, stream));
  if (out.layout_scratch) WEFT_CUDA_CHECK(cudaMemsetAsync(out.layout_scratch, 0, pair_bytes, stream));  // rows a skipped choice leaves
  const int blocks = blocks_of(s);
  const int64_t chunks = chunks_of(s), per_source = s.m * s.topk;
  int32_t* counts = static_cast<int32_t*>(workspace);
  int32_t* block_first = counts + chunks * blocks;
  int32_t* source_first = block_first + blocks;
  const size_t shared = sizeof(int32_t) * static_cast<size_t>(blocks);
  if (chunks > 0) {
    count_blocks<<<static_cast<unsigned>(chunks), kChunk, shared, stream>>>(choices, s.pairs(), per_source, s.experts, blocks, counts, error);
    WEFT_CUDA_CHECK(cudaGetLastError());
  }
  block_offsets<<<1, 1024, shared, stream>>>(chunks, s.world, s.experts, per_source, s.align, counts, block_first, source_first, out.expert_first);
  WEFT_CUDA_CHECK(cudaGetLastError());
  if (chunks > 0) {
    place_pairs<<<static_cast<unsigned>(chunks), kChunk, shared, stream>>>(choices, s.pairs(), per_source, s.topk, s.experts, blocks, counts,
                                                                           block_first, source_first, out);
    WEFT_CUDA_CHECK(cudaGetLastError());
  }
}

void preload_moe_route_kernels() {
  cudaFuncAttributes attributes;
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, count_blocks));
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, block_offsets));
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, place_pairs));
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, routed_table));
}

int64_t routed_moe_table_entries(int64_t capacity, int64_t n, int tile_m, int tile_n) {
  return (capacity + tile_m - 1) / tile_m * ((n + tile_n - 1) / tile_n);
}

void build_routed_moe_table(const int32_t* expert_first, int experts, int64_t capacity, int64_t n, int tile_m, int tile_n, OverlapGemmTile* table,
                            cudaStream_t stream) {
  if (tile_m < 1 || tile_n < 1 || n % tile_n != 0 || experts < 1)
    throw std::invalid_argument("build_routed_moe_table: n " + std::to_string(n) + " must be a multiple of tile_n " + std::to_string(tile_n) +
                                " (tile_m " + std::to_string(tile_m) + ", experts " + std::to_string(experts) + ")");
  const int64_t entries = routed_moe_table_entries(capacity, n, tile_m, tile_n);
  if (entries <= 0) return;
  routed_table<<<static_cast<unsigned>((entries + 255) / 256), 256, 0, stream>>>(expert_first, experts, capacity, (capacity + tile_m - 1) / tile_m,
                                                                                 n / tile_n, n, tile_m, tile_n, table);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace weft
