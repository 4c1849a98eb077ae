#include "weft/model/wave_partition.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace weft {

double predict_wave_partition(const std::vector<WaveGroupCost>& groups) {
  double compute_end = 0, comm_end = 0;
  for (const WaveGroupCost& g : groups) {
    compute_end += g.compute_seconds;
    comm_end = std::max(compute_end, comm_end) + g.comm_seconds;
  }
  return std::max(compute_end, comm_end);
}

std::vector<WaveGroupCost> WavePartitionModel::costs(const std::vector<int>& partition) const {
  std::vector<WaveGroupCost> out;
  int first = 0;
  for (int size : partition) {
    out.push_back({seconds_per_wave * size, comm_seconds(first, size)});
    first += size;
  }
  return out;
}

void check_wave_partition(const std::vector<int>& partition, int waves) {
  int total = 0;
  for (int s : partition) {
    if (s < 1) throw std::invalid_argument("wave partition " + to_string(partition) + ": every group needs at least one wave");
    total += s;
  }
  if (total != waves)
    throw std::invalid_argument("wave partition " + to_string(partition) + " covers " + std::to_string(total) +
                                " waves but the GEMM has " + std::to_string(waves));
}

std::string to_string(const std::vector<int>& partition) {
  std::string out;
  for (int s : partition) out += (out.empty() ? "" : ",") + std::to_string(s);
  return out;
}

std::vector<int> parse_wave_partition(const std::string& text) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || value < 1)
      throw std::invalid_argument("wave partition '" + text + "': expected positive wave counts separated by commas, e.g. 1,2,2");
    out.push_back(value);
    start = comma + 1;
  }
  return out;
}

std::vector<std::vector<int>> wave_partition_candidates(int waves, int first_max, int last_max, size_t limit) {
  std::vector<std::vector<int>> out;
  std::vector<int> current;
  // Depth-first over group sizes: the first within first_max, the last (the one that ends at
  // `waves`) within last_max; a single group is both.
  std::function<void(int)> extend = [&](int left) {
    if (left == 0) {
      if (out.size() == limit)
        throw std::length_error("more than " + std::to_string(limit) + " wave partitions of " + std::to_string(waves) + " waves");
      out.push_back(current);
      return;
    }
    const int most = current.empty() ? std::min(first_max, left) : left;
    for (int s = 1; s <= most; ++s) {
      if (s == left && s > last_max) continue;
      current.push_back(s);
      extend(left - s);
      current.pop_back();
    }
  };
  if (waves >= 1) extend(waves);
  return out;
}

std::vector<int> search_wave_partition(const WavePartitionModel& m) {
  const int T = m.waves;
  if (T <= 1) return {1};
  // best[j]: least communication end over partitions of waves [0, j) whose groups respect first_max;
  // from[j]: where the last group of that partition starts; groups[j]: how many it has.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> best(static_cast<size_t>(T) + 1, inf);
  std::vector<int> from(static_cast<size_t>(T) + 1, -1), groups(static_cast<size_t>(T) + 1, 0);
  best[0] = 0;
  for (int j = 1; j <= T; ++j)
    for (int i = 0; i < j; ++i) {
      if (best[static_cast<size_t>(i)] == inf) continue;
      if (i == 0 && j > m.first_max) continue;
      if (j == T && j - i > m.last_max) continue;
      const double compute_end = m.seconds_per_wave * j;
      const double end = std::max(compute_end, best[static_cast<size_t>(i)]) + m.comm_seconds(i, j - i);
      const int count = groups[static_cast<size_t>(i)] + 1;
      if (end < best[static_cast<size_t>(j)] - 1e-15 ||
          (end <= best[static_cast<size_t>(j)] + 1e-15 && count < groups[static_cast<size_t>(j)])) {
        best[static_cast<size_t>(j)] = end;
        from[static_cast<size_t>(j)] = i;
        groups[static_cast<size_t>(j)] = count;
      }
    }
  if (best[static_cast<size_t>(T)] == inf) {
    // Only when first_max or last_max is below 1.
    throw std::logic_error("search_wave_partition: no partition of " + std::to_string(T) + " waves");
  }
  std::vector<int> partition;
  for (int j = T; j > 0; j = from[static_cast<size_t>(j)]) partition.push_back(j - from[static_cast<size_t>(j)]);
  std::reverse(partition.begin(), partition.end());
  return partition;
}

}  // namespace weft
