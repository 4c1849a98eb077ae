// How weft measures, in one place (the `weft` tool and the GPU tests use it): fills that never leave
// a buffer at zero, a bounded finish that explains a hang instead of hanging, timing by CUDA events
// (median over iterations, a barrier before each, the slowest rank; variants interleaved; a
// device-side queue-ahead, so that the events time the device's work and not the host's enqueue,
// which has its own column), and a device-side relative difference for results too large to copy
// to the host.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "launcher.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/runtime/cuda_executor.hpp"

namespace weft::bench {

// Device memory freed on scope exit (at least 16 bytes, so that an empty buffer is still a pointer).
struct DeviceBuffer {
  void* data = nullptr;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return data; }
  template <class T = void>
  T* as() const { return static_cast<T*>(data); }
};

// Inputs get the same random values in every executor of a rank for a seed (so results are
// comparable); scratch gets random values too, so nothing is ever timed on zeros; outputs are
// poisoned (NaN), so an element nobody writes shows.
void fill_buffers(CudaExecutor& exec, int rank, uint64_t seed, cudaStream_t stream);
// Returns once `stream` is done and raises what the executor's device-side waits recorded
// (DeviceWaitTimeout); after WEFT_COLLECTIVE_TIMEOUT_S prints the executor's diagnosis and ends the
// process (device work is stuck: unwinding would block in CUDA teardown).
void finish_or_explain(CudaExecutor& exec, cudaStream_t stream, const std::string& what);
double median(std::vector<double> values);
// Keeps `stream` busy for about `microseconds` (a one-thread kernel reading the global timer).
void device_sleep(cudaStream_t stream, double microseconds);
// Ranks on GPUs 0 .. world-1 of this process, one communicator each.
std::vector<std::unique_ptr<Communicator>> first_gpus(int world);
// The ranks a benchmark drives from this process: with launched_one_rank_per_process(), this
// process's rank alone (Communicator::from_environment; `world` must be the launcher's); otherwise
// first_gpus(world), a thread each.
std::vector<std::unique_ptr<Communicator>> benchmark_ranks(int world);

// `plan` alone on every rank of `group` (buffers filled from `seed`, not validated again), timed as
// median_call_ms says; the slowest rank's median. `what` names it if it hangs.
double slowest_rank_median_ms(const std::vector<std::unique_ptr<Communicator>>& group, const Plan& plan, uint64_t seed, int warmup,
                              int iterations, const std::string& what);
// One rank's timing of a call: per iteration the rank threads meet (`ranks_meet`), a device barrier
// on `stream`, a queue-ahead (device_sleep: 200 us in the warm-up, then twice the warm-up's median
// host enqueue plus 20 us, the largest of every rank's: every device then starts the call at once,
// with all of it queued), CUDA events around `enqueue(stream)`, then `finish()`; the
// median of `iterations` after `warmup`. Every rank calls it together.
double median_call_ms(Communicator& comm, const std::function<void()>& ranks_meet, cudaStream_t stream, int warmup, int iterations,
                      const std::function<void(cudaStream_t)>& enqueue, const std::function<void()>& finish);
// The same for several variants, interleaved as interleaved_median_ms says: one median per variant.
// `finish(v)` returns once variant v's work on `stream` is done. host_us (if given) gets each
// variant's median host time to enqueue a call, in microseconds.
std::vector<double> interleaved_call_medians_ms(Communicator& comm, const std::function<void()>& ranks_meet, cudaStream_t stream, int warmup,
                                                int iterations, const std::vector<std::function<void(cudaStream_t)>>& variants,
                                                const std::function<void(size_t)>& finish, std::vector<double>* host_us = nullptr);
// Each variant's host time to enqueue a call in a loop's steady state, in microseconds: per burst
// the ranks meet (`ranks_meet`), a device barrier on `stream`, then `calls` calls back to back
// while the GPU still runs the ones before, then `finish(v)`; the median, over `bursts` bursts,
// of every call but the first (which pays for the host waking from the wait before it: the
// per-iteration figure of interleaved_call_medians_ms). Every rank calls it together.
std::vector<double> back_to_back_host_us(Communicator& comm, const std::function<void()>& ranks_meet, cudaStream_t stream,
                                         const std::vector<std::function<void(cudaStream_t)>>& variants,
                                         const std::function<void(size_t)>& finish, int bursts = 5, int calls = 4);
// Median time of each variant on one GPU, no barrier. Iterations visit the variants in turn, so that clock and
// power drift over a long measurement reaches all of them alike instead of whichever runs last;
// iteration i starts at variant i % count, so that no variant always runs right after the same
// one (the GPU idles between calls, and what ran before sets the clocks a call starts at).
// `finish(v)` returns once variant v's work on `stream` is done (a bounded wait that explains a hang).
// `before_each(stream)`, if given, runs before every timed call, outside the events (an L2 flush),
// then the queue-ahead median_call_ms describes.
std::vector<double> interleaved_median_ms(const std::vector<std::function<void(cudaStream_t)>>& variants, cudaStream_t stream, int warmup,
                                          int iterations, const std::function<void(size_t)>& finish,
                                          const std::function<void(cudaStream_t)>& before_each = {});
// sqrt(sum (a-b)^2 / sum b^2) over `count` contiguous bf16 elements, infinite when `a` holds a NaN.
// `sums` is 3 doubles of device memory; the stream is synchronized.
double relative_difference(const void* a, const void* b, int64_t count, double* sums, cudaStream_t stream);
// The same, accumulated over several (a, b, count) runs.
struct DifferenceRun {
  const void* a;
  const void* b;
  int64_t count;
};
double relative_difference(const std::vector<DifferenceRun>& runs, double* sums, cudaStream_t stream);
// Poisons exec's output, runs it once (finish_or_explain names `what` on a hang) and returns the
// relative difference of its output to `want` on the device. Outputs are whole-width row blocks.
double run_against_device_result(CudaExecutor& exec, const DeviceRegion& want, double* sums, cudaStream_t stream,
                                 const std::string& what);

}  // namespace weft::bench
