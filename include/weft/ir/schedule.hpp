// Chunk schedules (AutoOverlap, autooverlap.txt Section 5.1): the communication of one op as, per
// rank, a list of chunk-level operations with (rank, index) dependencies. A schedule says what moves
// where and after what; lowering it (plan/chunked.hpp) picks streams and signals, aligns the GEMM's
// tile order with chunk arrival and yields an ordinary plan, which the checks and executors take
// like any other.
//
// Chunks are row ranges of the op's logical tensor (every column):
//   ag_gemm : the gathered A, [W * m, k] on every rank. Rank r holds rows [r m, (r+1) m) at the
//             start; a pull copies rows from a peer's gathered A into its own, a push the reverse.
//             Rows a peer relays (received earlier) are read from the peer's gathered A, so ring
//             schedules work.
//   gemm_rs : the partial product P, [m, n] on every rank; rank d's result is rows
//             [d m/W, (d+1) m/W) of the sum over ranks. A push sends this rank's rows of block d to
//             d, a pull brings a peer's rows of this rank's block; d sums what arrives per chunk.
//   gemm_ar : C, [m, n]; a collective all_reduce over a row range, every rank in the same order.
// A chunk is moved by a backend: the copy engine (pulls and pushes through symmetric memory), SMs
// (a copy kernel on the SMs the GEMM leaves free), or NCCL (collectives).
//
//   Schedule s = make_schedule(problem, {.shape = ScheduleShape::ring, .chunks = 2});  // plan/chunked.hpp
//   check_schedule(problem, s);   // throws std::invalid_argument naming the operations at fault
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "weft/ir/plan.hpp"
#include "weft/ir/problem.hpp"

namespace weft {

enum class ChunkOpKind { pull, push, collective };
enum class ChunkBackend { copy_engine, sm, nccl };
std::string_view to_string(ChunkOpKind kind);
std::string_view to_string(ChunkBackend backend);
ChunkOpKind parse_chunk_op_kind(std::string_view text);    // throws std::invalid_argument naming the text
ChunkBackend parse_chunk_backend(std::string_view text);  // throws std::invalid_argument naming the text

// Operation `index` of rank `rank`'s list.
struct ChunkRef {
  int rank = 0;
  int index = 0;
  bool operator==(const ChunkRef&) const = default;
};

struct ChunkOp {
  ChunkOpKind kind = ChunkOpKind::pull;
  int peer = -1;       // pull: the rank read from; push: the rank written to; collective: unused
  int64_t row = 0;     // rows [row, row + rows) of the logical tensor
  int64_t rows = 0;
  CollectiveKind collective = CollectiveKind::all_reduce;  // collective ops
  ChunkBackend backend = ChunkBackend::copy_engine;
  std::vector<ChunkRef> after;  // operations that must have completed before this one starts
  bool operator==(const ChunkOp&) const = default;
};

struct Schedule {
  std::string name;
  OpKind op = OpKind::ag_gemm;
  std::vector<std::vector<ChunkOp>> ranks;  // ranks[r]: rank r's operations, in issue order
  bool operator==(const Schedule&) const = default;
};

// Rows of the logical tensor (see above) for `problem`.
int64_t schedule_rows(const Problem& problem);
// "op 3 of rank 1 (pull rows 64..128 from rank 2)".
std::string describe_chunk_op(const Schedule& schedule, const ChunkRef& ref);

// Throws std::invalid_argument, naming the operations at fault, unless the schedule fits the
// problem: one list per rank; peers, rows and dependencies in range; ops the op kind allows (pulls
// and pushes for ag_gemm and gemm_rs, collectives for gemm_ar); rows of gemm_rs within the block of
// the rank that receives them; every rank's collectives the same and in the same order; and no
// cycle among the dependencies (with each rank's operations on one backend and peer in issue
// order, as lowering runs them). It does not prove the data arrives (the plan checks do that).
void check_schedule(const Problem& problem, const Schedule& schedule);

}  // namespace weft
