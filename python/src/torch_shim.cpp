#include "torch_shim.hpp"

#include <dlfcn.h>

#include <stdexcept>

namespace weft::python {

namespace {

TorchShim loaded;
bool is_loaded = false;

void* open_loaded(const std::string& path) {
  // RTLD_NOLOAD: the library torch's import loaded, never a second copy.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!handle)
    throw std::runtime_error("weft.torch: " + path + " is not loaded in this process (" + std::string(dlerror()) +
                             "); import torch (a CUDA build) before weft.torch");
  return handle;
}

template <typename F>
void find(void* library, const std::string& path, const char* name, F& out) {
  void* symbol = dlsym(library, name);
  if (!symbol)
    throw std::runtime_error("weft.torch: " + path + " has no " + name +
                             " (PyTorch's stable C ABI; weft's torch ops need torch >= 2.7.1 built with CUDA)");
  out = reinterpret_cast<F>(symbol);
}

}  // namespace

const TorchShim& load_torch_shim(const std::string& libtorch_cpu, const std::string& libtorch_cuda) {
  if (is_loaded) return loaded;
  void* cpu = open_loaded(libtorch_cpu);
  void* cuda = open_loaded(libtorch_cuda);
  TorchShim s;
  find(cpu, libtorch_cpu, "aoti_torch_dtype_bfloat16", s.dtype_bfloat16);
  find(cpu, libtorch_cpu, "aoti_torch_dtype_int32", s.dtype_int32);
  find(cpu, libtorch_cpu, "aoti_torch_dtype_int64", s.dtype_int64);
  find(cpu, libtorch_cpu, "aoti_torch_dtype_float32", s.dtype_float32);
  find(cpu, libtorch_cpu, "aoti_torch_dtype_float8_e4m3fn", s.dtype_float8_e4m3fn);
  find(cpu, libtorch_cpu, "aoti_torch_dtype_float8_e5m2", s.dtype_float8_e5m2);
  find(cpu, libtorch_cpu, "aoti_torch_device_type_cpu", s.device_type_cpu);
  find(cpu, libtorch_cpu, "aoti_torch_device_type_cuda", s.device_type_cuda);
  find(cpu, libtorch_cpu, "aoti_torch_delete_tensor_object", s.delete_tensor_object);
  find(cpu, libtorch_cpu, "aoti_torch_get_data_ptr", s.get_data_ptr);
  find(cpu, libtorch_cpu, "aoti_torch_get_dim", s.get_dim);
  find(cpu, libtorch_cpu, "aoti_torch_get_sizes", s.get_sizes);
  find(cpu, libtorch_cpu, "aoti_torch_get_strides", s.get_strides);
  find(cpu, libtorch_cpu, "aoti_torch_get_dtype", s.get_dtype);
  find(cpu, libtorch_cpu, "aoti_torch_get_device_type", s.get_device_type);
  find(cpu, libtorch_cpu, "aoti_torch_get_device_index", s.get_device_index);
  find(cpu, libtorch_cpu, "aoti_torch_empty_strided", s.empty_strided);
  find(cpu, libtorch_cpu, "aoti_torch_library_init_impl", s.library_init_impl);
  find(cpu, libtorch_cpu, "aoti_torch_library_impl", s.library_impl);
  find(cuda, libtorch_cuda, "aoti_torch_get_current_cuda_stream", s.get_current_cuda_stream);
  loaded = s;
  is_loaded = true;
  return loaded;
}

const TorchShim& torch_shim() {
  if (!is_loaded) throw std::runtime_error("weft.torch: PyTorch's C ABI is not loaded (weft.torch registers it on import)");
  return loaded;
}

}  // namespace weft::python
