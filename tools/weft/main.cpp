// `weft`: the command line. `weft --help` lists the commands, ops and strategies.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands.hpp"
#ifdef WEFT_HAVE_CUDA
#include "weft/runtime/signal_set.hpp"
#endif

namespace {

void print_help() {
  std::printf(
      "weft: GEMM overlapped with the communication that depends on it\n\n"
      "usage: weft <command> [--option value ...]\n\n"
      "commands:\n"
      "  bench   time strategies on the local GPUs; without a GPU, run the plan checks on the CPU\n"
      "          --suite NAME|FILE (bench/NAME.json; default: default) --world LIST --op LIST\n"
      "          --strategy LIST --warmup N --iterations N --json FILE --csv FILE --seed S --machine FILE\n"
      "          signal: --gemm-sms N (SMs its GEMM keeps; default the profile's) --gemm-cta-per-tile\n"
      "          --partition 1,2,2 (wave groups; default: the predictive search)\n"
      "          --restore after_each_group|own_stream|at_end (where tiles are put back in place)\n"
      "          fused: --comm-chunks N (row chunks each peer's shard is pulled in; default 1)\n"
      "          chunked: --template swizzle|ring|2d|pull|partition --chunks N --backend copy_engine|sm\n"
      "          --comm-sms N (SMs left to sm copies) --group-size N (2d) --schedule FILE (a JSON schedule)\n"
      "          tilelink: --comm-sms N (the companion kernel's SMs; default 20) --comm-tile-rows N\n"
      "          (rows per communication tile; default about a quarter of a rank's rows) --order ring|all_to_all\n"
      "  bench gemm  the overlap GEMM (empty table; notify on every tile + remapped stores) against\n"
      "          cuBLASLt on GPU 0, over the suites' GEMM shapes of one rank\n"
      "          --suite LIST (default: default,tilelink_mlp,flux_gpt3,flashoverlap_ar) --world W (4)\n"
      "          --warmup N --iterations N --csv FILE --seed S\n"
      "  bench rmsnorm  RMSNorm of signal's restored result vs RMSNorm reading it where signal left it\n"
      "          (the remap fused in; FlashOverlap Table 4), and restore + RMSNorm, on GPU 0\n"
      "          --suite LIST (default: flashoverlap_ar,tilelink_mlp,tilelink_moe) --world W (2)\n"
      "          --warmup N --iterations N (50) --csv FILE --seed S --machine FILE\n"
      "  bench tilelink  TileLink's microbenchmark on GPU 0: the companion kernel's copy bandwidth by CTAs\n"
      "          (and a pull from GPU 1 where visible), the overlap GEMM's time by SMs given to communication,\n"
      "          alone and beside the companion copying on them\n"
      "          --ctas LIST --comm-sms LIST --gemm MxNxK,... --copy-mib N (256) --comm-tile-rows N (1024)\n"
      "          --warmup N --iterations N --csv FILE --machine FILE\n"
      "  characterize  FiCCO's decomposition (GEMM cut 1/W, 1/W^2 by rows and K) and contention\n"
      "          (GEMM with copy-engine or NCCL all-gather) losses for a suite's AllGather+GEMM rows\n"
      "          --suite NAME|FILE (default: tilelink_mlp) --world LIST --warmup N --iterations N --csv FILE\n"
      "  tune    --calibrate: measure GPU 0's peak GEMM rate and HBM bandwidth, write a machine profile\n"
      "          --out FILE (machine_profile.json) --warmup N --iterations N; read back with --machine FILE;\n"
      "          also NCCL all-reduce / reduce-scatter / all-to-all latency curves at world sizes 2, 4, 8\n"
      "          --partitions: signal's predicted vs measured time per wave partition, searched vs best\n"
      "          --suite NAME|FILE (flashoverlap_ar) --op LIST --world LIST --machine FILE --max-partitions N\n"
      "          --gemm-sms N --restore PLACEMENT --csv FILE --warmup N --iterations N\n"
      "  simulate  predict a call's time per strategy from the machine profile (the plan's third executor)\n"
      "          --op OP --m M --n N --k K --world W (any size) --strategy LIST --machine FILE --trace FILE\n"
      "          (Chrome/Perfetto JSON of the first strategy); chunked's options as for bench\n"
      "          --check-results DIR: replay every row weft bench recorded there (world >= 2), error per strategy\n"
      "          --csv FILE\n"
      "  tune --strategy S  search S's knobs (chunked: template, chunks, backend, comm SMs; fused: chunks;\n"
      "          signal: GEMM SMs, restore): predict every setting, time the best --keep N (3) against\n"
      "          sequential on the local GPUs, write them into the tuning table --out FILE\n"
      "          (bench/tuning/<gpu>.json) that auto and the strategies read; --suite --op --world --machine\n"
      "  tune --from-results  a tuning table of the rows weft bench recorded (--results DIR --out FILE)\n"
      "  tune --check-auto  auto on every recorded shape, left out of the table it chooses by (--results --machine)\n"
      "  tune --fit-simulator  fit the simulator's constants to the rows weft bench recorded\n"
      "          --results DIR (bench/results) --machine FILE --out FILE (the fitted profile)\n"
      "  check   prove plans on the CPU: validate, run the reference executor, compare with the op\n"
      "          --op LIST --strategy LIST --world LIST --seed S\n"
      "  plan    print one plan and its validation report\n"
      "          --op OP --strategy S --m M --n N --k K --world W --tile MxN --raster along_m|along_n\n"
      "          --swizzle S --seed S (gemm_a2a routing) --machine FILE; chunked's options as for bench;\n"
      "          --schedule FILE lowers a JSON chunk schedule (chunked) and prints it with the plan\n\n"
      "ops: ag_gemm (AllGather->GEMM), gemm_rs (GEMM->ReduceScatter), gemm_ar (GEMM->AllReduce),\n"
      "     gemm_a2a (GEMM->All-to-All of token rows), a2a_gemm (All-to-All of token rows->GEMM)\n\n"
      "strategies:\n");
  for (const auto& s : weft::strategies())
    std::printf("  %-11s (%s) %s\n", s.name.c_str(), s.paper.c_str(), s.description.c_str());
}

}  // namespace

