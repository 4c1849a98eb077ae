// A plain tile table (every tile at its own place in one output box, no waits or notifies) is what
// one library GEMM computes: it runs on cuBLASLt, with descriptors and algorithm chosen once. FP8
// operands go through cuBLASLt's FP8 matmul with their scales (ir/scaling.hpp): tensor scales as
// scalars, row scales as outer vectors, block scales as 1x128 (A) and 128x128 (B) blocks.
#include <memory>
#include <vector>

#include "lowering.hpp"
#include "weft/cuda/check.hpp"

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
  // FP8 operands whose scale pointers each enqueue sets again (empty otherwise: set once at
  // lowering): a caller's buffer, whose scales move with the bindings, or row scales staged below.
  std::optional<BoundScales> per_call_a_scales, per_call_b_scales;
  // cuBLASLt refuses an outer-vector (row) scale pointer that is not 16-byte aligned (NOT_SUPPORTED
  // at the matmul): a GEMM over a chunk of rows that starts at a row not a multiple of 4 (decomposed
  // gemm_ar at world 4 with 200 rows: chunks of 50). Such scales are copied into an aligned buffer
  // of the step's own before each matmul: [0] the weight's (B), [1] the activation's (A).
  std::shared_ptr<void> staged_scales[2];
  ~Descriptors() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    for (auto* l : {weight, activation, out})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
};

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    case DType::f32: return CUDA_R_32F;
    case DType::e4m3: return CUDA_R_8F_E4M3;
    case DType::e5m2: return CUDA_R_8F_E5M2;
    case DType::i32: break;  // indices: no GEMM reads them (the structure check)
  }
  throw std::invalid_argument("the library GEMM has no " + std::string(to_string(dtype)) + " operands");
}

// cuBLASLt's scale mode for an operand's scales.
int32_t scale_mode(const ScaleGrid& grid) {
  if (grid.block_cols == 0) return grid.block_rows == 1 ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F : CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  return grid.block_rows == 1 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
}


bool needs_staging(const BoundScales& s, const std::string& label, const char* operand) {
  return is_row_scaled(s.grid) && reinterpret_cast<uintptr_t>(scales_from(s, label, operand)) % 16 != 0;
}

// The scale pointer cuBLASLt is given: the scales where they lie, or, where they are row scales not
// 16-byte aligned, the step's aligned copy of them, made on `stream` (none at lowering: each
// enqueue copies them again, as the scales change between calls).
const float* pass_scales(Descriptors& d, int which, const BoundScales& s, const std::string& label, const char* operand, cudaStream_t stream) {
  const float* where = scales_from(s, label, operand);
  if (!is_row_scaled(s.grid) || reinterpret_cast<uintptr_t>(where) % 16 == 0) return where;
  const size_t bytes = static_cast<size_t>(s.elements.rows) * sizeof(float);
  if (!d.staged_scales[which]) {
    // Allocated at lowering, never while a call is enqueued (or captured): a pointer's alignment
    // mod 16 follows from its first row, bound pointers being 16-byte aligned.
    if (stream != nullptr)
      throw std::logic_error("CudaExecutor: GEMM step '" + label + "': " + operand + "'s row scales became misaligned after lowering");
    d.staged_scales[which] = upload(std::vector<float>(static_cast<size_t>(s.elements.rows), 0.0f).data(), bytes);
  }
  auto* staged = static_cast<float*>(d.staged_scales[which].get());
  if (stream != nullptr) WEFT_CUDA_CHECK(cudaMemcpyAsync(staged, where, bytes, cudaMemcpyDeviceToDevice, stream));
  return staged;
}

// Row-major C = A B^T runs as column-major C^T = B A^T: cuBLASLt's A is our B (the weight), its B
// our A, so the scale pointers cross over. `stream`: an enqueue's (staged row scales are copied on
// it), or null at lowering.
void set_scale_pointers(Descriptors& d, const BoundScales& a, const BoundScales& b, const std::string& label, cudaStream_t stream) {
  const float* weight_scales = pass_scales(d, 0, b, label, "B", stream);
  const float* activation_scales = pass_scales(d, 1, a, label, "A", stream);
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &weight_scales, sizeof weight_scales));
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &activation_scales, sizeof activation_scales));
}

