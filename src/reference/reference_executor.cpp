#include "weft/reference/reference_executor.hpp"

#include <cmath>
#include <condition_variable>
#include <set>
#include <limits>
#include <map>
#include <atomic>
#include <mutex>
#include <optional>
#include <sstream>
#include <tuple>
#include <thread>

#include "weft/plan/analysis.hpp"
#include "weft/plan/moe_route.hpp"
#include "weft/reference/fp8.hpp"

namespace weft {

namespace {

struct Aborted {};  // unwinds a worker once another worker has failed

class ReferenceRun {
 public:
  ReferenceRun(const Plan& plan, const std::vector<RankTensors>& inputs, const ReferenceOptions& options)
      : plan_(plan), options_(options), reaches_peers_(reaches_across_ranks(plan)) {
    const int world = plan.world_size();
    if (static_cast<int>(inputs.size()) != world)
      throw std::invalid_argument("run_reference: " + std::to_string(inputs.size()) + " input sets for " +
                                  std::to_string(world) + " ranks");
    memory_.resize(static_cast<size_t>(world));
    scales_.resize(static_cast<size_t>(world));
    grids_.resize(static_cast<size_t>(world));
    signals_.resize(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      const RankPlan& rp = plan.ranks[static_cast<size_t>(r)];
      signals_[static_cast<size_t>(r)].assign(rp.signals.size(), 0);
      column_major_.emplace_back();
      for (const BufferDecl& decl : rp.buffers) {
        // A column-major buffer's memory: its [cols, rows] transpose, row-major (ir/plan.hpp).
        const bool transposed = decl.order == MemoryOrder::column_major;
        const int64_t rows = transposed ? decl.cols : decl.rows, cols = transposed ? decl.rows : decl.cols;
        HostMatrix m(rows, cols, std::numeric_limits<float>::quiet_NaN());
        if (decl.role == BufferRole::input) {
          auto it = inputs[static_cast<size_t>(r)].find(decl.name);
          if (it == inputs[static_cast<size_t>(r)].end() || it->second.rows != rows || it->second.cols != cols)
            throw std::invalid_argument("run_reference: rank " + std::to_string(r) + " needs input '" + decl.name + "' of " +
                                        std::to_string(rows) + "x" + std::to_string(cols) + (transposed ? " (column-major: its transpose)" : ""));
          m = it->second;
        }
        memory_[static_cast<size_t>(r)].push_back(std::move(m));
        column_major_.back().push_back(transposed);
        bind_scales(r, decl, inputs[static_cast<size_t>(r)]);
      }
    }
  }

  std::vector<RankTensors> run() {
    std::vector<std::thread> workers;
    for (const RankPlan& rp : plan_.ranks)
      for (int s = 0; s < rp.stream_count; ++s) workers.emplace_back([this, &rp, s] { run_stream(rp, s); });
    for (auto& w : workers) w.join();
    if (!failure_.empty()) throw ReferenceTimeout(failure_);
    std::vector<RankTensors> result(memory_.size());
    for (size_t r = 0; r < memory_.size(); ++r)
      for (size_t b = 0; b < memory_[r].size(); ++b) {
        result[r][plan_.ranks[r].buffers[b].name] = memory_[r][b];
        if (grids_[r][b]) result[r][scale_name(plan_.ranks[r].buffers[b].name)] = scales_[r][b];
      }
    return result;
  }

 private:
  struct CollectiveState {
    int arrived = 0;
    bool done = false;
    std::vector<const CollectiveStep*> parts;
  };

  const Plan& plan_;
  ReferenceOptions options_;
  bool reaches_peers_;  // the plan touches another rank's memory: a call starts with a barrier
  std::vector<std::vector<HostMatrix>> memory_;
  std::vector<std::vector<bool>> column_major_;  // per rank and buffer: memory_ holds its transpose
  // FP8 buffers' scales (ir/scaling.hpp), beside memory_: the grid (empty: not FP8) and the values.
  std::vector<std::vector<std::optional<ScaleGrid>>> grids_;
  std::vector<std::vector<HostMatrix>> scales_;
  std::vector<std::vector<uint64_t>> signals_;
  std::map<int, CollectiveState> collectives_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::string failure_;
  std::map<std::string, std::string> blocked_;  // worker ("rank r stream s") -> what it waits for now
  std::set<int> at_call_barrier_;                // ranks that have started the call (see start_call)

  float& at(const Region& r, int64_t row, int64_t col) {
    HostMatrix& m = memory_[static_cast<size_t>(r.rank)][static_cast<size_t>(r.buffer)];
    if (column_major_[static_cast<size_t>(r.rank)][static_cast<size_t>(r.buffer)]) return m.at(r.box.col + col, r.box.row + row);
    return m.at(r.box.row + row, r.box.col + col);
  }

