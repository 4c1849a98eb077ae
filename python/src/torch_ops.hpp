// torch.ops.weft.*'s CUDA kernels in C++ (python/weft/torch/ops.py defines the schemas and the fake
// implementations, then calls register_torch_ops): a call goes from PyTorch's dispatcher straight to
// the op's checks and weft::Op::run, with no Python in between.
#pragma once

#include <nanobind/nanobind.h>

namespace weft::python {

void bind_torch_ops(nanobind::module_& m);

}  // namespace weft::python
