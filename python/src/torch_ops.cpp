#include "torch_ops.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "torch_shim.hpp"
#include "weft/ir/problem.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/runtime/communicator.hpp"
#include "weft/runtime/attention_op.hpp"
#include "weft/runtime/op.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace weft::python {

namespace {

void shim_check(ShimError error, const char* what) {
  if (error != 0) throw std::runtime_error(std::string("weft.torch: PyTorch's ") + what + " failed (error " + std::to_string(error) + ")");
}

// A tensor argument: the dispatcher hands each kernel a handle of its own, which the kernel frees.
class Tensor {
 public:
  explicit Tensor(StableIValue value) { std::memcpy(&handle_, &value, sizeof handle_); }
  ~Tensor() {
    if (handle_) (void)torch_shim().delete_tensor_object(handle_);
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  int64_t dim() const {
    int64_t d = 0;
    shim_check(torch_shim().get_dim(handle_, &d), "aoti_torch_get_dim");
    return d;
  }
  const int64_t* sizes() const {
    int64_t* s = nullptr;
    shim_check(torch_shim().get_sizes(handle_, &s), "aoti_torch_get_sizes");
    return s;
  }
  const int64_t* strides() const {
    int64_t* s = nullptr;
    shim_check(torch_shim().get_strides(handle_, &s), "aoti_torch_get_strides");
    return s;
  }
  int32_t dtype() const {
    int32_t t = 0;
    shim_check(torch_shim().get_dtype(handle_, &t), "aoti_torch_get_dtype");
    return t;
  }
  int32_t device_type() const {
    int32_t t = 0;
    shim_check(torch_shim().get_device_type(handle_, &t), "aoti_torch_get_device_type");
    return t;
  }
  int32_t device_index() const {
    int32_t i = 0;
    shim_check(torch_shim().get_device_index(handle_, &i), "aoti_torch_get_device_index");
    return i;
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t i = 0; i < dim(); ++i) n *= sizes()[i];
    return n;
  }
  // Its elements one after another (any strides of size-1 dimensions).
  bool dense() const {
    int64_t expected = 1;
    for (int64_t i = dim() - 1; i >= 0; --i) {
      if (sizes()[i] != 1 && strides()[i] != expected) return false;
      expected *= sizes()[i];
    }
    return true;
  }
  void* data() const {
    void* p = nullptr;
    shim_check(torch_shim().get_data_ptr(handle_, &p), "aoti_torch_get_data_ptr");
    return p;
  }

