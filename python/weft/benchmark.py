"""Side by side, under torchrun: weft's ops (each strategy and the default), torch.mm with
torch.distributed, and PyTorch AsyncTP's fused ops, for the suites' rows; then the tensor-parallel
MLP layer, forward and backward, weft against the same layer in plain torch. With --model, a model's
step instead: --layers decoder blocks (weft.torch.DecoderStack) in prefill or train mode, weft's
against the same blocks through plain torch.

    torchrun --standalone --nproc_per_node=4 -m weft.benchmark --suite default --csv out.csv
    torchrun --standalone --nproc_per_node=4 -m weft.benchmark --model llama3-8b --layers 2 --mode train --tokens 8192
    torchrun --standalone --nproc_per_node=4 -m weft.benchmark --attention      # sequence-parallel attention rows
    torchrun --standalone --nproc_per_node=4 -m weft.benchmark --fp8 rowwise --no-mlp   # the suite in FP8

Timing follows `weft bench`: CUDA events around one call, a device barrier before each call, the
median of --iterations after --warmup, the slowest rank's median, variants interleaved call by call
so that clock drift reaches all alike. Before the start event the GPU is kept busy for
--queue-ahead-us (a device-side sleep), as it is in a training step where the host runs ahead: the
figure is the device's time for the call, not the host's time to enqueue it (the `host us` column is
each call's median host time and `host x` its ratio to torch's on the same row; `b2b us` and `b2b x`
the same with calls back to back; --queue-ahead-us 0 times both together). weft's variants are the calls a user makes: torch.ops.weft.<op> on ordinary
tensors, the output allocated per call, every copy the op makes included. Every variant's result is first compared with torch's.
Speedup is T_torch / T; E = (T_torch - T) / (T_torch - T_gemm) with T_gemm the GEMM alone (torch.mm).
The MoE rows' `torch` is a loop over experts (HF's Mixtral block); `torch:grouped_mm` is the same
op with one torch._grouped_mm over every expert (a tuned torch MoE), the stronger baseline. Both take
the routing on the GPU, where a torch model's router leaves it. `weft:<strategy>` takes one fixed host
table (its plan made once); `weft:default:ids` takes this rank's ids on the GPU, new routing each call
(one plan for every routing); `weft:default:table` gathers each call's new ids to the host first (a
synchronisation, and a plan per table): the two ways a layer can call weft's MoE ops.
"""

import argparse
import csv
import json
import os
import statistics
import sys
import time
import warnings

import torch
import torch.distributed as dist

import weft
import weft.torch as wt
from weft.torch import plain


def suite_path(name):
    if name.endswith(".json") or os.sep in name:
        return name
    return os.path.join(os.path.dirname(weft.__file__), "suites", name + ".json")