  const std::optional<ScaleGrid>& grid(const Region& r) const {
    return grids_[static_cast<size_t>(r.rank)][static_cast<size_t>(r.buffer)];
  }
  const BufferDecl& decl(const Region& r) const { return plan_.ranks[static_cast<size_t>(r.rank)].buffers[static_cast<size_t>(r.buffer)]; }
  // The scale of element (row, col) of a region of an FP8 buffer.
  float scale(const Region& r, int64_t row, int64_t col) {
    const ScaleCell cell = scale_cell(*grid(r), r.box.row + row, r.box.col + col);
    // Scale cells over several rows (tensor, block) are read and written by every stream that moves
    // or multiplies those rows, with the same value: relaxed atomics, the plan's waits order the rest.
    return std::atomic_ref<float>(scales_[static_cast<size_t>(r.rank)][static_cast<size_t>(r.buffer)].at(cell.row, cell.col))
        .load(std::memory_order_relaxed);
  }

  // An FP8 buffer's scales: the input's (which must be FP8 values with a scale array of the grid's
  // shape), or NaN until a step moves rows in (a GEMM that reads rows whose scales never came gives
  // NaN).
  void bind_scales(int r, const BufferDecl& decl, const RankTensors& inputs) {
    auto grid = scale_grid(plan_.problem, decl);
    grids_[static_cast<size_t>(r)].push_back(grid);
    if (!grid) {
      scales_[static_cast<size_t>(r)].emplace_back();
      return;
    }
    HostMatrix s(scale_rows(*grid, decl.rows), scale_cols(*grid, decl.cols), std::numeric_limits<float>::quiet_NaN());
    if (decl.role == BufferRole::input) {
      const auto it = inputs.find(scale_name(decl.name));
      if (it == inputs.end() || it->second.rows != s.rows || it->second.cols != s.cols)
        throw std::invalid_argument("run_reference: rank " + std::to_string(r) + " needs input '" + scale_name(decl.name) + "' of " +
                                    std::to_string(s.rows) + "x" + std::to_string(s.cols) + " (the " + std::string(to_string(plan_.problem.scaling)) +
                                    " scales of " + std::string(to_string(decl.dtype)) + " input '" + decl.name + "')");
      s = it->second;
      for (float v : memory_[static_cast<size_t>(r)].back().data)
        if (!(round_to_fp8(v, decl.dtype) == v))
          throw std::invalid_argument("run_reference: rank " + std::to_string(r) + " input '" + decl.name + "' holds " + std::to_string(v) +
                                      ", which is not an " + std::string(to_string(decl.dtype)) + " value (quantize it: reference/fp8.hpp)");
    }
    scales_[static_cast<size_t>(r)].push_back(std::move(s));
  }

  // Scales moved with their rows: each step collects the cells it writes, then commits them, so that
  // a move that gives one cell two values (it splits a scale block, or gathers rows whose tensor
  // scales differ) fails naming the buffer.
  struct ScaleWrites {
    std::map<std::tuple<int, BufferId, int64_t, int64_t>, float> cells;
  };
  // The scales of a box of rows x cols elements, from (src_row, src_col) of `src` to (dst_row,
  // dst_col) of `dst` (relative to the regions). Nothing for buffers that are not FP8.
  void move_scales(const Region& src, int64_t src_row, int64_t src_col, const Region& dst, int64_t dst_row, int64_t dst_col, int64_t rows,
                   int64_t cols, ScaleWrites& writes, const std::string& who) {
    const auto& from = grid(src);
    const auto& to = grid(dst);
    if (!from && !to) return;
    if (!from || !to || decl(src).dtype != decl(dst).dtype)
      throw std::invalid_argument(who + " moves " + std::string(to_string(decl(src).dtype)) + " buffer '" + decl(src).name + "' into " +
                                  std::string(to_string(decl(dst).dtype)) + " buffer '" + decl(dst).name + "'");
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const float value = scale(src, src_row + i, src_col + j);
        const ScaleCell cell = scale_cell(*to, dst.box.row + dst_row + i, dst.box.col + dst_col + j);
        const auto [it, fresh] = writes.cells.try_emplace({dst.rank, dst.buffer, cell.row, cell.col}, value);
        if (!fresh && !(it->second == value) && !(std::isnan(it->second) && std::isnan(value)))
          throw std::invalid_argument(who + " gives scale (" + std::to_string(cell.row) + ", " + std::to_string(cell.col) + ") of '" +
                                      decl(dst).name + "' on rank " + std::to_string(dst.rank) + " two values (" + std::to_string(it->second) +
                                      " and " + std::to_string(value) + "): the move splits a scale block, or gathers rows whose " +
                                      std::string(to_string(plan_.problem.scaling)) + " scales differ");
      }
  }
  void commit(const ScaleWrites& writes, const std::string& who) {
    for (const auto& [key, value] : writes.cells) {
      const auto& [rank, buffer, row, col] = key;
      std::atomic_ref<float> shared(scales_[static_cast<size_t>(rank)][static_cast<size_t>(buffer)].at(row, col));
      const float cell = shared.load(std::memory_order_relaxed);
      // A scale over several rows keeps one value for the call: rows moved in from elsewhere must agree.
      const auto& g = grids_[static_cast<size_t>(rank)][static_cast<size_t>(buffer)];
      if (spans_rows(*g) && !std::isnan(cell) && !std::isnan(value) && cell != value)
        throw std::invalid_argument(who + " moves rows with scale " + std::to_string(value) + " into '" +
                                    plan_.ranks[static_cast<size_t>(rank)].buffers[static_cast<size_t>(buffer)].name + "' on rank " +
                                    std::to_string(rank) + ", whose rows share scale " + std::to_string(cell) + " (" +
                                    std::string(to_string(plan_.problem.scaling)) + " scaling: one scale over several rows)");
      shared.store(value, std::memory_order_relaxed);
    }
  }
  // Reductions sum partial sums, which are bf16 or f32: never FP8.
  void require_not_fp8(const Region& r, const std::string& who) const {
    if (grid(r))
      throw std::invalid_argument(who + " reduces " + std::string(to_string(decl(r).dtype)) + " buffer '" + decl(r).name +
                                  "': partial sums are bf16 or f32, never FP8");
  }