 private:
  TensorHandle handle_ = nullptr;
};

// The dtypes of a call: bf16 -> bf16, or FP8 A and B with their scaling mode -> bf16 or f32.
struct CallDtypes {
  DType a = DType::bf16, b = DType::bf16, out = DType::bf16;
  Scaling scaling = Scaling::none;
  bool operator==(const CallDtypes&) const = default;
};

struct OpKey {
  OpKind kind;
  BLayout b_layout;
  int64_t n, k, strategy, max_rows;
  CallDtypes dtypes;
  int experts = 0, topk = 0;  // the MoE ops'
  bool routing_on_device = false;  // the MoE ops', with the choices a GPU tensor
  bool operator==(const OpKey&) const = default;
};
struct OpKeyHash {
  size_t operator()(const OpKey& key) const {
    size_t h = (static_cast<size_t>(key.kind) * 2 + static_cast<size_t>(key.b_layout)) * 2 + key.routing_on_device;
    for (int v : {static_cast<int>(key.dtypes.a), static_cast<int>(key.dtypes.b), static_cast<int>(key.dtypes.out),
                  static_cast<int>(key.dtypes.scaling)})
      h = h * 31u + static_cast<size_t>(v);
    for (int64_t v : {key.n, key.k, key.strategy, key.max_rows, int64_t{key.experts}, int64_t{key.topk}}) h = h * 1000003u ^ std::hash<int64_t>{}(v);
    return h;
  }
};

// The communicator weft.torch.init made and the ops made for it, one per (op, B layout, n, k,
// strategy, row bucket): symmetric memory is allocated once per shape family. Ops live as long as the process:
// never destroyed, so that no op frees device memory or meets its peers while the process exits.
// ag_attention's ops, one per (shape, causal, strategy, token bucket).
struct AttentionKey {
  int batch, heads, kv_heads, head_dim;
  bool causal;
  int64_t strategy, max_tokens;
  bool operator==(const AttentionKey&) const = default;
};
struct AttentionKeyHash {
  size_t operator()(const AttentionKey& key) const {
    size_t h = key.causal ? 1 : 2;
    for (int64_t v : {int64_t{key.batch}, int64_t{key.heads}, int64_t{key.kv_heads}, int64_t{key.head_dim}, key.strategy, key.max_tokens})
      h = h * 1000003u ^ std::hash<int64_t>{}(v);
    return h;
  }
};

struct State {
  Communicator* comm = nullptr;
  nb::object comm_owner;  // keeps the Python communicator (and so comm) alive
  std::unordered_map<OpKey, std::unique_ptr<Op>, OpKeyHash> ops;
  std::unordered_map<AttentionKey, std::unique_ptr<AttentionOp>, AttentionKeyHash> attention_ops;
  LibraryHandle library = nullptr;
};
State& state() {
  static State* s = new State;
  return *s;
}

// torch.ops.weft.* take the strategy as an int (the dispatcher's stable ABI carries no strings): 0 is
// "default", i is strategies()[i - 1]. weft.torch.strategy_id(name) gives it.
std::string strategy_name(const char* op, int64_t id) {
  const auto& all = strategies();
  if (id == 0) return "default";
  if (id < 0 || id > static_cast<int64_t>(all.size()))
    throw std::invalid_argument(std::string("weft.") + op + ": strategy id " + std::to_string(id) + " is not one of 0.." +
                                std::to_string(all.size()) + " (use weft.torch.strategy_id(name))");
  return all[static_cast<size_t>(id - 1)].name;
}

int64_t max_rows_bucket(OpKind op, int64_t rows, int world) {
  // The next power of two (for gemm_rs, of the rows per rank, times the world): a few ops cover
  // every row count a model calls with.
  const int64_t per_rank = op == OpKind::gemm_rs ? (rows + world - 1) / world : rows;
  int64_t bucket = 1;
  while (bucket < per_rank) bucket *= 2;
  return op == OpKind::gemm_rs ? bucket * world : bucket;
}

Communicator& communicator() {
  if (!state().comm) throw std::runtime_error("weft.torch.init() has not been called");
  return *state().comm;
}

// The weft dtype of a torch dtype code weft takes (bfloat16, float32, float8_e4m3fn, float8_e5m2).
std::optional<DType> weft_dtype(int32_t code) {
  const TorchShim& shim = torch_shim();
  if (code == shim.dtype_bfloat16()) return DType::bf16;
  if (code == shim.dtype_float32()) return DType::f32;
  if (code == shim.dtype_float8_e4m3fn()) return DType::e4m3;
  if (code == shim.dtype_float8_e5m2()) return DType::e5m2;
  return std::nullopt;
}

std::string torch_name(DType dtype) {
  switch (dtype) {
    case DType::bf16: return "torch.bfloat16";
    case DType::f32: return "torch.float32";
    case DType::e4m3: return "torch.float8_e4m3fn";
    case DType::e5m2: return "torch.float8_e5m2";
    case DType::i32: return "torch.int32";
    default: return std::string(to_string(dtype));
  }
}

// dtype (`expected`: bf16, or where the call is FP8 the operand's FP8 dtype) and device.
void check_placement(const char* op, const char* name, const Tensor& t, const Communicator& comm, DType expected = DType::bf16) {
  const TorchShim& shim = torch_shim();
  const std::optional<DType> got = weft_dtype(t.dtype());
  const bool fp8_call = is_fp8(expected);
  if (fp8_call ? !(got && is_fp8(*got)) : got != expected)
    throw std::invalid_argument(std::string("weft.") + op + ": " + name + " is " + (got ? torch_name(*got) : "dtype code " + std::to_string(t.dtype())) +
                                (fp8_call ? "; A is FP8 here, so " + std::string(name) + " must be torch.float8_e4m3fn or torch.float8_e5m2"
                                          : "; weft's ops take torch.bfloat16 (or FP8 A and B, float8_e4m3fn / float8_e5m2, with scale_a and "
                                            "scale_b)"));
  if (t.device_type() != shim.device_type_cuda() || t.device_index() != comm.device())
    throw std::invalid_argument(std::string("weft.") + op + ": " + name + " is not on cuda:" + std::to_string(comm.device()) +
                                ", weft's communicator's GPU");
}

void check_aligned(const char* op, const char* name, const Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data()) % 16)
    throw std::invalid_argument(std::string("weft.") + op + ": " + name +
                                " does not start on a 16-byte boundary (a view at an odd offset?); call .contiguous() on a fresh tensor");
}

// A, out: bfloat16 (FP8 calls: A FP8) on the communicator's GPU, row-major contiguous, 16-byte aligned.
void check_operand(const char* op, const char* name, const Tensor& t, const Communicator& comm, DType expected = DType::bf16) {
  check_placement(op, name, t, comm, expected);
  const int64_t* s = t.sizes();
  const int64_t* st = t.strides();
  if (t.dim() != 2 || !((s[1] <= 1 || st[1] == 1) && (s[0] <= 1 || st[0] == s[1])))
    throw std::invalid_argument(std::string("weft.") + op + ": " + name + " must be a row-major contiguous 2-D tensor; call .contiguous()");
  check_aligned(op, name, t);
}

// B [n, k] in either layout the ops take, read from its strides (ir/problem.hpp, BLayout): row-major
// [n, k] (strides (k, 1): a linear layer's weight) is nk; the transpose of a row-major [k, n]
// (strides (1, n): X.t() of a contiguous X, e.g. weight.t()) is kn, which the GEMMs read as it lies.
// A size-1 dimension fits both; it counts as nk. Any other view is refused, not copied.
BLayout b_operand_layout(const char* op, const Tensor& b, const Communicator& comm, DType expected = DType::bf16) {
  check_placement(op, "B", b, comm, expected);
  if (b.dim() != 2) throw std::invalid_argument(std::string("weft.") + op + ": B must be a 2-D tensor [n, k]");
  const int64_t* s = b.sizes();
  const int64_t* st = b.strides();
  const bool row_major = (s[1] <= 1 || st[1] == 1) && (s[0] <= 1 || st[0] == s[1]);
  const bool transposed = (s[0] <= 1 || st[0] == 1) && (s[1] <= 1 || st[1] == s[0]);
  if (!row_major && !transposed)
    throw std::invalid_argument(std::string("weft.") + op + ": B [" + std::to_string(s[0]) + ", " + std::to_string(s[1]) + "] has strides (" +
                                std::to_string(st[0]) + ", " + std::to_string(st[1]) + "); weft takes B row-major [n, k] (strides (k, 1), "
                                "a linear layer's weight) or as X.t() of a contiguous X [k, n] (strides (1, n), e.g. weight.t()): call "
                                ".contiguous()");
  check_aligned(op, "B", b);
  return row_major ? BLayout::nk : BLayout::kn;
}

