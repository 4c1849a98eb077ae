// PlanOptions with a given tile, raster and swizzle, everything else at its default.
#pragma once

#include "weft/plan/strategies.hpp"

namespace weft::testing_support {

inline PlanOptions tiled(int tile_m, int tile_n, Raster raster, int swizzle) {
  PlanOptions o;
  o.tile_m = tile_m;
  o.tile_n = tile_n;
  o.raster = raster;
  o.swizzle = swizzle;
  return o;
}

}  // namespace weft::testing_support