  // Blocks until `ready` holds; on timeout records `what` and aborts every worker.
  template <class Ready, class Describe>
  void block_until(std::unique_lock<std::mutex>& lock, const std::string& worker, Ready ready, Describe what) {
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    if (!ready()) blocked_[worker] = what();
    if (!changed_.wait_until(lock, deadline, [&] { return !failure_.empty() || ready(); })) {
      std::string others;
      for (const auto& [who, waits_for] : blocked_)
        if (who != worker) others += "\n  " + waits_for;
      failure_ = "reference executor timed out after " + std::to_string(options_.timeout.count()) + " ms running " +
                 describe(plan_.problem) + " (strategy " + plan_.strategy + "): " + what() +
                 (others.empty() ? std::string() : "\nwaits still blocked then:" + others);
      changed_.notify_all();
    }
    blocked_.erase(worker);
    if (!failure_.empty()) throw Aborted{};
  }

  static std::string worker_of(const std::string& who) { return who.substr(0, who.find(" step ")); }

  void wait(const Wait& w, const std::string& who) {
    std::unique_lock lock(mutex_);
    uint64_t& value = signals_[static_cast<size_t>(w.signal.rank)][static_cast<size_t>(w.signal.id)];
    block_until(lock, worker_of(who), [&] { return value >= w.value; }, [&] {
      return who + " waited for signal '" +
             plan_.ranks[static_cast<size_t>(w.signal.rank)].signals[static_cast<size_t>(w.signal.id)] + "' (#" +
             std::to_string(w.signal.id) + " on rank " + std::to_string(w.signal.rank) + ") >= " +
             std::to_string(w.value) + "; its value is " + std::to_string(value) + ", " +
             describe_raisers(plan_, w.signal.rank, w.signal.id);
    });
  }

  void notify(const Notify& n) {
    std::lock_guard lock(mutex_);
    signals_[static_cast<size_t>(n.signal.rank)][static_cast<size_t>(n.signal.id)] += n.increment;
    changed_.notify_all();
  }

  // As the CUDA executor begins every call of a plan that reaches peers: no rank's steps start
  // before every rank has started the call (its device barrier), so a rank that skips the call
  // holds every peer there instead of letting them read its buffers unsynchronized.
  void start_call(const RankPlan& rp, int stream) {
    if (!reaches_peers_) return;
    const int world = plan_.world_size();
    std::unique_lock lock(mutex_);
    at_call_barrier_.insert(rp.rank);
    changed_.notify_all();
    const std::string worker = "rank " + std::to_string(rp.rank) + " stream " + std::to_string(stream);
    block_until(lock, worker, [&] { return static_cast<int>(at_call_barrier_.size()) == world; }, [&] {
      std::string missing;
      for (int r = 0; r < world; ++r)
        if (!at_call_barrier_.count(r)) missing += " " + std::to_string(r);
      return worker + " waited at the call's start barrier for ranks" + missing + ", which have not started the call";
    });
  }