// A per-call table on the CPU, every rank's row of it: the routed ops' destinations (values ranks,
// `limit` the world size) or the MoE ops' expert choices (values experts).
std::vector<std::vector<int>> host_table(const char* op, const char* name, const char* value_noun, const Tensor& routing, int world, int64_t rows,
                                         int64_t limit) {
  const TorchShim& shim = torch_shim();
  const int32_t dtype = routing.dtype();
  if (routing.device_type() != shim.device_type_cpu() || (dtype != shim.dtype_int32() && dtype != shim.dtype_int64()))
    throw std::invalid_argument(std::string("weft.") + op + ": " + name + " must be an integer tensor on the CPU (every rank's)");
  const int64_t* s = routing.sizes();
  if (routing.dim() != 2 || s[0] != world || s[1] != rows)
    throw std::invalid_argument(std::string("weft.") + op + ": " + name + " must be [world_size, " + (std::string(name) == "routing" ? "rows" : "rows * topk") +
                                "] = [" + std::to_string(world) + ", " + std::to_string(rows) + "]");
  const int64_t* st = routing.strides();
  std::vector<std::vector<int>> table(static_cast<size_t>(world), std::vector<int>(static_cast<size_t>(rows)));
  const char* base = static_cast<const char*>(routing.data());
  const size_t element = dtype == shim.dtype_int32() ? 4 : 8;
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < rows; ++i) {
      const char* at = base + (r * st[0] + i * st[1]) * static_cast<int64_t>(element);
      int64_t v = 0;
      if (element == 4) {
        int32_t v32;
        std::memcpy(&v32, at, 4);
        v = v32;
      } else {
        std::memcpy(&v, at, 8);
      }
      if (v < 0 || v >= limit)
        throw std::invalid_argument(std::string("weft.") + op + ": " + name + "[" + std::to_string(r) + "][" + std::to_string(i) + "] = " +
                                    std::to_string(v) + " is not " + value_noun + " of 0.." + std::to_string(limit - 1));
      table[static_cast<size_t>(r)][static_cast<size_t>(i)] = static_cast<int>(v);
    }
  return table;
}

// An optional argument (T?) off the stack: null for None, else the StableIValue the dispatcher
// allocated, which this takes (and deletes) at once, so that no early refusal leaks it.
std::optional<StableIValue> take_optional(StableIValue value) {
  StableIValue* boxed = nullptr;
  std::memcpy(&boxed, &value, sizeof boxed);
  if (!boxed) return std::nullopt;
  const StableIValue inner = *boxed;
  delete boxed;
  return inner;
}

// The scales of an FP8 call, as torch._scaled_mm takes them: fp32 on the GPU, one element each
// (tensor scaling: a 0-d or 1-element tensor), or one per row of A ([rows] or [rows, 1]) and one per
// row of B [n, k], i.e. per output column ([n] or [1, n]): row scaling. Both the same mode.
Scaling check_scales(const char* op, const Tensor& scale_a, const Tensor& scale_b, int64_t rows, int64_t n, const Communicator& comm) {
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"scale_a", &scale_a}, {"scale_b", &scale_b}}) {
    const std::optional<DType> got = weft_dtype(t->dtype());
    if (got != DType::f32)
      throw std::invalid_argument(std::string("weft.") + op + ": " + name + " is " + (got ? torch_name(*got) : "dtype code " + std::to_string(t->dtype())) +
                                  "; the scales are torch.float32 (dequantization scales, as torch._scaled_mm takes them)");
    if (t->device_type() != torch_shim().device_type_cuda() || t->device_index() != comm.device())
      throw std::invalid_argument(std::string("weft.") + op + ": " + name + " is not on cuda:" + std::to_string(comm.device()) +
                                  ", weft's communicator's GPU");
    if (!t->dense()) throw std::invalid_argument(std::string("weft.") + op + ": " + name + " must be contiguous; call .contiguous()");
    check_aligned(op, name, *t);
  }
  auto shape = [](const Tensor& t) {
    std::string text = "[";
    for (int64_t i = 0; i < t.dim(); ++i) text += (i ? ", " : "") + std::to_string(t.sizes()[i]);
    return text + "]";
  };
  const bool a_row = scale_a.dim() >= 1 && scale_a.dim() <= 2 && scale_a.sizes()[0] == rows && scale_a.numel() == rows && rows > 1;
  const bool b_row = scale_b.dim() >= 1 && scale_b.dim() <= 2 && scale_b.sizes()[scale_b.dim() - 1] == n && scale_b.numel() == n;
  if (b_row) {
    if (!a_row && !(rows == 1 && scale_a.numel() == 1))
      throw std::invalid_argument(std::string("weft.") + op + ": scale_b is one per column (row-wise scaling), so scale_a must be one per row of A: [" +
                                  std::to_string(rows) + ", 1] float32, got " + shape(scale_a));
    return Scaling::row;
  }
  if (scale_b.numel() != 1)
    throw std::invalid_argument(std::string("weft.") + op + ": scale_b must be one float32 (a 0-d or 1-element tensor: tensor-wise scaling) or one per " +
                                "column of the output ([1, " + std::to_string(n) + "]: row-wise), got " + shape(scale_b));
  if (scale_a.numel() != 1)
    throw std::invalid_argument(std::string("weft.") + op + ": scale_b is one float32 (tensor-wise scaling), so scale_a must be one too (a 0-d or "
                                "1-element tensor), got " + shape(scale_a));
  return Scaling::tensor;
}