void set_fp8(Descriptors& d, const GemmStep& gemm, const std::string& label, const Context& context) {
  const std::optional<BoundScales> a = context.scales(gemm.a), b = context.scales(gemm.b);
  if (!a || !b) throw std::invalid_argument("CudaExecutor: GEMM step '" + label + "' multiplies FP8 by a matrix that is not FP8");
  const int32_t weight_mode = scale_mode(b->grid), activation_mode = scale_mode(a->grid);
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &weight_mode, sizeof weight_mode));
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &activation_mode, sizeof activation_mode));
  set_scale_pointers(d, *a, *b, label, nullptr);
  if (a->scale_base || b->scale_base || needs_staging(*a, label, "A") || needs_staging(*b, label, "B")) {
    d.per_call_a_scales = a;
    d.per_call_b_scales = b;
  }
  // Fast accumulation skips the periodic promotion of partial sums to fp32: off unless asked, and
  // never with block scales (cuBLASLt runs those only with it off).
  const bool block = a->grid.block_cols > 0;
  if (context.fp8_fast_accumulation && block)
    throw std::invalid_argument("CudaExecutor: GEMM step '" + label + "': block-scaled FP8 runs without fast accumulation "
                                "(ExecutorOptions::fp8_fast_accumulation)");
  const int8_t fast = context.fp8_fast_accumulation ? 1 : 0;
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
}

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
  if (is_fp8(a.dtype) && b.column_major)
    throw std::invalid_argument("CudaExecutor: GEMM step '" + label + "' multiplies an FP8 B stored [K,N] (layout kn); cuBLASLt's FP8 matmul "
                                "takes B as [N,K] row-major only (TN): give B row-major [N,K]");
  WEFT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d->weight, cuda_type(b.dtype), b.column_major ? n : k, b.column_major ? k : n, b.stride));
  WEFT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d->activation, cuda_type(a.dtype), k, m, a.stride));
  WEFT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d->out, cuda_type(c.dtype), n, m, c.stride));
  if (is_fp8(a.dtype)) set_fp8(*d, gemm, label, context);
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
                                ", " + std::string(to_string(a.dtype)) + " x " + std::string(to_string(b.dtype)) + " -> " +
                                std::string(to_string(c.dtype)) + "); check K and N alignment (multiples of 8 elements; FP8: of 16, "
                                "and block scales need a cuBLASLt with Hopper block scaling, 12.9 or later)");
  d->algo = found.algo;
  // 1 where the GEMM adds to C. The warm-up uses the same: cuBLASLt runs another kernel for beta 0,
  // and the first use of a kernel loads its library (see CudaExecutor::load_gemm_kernels).
  const float beta = gemm.accumulate ? 1.0f : 0.0f;
  cublasLtHandle_t lt = context.lt;
  void* ws = context.gemm_workspace;
  const size_t ws_bytes = context.gemm_workspace_bytes;
  auto enqueue = [d, a, b, c, beta, lt, ws, ws_bytes, label](cudaStream_t stream) {
    const float one = 1.0f;
    if (d->per_call_a_scales) set_scale_pointers(*d, *d->per_call_a_scales, *d->per_call_b_scales, label, stream);
    const DeviceRegion ra = a.resolve(), rb = b.resolve(), rc = c.resolve();
    WEFT_CUBLAS_CHECK(cublasLtMatmul(lt, d->desc, &one, rb.data, d->weight, ra.data, d->activation, &beta, rc.data, d->out, rc.data,
                                     d->out, &d->algo, ws, ws_bytes, stream));
  };
  return {enqueue, enqueue};
}

Lowered lower_gemm(const GemmStep& gemm, const std::string& label, const Context& context) {
  if (gemm.routed) return lower_routed_gemm(gemm, label, context);
  if (gemm.tiles.empty()) return {};
  if (!is_plain_tile_table(gemm) || context.plain_gemm_on_overlap) return lower_overlap_gemm(gemm, label, context);
  return lower_library_gemm(gemm, label, context);
}

}  // namespace weft::lowering