  void run_stream(const RankPlan& rp, int stream) {
    try {
      const bool stops = rp.rank == options_.stopped_rank;
      if (!(stops && options_.steps_before_stop == 0)) start_call(rp, stream);
      for (size_t index = 0; index < rp.steps.size(); ++index) {
        const Step& step = rp.steps[index];
        if (stops && static_cast<int>(index) >= options_.steps_before_stop) break;
        if (step.stream != stream) continue;
        const std::string who = "rank " + std::to_string(rp.rank) + " stream " + std::to_string(stream) + " step '" + step.label + "'";
        for (const Wait& w : step.waits) wait(w, who);
        std::visit([&](const auto& body) { execute(rp.rank, who, body); }, step.body);
        for (const Notify& n : step.notifies) notify(n);
      }
    } catch (const Aborted&) {
    } catch (const std::exception& e) {
      std::lock_guard lock(mutex_);
      if (failure_.empty()) failure_ = e.what();
      changed_.notify_all();
    }
  }

  // Entry r of an i32 index column, checked to be an integer in [0, limit): a table the route wrote.
  int64_t index_at(const Region& index, int64_t r, int64_t limit, const std::string& who) {
    const float v = at(index, r, 0);
    if (!(v >= 0.0f) || v >= static_cast<float>(limit) || v != std::floor(v))
      throw std::runtime_error(who + " reads index " + std::to_string(v) + " at entry " + std::to_string(r) + " of " + describe_region(plan_, index) +
                               ", not a row in [0, " + std::to_string(limit) + ")");
    return static_cast<int64_t>(v);
  }
  // A permute's or combine's source rows: listed, or read now from its index region.
  std::vector<int64_t> source_rows_of(const std::vector<int64_t>& listed, const std::optional<Region>& index, int64_t src_rows,
                                      const std::string& who) {
    if (!index) return listed;
    std::vector<int64_t> rows(static_cast<size_t>(index->box.rows));
    for (int64_t r = 0; r < index->box.rows; ++r) rows[static_cast<size_t>(r)] = index_at(*index, r, src_rows, who);
    return rows;
  }

  void execute(int rank, const std::string& who, const GemmStep& g) {
    if (g.routed) return routed_gemm(who, g);
    execute_tiles(rank, who, g);
  }

  // As the GPU's table computes it (build_routed_moe_table): every row tile of a whose first row lies
  // in [first[e], first[e + 1]) is expert e's, its rows up to first[e + 1] times expert e's rows of b,
  // into the same rows of out. (A route starts every expert that has rows on the grid; the rows of an
  // expert without any lie in no tile of its own.)
  void routed_gemm(const std::string& who, const GemmStep& g) {
    const RoutedGemm& routed = *g.routed;
    const int64_t n = g.b.box.rows / routed.experts, k = g.a.box.cols, rows = g.a.box.rows;
    int64_t previous_end = 0;
    for (int e = 0; e < routed.experts; ++e) {
      const int64_t first = index_at(routed.expert_first, e, rows + 1, who);
      const int64_t end = index_at(routed.expert_first, e + 1, rows + 1, who);
      if (first < previous_end || end < first)
        throw std::runtime_error(who + ": expert " + std::to_string(e) + "'s rows [" + std::to_string(first) + ", " + std::to_string(end) +
                                 ") overlap or precede the expert before's (ending at " + std::to_string(previous_end) + ")");
      previous_end = end;
      for (int64_t tile = (first + g.tile_m - 1) / g.tile_m * g.tile_m; tile < end; tile += g.tile_m)
        for (int64_t r = tile; r < std::min(end, tile + g.tile_m); ++r)
          for (int64_t c = 0; c < n; ++c) {
            double sum = 0.0;
            for (int64_t kk = 0; kk < k; ++kk) sum += static_cast<double>(at(g.a, r, kk)) * at(g.b, int64_t{e} * n + c, kk);
            at(routed.out, r, c) = static_cast<float>(sum);
          }
    }
  }

  // The route (RouteStep): plan/moe_route.hpp's route_moe_rows on the choices as they are now.
  void execute(int, const std::string& who, const RouteStep& s) {
    const int64_t tokens = s.choices.box.rows;
    const int world = plan_.problem.world_size;
    std::vector<int32_t> choices(static_cast<size_t>(tokens * s.topk));
    for (int64_t t = 0; t < tokens; ++t)
      for (int j = 0; j < s.topk; ++j) {
        const float e = at(s.choices, t, j);
        // Out of range is route_moe_rows' to name; what is not an integer at all is refused here.
        if (!std::isfinite(e) || e != std::floor(e) || std::fabs(e) > 1e9f)
          throw std::runtime_error(who + ": choice " + std::to_string(j) + " of token " + std::to_string(t) + " is " + std::to_string(e) +
                                   ", not an expert's index");
        choices[static_cast<size_t>(t * s.topk + j)] = static_cast<int32_t>(e);
      }
    MoeRouteTables tables;
    try {
      tables = route_moe_rows(choices, world, tokens / world, s.topk, s.experts, s.align);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(who + ": " + e.what());
    }
    // Padding rows of the scratch read row 0 (a row that exists; never stored).
    for (int64_t x = 0; x < s.scratch_source.box.rows; ++x) at(s.scratch_source, x, 0) = 0.0f;
    std::vector<int64_t> scratch_of_layout(tables.layout_row.size(), -1);
    for (size_t x = 0; x < tables.expert_row.size(); ++x)
      if (tables.expert_row[x] >= 0) scratch_of_layout[static_cast<size_t>(tables.expert_row[x])] = static_cast<int64_t>(x);
    for (size_t p = 0; p < tables.layout_row.size(); ++p) {
      const int64_t layout = tables.layout_row[p], scratch = scratch_of_layout[static_cast<size_t>(layout)];
      at(s.scratch_source, scratch, 0) = static_cast<float>(s.source == RouteSource::token ? static_cast<int64_t>(p) / s.topk : layout);
      if (s.layout_scratch) at(*s.layout_scratch, layout, 0) = static_cast<float>(scratch);
      if (s.pair_scratch) at(*s.pair_scratch, static_cast<int64_t>(p), 0) = static_cast<float>(scratch);
    }
    for (int e = 0; e <= s.experts; ++e) at(s.expert_first, e, 0) = static_cast<float>(tables.expert_first[static_cast<size_t>(e)]);
  }