// The op of this shape family (made the first time: collective).
Op& op_for(OpKind kind, BLayout b_layout, int64_t n, int64_t k, int64_t strategy, int64_t rows, const CallDtypes& dtypes = {}, int experts = 0,
           int topk = 0, bool routing_on_device = false) {
  Communicator& comm = communicator();
  const OpKey key{kind, b_layout, n, k, strategy, max_rows_bucket(kind, rows, comm.world_size()), dtypes, experts, topk, routing_on_device};
  auto& ops = state().ops;
  auto it = ops.find(key);
  if (it == ops.end()) {
    OpSpec spec;
    spec.op = kind;
    spec.n = n;
    spec.k = k;
    spec.b_layout = b_layout;
    spec.max_rows = key.max_rows;
    spec.strategy = strategy_name(to_string(kind).data(), strategy);
    spec.input_dtype = dtypes.a;
    if (dtypes.b != dtypes.a) spec.b_dtype = dtypes.b;
    spec.output_dtype = dtypes.out;
    spec.scaling = dtypes.scaling;
    spec.experts = experts;
    spec.topk = topk;
    spec.routing_on_device = routing_on_device;
    it = ops.emplace(key, std::make_unique<Op>(comm, std::move(spec))).first;
  }
  return *it->second;
}

// One call: stack = [a, b, (routing), (out), strategy, (scale_a?, scale_b?, out_dtype?: `scaled`,
// the plain ag_gemm, gemm_rs and gemm_ar)]; leaves the result (or nothing, for the _into ops, which
// write `out`; with `gathered`, ag_gemm_gathered: the result and gather(a)) on the stack.
void call(OpKind kind, bool into, bool gathered, bool scaled, StableIValue* stack) {
  const char* name = to_string(kind).data();
  Communicator& comm = communicator();
  const bool routed = routes_rows(kind);
  size_t arg = 0;
  Tensor a(stack[arg++]);
  Tensor b(stack[arg++]);
  std::optional<Tensor> routing, out;
  if (routed) routing.emplace(stack[arg++]);
  if (into) out.emplace(stack[arg++]);
  int64_t strategy = 0;
  std::memcpy(&strategy, &stack[arg++], sizeof strategy);
  std::optional<Tensor> scale_a, scale_b;
  std::optional<int32_t> out_dtype_code;
  if (scaled) {
    if (auto v = take_optional(stack[arg++])) scale_a.emplace(*v);
    if (auto v = take_optional(stack[arg++])) scale_b.emplace(*v);
    if (auto v = take_optional(stack[arg++])) {
      int32_t code = 0;
      std::memcpy(&code, &*v, sizeof code);
      out_dtype_code = code;
    }
  }

  // FP8 where A is: then B is FP8 too, both scales are given, and the output is bf16 or f32.
  CallDtypes dtypes;
  if (const std::optional<DType> a_dtype = weft_dtype(a.dtype()); a_dtype && is_fp8(*a_dtype)) {
    dtypes.a = *a_dtype;
    dtypes.b = weft_dtype(b.dtype()).value_or(DType::bf16);
  }
  const bool fp8 = is_fp8(dtypes.a);
  if (!fp8 && (scale_a || scale_b))
    throw std::invalid_argument(std::string("weft.") + name + ": " + (scale_a ? "scale_a" : "scale_b") +
                                " is given, but A is not FP8; the scales are for float8_e4m3fn / float8_e5m2 operands");
  if (fp8 && (!scale_a || !scale_b))
    throw std::invalid_argument(std::string("weft.") + name + ": A is " + torch_name(dtypes.a) + ", so " + (scale_a ? "scale_b" : "scale_a") +
                                " is needed (float32: one element, or one per row of A / per column of the output, as torch._scaled_mm takes them)");
  if (out_dtype_code) {
    const std::optional<DType> out = weft_dtype(*out_dtype_code);
    const bool allowed = fp8 ? (out == DType::bf16 || out == DType::f32) : out == DType::bf16;
    if (!allowed)
      throw std::invalid_argument(std::string("weft.") + name + ": out_dtype " + (out ? torch_name(*out) : "code " + std::to_string(*out_dtype_code)) +
                                  (fp8 ? " is not taken: FP8 products give torch.bfloat16 or torch.float32" : " is not taken: bfloat16 products give torch.bfloat16"));
    dtypes.out = *out;
  }

  check_operand(name, "A", a, comm, dtypes.a);
  const BLayout b_layout = b_operand_layout(name, b, comm, dtypes.a);
  if (fp8 && b_layout != BLayout::nk)
    throw std::invalid_argument(std::string("weft.") + name + ": an FP8 B must be row-major [n, k] (strides (k, 1)), whose .t() is the "
                                "column-major [k, n] operand torch._scaled_mm takes; got B as the transpose of a row-major [k, n]");
  const int64_t rows = a.sizes()[0], k = a.sizes()[1], n = b.sizes()[0];
  if (b.sizes()[1] != k)
    throw std::invalid_argument(std::string("weft.") + name + ": A is [rows, k] and B is [n, k]; A has k=" + std::to_string(k) +
                                ", B has k=" + std::to_string(b.sizes()[1]));
  if (rows < 1 || n < 1 || k < 1) throw std::invalid_argument(std::string("weft.") + name + ": empty operand");
  const int64_t multiple = fp8 ? 16 : 8;
  if (k % multiple || n % multiple)
    throw std::invalid_argument(std::string("weft.") + name + ": n=" + std::to_string(n) + " and k=" + std::to_string(k) + " must be multiples of " +
                                std::to_string(multiple) + " (16-byte rows for the GEMMs)");
  const int world = comm.world_size();
  if (kind == OpKind::gemm_rs && rows % world)
    throw std::invalid_argument("weft.gemm_rs: rows=" + std::to_string(rows) + " must be a multiple of the world size " + std::to_string(world));
  RunArgs args;
  args.rows = rows;
  if (routed) args.routing = host_table(name, "routing", "a rank", *routing, world, rows, world);
  int64_t out_rows = 0;
  switch (kind) {
    case OpKind::ag_gemm: out_rows = world * rows; break;
    case OpKind::gemm_rs: out_rows = rows / world; break;
    case OpKind::gemm_ar: out_rows = rows; break;
    default:
      for (const auto& r : args.routing)
        for (int d : r) out_rows += d == comm.rank();
  }

  if (fp8) {
    dtypes.scaling = check_scales(name, *scale_a, *scale_b, rows, n, comm);
    args.scale_a = static_cast<const float*>(scale_a->data());
    args.scale_b = static_cast<const float*>(scale_b->data());
    args.scale_a_count = scale_a->numel();
    args.scale_b_count = scale_b->numel();
  }

  Op& op = op_for(kind, b_layout, n, k, strategy, rows, dtypes);

  const TorchShim& shim = torch_shim();
  TensorHandle result = nullptr;
  void* c = nullptr;
  if (into) {
    check_operand(name, "out", *out, comm);
    if (out->sizes()[0] != out_rows || out->sizes()[1] != n)
      throw std::invalid_argument(std::string("weft.") + name + ": out must be [" + std::to_string(out_rows) + ", " + std::to_string(n) +
                                  "], got [" + std::to_string(out->sizes()[0]) + ", " + std::to_string(out->sizes()[1]) + "]");
    c = out->data();
  } else {
    const int64_t sizes[2] = {out_rows, n};
    const int64_t strides[2] = {n, 1};
    const int32_t out_code = dtypes.out == DType::f32 ? shim.dtype_float32() : shim.dtype_bfloat16();
    shim_check(shim.empty_strided(2, sizes, strides, out_code, shim.device_type_cuda(), comm.device(), &result), "aoti_torch_empty_strided");
    shim_check(shim.get_data_ptr(result, &c), "aoti_torch_get_data_ptr");
  }
  std::unique_ptr<AtenTensorOpaque, ShimError (*)(TensorHandle)> owned(result, shim.delete_tensor_object);
  // ag_gemm_gathered: gather(a) [W * rows, k], which the call writes as it gathers.
  TensorHandle gathered_result = nullptr;
  void* gathered_a = nullptr;
  if (gathered) {
    const int64_t sizes[2] = {world * rows, k};
    const int64_t strides[2] = {k, 1};
    shim_check(shim.empty_strided(2, sizes, strides, shim.dtype_bfloat16(), shim.device_type_cuda(), comm.device(), &gathered_result),
               "aoti_torch_empty_strided");
    shim_check(shim.get_data_ptr(gathered_result, &gathered_a), "aoti_torch_get_data_ptr");
  }
  std::unique_ptr<AtenTensorOpaque, ShimError (*)(TensorHandle)> owned_gathered(gathered_result, shim.delete_tensor_object);
  void* stream = nullptr;
  shim_check(shim.get_current_cuda_stream(comm.device(), &stream), "aoti_torch_get_current_cuda_stream");
  args.a = a.data();
  args.b = b.data();
  args.c = c;
  args.gathered_a = gathered_a;
  op.run(args, static_cast<cudaStream_t>(stream));
  if (!into) {
    const TensorHandle handed = owned.release();  // the dispatcher owns the results from here
    std::memcpy(&stack[0], &handed, sizeof handed);
  }
  if (gathered) {
    const TensorHandle handed = owned_gathered.release();
    std::memcpy(&stack[1], &handed, sizeof handed);
  }
}

