// The few functions of PyTorch's stable C ABI (the "AOTI shim": torch/csrc/inductor/aoti_torch/c/
// shim.h, shim_cuda.h, and the library functions of torch/csrc/stable) that weft's torch ops use.
// They are C functions whose signatures PyTorch keeps across releases (2.7.1 and later), looked up at
// run time in the libtorch the process has already loaded: weft links no libtorch and includes no
// torch header, so one build serves every supported torch.
#pragma once

#include <cstdint>
#include <string>

namespace weft::python {

// An at::Tensor owned through the shim (AtenTensorHandle); a StableIValue is a uint64_t whose leading
// bytes hold the handle (Tensor) or the value (int, bool; a ScalarType: the shim's dtype code), and an
// optional argument (T?) is a null pointer (None) or a pointer to a StableIValue the dispatcher
// allocated with new, which the kernel deletes (PyTorch's docs/notes/libtorch_stable_abi and
// torch/csrc/stable/stableivalue_conversions.h).
using TensorHandle = struct AtenTensorOpaque*;
using LibraryHandle = struct TorchLibraryOpaque*;
using StableIValue = uint64_t;
using BoxedKernel = void (*)(StableIValue* stack, uint64_t arguments, uint64_t returns);
using ShimError = int32_t;  // 0: success

struct TorchShim {
  int32_t (*dtype_bfloat16)() = nullptr;
  int32_t (*dtype_int32)() = nullptr;
  int32_t (*dtype_int64)() = nullptr;
  int32_t (*dtype_float32)() = nullptr;
  int32_t (*dtype_float8_e4m3fn)() = nullptr;
  int32_t (*dtype_float8_e5m2)() = nullptr;
  int32_t (*device_type_cpu)() = nullptr;
  int32_t (*device_type_cuda)() = nullptr;
  ShimError (*delete_tensor_object)(TensorHandle) = nullptr;
  ShimError (*get_data_ptr)(TensorHandle, void**) = nullptr;
  ShimError (*get_dim)(TensorHandle, int64_t*) = nullptr;
  ShimError (*get_sizes)(TensorHandle, int64_t**) = nullptr;
  ShimError (*get_strides)(TensorHandle, int64_t**) = nullptr;
  ShimError (*get_dtype)(TensorHandle, int32_t*) = nullptr;
  ShimError (*get_device_type)(TensorHandle, int32_t*) = nullptr;
  ShimError (*get_device_index)(TensorHandle, int32_t*) = nullptr;
  ShimError (*empty_strided)(int64_t ndim, const int64_t* sizes, const int64_t* strides, int32_t dtype, int32_t device_type,
                             int32_t device_index, TensorHandle* out) = nullptr;
  ShimError (*get_current_cuda_stream)(int32_t device_index, void** stream) = nullptr;
  ShimError (*library_init_impl)(const char* ns, const char* dispatch_key, const char* file, uint32_t line, LibraryHandle* out) = nullptr;
  ShimError (*library_impl)(LibraryHandle, const char* name, BoxedKernel) = nullptr;
};

// Looks every function up in the already loaded libtorch_cpu and libtorch_cuda (paths from torch's
// package); throws std::runtime_error naming a library or function that is missing (a torch older
// than 2.7.1, or a CPU-only torch).
const TorchShim& load_torch_shim(const std::string& libtorch_cpu, const std::string& libtorch_cuda);
// The shim loaded by load_torch_shim; throws if it has not been.
const TorchShim& torch_shim();

}  // namespace weft::python
