// A plain tile table (every tile at its own place in one output box, no waits or notifies) is what
// one library GEMM computes: it runs on cuBLASLt, with descriptors and algorithm chosen once.
#include <memory>

#include "lowering.hpp"
#include "weft/runtime/cuda_check.hpp"

namespace weft::lowering {

namespace {

// The alignment cuBLASLt may assume of an operand: its current one, or for a caller's buffer,
// which may move, the 16 bytes bind() requires of every caller pointer.
uint32_t alignment_of(const BoundRegion& r) {
  if (r.moves) return 16;
  const auto address = reinterpret_cast<uintptr_t>(r.resolve().data);
  uint32_t alignment = 256;
  while (alignment > 2 && address % alignment != 0) alignment /= 2;
  return alignment;
}

struct Descriptors {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t weight = nullptr, activation = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Descriptors() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    for (auto* l : {weight, activation, out})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
};

}  // namespace

Lowered lower_library_gemm(const GemmStep& gemm, const std::string& label, const Context& context) {
  if (gemm.tiles.empty()) return {};
  const GemmTile& first = gemm.tiles.front();
  Region c_region = first.store;
  c_region.box = {first.store.box.row - first.tile.row, first.store.box.col - first.tile.col, gemm.a.box.rows, gemm.b.box.rows};
  const BoundRegion a = context.region(gemm.a), b = context.region(gemm.b), c = context.region(c_region);
  const auto m = static_cast<uint64_t>(a.rows), n = static_cast<uint64_t>(b.rows), k = static_cast<uint64_t>(a.cols);
  auto d = std::make_shared<Descriptors>();
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Row-major C[M,N] = A[M,K] B[N,K]^T is column-major C^T[N,M] = op(W)[N,K] * A^T[K,M], where W is
  // B's memory read column-major: B row-major [N,K] is a column-major [K,N] (transposed: op T); B
  // in layout kn, row-major [K,N] (a column-major buffer of the plan), is a column-major [N,K]
  // already (op N). No copy either way.
  const cublasOperation_t transa = b.column_major ? CUBLAS_OP_N : CUBLAS_OP_T, keep = CUBLAS_OP_N;
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d->desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep));
  if (b.column_major) WEFT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d->weight, CUDA_R_16BF, n, k, b.stride));
  else WEFT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d->weight, CUDA_R_16BF, k, n, b.stride));
  WEFT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d->activation, CUDA_R_16BF, k, m, a.stride));
  WEFT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d->out, CUDA_R_16BF, n, m, c.stride));
  cublasLtMatmulPreference_t pref;
  WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace = context.gemm_workspace_bytes;
  WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
  const uint32_t align_a = alignment_of(b), align_b = alignment_of(a), align_c = alignment_of(c);
  WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a));
  WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b));
  WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c));
  WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof align_c));
  cublasLtMatmulHeuristicResult_t found{};
  int count = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(context.lt, d->desc, d->weight, d->activation, d->out, d->out, pref, 1,
                                                                &found, &count);
  cublasLtMatmulPreferenceDestroy(pref);
  if (status != CUBLAS_STATUS_SUCCESS || count == 0)
    throw std::invalid_argument("CudaExecutor: cuBLASLt has no algorithm for GEMM step '" + label + "' (m=" + std::to_string(m) +
                                " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                                "); check K and N alignment (multiples of 8 elements)");
  d->algo = found.algo;
  // 1 where the GEMM adds to C. The warm-up uses the same: cuBLASLt runs another kernel for beta 0,
  // and the first use of a kernel loads its library (see CudaExecutor::load_gemm_kernels).
  const float beta = gemm.accumulate ? 1.0f : 0.0f;
  cublasLtHandle_t lt = context.lt;
  void* ws = context.gemm_workspace;
  const size_t ws_bytes = context.gemm_workspace_bytes;
  auto enqueue = [d, a, b, c, beta, lt, ws, ws_bytes](cudaStream_t stream) {
    const float one = 1.0f;
    const DeviceRegion ra = a.resolve(), rb = b.resolve(), rc = c.resolve();
    WEFT_CUBLAS_CHECK(cublasLtMatmul(lt, d->desc, &one, rb.data, d->weight, ra.data, d->activation, &beta, rc.data, d->out, rc.data,
                                     d->out, &d->algo, ws, ws_bytes, stream));
  };
  return {enqueue, enqueue};
}

Lowered lower_gemm(const GemmStep& gemm, const std::string& label, const Context& context) {
  if (gemm.tiles.empty()) return {};
  if (!is_plain_tile_table(gemm) || context.plain_gemm_on_overlap) return lower_overlap_gemm(gemm, label, context);
  return lower_library_gemm(gemm, label, context);
}

}  // namespace weft::lowering