// ag_attention: stack = [q, k, v, causal, strategy]; q [tokens, heads, head_dim] or [tokens, batch,
// heads, head_dim], k and v the same with kv_heads, each bfloat16, row-major contiguous, on weft's
// GPU; leaves o (q's shape) on the stack.
void attention_call(StableIValue* stack) {
  const char* name = "ag_attention";
  Communicator& comm = communicator();
  Tensor q(stack[0]), k(stack[1]), v(stack[2]);
  bool causal = false;
  std::memcpy(&causal, &stack[3], sizeof causal);
  int64_t strategy = 0;
  std::memcpy(&strategy, &stack[4], sizeof strategy);
  for (const auto& [label, t] : {std::pair<const char*, const Tensor*>{"q", &q}, {"k", &k}, {"v", &v}}) {
    check_placement(name, label, *t, comm);
    if (t->dim() != 3 && t->dim() != 4)
      throw std::invalid_argument(std::string("weft.ag_attention: ") + label + " must be [tokens, heads, head_dim] or [tokens, batch, heads, "
                                  "head_dim] (this rank's tokens first: Megatron's sbhd), got a " + std::to_string(t->dim()) + "-D tensor");
    if (!t->dense()) throw std::invalid_argument(std::string("weft.ag_attention: ") + label + " must be contiguous; call .contiguous()");
    check_aligned(name, label, *t);
  }
  auto shape = [](const Tensor& t) {
    std::string text = "[";
    for (int64_t i = 0; i < t.dim(); ++i) text += (i ? ", " : "") + std::to_string(t.sizes()[i]);
    return text + "]";
  };
  const int64_t dims = q.dim();
  const int64_t tokens = q.sizes()[0], batch = dims == 4 ? q.sizes()[1] : 1, heads = q.sizes()[dims - 2], head_dim = q.sizes()[dims - 1];
  const int64_t kv_heads = k.sizes()[k.dim() - 2];
  bool same = k.dim() == dims && v.dim() == dims;
  for (int64_t i = 0; same && i < dims; ++i) {
    const int64_t want = i == dims - 2 ? kv_heads : q.sizes()[i];
    same = k.sizes()[i] == want && v.sizes()[i] == want;
  }
  if (!same)
    throw std::invalid_argument("weft.ag_attention: k and v must be q's shape with kv_heads for heads (q " + shape(q) + ", k " + shape(k) + ", v " +
                                shape(v) + ")");
  if (tokens < 1 || batch < 1 || heads < 1 || kv_heads < 1 || head_dim < 1) throw std::invalid_argument("weft.ag_attention: empty operand");
  int64_t bucket = 1;  // the next power of two: a few ops cover every token count a model calls with
  while (bucket < tokens) bucket *= 2;
  const AttentionKey key{static_cast<int>(batch), static_cast<int>(heads), static_cast<int>(kv_heads), static_cast<int>(head_dim), causal, strategy,
                         bucket};
  auto& ops = state().attention_ops;
  auto it = ops.find(key);
  if (it == ops.end()) {
    AttentionSpec spec;
    spec.shape = AttentionShape{key.batch, key.heads, key.kv_heads, key.head_dim, causal, bucket};
    spec.strategy = strategy_name(name, strategy);
    it = ops.emplace(key, std::make_unique<AttentionOp>(comm, std::move(spec))).first;
  }
  const TorchShim& shim = torch_shim();
  TensorHandle result = nullptr;
  std::vector<int64_t> strides(static_cast<size_t>(dims), 1);
  for (int64_t i = dims - 2; i >= 0; --i) strides[static_cast<size_t>(i)] = strides[static_cast<size_t>(i + 1)] * q.sizes()[i + 1];
  shim_check(shim.empty_strided(dims, q.sizes(), strides.data(), shim.dtype_bfloat16(), shim.device_type_cuda(), comm.device(), &result),
             "aoti_torch_empty_strided");
  std::unique_ptr<AtenTensorOpaque, ShimError (*)(TensorHandle)> owned(result, shim.delete_tensor_object);
  void* o = nullptr;
  shim_check(shim.get_data_ptr(result, &o), "aoti_torch_get_data_ptr");
  void* stream = nullptr;
  shim_check(shim.get_current_cuda_stream(comm.device(), &stream), "aoti_torch_get_current_cuda_stream");
  it->second->run({q.data(), k.data(), v.data(), o, tokens}, static_cast<cudaStream_t>(stream));
  const TensorHandle handed = owned.release();  // the dispatcher owns the result from here
  std::memcpy(&stack[0], &handed, sizeof handed);
}

