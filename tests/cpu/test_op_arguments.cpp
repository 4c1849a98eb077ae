// The op API's argument checks (plan/op_arguments.hpp), on the CPU: every bad spec and call that
// weft::Op refuses before launching anything, at world sizes no machine here has, each refused with
// a message naming what was wrong; and what it accepts (the routed ops, MoE excepted).
#include <gtest/gtest.h>

#include <cstdint>

#include "../support/expect_refused.hpp"
#include "weft/plan/op_arguments.hpp"

namespace weft {
namespace {

using test_support::expect_refused;

OpShape shape(OpKind op, int64_t max_rows = 256) { return OpShape{op, 128, 64, max_rows, DType::bf16, DType::bf16}; }

TEST(OpArguments, TheShapesTheApiTakes) {
  for (OpKind op : {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar, OpKind::gemm_a2a, OpKind::a2a_gemm})
    EXPECT_NO_THROW(check_op_shape(shape(op), 4)) << to_string(op);
  expect_refused([] { check_op_shape(shape(OpKind::ag_moe), 2); }, "ag_moe needs experts >= 1 and topk in 1..experts (experts=0 topk=0)");
  expect_refused([] { check_op_shape(shape(OpKind::moe_rs), 2); }, "moe_rs needs experts >= 1");
  expect_refused([] { check_op_shape(shape(OpKind::ag_attention), 2); }, "ag_attention is not a GEMM: weft::AttentionOp takes it");
}

// The MoE ops through the op API: experts and topk with the shape, every rank's expert choices per
// call (the problem's), bf16 only so far.
TEST(OpArguments, TheMoeOpsTakeExpertsAndEveryRanksChoicesPerCall) {
  for (OpKind op : {OpKind::ag_moe, OpKind::moe_rs}) {
    OpShape s = shape(op, 64);
    s.experts = 8;
    s.topk = 2;
    EXPECT_NO_THROW(check_op_shape(s, 4)) << to_string(op);
    const auto choices = random_choices(4, 48, 8, 2, 3);
    const Problem p = op_call_problem(s, 4, 48, choices);
    EXPECT_EQ(p.experts, 8);
    EXPECT_EQ(p.topk, 2);
    EXPECT_EQ(p.choices, choices);
    EXPECT_EQ(output_rows(p, 1), op == OpKind::ag_moe ? 4 * 48 * 2 : 48);
    expect_refused([&] { (void)op_call_problem(s, 4, 48, {}); }, "needs every rank's expert choices");
    s.topk = 9;
    expect_refused([&] { check_op_shape(s, 4); }, "topk in 1..experts (experts=8 topk=9)");
    s.topk = 2;
    s.input_dtype = DType::e4m3;
    s.scaling = Scaling::row;
    expect_refused([&] { check_op_shape(s, 4); }, "takes bf16 so far");
  }
  OpShape dense = shape(OpKind::gemm_ar);
  dense.experts = 8;
  expect_refused([&] { check_op_shape(dense, 2); }, "experts, topk and routing_on_device are the MoE ops'");
}

// The MoE ops with the choices given on the device (OpShape::routing_on_device): a call's problem
// takes no table (one plan per row count, whatever the routing), a host table is refused, the flag is
// the MoE ops' only, and the route's block limit is refused with the shape.
TEST(OpArguments, TheMoeOpsWithChoicesOnTheDeviceTakeNoTable) {
  for (OpKind op : {OpKind::ag_moe, OpKind::moe_rs}) {
    OpShape s = shape(op, 64);
    s.experts = 8;
    s.topk = 2;
    s.routing_on_device = true;
    EXPECT_NO_THROW(check_op_shape(s, 4)) << to_string(op);
    const Problem p = op_call_problem(s, 4, 48, {});
    EXPECT_TRUE(p.routing_on_device);
    EXPECT_TRUE(p.choices.empty());
    EXPECT_EQ(output_rows(p, 1), op == OpKind::ag_moe ? 4 * 48 * 2 : 48);
    expect_refused([&] { (void)op_call_problem(s, 4, 48, random_choices(4, 48, 8, 2, 3)); }, "takes its choices on the device");
  }
  OpShape dense = shape(OpKind::gemm_ar);
  dense.routing_on_device = true;
  expect_refused([&] { check_op_shape(dense, 2); }, "routing_on_device are the MoE ops'");
  OpShape wide = shape(OpKind::ag_moe, 64);
  wide.experts = 1024;
  wide.topk = 2;
  wide.routing_on_device = true;
  EXPECT_NO_THROW(check_op_shape(wide, 8));
  expect_refused([&] { check_op_shape(wide, 9); }, "at most 8192 (rank, expert) blocks");
}

// weft::AttentionOp's shape and per-call checks: what it takes (GQA and MHA, causal or not, any
// batch, at worlds 1-8) gives the problem the plans are made for; what it refuses names the values.
TEST(AttentionArguments, TheShapesTheApiTakesAndTheProblemOfACall) {
  for (int world : {1, 2, 8}) {
    AttentionShape s{2, 32, 8, 128, true, 4096};
    EXPECT_NO_THROW(check_attention_shape(s, world));
    const Problem p = attention_call_problem(s, world, 1000);
    EXPECT_EQ(p.op, OpKind::ag_attention);
    EXPECT_EQ(p.m, 1000);
    EXPECT_EQ(p.world_size, world);
    EXPECT_EQ(p.batch, 2);
    EXPECT_EQ(p.heads, 32);
    EXPECT_EQ(p.kv_heads, 8);
    EXPECT_EQ(p.head_dim, 128);
    EXPECT_TRUE(p.causal);
    EXPECT_EQ(query_cols(p), 2 * 32 * 128);
    EXPECT_EQ(key_cols(p), 2 * 8 * 128);
  }
  AttentionShape mha{1, 16, 0, 64, false, 512};  // kv_heads 0: as many as heads
  EXPECT_EQ(attention_call_problem(mha, 4, 512).kv_heads, 16);
}

TEST(AttentionArguments, BadShapesAndCallsAreRefusedNamingTheValues) {
  expect_refused([] { check_attention_shape(AttentionShape{1, 0, 0, 64, false, 128}, 2); }, "must be positive (batch=1 heads=0");
  expect_refused([] { check_attention_shape(AttentionShape{1, 8, 8, 64, false, 0}, 2); }, "max_tokens=0");
  expect_refused([] { check_attention_shape(AttentionShape{1, 8, 3, 64, false, 128}, 2); }, "heads (8) must be a multiple of kv_heads (3)");
  expect_refused([] { check_attention_shape(AttentionShape{1, 8, 8, 60, false, 128}, 2); }, "head_dim=60 must be a multiple of 8");
  const AttentionShape s{1, 8, 8, 64, false, 128};
  expect_refused([&] { (void)attention_call_problem(s, 2, 129); }, "tokens=129 per rank is outside 1..max_tokens=128");
  expect_refused([&] { (void)attention_call_problem(s, 2, 0); }, "tokens=0");
}

TEST(OpArguments, BadShapesAreRefusedNamingTheValues) {
  OpShape s = shape(OpKind::gemm_ar);
  s.n = 0;
  expect_refused([&] { check_op_shape(s, 1); }, "n, k and max_rows must be positive (n=0 k=64 max_rows=256)");
  s = shape(OpKind::gemm_ar, -1);
  expect_refused([&] { check_op_shape(s, 1); }, "max_rows=-1");
  s = shape(OpKind::gemm_ar);
  s.input_dtype = s.output_dtype = DType::f16;
  expect_refused([&] { check_op_shape(s, 1); }, "f16 -> f16 is not supported yet");
  s = shape(OpKind::gemm_ar);
  s.output_dtype = DType::f32;
  expect_refused([&] { check_op_shape(s, 1); }, "bf16 -> f32 is not supported yet");
  s = shape(OpKind::gemm_ar);
  s.k = 100;
  expect_refused([&] { check_op_shape(s, 1); }, "n=128 and k=100 must be multiples of 8");
  s = shape(OpKind::gemm_ar);
  s.n = 12;
  expect_refused([&] { check_op_shape(s, 1); }, "n=12 and k=64 must be multiples of 8");
}

TEST(OpArguments, GemmRsNeedsMaxRowsAMultipleOfTheWorld) {
  EXPECT_NO_THROW(check_op_shape(shape(OpKind::gemm_rs, 8 * 6), 8));
  expect_refused([] { check_op_shape(shape(OpKind::gemm_rs, 8 * 6 + 4), 8); }, "gemm_rs needs max_rows a multiple of the world size 8 (got 52)");
  EXPECT_NO_THROW(check_op_shape(shape(OpKind::gemm_ar, 52), 8)) << "only gemm_rs splits its rows over the ranks";
}

TEST(OpArguments, ACallsRowsAndRouting) {
  const Problem p = op_call_problem(shape(OpKind::ag_gemm), 4, 200, {});
  EXPECT_EQ(p, (Problem{OpKind::ag_gemm, 200, 128, 64, 4, DType::bf16, DType::bf16, {}}));
  expect_refused([] { op_call_problem(shape(OpKind::ag_gemm), 4, 257, {}); }, "rows=257 is outside 1..max_rows=256");
  expect_refused([] { op_call_problem(shape(OpKind::ag_gemm), 4, 0, {}); }, "rows=0 is outside 1..max_rows=256");
  expect_refused([] { op_call_problem(shape(OpKind::gemm_ar), 2, 64, {{0}, {1}}); }, "gemm_ar takes no routing");
  expect_refused([] { op_call_problem(shape(OpKind::gemm_rs), 4, 66, {}); }, "gemm_rs needs m (66) divisible by world_size (4)");
  expect_refused([] { op_call_problem(shape(OpKind::gemm_a2a), 2, 3, {}); }, "gemm_a2a needs the routing of every rank");
  // A routing that does not fit: a destination outside the world, a rank's routing of the wrong length.
  expect_refused([] { op_call_problem(shape(OpKind::a2a_gemm), 2, 3, {{0, 1, 2}, {0, 0, 0}}); }, "routing[0] names rank 2");
  expect_refused([] { op_call_problem(shape(OpKind::a2a_gemm), 2, 3, {{0, 1}, {0, 0, 0}}); }, "routing[0] has 2");
  const std::vector<std::vector<int>> routing = {{1, 1, 0}, {0, 1, 1}};
  EXPECT_EQ(op_call_problem(shape(OpKind::gemm_a2a), 2, 3, routing).routing, routing);
}

TEST(OpArguments, CallersPointersAreSetAndAligned) {
  alignas(16) static char buffer[64];
  EXPECT_NO_THROW(check_op_pointer(buffer, "a"));
  expect_refused([] { check_op_pointer(nullptr, "b"); }, "weft::Op::run: b is null");
  expect_refused([] { check_op_pointer(buffer + 8, "c"); }, "is not 16-byte aligned");
}

}  // namespace
}  // namespace weft
