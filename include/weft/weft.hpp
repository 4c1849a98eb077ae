// weft: a GEMM overlapped with the inter-GPU communication that depends on it, one call per layer.
//
//   #include <weft/weft.hpp>
//   auto comm = weft::Communicator::from_environment();              // torchrun / mpirun / srun
//   weft::Op up(*comm, {.op = weft::OpKind::ag_gemm, .n = 14336 / W, .k = 4096, .max_rows = 8192 / W});
//   up.run({.a = x_shard, .b = w_up, .c = y, .rows = tokens / W}, stream);
//
// runtime/op.hpp says what each op computes, its stream timeline and its errors; plan/strategies.hpp
// lists the strategies (the papers' designs) an op can run.
#pragma once

#include "weft/ir/problem.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/runtime/communicator.hpp"
#include "weft/errors.hpp"
#include "weft/runtime/op.hpp"
#include "weft/runtime/signal_set.hpp"