  void execute_tiles(int, const std::string& who, const GemmStep& g) {
    auto fp8 = [&](const Region& r) { return grid(r).has_value(); };
    for (size_t i = 0; i < g.tiles.size(); ++i) {
      const GemmTile& t = g.tiles[i];
      if (fp8(t.a_rows ? *t.a_rows : g.a) != fp8(g.b) || fp8(t.store))
        throw std::invalid_argument(who + " multiplies " + std::string(to_string(decl(t.a_rows ? *t.a_rows : g.a).dtype)) + " by " +
                                    std::string(to_string(decl(g.b).dtype)) + " into " + std::string(to_string(decl(t.store).dtype)) +
                                    ": FP8 multiplies FP8 (both scaled) into bf16 or f32");
      const std::string tile_who = who + " tile " + std::to_string(i);
      // The tile's A rows: in the step's `a`, or where the tile says.
      const Region& a = t.a_rows ? *t.a_rows : g.a;
      const int64_t a_row = t.a_rows ? 0 : t.tile.row;
      auto product = [&](int64_t r, int64_t c, double sum) {
        if (grid(a)) return sum + scaled_product(a, a_row + r, g.b, t.tile.col + c, g.a.box.cols);
        for (int64_t k = 0; k < g.a.box.cols; ++k) sum += static_cast<double>(at(a, a_row + r, k)) * at(g.b, t.tile.col + c, k);
        return sum;
      };
      if (t.addends.empty()) {
        if (t.wait) wait(*t.wait, tile_who);
        for (int64_t r = 0; r < t.tile.rows; ++r)
          for (int64_t c = 0; c < t.tile.cols; ++c) at(t.store, r, c) = static_cast<float>(product(r, c, g.accumulate ? at(t.store, r, c) : 0.0));
      } else {
        // A tile with addends reads A and B before its wait, as the overlap GEMM does (it waits in
        // its epilogue): a plan whose operands depend on that wait reads them unready here too.
        HostMatrix tile(t.tile.rows, t.tile.cols);
        for (int64_t r = 0; r < t.tile.rows; ++r)
          for (int64_t c = 0; c < t.tile.cols; ++c) tile.at(r, c) = static_cast<float>(product(r, c, 0.0));
        if (t.wait) wait(*t.wait, tile_who);
        for (int64_t r = 0; r < t.tile.rows; ++r)
          for (int64_t c = 0; c < t.tile.cols; ++c) {
            double sum = tile.at(r, c);
            for (const Region& addend : t.addends) sum += at(addend, r, c);
            at(t.store, r, c) = static_cast<float>(sum);
          }
      }
      if (t.notify) notify(*t.notify);
    }
  }

  // Row a_row of FP8 `a` times row b_row of FP8 `b` over k columns, as the GPU computes it: products
  // summed in fp32 and scaled in fp32, in the epilogue (tensor, row) or per 128-wide K block, each
  // block's partial sum scaled before it joins the fp32 total (block: DeepSeek-V3's promotion).
  float scaled_product(const Region& a, int64_t a_row, const Region& b, int64_t b_row, int64_t k) {
    const int64_t step = grid(a)->block_cols > 0 ? grid(a)->block_cols : k;
    float total = 0.0f;
    for (int64_t first = 0; first < k; first += step) {
      float partial = 0.0f;
      for (int64_t col = first; col < std::min(k, first + step); ++col) partial += at(a, a_row, col) * at(b, b_row, col);
      total += partial * (scale(a, a_row, first) * scale(b, b_row, first));
    }
    return total;
  }

