// How this benchmark process was started: alone (it drives every rank, a thread per GPU) or as one
// rank of several that a launcher started (torchrun, mpirun, srun), as users run weft. CPU-only.
#pragma once

namespace weft::bench {

// A world size above 1 in the launcher's environment (WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE,
// SLURM_NTASKS). A launcher's world of one (one srun task, torchrun --nproc_per_node=1) leaves every
// GPU of the process to its threads, as without a launcher.
bool launched_one_rank_per_process();

// The process that prints a benchmark's tables: any without a launcher, else rank 0's (RANK,
// OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID).
bool prints_for_every_rank();

}  // namespace weft::bench
