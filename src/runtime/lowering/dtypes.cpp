// Which steps the CUDA executor lowers for buffers that are not bf16: decided on the CPU by
// gpu_step_gap (plan/gpu_lowering.hpp, the one home of that decision); a step it names is refused
// here, before lowering, rather than run as bf16.
#include <stdexcept>

#include "lowering.hpp"
#include "weft/plan/gpu_lowering.hpp"

namespace weft::lowering {

void require_lowerable_dtypes(const Step& step, const Context& context) {
  if (auto gap = gpu_step_gap(*context.plan, step, context.plain_gemm_on_overlap)) throw std::invalid_argument("CudaExecutor: " + *gap);
}

}  // namespace weft::lowering
