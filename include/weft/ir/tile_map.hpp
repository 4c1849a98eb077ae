// TileLink's tile-centric mappings (tilelink.txt §4): from a communication tile's id to the rank
// that produces or owns its rows, its channel and its rows. Plain C++ of the IR layer: the plan
// builders use it and the device primitives (weft/tile/tilelink.cuh) include it, so that a kernel and
// the plan it runs agree by construction.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define WEFT_HOST_DEVICE __host__ __device__
#else
#define WEFT_HOST_DEVICE
#endif

namespace weft::tile {

struct TileCoord {
  int rank;     // the rank that produces (AG) or owns (RS) the tile's rows
  int channel;  // the communication tile within that rank's part
  int64_t row;  // first row, in the gathered / full matrix
  int64_t rows;
};

// Static mapping (affine): rows [0, ranks * rows_per_rank) cut, rank by rank, into communication
// tiles of channel_rows rows (a rank's last one takes the rest); tile id = rank * channels() + channel.
struct StaticTileMap {
  int ranks = 1;
  int64_t rows_per_rank = 0;
  int64_t channel_rows = 1;

  WEFT_HOST_DEVICE int channels() const {
    return rows_per_rank > 0 ? static_cast<int>((rows_per_rank + channel_rows - 1) / channel_rows) : 1;
  }
  WEFT_HOST_DEVICE int tiles() const { return ranks * channels(); }
  WEFT_HOST_DEVICE TileCoord operator()(int tile) const {
    const int rank = tile / channels(), channel = tile % channels();
    const int64_t first = static_cast<int64_t>(channel) * channel_rows;
    const int64_t rest = rows_per_rank - first;
    return TileCoord{rank, channel, static_cast<int64_t>(rank) * rows_per_rank + first, rest < channel_rows ? rest : channel_rows};
  }
  // The communication tile that holds `row` (a GEMM tile finds there the signal it waits for).
  WEFT_HOST_DEVICE int tile_of_row(int64_t row) const {
    const int rank = static_cast<int>(row / rows_per_rank);
    return rank * channels() + static_cast<int>((row - static_cast<int64_t>(rank) * rows_per_rank) / channel_rows);
  }
};

// Dynamic mapping: tables filled at run time (device arrays of `tiles` entries), e.g. grouped-GEMM
// tiles of an MoE layer, each tile `rows` rows of one expert starting at `row` in the expert-sorted
// token order, produced from communication tile `source_tile`.
struct DynamicTileMap {
  const int32_t* expert = nullptr;
  const int64_t* row = nullptr;
  const int32_t* rows = nullptr;
  const int32_t* source_tile = nullptr;
  int tiles = 0;

  WEFT_HOST_DEVICE TileCoord operator()(int tile) const { return TileCoord{source_tile ? source_tile[tile] : 0, expert[tile], row[tile], rows[tile]}; }
};

}  // namespace weft::tile