  void execute(int, const std::string& who, const CopyStep& c) {
    ScaleWrites writes;
    move_scales(c.src, 0, 0, c.dst, 0, 0, c.src.box.rows, c.src.box.cols, writes, who);
    for (int64_t r = 0; r < c.src.box.rows; ++r)
      for (int64_t col = 0; col < c.src.box.cols; ++col) at(c.dst, r, col) = at(c.src, r, col);
    commit(writes, who);
  }

  void execute(int, const std::string& who, const ReduceStep& s) {
    require_not_fp8(s.dst, who);
    for (const Region& src : s.srcs) require_not_fp8(src, who);
    HostMatrix sum(s.dst.box.rows, s.dst.box.cols, 0.0f);
    for (int64_t r = 0; r < sum.rows; ++r)
      for (int64_t c = 0; c < sum.cols; ++c) {
        double total = s.accumulate ? at(s.dst, r, c) : 0.0;
        for (const Region& src : s.srcs) total += at(src, r, c);
        sum.at(r, c) = static_cast<float>(total);
      }
    for (int64_t r = 0; r < sum.rows; ++r)
      for (int64_t c = 0; c < sum.cols; ++c) at(s.dst, r, c) = sum.at(r, c);
  }

  void execute(int, const std::string& who, const PermuteRowsStep& p) {
    const std::vector<int64_t> source_rows = source_rows_of(p.source_rows, p.index, p.src.box.rows, who);
    ScaleWrites writes;
    for (int64_t r = 0; r < p.dst.box.rows; ++r) move_scales(p.src, source_rows[static_cast<size_t>(r)], 0, p.dst, r, 0, 1, p.dst.box.cols, writes, who);
    commit(writes, who);
    HostMatrix rows(p.dst.box.rows, p.dst.box.cols);
    for (int64_t r = 0; r < rows.rows; ++r)
      for (int64_t c = 0; c < rows.cols; ++c) rows.at(r, c) = at(p.src, source_rows[static_cast<size_t>(r)], c);
    for (int64_t r = 0; r < rows.rows; ++r)
      for (int64_t c = 0; c < rows.cols; ++c) at(p.dst, r, c) = rows.at(r, c);
  }

  void execute(int, const std::string& who, const CombineRowsStep& s) {
    for (const Region* r : {&s.src, &s.weights, &s.dst}) require_not_fp8(*r, who);
    const std::vector<int64_t> source_rows = source_rows_of(s.source_rows, s.index, s.src.box.rows, who);
    HostMatrix rows(s.dst.box.rows, s.dst.box.cols);
    for (int64_t r = 0; r < rows.rows; ++r)
      for (int64_t c = 0; c < rows.cols; ++c) {
        double sum = 0.0;
        for (int j = 0; j < s.topk; ++j)
          sum += static_cast<double>(at(s.weights, r, j)) * at(s.src, source_rows[static_cast<size_t>(r * s.topk + j)], c);
        rows.at(r, c) = static_cast<float>(sum);
      }
    for (int64_t r = 0; r < rows.rows; ++r)
      for (int64_t c = 0; c < rows.cols; ++c) at(s.dst, r, c) = rows.at(r, c);
  }

  void execute(int, const std::string& who, const MoveBoxesStep& s) {
    ScaleWrites writes;
    for (const BoxMove& move : s.moves)
      move_scales(s.src, move.from.row, move.from.col, s.dst, move.to.row, move.to.col, move.from.rows, move.from.cols, writes, who);
    commit(writes, who);
    // Read every box before writing any, as if the kernel's moves all happened at once.
    std::vector<HostMatrix> boxes;
    boxes.reserve(s.moves.size());
    for (const BoxMove& move : s.moves) {
      HostMatrix box(move.from.rows, move.from.cols);
      for (int64_t r = 0; r < box.rows; ++r)
        for (int64_t c = 0; c < box.cols; ++c) box.at(r, c) = at(s.src, move.from.row + r, move.from.col + c);
      boxes.push_back(std::move(box));
    }
    for (size_t i = 0; i < s.moves.size(); ++i)
      for (int64_t r = 0; r < boxes[i].rows; ++r)
        for (int64_t c = 0; c < boxes[i].cols; ++c) at(s.dst, s.moves[i].to.row + r, s.moves[i].to.col + c) = boxes[i].at(r, c);
  }

