// weft._native: the op API for Python, without libtorch. Pointers, shapes and the CUDA stream cross
// as integers, so one build serves every torch version (and code that uses no torch at all); the
// torch layer (weft.torch) is Python over this module.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "weft/ir/plan.hpp"
#include "weft/model/tiling.hpp"
#include "weft/model/tuning_table.hpp"
#include "weft/plan/auto.hpp"
#include "weft/plan/plan_bounds.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/validation.hpp"
#include "weft/runtime/communicator.hpp"
#include "weft/errors.hpp"
#include "weft/runtime/op.hpp"
#include "weft/runtime/signal_set.hpp"
#include "torch_ops.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

weft::NcclUniqueId unique_id_from(const nb::bytes& bytes) {
  weft::NcclUniqueId id;
  if (bytes.size() != id.bytes.size())
    throw std::invalid_argument("a weft unique id is " + std::to_string(id.bytes.size()) + " bytes, not " + std::to_string(bytes.size()));
  std::memcpy(id.bytes.data(), bytes.c_str(), id.bytes.size());
  return id;
}

cudaStream_t stream_from(uintptr_t stream) { return reinterpret_cast<cudaStream_t>(stream); }

// The Python functions take a GEMM's (m, n, k); attention's shape is the tool's (weft plan and simulate).
void refuse_attention(weft::OpKind op) {
  if (weft::is_attention(op))
    throw std::invalid_argument(std::string(weft::to_string(op)) + " is shaped by batch, heads, kv heads and head dim, not (m, n, k): "
                                "plan it with the weft tool (weft plan --op ag_attention --batch B --heads H --kv-heads G --head-dim D)");
}

}  // namespace

