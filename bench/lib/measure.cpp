#include "measure.hpp"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <vector>

#include "weft/kernels/elementwise.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/rank_threads.hpp"

namespace weft::bench {

DeviceBuffer::DeviceBuffer(size_t bytes) { WEFT_CUDA_CHECK(cudaMalloc(&data, std::max<size_t>(bytes, 16))); }

namespace {

uint64_t buffer_seed(uint64_t seed, int rank, const std::string& name) {
  return seed * 1000003u + static_cast<uint64_t>(rank) * 7919u + std::hash<std::string>{}(name);
}

}  // namespace

void fill_buffers(CudaExecutor& exec, int rank, uint64_t seed, cudaStream_t stream) {
  for (const BufferDecl& decl : exec.rank_plan().buffers) {
    void* data = exec.buffer(decl.name);
    const int64_t count = decl.rows * decl.cols;
    const std::string seed_name = decl.role == BufferRole::input ? decl.name : "scratch " + decl.name;
    const uint64_t own_seed = buffer_seed(seed, rank, seed_name);
    if (decl.role == BufferRole::output) {
      fill_u16(data, count * static_cast<int64_t>(dtype_bytes(decl.dtype)) / 2, kBf16Nan, stream);  // NaN in bf16 and f32 alike
    } else if (decl.dtype == DType::i32 && decl.role == BufferRole::input) {
      // The MoE choices given on the device: each token's top-k distinct experts.
      const Problem& p = exec.plan().problem;
      const std::vector<int> choices = random_choices(1, decl.rows, p.experts, static_cast<int>(decl.cols), own_seed).at(0);
      const std::vector<int32_t> values(choices.begin(), choices.end());
      WEFT_CUDA_CHECK(cudaMemcpyAsync(data, values.data(), values.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
      WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vector goes out of scope
    } else if (is_fp8(decl.dtype)) {
      fill_random_e4m3(data, count, own_seed, stream);
      // Its dequantization scales, in [0.5, 1.5): a pure function of the seed, as the elements are.
      // A tensor scale is the same on every rank: ag_gemm's A scale is the whole gathered A's (the
      // ops' contract, as AsyncTP's), and a rank's own would give each strategy another product.
      if (const std::optional<ScaleGrid> grid = scale_grid(exec.plan().problem, decl)) {
        std::vector<float> scales(static_cast<size_t>(device_scale_count(*grid, decl.rows, decl.cols)));
        const bool tensor = exec.plan().problem.scaling == Scaling::tensor;
        uint64_t state = (tensor ? buffer_seed(seed, 0, seed_name) : own_seed) | 1;
        for (float& x : scales) {
          state = state * 6364136223846793005ULL + 1442695040888963407ULL;
          x = 0.5f + static_cast<float>(state >> 40) * (1.0f / 16777216.0f);
        }
        WEFT_CUDA_CHECK(cudaMemcpyAsync(exec.buffer(scale_name(decl.name)), scales.data(), scales.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
        WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vector goes out of scope
      }
    } else {
      fill_random_bf16(data, count, own_seed, stream);
    }
  }
}

void finish_or_explain(CudaExecutor& exec, cudaStream_t stream, const std::string& what) {
  // The one bound of every wait for peers (WEFT_COLLECTIVE_TIMEOUT_S): a hang probe can then take
  // the host stacks of a stuck run before it ends itself.
  const int64_t limit_ms = Communicator::timeout_ms();
  if (synchronize_with_timeout(stream, limit_ms)) {
    exec.check();
    return;
  }
  std::fprintf(stderr, "weft bench: rank %d: %s did not finish within %lld ms; unmet waits:\n%s", exec.communicator().rank(), what.c_str(),
               static_cast<long long>(limit_ms), exec.diagnose().c_str());
  std::fflush(stderr);
  std::_Exit(3);
}

namespace {

// The one timing loop: per iteration every variant once, in turn from variant i % count (so that
// clock and power drift reach all alike and no variant always follows the same one), each after
// `before_each(stream)` and between CUDA events. host_us (if given): each variant's median host
// time to enqueue (the call's own CPU cost, what a CUDA graph's replay removes).
// The queue-ahead during the warm-up, and the bounds of the one after it.
constexpr double kFirstQueueAheadUs = 200;
constexpr double kMaxQueueAheadUs = 20000;

// `agree(ahead)`, if given, makes every rank's queue-aheads the same after the warm-up (the slowest
// rank's): a rank whose device started later would have its peers wait for it in the call.
std::vector<double> timed_in_turn(const std::function<void(cudaStream_t)>& before_each,
                                  const std::vector<std::function<void(cudaStream_t)>>& variants, cudaStream_t stream, int warmup,
                                  int iterations, const std::function<void(size_t)>& finish, std::vector<double>* host_us = nullptr,
                                  const std::function<void(std::vector<double>&)>& agree = nullptr) {
  cudaEvent_t start, stop;
  WEFT_CUDA_CHECK(cudaEventCreate(&start));
  WEFT_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<std::vector<double>> times(variants.size()), host(variants.size());
  // Each variant's queue-ahead: the same constant on every rank during the warm-up, then twice the
  // warm-up's median enqueue (its first calls may build and capture), plus 20 us (the largest of every
  // rank's, where `agree` is given).
  std::vector<double> ahead_us(variants.size(), kFirstQueueAheadUs);
  std::vector<std::vector<double>> warm_us(variants.size());
  for (int i = 0; i < warmup + iterations; ++i) {
    if (i == warmup && warmup > 0) {
      for (size_t v = 0; v < variants.size(); ++v) ahead_us[v] = std::clamp(2 * median(warm_us[v]) + 20, kFirstQueueAheadUs / 4, kMaxQueueAheadUs);
      if (agree) agree(ahead_us);
    }
    for (size_t turn = 0; turn < variants.size(); ++turn) {
      const size_t v = (static_cast<size_t>(i) + turn) % variants.size();
      before_each(stream);
      device_sleep(stream, ahead_us[v]);
      WEFT_CUDA_CHECK(cudaEventRecord(start, stream));
      const auto enqueue_start = std::chrono::steady_clock::now();
      variants[v](stream);
      const auto enqueue_end = std::chrono::steady_clock::now();
      WEFT_CUDA_CHECK(cudaEventRecord(stop, stream));
      finish(v);
      float ms = 0;
      WEFT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      const double enqueue_us = std::chrono::duration<double, std::micro>(enqueue_end - enqueue_start).count();
      if (i < warmup) warm_us[v].push_back(enqueue_us);
      else {
        times[v].push_back(ms);
        host[v].push_back(enqueue_us);
      }
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::vector<double> medians;
  for (auto& t : times) medians.push_back(median(t));
  if (host_us) {
    host_us->clear();
    for (auto& h : host) host_us->push_back(median(h));
  }
  return medians;
}

}  // namespace

std::vector<double> interleaved_call_medians_ms(Communicator& comm, const std::function<void()>& ranks_meet, cudaStream_t stream, int warmup,
                                                int iterations, const std::vector<std::function<void(cudaStream_t)>>& variants,
                                                const std::function<void(size_t)>& finish, std::vector<double>* host_us) {
  return timed_in_turn(
      [&](cudaStream_t s) {
        ranks_meet();
        comm.barrier(s);
      },
      variants, stream, warmup, iterations, finish, host_us, [&](std::vector<double>& ahead_us) {
        const std::vector<uint8_t> all = comm.all_gather_bytes(ahead_us.data(), ahead_us.size() * sizeof(double));
        for (int r = 0; r < comm.world_size(); ++r)
          for (size_t v = 0; v < ahead_us.size(); ++v) {
            double theirs = 0;
            std::memcpy(&theirs, all.data() + (static_cast<size_t>(r) * ahead_us.size() + v) * sizeof(double), sizeof theirs);
            ahead_us[v] = std::max(ahead_us[v], theirs);
          }
      });
}

std::vector<double> back_to_back_host_us(Communicator& comm, const std::function<void()>& ranks_meet, cudaStream_t stream,
                                         const std::vector<std::function<void(cudaStream_t)>>& variants,
                                         const std::function<void(size_t)>& finish, int bursts, int calls) {
  std::vector<double> medians;
  for (size_t v = 0; v < variants.size(); ++v) {
    std::vector<double> host;
    for (int burst = 0; burst < bursts; ++burst) {
      ranks_meet();
      comm.barrier(stream);
      for (int call = 0; call < calls; ++call) {
        const auto start = std::chrono::steady_clock::now();
        variants[v](stream);
        const auto end = std::chrono::steady_clock::now();
        if (call > 0) host.push_back(std::chrono::duration<double, std::micro>(end - start).count());
      }
      finish(v);
    }
    medians.push_back(median(host));
  }
  return medians;
}

double median_call_ms(Communicator& comm, const std::function<void()>& ranks_meet, cudaStream_t stream, int warmup, int iterations,
                      const std::function<void(cudaStream_t)>& enqueue, const std::function<void()>& finish) {
  return interleaved_call_medians_ms(comm, ranks_meet, stream, warmup, iterations, {enqueue}, [&](size_t) { finish(); })[0];
}

std::vector<double> interleaved_median_ms(const std::vector<std::function<void(cudaStream_t)>>& variants, cudaStream_t stream, int warmup,
                                          int iterations, const std::function<void(size_t)>& finish,
                                          const std::function<void(cudaStream_t)>& before_each) {
  const std::function<void(cudaStream_t)> nothing = [](cudaStream_t) {};
  return timed_in_turn(before_each ? before_each : nothing, variants, stream, warmup, iterations, finish);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

double relative_difference(const std::vector<DifferenceRun>& runs, double* sums, cudaStream_t stream) {
  WEFT_CUDA_CHECK(cudaMemsetAsync(sums, 0, 3 * sizeof(double), stream));
  for (const DifferenceRun& run : runs) accumulate_difference_bf16(run.a, run.b, run.count, sums, stream);
  double host[3];
  WEFT_CUDA_CHECK(cudaMemcpyAsync(host, sums, sizeof host, cudaMemcpyDeviceToHost, stream));
  WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host[2] > 0) return INFINITY;
  return host[1] > 0 ? std::sqrt(host[0] / host[1]) : std::sqrt(host[0]);
}

double relative_difference(const void* a, const void* b, int64_t count, double* sums, cudaStream_t stream) {
  return relative_difference({DifferenceRun{a, b, count}}, sums, stream);
}

double run_against_device_result(CudaExecutor& exec, const DeviceRegion& want, double* sums, cudaStream_t stream,
                                 const std::string& what) {
  const DeviceRegion got = exec.output();
  fill_u16(got.data, got.rows * got.stride, kBf16Nan, stream);
  exec.run(stream);
  finish_or_explain(exec, stream, what);
  return relative_difference(got.data, want.data, got.rows * got.cols, sums, stream);
}

std::vector<std::unique_ptr<Communicator>> benchmark_ranks(int world) {
  if (!launched_one_rank_per_process()) return first_gpus(world);
  std::vector<std::unique_ptr<Communicator>> mine;
  mine.push_back(Communicator::from_environment());
  if (mine.front()->world_size() != world)
    throw std::invalid_argument("world size " + std::to_string(world) + " asked for, but this process is one of " +
                                std::to_string(mine.front()->world_size()) + " ranks its launcher started: give that world size alone");
  return mine;
}

std::vector<std::unique_ptr<Communicator>> first_gpus(int world) {
  std::vector<int> devices(static_cast<size_t>(world));
  for (int d = 0; d < world; ++d) devices[static_cast<size_t>(d)] = d;
  return Communicator::local_group(devices);
}

double slowest_rank_median_ms(const std::vector<std::unique_ptr<Communicator>>& group, const Plan& plan, uint64_t seed, int warmup,
                              int iterations, const std::string& what) {
  std::vector<double> ms(group.size(), 0.0);
  std::barrier sync(static_cast<std::ptrdiff_t>(group.size()));
  for_each_rank(group, [&](Communicator& comm) {
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    {
      CudaExecutor exec(comm, plan, ExecutorOptions{.validate = false});
      fill_buffers(exec, comm.rank(), seed, stream);
      ms[static_cast<size_t>(comm.rank())] = median_call_ms(
          comm, [&] { sync.arrive_and_wait(); }, stream, warmup, iterations, [&](cudaStream_t s) { exec.run(s); },
          [&] { finish_or_explain(exec, stream, what); });
    }
    cudaStreamDestroy(stream);
  });
  return *std::max_element(ms.begin(), ms.end());
}

}  // namespace weft::bench