void boxed_attention(StableIValue* stack, uint64_t, uint64_t) { attention_call(stack); }

// ag_moe: stack = [a, b, choices, experts, strategy]; moe_rs: [a, b, choices, topk_weights, experts,
// strategy]. choices, either: this rank's experts per token [rows, topk] int32 on weft's GPU (the
// router's top-k ids: no host read, one op per row count serves every routing, a call replays in a
// CUDA graph on new choices; OpSpec::routing_on_device), or an integer CPU tensor [W, rows * topk],
// every rank's (the same on every rank; an op plan per table). topk_weights [W * rows, topk] bf16 on
// weft's GPU. Leaves the result.
void moe_call(OpKind kind, StableIValue* stack) {
  const char* name = to_string(kind).data();
  Communicator& comm = communicator();
  const int world = comm.world_size();
  const bool rs = kind == OpKind::moe_rs;
  size_t arg = 0;
  Tensor a(stack[arg++]);
  Tensor b(stack[arg++]);
  Tensor choices(stack[arg++]);
  std::optional<Tensor> weights;
  if (rs) weights.emplace(stack[arg++]);
  int64_t experts = 0, strategy = 0;
  std::memcpy(&experts, &stack[arg++], sizeof experts);
  std::memcpy(&strategy, &stack[arg++], sizeof strategy);
  check_operand(name, "A", a, comm);
  const BLayout b_layout = b_operand_layout(name, b, comm);
  if (b_layout != BLayout::nk)
    throw std::invalid_argument(std::string("weft.") + name + ": B must be every expert's weight shard stacked row-major [experts * n, k]");
  const int64_t k = a.sizes()[1];
  if (experts < 1 || b.sizes()[0] % experts != 0 || b.sizes()[1] != k)
    throw std::invalid_argument(std::string("weft.") + name + ": B must be [experts * n, k] with experts=" + std::to_string(experts) +
                                " and A's k=" + std::to_string(k) + ", got [" + std::to_string(b.sizes()[0]) + ", " + std::to_string(b.sizes()[1]) + "]");
  const int64_t n = b.sizes()[0] / experts;
  const TorchShim& shim = torch_shim();
  const bool on_device = choices.device_type() != shim.device_type_cpu();
  int64_t rows = 0, topk = 0;
  if (rs) {
    check_operand(name, "topk_weights", *weights, comm);
    topk = weights->sizes()[1];
    if (topk < 1 || weights->sizes()[0] % world != 0)
      throw std::invalid_argument(std::string("weft.moe_rs: topk_weights must be [world_size * rows, topk] (every rank's tokens)"));
    rows = weights->sizes()[0] / world;
    if (a.sizes()[0] != world * rows * topk)
      throw std::invalid_argument("weft.moe_rs: A must be [world_size * rows * topk, k] = [" + std::to_string(world * rows * topk) + ", " +
                                  std::to_string(k) + "] (ag_moe's rows), got " + std::to_string(a.sizes()[0]) + " rows");
  } else {
    rows = a.sizes()[0];
    if (on_device) {
      topk = choices.dim() == 2 ? choices.sizes()[1] : 0;
    } else {
      if (choices.dim() != 2 || rows < 1 || choices.sizes()[1] % rows != 0)
        throw std::invalid_argument("weft.ag_moe: choices on the CPU must be [world_size, rows * topk] with rows=" + std::to_string(rows) + " (A's)");
      topk = choices.sizes()[1] / rows;
    }
  }
  RunArgs args;
  args.rows = rows;
  if (on_device) {
    if (choices.device_type() != shim.device_type_cuda() || choices.device_index() != comm.device())
      throw std::invalid_argument(std::string("weft.") + name + ": choices are on neither the CPU nor cuda:" + std::to_string(comm.device()) +
                                  ", weft's communicator's GPU");
    if (choices.dtype() != shim.dtype_int32())
      throw std::invalid_argument(std::string("weft.") + name + ": choices on the GPU must be torch.int32, got " +
                                  (choices.dtype() == shim.dtype_int64() ? std::string("torch.int64 (torch.topk's ids): pass ids.to(torch.int32)")
                                                                         : "dtype code " + std::to_string(choices.dtype())));
    if (choices.dim() != 2 || choices.sizes()[0] != rows || choices.sizes()[1] != topk || topk < 1)
      throw std::invalid_argument(std::string("weft.") + name + ": choices on the GPU must be this rank's [rows, topk] = [" + std::to_string(rows) + ", " +
                                  (rs ? std::to_string(topk) : std::string("topk")) + "] (rows: " + (rs ? "topk_weights' rows / world_size" : "A's") +
                                  "), got a " + std::to_string(choices.dim()) + "-D tensor" +
                                  (choices.dim() == 2 ? " [" + std::to_string(choices.sizes()[0]) + ", " + std::to_string(choices.sizes()[1]) + "]" : ""));
    if (!choices.dense()) throw std::invalid_argument(std::string("weft.") + name + ": choices must be contiguous; call .contiguous()");
    check_aligned(name, "choices", choices);
    args.choices_device = choices.data();
  } else {
    if (choices.dim() != 2 || choices.sizes()[0] != world)
      throw std::invalid_argument(std::string("weft.") + name + ": choices on the CPU must be an integer tensor [world_size, rows * topk] = [" +
                                  std::to_string(world) + ", ...]: every rank's experts per token");
    args.choices = host_table(name, "choices", "an expert", choices, world, rows * topk, experts);
  }
  Op& op = op_for(kind, BLayout::nk, n, k, strategy, rows, {}, static_cast<int>(experts), static_cast<int>(topk), on_device);
  const int64_t out_rows = rs ? rows : world * rows * topk;
  TensorHandle result = nullptr;
  const int64_t sizes[2] = {out_rows, n};
  const int64_t strides[2] = {n, 1};
  shim_check(shim.empty_strided(2, sizes, strides, shim.dtype_bfloat16(), shim.device_type_cuda(), comm.device(), &result), "aoti_torch_empty_strided");
  std::unique_ptr<AtenTensorOpaque, ShimError (*)(TensorHandle)> owned(result, shim.delete_tensor_object);
  void* c = nullptr;
  shim_check(shim.get_data_ptr(result, &c), "aoti_torch_get_data_ptr");
  void* stream = nullptr;
  shim_check(shim.get_current_cuda_stream(comm.device(), &stream), "aoti_torch_get_current_cuda_stream");
  args.a = a.data();
  args.b = b.data();
  args.c = c;
  if (rs) args.topk_weights = weights->data();
  op.run(args, static_cast<cudaStream_t>(stream));
  const TensorHandle handed = owned.release();
  std::memcpy(&stack[0], &handed, sizeof handed);
}

