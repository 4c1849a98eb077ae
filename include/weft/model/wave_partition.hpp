// FlashOverlap's wave groups (flashoverlap.txt Sections 3.2.4, 3.4, 4): a GEMM of T waves is cut
// into consecutive groups of waves; each group's communication starts when its last tile is stored.
// A partition is the list of group sizes in waves, e.g. {1, 2, 2} for T = 5.
//
//   double t = predict_wave_partition(costs_of(partition));           // Algorithm 1's accumulation
//   std::vector<int> best = search_wave_partition(input);             // the best partition it predicts
//
// The search takes the paper's pruning (first group <= 2 waves, last <= 4) and, instead of listing
// the 2^(T-2) candidates, a dynamic program over group ends that finds the same minimum: the
// predicted time is monotone in the communication end of the previous group.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace weft {

struct WaveGroupCost {
  double compute_seconds = 0;  // the group's waves of GEMM
  double comm_seconds = 0;     // its collective
};

// Algorithm 1: a group's communication starts when both its compute and the previous group's
// communication have ended; returns when the last communication ends.
double predict_wave_partition(const std::vector<WaveGroupCost>& groups);

struct WavePartitionModel {
  int waves = 1;
  double seconds_per_wave = 0;
  // Seconds of the collective over the tiles of waves [first_wave, first_wave + wave_count).
  std::function<double(int first_wave, int wave_count)> comm_seconds;
  int first_max = 2;  // S_1
  int last_max = 4;   // S_P

  std::vector<WaveGroupCost> costs(const std::vector<int>& partition) const;
  double predict(const std::vector<int>& partition) const { return predict_wave_partition(costs(partition)); }
};

// Every partition of `waves` whose first group has <= first_max and last group <= last_max waves
// (the paper's candidate set), in lexicographic order; throws std::length_error past `limit`.
std::vector<std::vector<int>> wave_partition_candidates(int waves, int first_max, int last_max, size_t limit = 1u << 16);
// The candidate with the least predicted time (ties: fewer groups).
std::vector<int> search_wave_partition(const WavePartitionModel& model);

// Throws std::invalid_argument unless `partition` is positive sizes adding up to `waves`.
void check_wave_partition(const std::vector<int>& partition, int waves);
std::string to_string(const std::vector<int>& partition);                 // "1,2,2"
std::vector<int> parse_wave_partition(const std::string& text);           // "1,2,2"; throws

}  // namespace weft