  // The online softmax in double, KV tile by KV tile in the step's order, each read right after its
  // wait (as the kernel's producer loads it): a plan whose wait lets a tile be read before it lands
  // reads NaN here. Per (query row, head): the running maximum, the sum of exponentials relative to
  // it, and the weighted sum of values.
  void execute(int, const std::string& who, const AttentionStep& s) {
    const int64_t rows = s.q.box.rows, d = s.head_dim, heads = s.q.box.cols / d, group = heads / (s.k.box.cols / d);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const double none = -std::numeric_limits<double>::infinity();
    std::vector<double> top(static_cast<size_t>(rows * heads), none), total(static_cast<size_t>(rows * heads), 0.0);
    std::vector<double> acc(static_cast<size_t>(rows * heads * d), 0.0);
    for (size_t i = 0; i < s.kv_tiles.size(); ++i) {
      const KvTile& t = s.kv_tiles[i];
      if (t.wait) wait(*t.wait, who + " KV tile " + std::to_string(i));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < heads; ++h) {
          const size_t cell = static_cast<size_t>(r * heads + h);
          const int64_t kv_col = (h / group) * d;
          for (int64_t j = t.row; j < t.row + t.rows; ++j) {
            if (s.causal && s.kv_position + j > s.q_position + r) continue;
            double score = 0.0;
            for (int64_t e = 0; e < d; ++e) score += static_cast<double>(at(s.q, r, h * d + e)) * at(s.k, j, kv_col + e);
            score *= scale;
            const double new_top = std::max(top[cell], score);
            const double rescale = std::exp(top[cell] - new_top), weight = std::exp(score - new_top);  // exp(-inf) = 0 at the first key
            total[cell] = total[cell] * rescale + weight;
            for (int64_t e = 0; e < d; ++e) {
              double& a = acc[cell * static_cast<size_t>(d) + static_cast<size_t>(e)];
              a = a * rescale + weight * at(s.v, j, kv_col + e);
            }
            top[cell] = new_top;
          }
        }
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < heads; ++h) {
        const size_t cell = static_cast<size_t>(r * heads + h);
        const double lse = total[cell] > 0 ? top[cell] + std::log(total[cell]) : none;
        // This step's share and the one already there: weights e^(lse - lse') (0 for a side that saw
        // no key; a NaN already there stays NaN, so merging into an unwritten result shows).
        double mine = 1.0, theirs = 0.0, merged = lse;
        if (s.merge) {
          const double before = at(s.lse, r, h);
          merged = before == none ? lse : lse == none ? before : std::max(before, lse) + std::log1p(std::exp(-std::fabs(before - lse)));
          mine = lse == none ? 0.0 : std::exp(lse - merged);
          theirs = before == none ? 0.0 : std::exp(before - merged);
          if (std::isnan(before)) theirs = before;
        }
        for (int64_t e = 0; e < d; ++e) {
          const double step = total[cell] > 0 ? acc[cell * static_cast<size_t>(d) + static_cast<size_t>(e)] / total[cell] : 0.0;
          const double old = s.merge ? theirs * at(s.o, r, h * d + e) : 0.0;
          at(s.o, r, h * d + e) = static_cast<float>(mine * step + old);
        }
        at(s.lse, r, h) = static_cast<float>(merged);
      }
  }

  void execute(int, const std::string&, const JoinStep&) {}

  void execute(int rank, const std::string& who, const CollectiveStep& step) {
    const int world = plan_.world_size();
    std::unique_lock lock(mutex_);
    CollectiveState& state = collectives_[step.id];
    state.parts.resize(static_cast<size_t>(world), nullptr);
    state.parts[static_cast<size_t>(rank)] = &step;
    if (++state.arrived == world) {
      perform(state.parts, who);  // under the lock: every rank is parked here, nothing else touches the data
      state.done = true;
      changed_.notify_all();
      return;
    }
    block_until(lock, worker_of(who), [&] { return state.done; }, [&] {
      std::string missing;
      for (int r = 0; r < world; ++r)
        if (!state.parts[static_cast<size_t>(r)]) missing += " " + std::to_string(r);
      return who + " waited in collective #" + std::to_string(step.id) + " (" + std::string(to_string(step.kind)) +
             ") for ranks" + missing + ", which have not joined it";
    });
  }