NB_MODULE(_native, m) {
  m.doc() = "weft's op API: GEMM overlapped with the communication that depends on it (see weft/runtime/op.hpp)";
  // Ops live as long as the process (weft.torch caches one per shape family): still alive at
  // interpreter exit by design, not leaked.
  nb::set_leak_warnings(false);

  // std::invalid_argument arrives as ValueError (nanobind's translation); what fails on the device
  // as weft.Error and its kinds.
  static nb::exception<weft::Error> error(m, "Error");
  static nb::exception<weft::CudaError> cuda_error(m, "CudaError", error);
  static nb::exception<weft::DeviceWaitTimeout> device_wait_timeout(m, "DeviceWaitTimeout", error);
  static nb::exception<weft::CallTimeout> call_timeout(m, "CallTimeout", error);
  static nb::exception<weft::CommunicatorAborted> communicator_aborted(m, "CommunicatorAborted", error);

  m.def("configure_cuda_for_waits", &weft::configure_cuda_for_waits,
        "Sets CUDA_DEVICE_MAX_CONNECTIONS=32 and CUDA_MODULE_LOADING=EAGER unless set; effective before the process's first CUDA call.");
  m.def("new_unique_id", [] {
    const weft::NcclUniqueId id = weft::Communicator::new_unique_id();
    return nb::bytes(id.bytes.data(), id.bytes.size());
  }, "A fresh NCCL bootstrap id (made on one rank, sent to the others).");

  nb::class_<weft::Communicator>(m, "Communicator",
                                 "This process's rank of an NCCL communicator on one GPU, made collectively with "
                                 "Communicator.from_unique_id (or, from PyTorch, weft.torch.init()).")
      .def("__init__", [](weft::Communicator*) {
        throw nb::type_error("weft.Communicator is made with weft.Communicator.from_unique_id(unique_id, rank, world_size, device) "
                             "(rank 0 makes the id with weft.new_unique_id()), or from PyTorch with weft.torch.init()");
      })
      .def_static(
          "from_unique_id",
          [](const nb::bytes& id, int rank, int world_size, int device) {
            return weft::Communicator::from_unique_id(unique_id_from(id), rank, world_size, device);
          },
          "unique_id"_a, "rank"_a, "world_size"_a, "device"_a, nb::call_guard<nb::gil_scoped_release>(),
          "Collective: every rank calls it with the id rank 0 made.")
      .def_prop_ro("rank", &weft::Communicator::rank, "This process's rank.")
      .def_prop_ro("world_size", &weft::Communicator::world_size, "How many ranks.")
      .def_prop_ro("device", &weft::Communicator::device, "The CUDA device this rank runs on.")
      .def_prop_ro("aborted", &weft::Communicator::aborted, "Whether a stuck call aborted the communicator (it is unusable then).");

  nb::class_<weft::Op>(m, "Op",
                      "One GEMM and the communication that depends on it (ag_gemm, gemm_rs, gemm_ar, gemm_a2a, a2a_gemm), made once per "
                      "layer and run every step on pointers and a CUDA stream given as integers; weft/runtime/op.hpp is the reference.")
      .def(
          "__init__",
          [](weft::Op* self, weft::Communicator& comm, const std::string& op, int64_t n, int64_t k, int64_t max_rows,
             const std::string& strategy, int64_t device_wait_timeout_ms, int64_t call_timeout_ms, const std::string& b_layout) {
            weft::OpSpec spec;
            spec.op = weft::parse_op(op);
            spec.n = n;
            spec.k = k;
            spec.b_layout = weft::parse_b_layout(b_layout);
            spec.max_rows = max_rows;
            spec.strategy = strategy;
            spec.device_wait_timeout_ms = device_wait_timeout_ms;
            spec.call_timeout_ms = call_timeout_ms;
            nb::gil_scoped_release release;
            new (self) weft::Op(comm, std::move(spec));
          },
          "communicator"_a, "op"_a, "n"_a, "k"_a, "max_rows"_a, "strategy"_a = "default", "device_wait_timeout_ms"_a = 0,
          "call_timeout_ms"_a = 0, "b_layout"_a = "nk", nb::keep_alive<1, 2>(),
          "Collective: every rank makes its op with the same arguments. b_layout: how b is laid out, \"nk\" (row-major [n, k], a "
          "linear layer's weight) or \"kn\" (row-major [k, n]: B^T, e.g. that weight for its input gradient).")
      .def_prop_ro("strategy", &weft::Op::strategy, "The strategy asked for (\"default\" resolved to auto).")
      .def_prop_ro("max_rows", [](const weft::Op& op) { return op.spec().max_rows; }, "The largest row count a call may pass.")
      .def(
          "run",
          [](weft::Op& op, uintptr_t a, uintptr_t b, uintptr_t c, int64_t rows, uintptr_t stream,
             const std::vector<std::vector<int>>& routing, uintptr_t gathered_a) {
            weft::RunArgs args;
            args.a = reinterpret_cast<const void*>(a);
            args.b = reinterpret_cast<const void*>(b);
            args.c = reinterpret_cast<void*>(c);
            args.rows = rows;
            args.routing = routing;
            args.gathered_a = reinterpret_cast<void*>(gathered_a);
            op.run(args, stream_from(stream));
          },
          "a"_a, "b"_a, "c"_a, "rows"_a, "stream"_a, "routing"_a = std::vector<std::vector<int>>{}, "gathered_a"_a = 0,
          nb::call_guard<nb::gil_scoped_release>(),
          "Enqueues one call on the CUDA stream (an integer handle). ag_gemm: a nonzero gathered_a (an address) also receives "
          "gather(a), [W * rows, k].")
      .def(
          "prepare", [](weft::Op& op, int64_t rows, const std::vector<std::vector<int>>& routing) { op.prepare(rows, routing); },
          "rows"_a, "routing"_a = std::vector<std::vector<int>>{}, nb::call_guard<nb::gil_scoped_release>(),
          "Plans and lowers a call of `rows` rows now, so that a later call can be captured in a CUDA graph; collective.")
      .def(
          "a_in_workspace",
          [](weft::Op& op, int64_t rows) { return reinterpret_cast<uintptr_t>(op.a_in_workspace(rows)); }, "rows"_a,
          nb::call_guard<nb::gil_scoped_release>(),
          "Where a producer writes this rank's A for a call of `rows` rows so that nothing is copied in (an integer address; 0 "
          "where the strategy reads A from the caller's memory); collective the first time.")
      .def(
          "output_rows",
          [](const weft::Op& op, int64_t rows, const std::vector<std::vector<int>>& routing) {
            weft::RunArgs args;
            args.rows = rows;
            args.routing = routing;
            return op.output_rows(args);
          },
          "rows"_a, "routing"_a = std::vector<std::vector<int>>{}, "Rows of the result of a call with these rows (and routing).")
      .def(
          "describe_plan", [](weft::Op& op, int64_t rows) { return weft::to_string(op.plan(rows)); }, "rows"_a,
          nb::call_guard<nb::gil_scoped_release>(), "The plan a call of `rows` rows runs, as text (collective the first time).")
      .def("finish", [](weft::Op& op, uintptr_t stream) { op.finish(stream_from(stream)); }, "stream"_a,
           nb::call_guard<nb::gil_scoped_release>(), "Waits (bounded) until the stream is done, then raises what went wrong in the op's calls.")
      .def("check", &weft::Op::check, "Raises weft.DeviceWaitTimeout if a device-side wait of an earlier call gave up; never waits.")
      .def("diagnose", &weft::Op::diagnose, "Which waits of the last call are unmet, with the signals' values (for a stuck call).");

  weft::python::bind_torch_ops(m);

  // The CPU side, usable without a GPU: what the strategies are and what plan one would run.
  m.def("strategies", [] {
    std::vector<std::tuple<std::string, std::string, std::string, std::vector<std::string>>> all;
    for (const weft::Strategy& s : weft::strategies()) {
      std::vector<std::string> ops;
      for (weft::OpKind op : s.ops) ops.emplace_back(weft::to_string(op));
      all.emplace_back(s.name, s.paper, s.description, ops);
    }
    return all;
  }, "(name, paper, description, ops) of every strategy.");
  m.def(
      "moe_row_order",
      [](const std::vector<std::vector<int>>& choices, int experts, int topk) {
        if (choices.empty() || topk < 1 || choices[0].size() % static_cast<size_t>(topk) != 0)
          throw std::invalid_argument("moe_row_order: choices must be every rank's [rows * topk] experts, topk >= 1");
        weft::Problem p;
        p.op = weft::OpKind::ag_moe;
        p.world_size = static_cast<int>(choices.size());
        p.m = static_cast<int64_t>(choices[0].size()) / topk;
        p.n = p.k = 8;
        p.experts = experts;
        p.topk = topk;
        p.choices = choices;
        weft::check_problem(p);  // experts in range, one row of choices per rank
        const weft::MoeRows rows = weft::moe_rows(p);
        std::vector<int64_t> order(rows.row_of.size());
        for (size_t f = 0; f < rows.row_of.size(); ++f) order[static_cast<size_t>(rows.row_of[f])] = static_cast<int64_t>(f);
        return order;
      },
      "choices"_a, "experts"_a, "topk"_a,
      "The MoE row layout of ag_moe's result (moe_rows): row r holds the (token, choice) of flat index order[r] = token * topk + "
      "choice, tokens numbered over every rank.");
  m.def(
      "device_routing_gap",
      [](const std::string& op, int64_t n, int64_t k, int experts, int topk, int world_size, const std::string& strategy) {
        weft::Problem p;
        p.op = weft::parse_op(op);
        if (!weft::is_moe(p.op)) throw std::invalid_argument("device_routing_gap: " + op + " is not an MoE op (ag_moe, moe_rs)");
        p.m = 1;
        p.n = n;
        p.k = k;
        p.world_size = world_size;
        p.experts = experts;
        p.topk = topk;
        p.routing_on_device = true;
        return weft::device_routing_gap(strategy == "default" ? weft::default_strategy(p.op, world_size) : strategy, p);
      },
      "op"_a, "n"_a, "k"_a, "experts"_a, "topk"_a, "world_size"_a, "strategy"_a = "default",
      "Why the MoE op cannot take its choices on the device (this rank's ids on the GPU) for this shape and strategy; \"\" where it can.");
  m.def("default_strategy", [](const std::string& op, int world_size) { return weft::default_strategy(weft::parse_op(op), world_size); },
        "op"_a, "world_size"_a, "The strategy \"default\" stands for (auto, which chooses per call shape).");
  m.def(
      "choose_strategy",
      [](const std::string& op, int64_t m, int64_t n, int64_t k, int world_size, const std::string& machine, const std::string& tuning) {
        weft::Problem p{weft::parse_op(op), m, n, k, world_size, weft::DType::bf16, weft::DType::bf16, {}};
        refuse_attention(p.op);
        weft::require_problem_fits(p);  // the bounds weft's tool holds plans to
        weft::draw_routing(p, 1);
        weft::check_problem(p);
        // As the op API chooses (weft::Op): the default profile and table where none is given.
        weft::PlanOptions o;
        if (!machine.empty()) o.machine = weft::load_machine_profile(machine);
        if (!tuning.empty() && tuning != "none") o.tuning = std::make_shared<const weft::TuningTable>(weft::load_tuning_table(tuning));
        weft::use_default_auto_inputs(o);
        if (tuning == "none") o.tuning = nullptr;
        const weft::AutoChoice c = weft::choose_strategy(p, o);
        return std::make_tuple(c.candidate.strategy, c.reason);
      },
      "op"_a, "m"_a, "n"_a, "k"_a, "world_size"_a, "machine"_a = "", "tuning"_a = "",
      "What auto runs for this problem and why: (strategy, reason), as the op API chooses. machine, tuning: a profile and a tuning table "
      "(JSON files; by default weft's shipped H200 measurements, or WEFT_MACHINE_PROFILE / WEFT_TUNING_TABLE); tuning=\"none\": the "
      "simulator alone.");
  m.def(
      "describe_plan",
      [](const std::string& op, int64_t m, int64_t n, int64_t k, int world_size, const std::string& strategy, const std::string& b_layout) {
        weft::Problem p{weft::parse_op(op), m, n, k, world_size, weft::DType::bf16, weft::DType::bf16, {}};
        p.b_layout = weft::parse_b_layout(b_layout);
        refuse_attention(p.op);
        weft::require_problem_fits(p);  // the bounds weft's tool holds plans to
        weft::draw_routing(p, 1);
        weft::check_problem(p);
        const weft::Strategy& chosen = weft::find_strategy(strategy);
        weft::PlanOptions o;
        weft::use_default_auto_inputs(o);  // as the op API plans (weft::Op)
        weft::require_plan_fits(p, weft::resolve_options(chosen, p, o));
        const weft::Plan plan = weft::make_plan(chosen, p, o);
        weft::require_valid(plan);
        return weft::to_string(plan);
      },
      "op"_a, "m"_a, "n"_a, "k"_a, "world_size"_a, "strategy"_a, "b_layout"_a = "nk",
      "The validated plan a strategy builds for one problem, as text (routed ops: a random routing; b_layout \"nk\" or \"kn\").");
}
