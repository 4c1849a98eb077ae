// A tensor-parallel MLP step with weft on buffers of its own:
//   y = gather(x) * W1^T     ag_gemm: x is this rank's token shard [t, H], W1 its [F/W, H] shard
//   z = reduce_scatter(y * W2^T)   gemm_rs: W2 this rank's [H, F/W] shard, z this rank's [t, H]
// for token counts that change from call to call. Every result is checked against the same step
// run by the `sequential` strategy (cuBLAS, then NCCL) and, at world 1, against the host.
//
//   ./tp_mlp                                                   world 1 on GPU 0
//   torchrun --standalone --nproc_per_node=2 --no-python ./tp_mlp
#include <cuda_runtime_api.h>
#include <weft/weft.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr int64_t kHidden = 512, kFfn = 1024, kMaxTokensPerRank = 128;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "tp_mlp: %s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);  // round to nearest even
}

float from_bf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// A device buffer of bf16 values.
struct Matrix {
  int64_t rows = 0, cols = 0;
  void* data = nullptr;
  Matrix(int64_t r, int64_t c) : rows(r), cols(c) { check(cudaMalloc(&data, static_cast<size_t>(r * c) * 2), "cudaMalloc"); }
  ~Matrix() { cudaFree(data); }
  Matrix(const Matrix&) = delete;
  Matrix& operator=(const Matrix&) = delete;
  std::vector<uint16_t> random(uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<uint16_t> host(static_cast<size_t>(rows * cols));
    for (uint16_t& v : host) v = to_bf16(uniform(rng));
    check(cudaMemcpy(data, host.data(), host.size() * 2, cudaMemcpyHostToDevice), "upload");
    return host;
  }
  std::vector<uint16_t> download(int64_t used_rows) const {
    std::vector<uint16_t> host(static_cast<size_t>(used_rows * cols));
    check(cudaMemcpy(host.data(), data, host.size() * 2, cudaMemcpyDeviceToHost), "download");
    return host;
  }
};

// ||got - want|| / ||want||.
double relative_error(const std::vector<uint16_t>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = from_bf16(got[i]);
    if (std::isnan(g)) return INFINITY;
    diff += (g - want[i]) * (g - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

std::vector<double> as_double(const std::vector<uint16_t>& v) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = from_bf16(v[i]);
  return d;
}

// c [m, n] = a [m, k] * b [n, k]^T on the host; the result rounded to bf16 like the GPU's.
std::vector<uint16_t> host_gemm(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int64_t m, int64_t n, int64_t k) {
  std::vector<uint16_t> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += static_cast<double>(from_bf16(a[i * k + p])) * from_bf16(b[j * k + p]);
      c[i * n + j] = to_bf16(static_cast<float>(sum));
    }
  return c;
}

}  // namespace

int main() {
  weft::configure_cuda_for_waits();
  try {
    std::unique_ptr<weft::Communicator> comm;
    if (std::getenv("WORLD_SIZE")) comm = weft::Communicator::from_environment();
    else comm = std::move(weft::Communicator::local_group({0}).front());
    const int world = comm->world_size(), rank = comm->rank();
    check(cudaSetDevice(comm->device()), "cudaSetDevice");
    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

    const int64_t ffn = kFfn / world;
    // One op per projection, made once; the strategy is the library's default.
    weft::Op up(*comm, {.op = weft::OpKind::ag_gemm, .n = ffn, .k = kHidden, .max_rows = kMaxTokensPerRank});
    weft::Op down(*comm, {.op = weft::OpKind::gemm_rs, .n = kHidden, .k = ffn, .max_rows = world * kMaxTokensPerRank});
    // The same step by cuBLAS + NCCL, to check against.
    weft::Op up_plain(*comm, {.op = weft::OpKind::ag_gemm, .n = ffn, .k = kHidden, .max_rows = kMaxTokensPerRank, .strategy = "sequential"});
    weft::Op down_plain(*comm, {.op = weft::OpKind::gemm_rs, .n = kHidden, .k = ffn, .max_rows = world * kMaxTokensPerRank,
                                .strategy = "sequential"});
    if (rank == 0)
      std::printf("tp_mlp: world %d, hidden %lld, ffn %lld; up: %s, down: %s\n", world, static_cast<long long>(kHidden),
                  static_cast<long long>(kFfn), up.strategy().c_str(), down.strategy().c_str());

    Matrix x(kMaxTokensPerRank, kHidden), w1(ffn, kHidden), w2(kHidden, ffn);
    Matrix y(world * kMaxTokensPerRank, ffn), z(kMaxTokensPerRank, kHidden);
    Matrix y_plain(world * kMaxTokensPerRank, ffn), z_plain(kMaxTokensPerRank, kHidden);
    const std::vector<uint16_t> w1_host = w1.random(1000 + static_cast<uint64_t>(rank));
    const std::vector<uint16_t> w2_host = w2.random(2000 + static_cast<uint64_t>(rank));
    int failures = 0;
    int call = 0;
    for (int64_t tokens : {int64_t{128}, int64_t{64}, int64_t{72}, int64_t{128}, int64_t{8}}) {  // per rank, per call
      const std::vector<uint16_t> x_host = x.random(static_cast<uint64_t>(call) * 100 + static_cast<uint64_t>(rank));
      up.run({.a = x.data, .b = w1.data, .c = y.data, .rows = tokens}, stream);
      down.run({.a = y.data, .b = w2.data, .c = z.data, .rows = world * tokens}, stream);
      up_plain.run({.a = x.data, .b = w1.data, .c = y_plain.data, .rows = tokens}, stream);
      down_plain.run({.a = y_plain.data, .b = w2.data, .c = z_plain.data, .rows = world * tokens}, stream);
      up.finish(stream);
      down.finish(stream);
      down_plain.finish(stream);
      const std::vector<uint16_t> got = z.download(tokens);
      double error = relative_error(got, as_double(z_plain.download(tokens)));
      if (world == 1)  // the whole step on the host
        error = std::max(error, relative_error(got, as_double(host_gemm(host_gemm(x_host, w1_host, tokens, ffn, kHidden), w2_host, tokens,
                                                                             kHidden, ffn))));
      const bool ok = error < 2e-2;
      failures += !ok;
      std::printf("tp_mlp: rank %d, %lld tokens per rank: relative error %.2e %s\n", rank, static_cast<long long>(tokens), error,
                  ok ? "ok" : "MISMATCH");
      ++call;
    }
    cudaStreamDestroy(stream);
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tp_mlp: %s\n", e.what());
    return 2;
  }
}