template <OpKind kind>
void boxed_moe(StableIValue* stack, uint64_t, uint64_t) {
  moe_call(kind, stack);
}

template <OpKind kind, bool into, bool gathered = false>
void boxed(StableIValue* stack, uint64_t, uint64_t) {
  call(kind, into, gathered, !into && !gathered && !routes_rows(kind), stack);
}

void register_ops(const std::string& libtorch_cpu, const std::string& libtorch_cuda) {
  State& s = state();
  if (s.library) return;
  const TorchShim& shim = load_torch_shim(libtorch_cpu, libtorch_cuda);
  shim_check(shim.library_init_impl("weft", "CUDA", __FILE__, __LINE__, &s.library), "aoti_torch_library_init_impl");
  const struct {
    const char* name;
    BoxedKernel kernel;
  } kernels[] = {
      {"ag_gemm", boxed<OpKind::ag_gemm, false>},        {"gemm_rs", boxed<OpKind::gemm_rs, false>},
      {"gemm_ar", boxed<OpKind::gemm_ar, false>},        {"gemm_a2a", boxed<OpKind::gemm_a2a, false>},
      {"a2a_gemm", boxed<OpKind::a2a_gemm, false>},      {"ag_gemm_into", boxed<OpKind::ag_gemm, true>},
      {"gemm_rs_into", boxed<OpKind::gemm_rs, true>},    {"gemm_ar_into", boxed<OpKind::gemm_ar, true>},
      {"ag_gemm_gathered", boxed<OpKind::ag_gemm, false, true>}, {"ag_attention", boxed_attention},
      {"ag_moe", boxed_moe<OpKind::ag_moe>},                   {"moe_rs", boxed_moe<OpKind::moe_rs>},
  };
  for (const auto& k : kernels) shim_check(shim.library_impl(s.library, k.name, k.kernel), "aoti_torch_library_impl");
}

}  // namespace