  void perform(const std::vector<const CollectiveStep*>& parts, const std::string& who) {
    const int world = static_cast<int>(parts.size());
    const CollectiveStep& first = *parts[0];
    const int64_t cols = first.src.box.cols;
    // FP8 rows take their scales along (all_gather, all_to_all); reductions never see FP8.
    ScaleWrites writes;
    for (int r = 0; r < world; ++r) {
      const CollectiveStep& mine = *parts[static_cast<size_t>(r)];
      if (first.kind == CollectiveKind::reduce_scatter || first.kind == CollectiveKind::all_reduce) {
        require_not_fp8(mine.src, who);
        require_not_fp8(mine.dst, who);
      } else if (first.kind == CollectiveKind::all_gather) {
        for (int s = 0; s < world; ++s) {
          const Region& src = parts[static_cast<size_t>(s)]->src;
          move_scales(src, 0, 0, mine.dst, s * src.box.rows, 0, src.box.rows, cols, writes, who);
        }
      } else {
        int64_t row = 0;
        for (int s = 0; s < world; ++s) {
          const CollectiveStep& theirs = *parts[static_cast<size_t>(s)];
          int64_t offset = 0;
          for (int d = 0; d < r; ++d) offset += theirs.send_rows[static_cast<size_t>(d)];
          const int64_t count = mine.recv_rows[static_cast<size_t>(s)];
          move_scales(theirs.src, offset, 0, mine.dst, row, 0, count, cols, writes, who);
          row += count;
        }
      }
    }
    commit(writes, who);
    // Results go to scratch first: src and dst may be the same memory (in-place collectives).
    std::vector<HostMatrix> results;
    for (int r = 0; r < world; ++r) results.emplace_back(parts[static_cast<size_t>(r)]->dst.box.rows, cols);
    for (int r = 0; r < world; ++r) {
      const CollectiveStep& mine = *parts[static_cast<size_t>(r)];
      HostMatrix& out = results[static_cast<size_t>(r)];
      switch (first.kind) {
        case CollectiveKind::all_gather:
          for (int s = 0; s < world; ++s) {
            const Region& src = parts[static_cast<size_t>(s)]->src;
            for (int64_t i = 0; i < src.box.rows; ++i)
              for (int64_t c = 0; c < cols; ++c) out.at(s * src.box.rows + i, c) = at(src, i, c);
          }
          break;
        case CollectiveKind::reduce_scatter:
        case CollectiveKind::all_reduce: {
          const int64_t first_row = first.kind == CollectiveKind::reduce_scatter ? r * out.rows : 0;
          for (int64_t i = 0; i < out.rows; ++i)
            for (int64_t c = 0; c < cols; ++c) {
              double sum = 0.0;
              for (int s = 0; s < world; ++s) sum += at(parts[static_cast<size_t>(s)]->src, first_row + i, c);
              out.at(i, c) = static_cast<float>(sum);
            }
          break;
        }
        case CollectiveKind::all_to_all: {
          int64_t row = 0;
          for (int s = 0; s < world; ++s) {
            const CollectiveStep& theirs = *parts[static_cast<size_t>(s)];
            int64_t offset = 0;  // where rank s's block for rank r starts in its src
            for (int d = 0; d < r; ++d) offset += theirs.send_rows[static_cast<size_t>(d)];
            for (int64_t i = 0; i < mine.recv_rows[static_cast<size_t>(s)]; ++i, ++row)
              for (int64_t c = 0; c < cols; ++c) out.at(row, c) = at(theirs.src, offset + i, c);
          }
          break;
        }
      }
    }
    for (int r = 0; r < world; ++r) {
      const Region& dst = parts[static_cast<size_t>(r)]->dst;
      for (int64_t i = 0; i < dst.box.rows; ++i)
        for (int64_t c = 0; c < cols; ++c) at(dst, i, c) = results[static_cast<size_t>(r)].at(i, c);
    }
  }
};

}  // namespace

std::vector<RankTensors> run_reference(const Plan& plan, const std::vector<RankTensors>& inputs,
                                       const ReferenceOptions& options) {
  return ReferenceRun(plan, inputs, options).run();
}

std::vector<HostMatrix> gathered_a_of(const Plan& plan, const std::vector<RankTensors>& memory) {
  std::vector<HostMatrix> result;
  for (const RankPlan& rp : plan.ranks) {
    int64_t rows = 0;
    for (const Region& piece : rp.gathered_a) rows += piece.box.rows;
    HostMatrix gathered(rows, rp.gathered_a.empty() ? 0 : rp.gathered_a.front().box.cols);
    int64_t row = 0;
    for (const Region& piece : rp.gathered_a) {
      const HostMatrix& whole = memory.at(static_cast<size_t>(piece.rank)).at(plan.ranks.at(static_cast<size_t>(piece.rank)).buffers.at(static_cast<size_t>(piece.buffer)).name);
      for (int64_t r = 0; r < piece.box.rows; ++r, ++row)
        for (int64_t c = 0; c < piece.box.cols && c < gathered.cols; ++c) gathered.at(row, c) = whole.at(piece.box.row + r, piece.box.col + c);
    }
    result.push_back(std::move(gathered));
  }
  return result;
}

std::vector<HostMatrix> outputs_of(const Plan& plan, const std::vector<RankTensors>& memory) {
  std::vector<HostMatrix> result;
  for (const RankPlan& rp : plan.ranks) {
    const auto& decl = rp.buffers.at(static_cast<size_t>(rp.output.buffer));
    const HostMatrix& whole = memory.at(static_cast<size_t>(rp.rank)).at(decl.name);
    HostMatrix out(rp.output.box.rows, rp.output.box.cols);
    for (int64_t r = 0; r < out.rows; ++r)
      for (int64_t c = 0; c < out.cols; ++c) out.at(r, c) = whole.at(rp.output.box.row + r, rp.output.box.col + c);
    result.push_back(std::move(out));
  }
  return result;
}

}  // namespace weft