int main(int argc, char** argv) {
#ifdef WEFT_HAVE_CUDA
  weft::configure_cuda_for_waits();
#endif
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    print_help();
    return argc < 2 ? 2 : 0;
  }
  const bool gemm_bench = !std::strcmp(argv[1], "bench") && argc > 2 && !std::strcmp(argv[2], "gemm");
  const bool rmsnorm_bench = !std::strcmp(argv[1], "bench") && argc > 2 && !std::strcmp(argv[2], "rmsnorm");
  const bool tilelink_bench = !std::strcmp(argv[1], "bench") && argc > 2 && !std::strcmp(argv[2], "tilelink");
  const std::string command = gemm_bench ? "bench gemm" : rmsnorm_bench ? "bench rmsnorm" : tilelink_bench ? "bench tilelink" : argv[1];
  try {
    const weft::cli::Arguments args(argc, argv, gemm_bench || rmsnorm_bench || tilelink_bench ? 3 : 2);
    int code = 2;
    if (gemm_bench) code = weft::cli::command_bench_gemm(args);
    else if (rmsnorm_bench) code = weft::cli::command_bench_rmsnorm(args);
    else if (tilelink_bench) code = weft::cli::command_bench_tilelink(args);
    else if (command == "bench") code = weft::cli::command_bench(args);
    else if (command == "check") code = weft::cli::command_check(args);
    else if (command == "characterize") code = weft::cli::command_characterize(args);
    else if (command == "tune") code = weft::cli::command_tune(args);
    else if (command == "plan") code = weft::cli::command_plan(args);
    else if (command == "simulate") code = weft::cli::command_simulate(args);
    else {
      std::fprintf(stderr, "weft: unknown command '%s'; see weft --help\n", command.c_str());
      return 2;
    }
    for (const auto& name : args.unread()) std::fprintf(stderr, "weft: warning: option %s was not used\n", name.c_str());
    return code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft %s: %s\n", command.c_str(), e.what());
    return 2;
  }
}