void bind_torch_ops(nb::module_& m) {
  m.def("register_torch_ops", &register_ops, "libtorch_cpu"_a, "libtorch_cuda"_a,
        "Registers the CUDA kernels of torch.ops.weft.* (schemas defined first, by weft.torch) through PyTorch's stable C ABI.");
  m.def("set_torch_communicator", [](nb::object owner) {
    Communicator& comm = nb::cast<Communicator&>(owner);
    State& s = state();
    if (s.comm == &comm) return;
    s.ops.clear();  // made for the previous communicator
    s.attention_ops.clear();
    s.comm = &comm;
    s.comm_owner = std::move(owner);
  }, "communicator"_a, "The communicator torch.ops.weft.* run on (weft.torch.init).");
  m.def("strategy_id", [](const std::string& name) -> int64_t {
    if (name == "default") return 0;
    const auto& all = strategies();
    for (size_t i = 0; i < all.size(); ++i)
      if (all[i].name == name) return static_cast<int64_t>(i + 1);
    (void)find_strategy(name);  // throws listing the known names
    return -1;
  }, "name"_a, "The int torch.ops.weft.* take for a strategy's name (0: \"default\").");
  m.def("max_rows_bucket", [](const std::string& op, int64_t rows, int world) { return max_rows_bucket(parse_op(op), rows, world); },
        "op"_a, "rows"_a, "world_size"_a,
        "The max_rows torch.ops.weft.* make an op with for a call of `rows` rows: the next power of two (gemm_rs: of the rows per rank, times W).");
  m.def("torch_ops_finish", [](uintptr_t stream) {
    for (auto& [key, op] : state().ops) op->finish(reinterpret_cast<cudaStream_t>(stream));
    for (auto& [key, op] : state().attention_ops) op->finish(reinterpret_cast<cudaStream_t>(stream));
  }, "stream"_a, nb::call_guard<nb::gil_scoped_release>(), "Waits (bounded) for the stream, then raises what went wrong in any torch op's calls.");
  m.def("torch_ops_check", [] {
    for (auto& [key, op] : state().ops) op->check();
    for (auto& [key, op] : state().attention_ops) op->check();
  }, "Raises a device-side wait timeout recorded by any torch op's earlier call; never waits.");
  m.def("torch_ops_count", [] { return state().ops.size(); }, "How many ops torch.ops.weft.* have made (one per shape family).");
  m.def(
      "torch_symmetric_a",
      [](const std::string& op, int64_t n, int64_t k, int64_t rows, int64_t strategy, const std::string& b_layout) -> nb::object {
        const OpKind kind = parse_op(op);
        void* a = op_for(kind, parse_b_layout(b_layout), n, k, strategy, rows).a_in_workspace(rows);
        if (!a) return nb::none();
        const size_t shape[2] = {static_cast<size_t>(rows), static_cast<size_t>(k)};
        const nb::dlpack::dtype bf16{static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
        // The op (never destroyed) owns the memory: the tensor refers to it (rv_policy::reference; the
        // default would hand out a copy of an ndarray without an owner).
        return nb::cast(nb::ndarray<nb::pytorch>(a, 2, shape, nb::handle(), nullptr, bf16, nb::device::cuda::value, communicator().device()),
                        nb::rv_policy::reference);
      },
      "op"_a, "n"_a, "k"_a, "rows"_a, "strategy"_a, "b_layout"_a = "nk",  // holds the GIL: it makes Python objects
      "This rank's A for a call of `rows` rows, in the op's symmetric memory, as a torch tensor (DLPack), or None where the "
      "strategy reads A from the caller's memory; collective the first time.");
  m.def(
      "torch_copies_in_last_call",
      [](const std::string& op, int64_t n, int64_t k, int64_t rows, int64_t strategy, const std::string& b_layout) {
        return op_for(parse_op(op), parse_b_layout(b_layout), n, k, strategy, rows).copies_in_last_call();
      },
      "op"_a, "n"_a, "k"_a, "rows"_a, "strategy"_a, "b_layout"_a = "nk", "Copies of A into symmetric memory the op's last call made.");
}

}  // namespace weft::python