def per_rank_shape(row, world):
    """The per-rank (m, n, k) of a suite row, cut for `world` ranks as bench/lib/bench_suite.hpp says:
    ag_gemm splits m and n, gemm_rs and gemm_ar split k, the routed ops split m ("split": "none":
    per-rank shapes already)."""
    m, n, k = row["m"], row["n"], row["k"]
    if row.get("split", "tensor") == "none":
        return m, n, k
    cut = {"ag_gemm": (True, True, False), "gemm_rs": (False, False, True), "gemm_ar": (False, False, True),
           "ag_moe": (True, True, False), "moe_rs": (True, False, True)}.get(row["op"], (True, False, False))
    for value, split in zip((m, n, k), cut):
        if split and value % world:
            raise ValueError(f"{value} is not divisible by the world size {world}")
    return tuple(v // world if split else v for v, split in zip((m, n, k), cut))


def _barrier():
    if dist.is_initialized():
        dist.barrier()
    torch.cuda.synchronize()


def _not_run(e):
    """The table's note for a variant that did not run: a strategy that declines the call (a dtype or
    shape it cannot run on the GPU, which auto passes over) is not a failure."""
    text = str(e).splitlines()[0] if str(e) else ""
    if isinstance(e, ValueError) and " declines " in text:
        return f"declined ({text[:110]})"
    return f"failed ({type(e).__name__}: {text[:80]})"


def _slowest(value):
    if not dist.is_initialized():
        return value
    t = torch.tensor([value], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


_SLEEP_CYCLES_PER_US = None
ROUTINGS = 10  # the MoE rows' routings that change per call (Row.ids_cycle)


def _queue_ahead(us):
    """Keeps the current stream busy for about `us` microseconds (torch.cuda._sleep spins for a
    number of clock cycles; cycles per microsecond are measured once)."""
    global _SLEEP_CYCLES_PER_US
    if us <= 0:
        return
    if _SLEEP_CYCLES_PER_US is None:
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 10_000_000
        torch.cuda._sleep(cycles // 10)  # the kernel's first launch out of the way
        start.record()
        torch.cuda._sleep(cycles)
        stop.record()
        stop.synchronize()
        _SLEEP_CYCLES_PER_US = cycles / max(start.elapsed_time(stop) * 1e3, 1.0)
    torch.cuda._sleep(int(us * _SLEEP_CYCLES_PER_US))


def time_interleaved(variants, warmup, iterations, queue_ahead_us=0, host_us=None):
    """Median ms of each variant (a callable), interleaved call by call, slowest rank. `host_us`, a
    dict, receives each variant's median host time per call in microseconds (slowest rank)."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = {name: [] for name in variants}
    host = {name: [] for name in variants}
    names = list(variants)
    for i in range(warmup + iterations):
        for turn in range(len(names)):
            name = names[(i + turn) % len(names)]
            _barrier()
            _queue_ahead(queue_ahead_us)
            start.record()
            began = time.perf_counter()
            variants[name]()
            ended = time.perf_counter()
            stop.record()
            stop.synchronize()
            if i >= warmup:
                times[name].append(start.elapsed_time(stop))
                host[name].append((ended - began) * 1e6)
    if host_us is not None:
        host_us.update({name: _slowest(statistics.median(t)) for name, t in host.items()})
    return {name: _slowest(statistics.median(t)) for name, t in times.items()}


def host_synchronises(fn):
    """Whether a call of fn in the steady state makes the host wait for the GPU inside PyTorch (a
    device-to-host copy, a nonzero, .item(): torch.cuda.set_sync_debug_mode's "warn"). Such a variant's
    device time includes the launches the host makes after each wait, and its host time is not an
    enqueue time: the table says so in its note. The call judged is the second: a first call may wait
    once while it sets up (NCCL's lazy communicator set-up did, flagging plain torch's first row).
    weft's own C++ waits are not seen here (weft's calls make none)."""
    fn()
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    return any("synchroniz" in str(w.message) for w in caught)


def host_back_to_back_us(variants, bursts=7, calls=20):
    """Each variant's host time per call with calls back to back (the GPU still busy with the ones
    before, as in a training step), in microseconds: the median over bursts of (burst time / calls),
    slowest rank; a device-side sleep first keeps the queue from draining. Bursts of the variants are
    interleaved, each round starting from the next variant, so that drift of the host reaches all alike."""
    per_call = {name: [] for name in variants}
    names = list(variants)
    for burst in range(bursts):
        for turn in range(len(names)):
            name = names[(burst + turn) % len(names)]
            fn = variants[name]
            _barrier()
            _queue_ahead(2000)
            began = time.perf_counter()
            for _ in range(calls):
                fn()
            per_call[name].append((time.perf_counter() - began) * 1e6 / calls)
            torch.cuda.synchronize()
    return {name: _slowest(statistics.median(t)) for name, t in per_call.items()}


def relative_error(got, want):
    got, want = got.float(), want.float()
    if torch.isnan(got).any():
        return float("inf")
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


class Row:
    """One suite row's tensors on this rank and the variants that compute it; with `fp8` (a
    Float8Recipe) the FP8 product of those tensors quantized by the recipe (ag_gemm, gemm_rs,
    gemm_ar): torch._scaled_mm with torch.distributed, weft's op with the FP8 operands and scales, and
    AsyncTP's scaled fused ops."""

    def __init__(self, row, world, rank, seed, fp8=None):
        self.name, self.op = row["name"], row["op"]
        self.m, self.n, self.k = per_rank_shape(row, world)
        g = torch.Generator(device="cuda").manual_seed(seed * 1000 + rank)
        self.a = (torch.rand((self.m, self.k), device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)
        self.b = (torch.rand((self.n, self.k), device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)
        self.routing = None
        if self.op in ("gemm_a2a", "a2a_gemm"):
            gen = torch.Generator().manual_seed(seed)
            self.routing = torch.randint(0, world, (world, self.m), generator=gen, dtype=torch.int32)
        self.experts = row.get("experts", 0)
        if self.op in ("ag_moe", "moe_rs"):
            # Every rank's top-k distinct experts per token (uniform, the same table on every rank),
            # the op's weights stacked per expert [experts * n, k], and moe_rs's rows in the op's
            # layout (each (token, choice) row of every rank) with every rank's top-k weights.
            gen = torch.Generator().manual_seed(seed)
            topk = row["topk"]
            self.choices = torch.stack([torch.stack([torch.randperm(self.experts, generator=gen)[:topk] for _ in range(self.m)]).reshape(-1)
                                        for _ in range(world)]).to(torch.int32)
            self.choices_on_device = self.choices.to("cuda")  # torch's variants: no host copy per call
            # The router's ids as a layer has them, on the GPU: this rank's [m, topk], the first of a
            # cycle of ROUTINGS routings (the rest drawn afresh), which the variants that take new
            # choices per call go through, as a model's layers do (more than weft::Op's 8 cached plans).
            self.ids_cycle = [self.choices[rank].reshape(self.m, topk).to("cuda")]
            for _ in range(ROUTINGS - 1):
                other = torch.stack([torch.stack([torch.randperm(self.experts, generator=gen)[:topk] for _ in range(self.m)])
                                     for _ in range(world)]).to(torch.int32)
                self.ids_cycle.append(other[rank].to("cuda"))
            self.b = (torch.rand((self.experts * self.n, self.k), device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)
            if self.op == "moe_rs":
                self.a = (torch.rand((world * self.m * topk, self.k), device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)
                w = torch.rand((world * self.m, topk), generator=gen)
                self.weights = (w / w.sum(-1, keepdim=True)).to(device="cuda", dtype=torch.bfloat16)
        self.world, self.rank = world, rank
        self.fp8 = fp8
        if fp8 is not None:
            if self.op not in ("ag_gemm", "gemm_rs", "gemm_ar"):
                raise ValueError(f"{self.op} has no FP8 rows yet")
            from weft.torch import fp8 as _fp8

            # ag_gemm's tensor-wise A scale is the gathered A's: one over every rank's rows.
            self.qa = _fp8.quantize(self.a, fp8, across_ranks=self.op == "ag_gemm")
            self.qb = _fp8.quantize(self.b, fp8)

    def torch_variant(self):
        """torch.mm and the torch.distributed collective: the baseline (FP8: torch._scaled_mm)."""
        world, group = self.world, wt.process_group()
        a, b = self.a, self.b
        if self.fp8 is not None:
            from weft.torch import fp8 as _fp8

            return lambda: _fp8._torch_equivalent(self.op, self.qa, self.qb)[0]
        if self.op == "ag_gemm":
            gathered = a.new_empty((world * self.m, self.k))

            if world == 1:  # nothing to gather: what a caller of plain torch runs is the GEMM
                return lambda: torch.mm(a, b.t())

            def run():
                dist.all_gather_into_tensor(gathered, a, group=group)
                return torch.mm(gathered, b.t())

            return run
        if self.op == "gemm_rs":
            out = a.new_empty((self.m // world, self.n))

            def run():
                partial = torch.mm(a, b.t())
                if world == 1:
                    return partial
                dist.reduce_scatter_tensor(out, partial, group=group)
                return out

            return run
        if self.op == "gemm_ar":

            def run():
                c = torch.mm(a, b.t())
                if world > 1:
                    dist.all_reduce(c, group=group)
                return c

            return run
        if self.op == "ag_moe":  # plain torch's MoE: all_gather, then a GEMM per expert (as HF's Mixtral block)
            return lambda: plain.ag_moe(a, b, self.choices_on_device, self.experts)
        if self.op == "moe_rs":
            return lambda: plain.moe_rs(a, b, self.choices_on_device, self.weights, self.experts)
        return None  # routed ops: weft alone (torch's all_to_all needs per-rank split sizes; not done yet)

    def torch_grouped_variant(self):
        """The MoE ops as a tuned torch MoE runs them: one torch._grouped_mm over every expert instead
        of the loop (plain.ag_moe_grouped / moe_rs_grouped); None for other ops or an older torch."""
        if self.fp8 is not None or self.op not in ("ag_moe", "moe_rs") or not plain.has_grouped_mm():
            return None
        a, b = self.a, self.b
        if self.op == "ag_moe":
            return lambda: plain.ag_moe_grouped(a, b, self.choices_on_device, self.experts)
        return lambda: plain.moe_rs_grouped(a, b, self.choices_on_device, self.weights, self.experts)

    def gemm_variant(self):
        """The rank's GEMM alone (T_gemm)."""
        a, b = self.a, self.b
        if self.fp8 is not None:
            from weft.torch import fp8 as _fp8

            qa = self.qa
            if self.op == "ag_gemm":  # the gathered A's size: this rank's rows and scales W times
                qa = _fp8.Float8(qa.data.repeat(self.world, 1), qa.scale.repeat(self.world, 1) if qa.scale.dim() else qa.scale)
            return lambda: _fp8.scaled_mm(qa, self.qb)
        if self.op == "ag_gemm":
            gathered = a.new_empty((self.world * self.m, self.k))
            return lambda: torch.mm(gathered, b.t())
        if self.op in ("ag_moe", "moe_rs"):
            # Every (token, choice) row of every rank against one expert's rows of b: the FLOPs of the
            # grouped GEMM in one torch.mm (a lower bound no grouping beats).
            rows = a.new_empty((self.world * self.m * (self.choices.shape[1] // self.m), self.k)) if self.op == "ag_moe" else a
            return lambda: torch.mm(rows, b[: self.n].t())
        return lambda: torch.mm(a, b.t())

    def weft_variant(self, strategy):
        """The call as a user makes it: torch.ops.weft.<op> on these tensors, its output allocated per call."""
        fn, sid = getattr(torch.ops.weft, self.op), wt.ops.strategy_id(strategy)
        if self.fp8 is not None:
            qa, qb = self.qa, self.qb
            return lambda: fn(qa.data, qb.data, sid, qa.scale, qb.column_scale(), torch.bfloat16)
        if self.routing is not None:
            return lambda: fn(self.a, self.b, self.routing, sid)
        if self.op == "ag_moe":
            return lambda: fn(self.a, self.b, self.choices, self.experts, sid)
        if self.op == "moe_rs":
            return lambda: fn(self.a, self.b, self.choices, self.weights, self.experts, sid)
        return lambda: fn(self.a, self.b, sid)

    def weft_routing_variants(self):
        """The MoE ops as a layer calls them with new routing per call (through ids_cycle), by name:
        "weft:default:ids", the router's ids given on the GPU; "weft:default:table", every rank's ids
        gathered to the host first (TensorParallelMoE's routing="table": a host synchronisation, and a
        plan per table). Empty for other ops."""
        if self.op not in ("ag_moe", "moe_rs"):
            return {}
        from weft.torch.moe import every_ranks_choices

        fn, cycle = getattr(torch.ops.weft, self.op), self.ids_cycle
        extra = (self.weights,) if self.op == "moe_rs" else ()

        def cycling(choices_of):
            state = {"call": 0}

            def run():
                ids = cycle[state["call"] % len(cycle)]
                state["call"] += 1
                return fn(self.a, self.b, choices_of(ids), *extra, self.experts, 0)

            run.routing_state = state  # routing_error reads which routing the next call takes
            return run

        return {"weft:default:ids": cycling(lambda ids: ids), "weft:default:table": cycling(every_ranks_choices)}

    def routing_error(self, run):
        """A weft_routing_variants variant checked on every routing of its cycle: the largest relative
        error of ROUTINGS calls, each against plain torch on the routing that call took."""
        from weft.torch.comm import all_gather_rows

        worst = 0.0
        for _ in range(len(self.ids_cycle)):
            ids = self.ids_cycle[run.routing_state["call"] % len(self.ids_cycle)]
            table = all_gather_rows(ids.to(torch.int32).contiguous()).reshape(self.world, -1)
            got = run()
            if self.op == "ag_moe":
                want = plain.ag_moe(self.a, self.b, table, self.experts)
            else:
                want = plain.moe_rs(self.a, self.b, table, self.weights, self.experts)
            worst = max(worst, relative_error(got, want))
        return worst

    def async_tp_variant(self):
        """PyTorch AsyncTP's fused op for ag_gemm and gemm_rs (symmetric memory), or None."""
        if self.op not in ("ag_gemm", "gemm_rs") or not dist.is_initialized():
            return None
        if self.fp8 is not None:
            qa, qb = self.qa, self.qb
            if self.op == "ag_gemm":
                return lambda: plain.column_parallel_async_tp_fp8(qa, qb)
            return lambda: plain.row_parallel_async_tp_fp8(qa, qb)
        a, b = self.a, self.b
        if self.op == "ag_gemm":
            return lambda: plain.column_parallel_async_tp(a, b)
        return lambda: plain.row_parallel_async_tp(a, b)


def bench_suite(args, world, rank, writer, table):
    with open(suite_path(args.suite)) as f:
        suite = json.load(f)
    strategies = args.strategies.split(",") if args.strategies else None
    for index, row_spec in enumerate(suite["rows"]):
        if args.op and row_spec["op"] not in args.op.split(","):
            continue
        if row_spec["op"] == "ag_attention":  # attention rows: --attention (weft's op against all_gather + SDPA)
            print(f"skipping {row_spec['name']}: ag_attention rows run with --attention", file=sys.stderr)
            continue
        try:
            row = Row(row_spec, world, rank, args.seed + index, fp8=wt.Float8Recipe(args.fp8) if args.fp8 else None)
        except ValueError as e:
            print(f"skipping {row_spec['name']}: {e}", file=sys.stderr)
            continue
        variants, notes = {}, {}
        baseline = row.torch_variant()
        if baseline is not None:
            variants["torch"] = baseline
        grouped = row.torch_grouped_variant()
        if grouped is not None:
            variants["torch:grouped_mm"] = grouped
        names = [s for s, _, _, ops in weft.strategies() if row.op in ops]
        for name in (strategies or names) + ["default"]:
            if name in names or name == "default":
                variants["weft:" + name] = row.weft_variant(name)
        variants.update(row.weft_routing_variants())
        if not args.no_async_tp:
            try:
                fused = row.async_tp_variant()
                if fused is not None:
                    fused()
                    variants["async_tp"] = fused
            except Exception as e:  # noqa: BLE001 - reported in the table, not fatal
                notes["async_tp"] = f"n/a ({type(e).__name__}: {str(e).splitlines()[0][:80]})"
        reference = baseline() if baseline is not None else variants["weft:sequential"]()
        torch.cuda.synchronize()
        errors = {}
        for name, fn in variants.items():
            try:
                error = row.routing_error(fn) if hasattr(fn, "routing_state") else relative_error(fn(), reference)
                errors[name] = _slowest(error)
            except Exception as e:  # noqa: BLE001
                notes[name] = _not_run(e)
        variants = {name: fn for name, fn in variants.items() if name not in notes}
        synchronising = {name for name, fn in variants.items() if host_synchronises(fn)}
        torch.cuda.synchronize()
        variants["gemm alone"] = row.gemm_variant()
        host_us = {}
        ms = time_interleaved(variants, args.warmup, args.iterations, args.queue_ahead_us, host_us)
        b2b_us = host_back_to_back_us(variants)
        t_base = ms.get("torch", ms.get("weft:sequential"))
        t_gemm = ms.pop("gemm alone")
        for name in list(ms) + list(notes):
            t = ms.get(name)
            line = {
                "row": row.name, "op": row.op, "world": world, "m": row.m, "n": row.n, "k": row.k, "variant": name,
                "ms": t, "gemm_ms": t_gemm, "baseline_ms": t_base,
                "speedup": t_base / t if t else None,
                "overlap_efficiency": (t_base - t) / (t_base - t_gemm) if t and t_base > t_gemm else None,
                "relative_error": errors.get(name), "host_us": host_us.get(name),
                "host_ratio": host_us[name] / host_us["torch"] if name in host_us and host_us.get("torch") else None,
                "b2b_us": b2b_us.get(name),
                "b2b_ratio": b2b_us[name] / b2b_us["torch"] if name in b2b_us and b2b_us.get("torch") else None,
                "note": "; ".join(x for x in (notes.get(name, ""), "synchronises the host per call" if name in synchronising else "") if x),
            }
            table.append(line)
            if writer and rank == 0:
                writer.writerow(line)


def bench_mlp(args, world, rank, writer, table):
    """The TP MLP layer, forward + backward: weft's against plain torch's, same weights."""
    hidden, ffn, tokens = args.mlp_hidden, args.mlp_ffn, args.mlp_tokens
    # The plain torch layer's autograd keeps the gathered input for dW; weft's keeps it too (from the
    # forward's ag_gemm) unless --regather-input.
    recipe = wt.Float8Recipe(args.fp8) if args.fp8 else None
    layer = wt.TensorParallelMLP(hidden, ffn, sequence_parallel=world > 1, save_gathered_input=not args.regather_input, fp8=recipe)
    rows = tokens // world if world > 1 else tokens
    g = torch.Generator(device="cuda").manual_seed(args.seed + rank)
    x = (torch.rand((rows, hidden), device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)
    dz = (torch.rand((rows, hidden), device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)
    up, down = layer.up.weight, layer.down.weight

    def weft_step():
        xi = x.detach().requires_grad_()
        layer.zero_grad(set_to_none=True)
        layer(xi).backward(dz)
        return xi.grad

    def plain_step():
        xi, u, d = x.detach().requires_grad_(), up.detach().requires_grad_(), down.detach().requires_grad_()
        (plain.fp8_mlp(xi, u, d, world > 1, recipe) if recipe else plain.mlp(xi, u, d, world > 1)).backward(dz)
        return xi.grad

    error = _slowest(relative_error(weft_step(), plain_step()))
    host_us = {}
    ms = time_interleaved({"weft MLP fwd+bwd": weft_step, "torch MLP fwd+bwd": plain_step}, args.warmup, args.iterations,
                          args.queue_ahead_us, host_us)
    for name, t in ms.items():
        line = {"row": f"TP MLP H={hidden} F={ffn} T={tokens}" + (f" {args.fp8}" if recipe else ""), "op": "mlp", "world": world, "m": rows, "n": ffn, "k": hidden,
                "variant": name, "ms": t, "gemm_ms": None, "baseline_ms": ms["torch MLP fwd+bwd"],
                "speedup": ms["torch MLP fwd+bwd"] / t, "overlap_efficiency": None, "relative_error": error, "host_us": host_us.get(name),
                "host_ratio": host_us[name] / host_us["torch MLP fwd+bwd"], "b2b_us": None, "b2b_ratio": None,
                "note": "input gradient compared"}
        table.append(line)
        if writer and rank == 0:
            writer.writerow(line)


# Sequence-parallel attention rows: total tokens x batch x heads x kv heads x head dim (Llama-3-8B's and
# Llama-3-70B's attention; 16k and 32k tokens over every rank, as TileLink's and AutoOverlap's).
ATTENTION_DEFAULT = "16384x1x32x8x128,32768x1x32x8x128,16384x1x64x8x128"


def attention_flops(tokens, batch, heads, d, causal, world, rank):
    """This rank's FLOPs: its queries against every key it attends (causal: keys up to its own)."""
    keys = (rank + 1) * tokens - (tokens - 1) / 2 if causal else world * tokens
    return 4.0 * batch * heads * d * tokens * keys


def bench_attention(args, world, rank, writer, table):
    """ag_attention: weft's op (each strategy, auto, and default, which is the plain path: see
    ops.attention_default_is_plain) against all_gather + SDPA in plain torch
    (plain.sequence_parallel_attention: the installed torch's fastest backend for its mask), forward,
    on this rank's tokens; E against SDPA over keys already gathered (the attention alone)."""
    for spec in args.attention.split(","):
        total, batch, heads, kv_heads, d = (int(v) for v in spec.split("x"))
        if total % world:
            print(f"skipping attention {spec}: {total} tokens do not split over {world} ranks", file=sys.stderr)
            continue
        tokens = total // world
        g = torch.Generator(device="cuda").manual_seed(args.seed * 1000 + rank)
        q = torch.randn((tokens, batch, heads, d), device="cuda", generator=g).to(torch.bfloat16)
        k = torch.randn((tokens, batch, kv_heads, d), device="cuda", generator=g).to(torch.bfloat16)
        v = torch.randn((tokens, batch, kv_heads, d), device="cuda", generator=g).to(torch.bfloat16)
        k_all, v_all = wt.layers.all_gather_rows(k), wt.layers.all_gather_rows(v)
        for causal in (False, True):
            variants = {"torch": lambda: plain.sequence_parallel_attention(q, k, v, causal=causal)}
            for name in ("sequential", "decomposed", "tilelink", "auto", "default"):
                variants["weft:" + name] = (lambda name=name: wt.ops.ag_attention(q, k, v, causal, name))
            notes, errors = {}, {}
            with torch.no_grad():
                reference = variants["torch"]()
                for name, fn in list(variants.items()):
                    try:
                        errors[name] = _slowest(relative_error(fn(), reference))
                    except Exception as e:  # noqa: BLE001 - reported in the table, not fatal
                        notes[name] = _not_run(e)
                        del variants[name]
                variants["attention alone"] = lambda: plain.attention_over_gathered(q, k_all, v_all, causal, rank)
                host_us = {}
                ms = time_interleaved(variants, args.warmup, args.iterations, args.queue_ahead_us, host_us)
            t_alone = ms.pop("attention alone")
            t_base = ms["torch"]
            flops = _slowest(attention_flops(tokens, batch, heads, d, causal, world, rank))
            for name in list(ms) + list(notes):
                t = ms.get(name)
                line = {
                    "row": f"attn T={total} b={batch} h={heads}/{kv_heads} d={d}{' causal' if causal else ''}", "op": "ag_attention",
                    "world": world, "m": tokens, "n": heads * d, "k": kv_heads * d, "variant": name, "ms": t, "gemm_ms": t_alone,
                    "baseline_ms": t_base, "speedup": t_base / t if t else None,
                    "overlap_efficiency": (t_base - t) / (t_base - t_alone) if t and t_base > t_alone else None,
                    "relative_error": errors.get(name), "host_us": host_us.get(name),
                    "host_ratio": host_us[name] / host_us["torch"] if name in host_us else None, "b2b_us": None, "b2b_ratio": None,
                    "note": notes.get(name, f"{flops / (t * 1e-3) * 1e-12:.0f} TFLOP/s (slowest rank's FLOPs)" if t else ""),
                }
                table.append(line)
                if writer and rank == 0:
                    writer.writerow(line)


def bench_model(args, world, rank, writer, table):
    """A model's step: `--layers` decoder blocks of `--model` (random weights), prefill (forward) or
    train (forward + backward), weft's blocks against the same blocks through plain torch (same
    weights), verified first (output, and in train the input gradient); step ms and tokens/s."""
    from . import models

    cfg = models.config(args.model)
    sequence_parallel = world > 1
    if args.tokens % (args.batch * world):
        raise ValueError(f"--tokens {args.tokens} must be a multiple of --batch {args.batch} x the world size {world}")
    seq = args.tokens // args.batch  # positions per sequence; each rank holds seq / W of them
    stack = wt.DecoderStack(cfg, args.layers, sequence_parallel=sequence_parallel, save_gathered_input=not args.regather_input)
    if args.moe_routing:  # the MoE layers' routing (TensorParallelMoE.routing), where not the layer's own pick
        for m in stack.modules():
            if isinstance(m, wt.TensorParallelMoE):
                m.routing = args.moe_routing
    g = torch.Generator(device="cuda").manual_seed(args.seed + rank)
    shape = (seq // world if sequence_parallel else seq, args.batch, cfg.hidden)
    if not sequence_parallel and world > 1:  # tensor parallel alone: every rank holds the same activations
        g.manual_seed(args.seed)
    x = (torch.rand(shape, device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)
    dz = (torch.rand(shape, device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)
    train = args.mode == "train"

    def step(plain_products):
        def run():
            if not train:
                with torch.no_grad():
                    return stack(x, plain_products)
            xi = x.detach().requires_grad_()
            stack.zero_grad(set_to_none=True)
            stack(xi, plain_products).backward(dz)
            return xi.grad
        return run

    weft_step, plain_step = step(False), step(True)
    # MoE layers: the reference routes each token as weft's pass did (TensorParallelMoE.fixed_ids),
    # so that the comparison measures the ops, not near-ties of the router's top-k; timed freely.
    ours = weft_step()
    routers = [m for m in stack.modules() if hasattr(m, "fixed_ids")]
    for m in routers:
        m.fixed_ids = m.last_ids
    reference = plain_step()
    errors = {f"weft {args.mode} step": _slowest(relative_error(ours, reference)), f"torch {args.mode} step": 0.0}
    host_us = {}
    names = {"weft": f"weft {args.mode} step", "plain": f"torch {args.mode} step", "async_tp": f"async_tp {args.mode} step"}
    variants = {names["weft"]: weft_step, names["plain"]: plain_step}
    notes = {}
    # PyTorch AsyncTP's fused ops in the same blocks: forward only (prefill), sequence parallel.
    if not train and sequence_parallel and not args.no_async_tp:
        async_tp_step = step("async_tp")
        try:
            errors[names["async_tp"]] = _slowest(relative_error(async_tp_step(), reference))
            variants[names["async_tp"]] = async_tp_step
            notes[names["async_tp"]] = "output compared with torch's"
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            if rank == 0:
                print(f"async_tp step: n/a ({type(e).__name__}: {str(e).splitlines()[0][:120]})", file=sys.stderr)
    for m in routers:
        m.fixed_ids = None
    ms = time_interleaved(variants, args.warmup, args.iterations, args.queue_ahead_us, host_us)
    baseline = ms[names["plain"]]
    for name, t in ms.items():
        line = {"row": f"{cfg.name} x{args.layers} T={args.tokens} b={args.batch}", "op": args.mode, "world": world, "m": args.tokens,
                "n": cfg.hidden, "k": cfg.ffn, "variant": name, "ms": t, "gemm_ms": None, "baseline_ms": baseline, "speedup": baseline / t,
                "overlap_efficiency": None, "relative_error": errors.get(name), "host_us": host_us.get(name),
                "host_ratio": host_us[name] / host_us[names["plain"]], "b2b_us": None, "b2b_ratio": None,
                "note": f"{args.tokens / (t / 1e3):.0f} tokens/s; " + notes.get(name, ("input gradient compared" if train else "output compared")
                                                                                + (f" (weft's routing; MoE ops given {routers[0].routing})" if routers else ""))}
        table.append(line)
        if writer and rank == 0:
            writer.writerow(line)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m weft.benchmark", description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="default", help="bench/NAME.json or a JSON file")
    parser.add_argument("--op", default="", help="comma-separated ops (default: every op of the suite)")
    parser.add_argument("--strategies", default="", help="comma-separated weft strategies (default: every one the op has)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--csv", default="")
    parser.add_argument("--no-async-tp", action="store_true", help="leave PyTorch AsyncTP out")
    parser.add_argument("--no-mlp", action="store_true", help="leave the TP MLP layer out")
    parser.add_argument("--regather-input", action="store_true",
                        help="the column-parallel layers gather their input again for dW instead of keeping the forward's (less memory)")
    parser.add_argument("--mlp-hidden", type=int, default=4096)
    parser.add_argument("--mlp-ffn", type=int, default=14336)
    parser.add_argument("--mlp-tokens", type=int, default=8192)
    parser.add_argument("--model", default="", help="a model's step instead of the suite: llama3-8b, llama3-70b, qwen2-72b, mixtral-8x7b (weft.models; MoE blocks: sequence parallel)")
    parser.add_argument("--layers", type=int, default=2, help="--model: decoder blocks")
    parser.add_argument("--moe-routing", choices=("ids", "table"), default="",
                        help="--model, MoE configs: the router's ids to weft's ops on the GPU, or every rank's gathered to the host "
                             "(default: the layer's pick, ids where its strategy takes them)")
    parser.add_argument("--mode", choices=("prefill", "train"), default="train", help="--model: forward, or forward + backward")
    parser.add_argument("--tokens", type=int, default=8192, help="--model: tokens per step over all ranks")
    parser.add_argument("--batch", type=int, default=1, help="--model: sequences per step")
    parser.add_argument("--fp8", choices=("tensorwise", "rowwise"), default="",
                        help="the suite's ag_gemm, gemm_rs and gemm_ar rows in FP8 (e4m3 operands scaled by the recipe, bf16 out): "
                             "weft's ops against torch._scaled_mm + torch.distributed and AsyncTP's scaled fused ops")
    parser.add_argument("--attention", nargs="?", const=ATTENTION_DEFAULT, default="",
                        help="sequence-parallel attention rows instead of the suite: TOTALxBATCHxHEADSxKV_HEADSxHEAD_DIM,... "
                             f"(given alone: {ATTENTION_DEFAULT}); weft's ag_attention against all_gather + SDPA")
    parser.add_argument("--queue-ahead-us", type=float, default=300,
                        help="device-side sleep before each timed call, so that the host's enqueue time is not timed (0: timed)")
    args = parser.parse_args(argv)

    if "WORLD_SIZE" in os.environ and not dist.is_initialized():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    wt.init()
    world, rank = wt.world_size(), wt.communicator().rank
    fields = ["row", "op", "world", "m", "n", "k", "variant", "ms", "gemm_ms", "baseline_ms", "speedup", "overlap_efficiency",
              "relative_error", "host_us", "host_ratio", "b2b_us", "b2b_ratio", "note"]
    out = open(args.csv, "w", newline="") if args.csv and rank == 0 else None
    writer = csv.DictWriter(out, fieldnames=fields) if out else None
    if writer:
        writer.writeheader()
    table = []
    if args.model:
        bench_model(args, world, rank, writer, table)
    elif args.attention:
        bench_attention(args, world, rank, writer, table)
    else:
        bench_suite(args, world, rank, writer, table)
        if not args.no_mlp:
            bench_mlp(args, world, rank, writer, table)
    if rank == 0:
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-"
        print(f"{torch.cuda.get_device_name()} x {world}, torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {nccl}; "
              "speedup over torch.mm + torch.distributed")
        print(f"queue ahead {args.queue_ahead_us:g} us (device time of each call; host us: its enqueue time on the host)")
        width = max([24] + [len(r["row"]) for r in table])  # whole names: attention rows end in " causal"
        print(f"{'row':{width}} {'op':9} {'variant':26} {'ms':>8} {'speedup':>8} {'E':>6} {'rel.err':>9} {'host us':>8} {'host x':>7} {'b2b us':>7} {'b2b x':>6}  note")
        for r in table:
            fmt = lambda v, f: format(v, f) if isinstance(v, (int, float)) else "-"  # noqa: E731
            print(f"{r['row']:{width}} {r['op']:9} {r['variant']:26} {fmt(r['ms'], '8.3f')} {fmt(r['speedup'], '8.3f')} "
                  f"{fmt(r['overlap_efficiency'], '6.2f')} {fmt(r['relative_error'], '9.2e')} {fmt(r['host_us'], '8.1f')} "
                  f"{fmt(r['host_ratio'], '7.2f')} {fmt(r['b2b_us'], '7.1f')} {fmt(r['b2b_ratio'], '6.2f')}  {r['note']}")
    if out:
        out.close()
    bad = [r for r in table if r["relative_error"] is not None and r["relative_error"] > 2e-2]
    if dist.is_initialized():
        dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
