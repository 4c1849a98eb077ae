// The `chunked` strategy (AutoOverlap, autooverlap.txt Sections 5.1 and 5.2): a chunk schedule
// (ir/schedule.hpp) from a template or written by the user, lowered to a plan.
//
//   Schedule s = make_schedule(problem, options.chunked);          // or parse_schedule_json(text)
//   Plan plan = lower_schedule(problem, s, options);               // what plan_chunked does
//
// Lowering, per rank:
//   - one overlap GEMM on stream 0 over the whole problem. ag_gemm: the own shard is copied into
//     the gathered A before it; each tile waits for its row block's counter, raised when the
//     chunks holding those rows have landed, and tiles run in the estimated arrival order of their
//     rows (the tile scheduler follows the chunks, Section 5.2), the raster and swizzle kept within
//     a chunk for locality. gemm_rs and gemm_ar: tiles store locally and count per row block; tiles
//     of rows that leave early run first.
//   - each chunk operation on a stream of its own per (backend, peer): copy-engine copies
//     (cudaMemcpy2DAsync through symmetric memory), SM copies (a copy kernel on the comm_sms SMs
//     the GEMM then leaves free), or NCCL all_reduce calls (gemm_ar; the GEMM leaves the profile's
//     collective_sms). A dependency (rank q, op i) becomes a counter on the dependent rank that op i
//     raises when done. Pulls read a peer's own rows from its A shard and relayed rows from its
//     gathered A.
//   - counters are written by one stream each (no kernel, so no SM is needed to raise them while the
//     GEMM holds every SM); where several operations fill one row block, a join step on a stream of
//     its own waits for all of them and raises the block once.
//   - gemm_rs: arrivals land in a slot per source rank; each segment of this rank's block is summed
//     (its own partial rows and every slot) as soon as its chunks are in, not after the last.
#pragma once

#include <string>
#include <string_view>

#include "weft/ir/schedule.hpp"
#include "weft/plan/strategies.hpp"

namespace weft {

// The schedule a template makes for `problem` (options.shape, chunks, backend, group_size).
Schedule make_schedule(const Problem& problem, const ChunkedOptions& options);
// check_schedule, then the plan (see above). Throws std::invalid_argument naming what is wrong.
Plan lower_schedule(const Problem& problem, const Schedule& schedule, const PlanOptions& options);

// A schedule as JSON, and back:
//   {"name": "...", "op": "ag_gemm", "ranks": [[{"kind": "pull", "peer": 1, "rows": [128, 192],
//     "backend": "copy_engine", "after": [[1, 0]]}, ...], ...]}
// "rows" is [first, end) of the op's logical tensor; "after" lists [rank, index] pairs; a
// collective names "collective": "all_reduce". Parsing throws std::invalid_argument with the field.
std::string schedule_json(const Schedule& schedule);
// Strict JSON (src/common/json.hpp); errors read "NAME: byte N: ranks[0][2].peer: ...".
Schedule parse_schedule_json(std::string_view text, const std::string& name = "schedule");
Schedule load_schedule(const std::string& path);

}  // namespace weft
