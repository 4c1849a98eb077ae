// `weft`: the command line. `weft --help` lists the commands, ops and strategies.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "commands.hpp"
#include "on_gpus.hpp"
#ifdef WEFT_HAVE_CUDA
#include "weft/runtime/signal_set.hpp"
#endif

namespace {

void print_help() {
  std::printf(
      "weft: GEMM overlapped with the communication that depends on it\n\n"
      "usage: weft <command> [--option value ...]     weft <command> --help: the command's options\n"
      "       weft --version\n\n"
      "commands:\n");
  for (const auto& c : weft::cli::command_specs()) std::printf("  %-16s %s\n", c.name.c_str(), c.summary.c_str());
  std::printf(
      "\nops: ag_gemm (AllGather->GEMM), gemm_rs (GEMM->ReduceScatter), gemm_ar (GEMM->AllReduce),\n"
      "     gemm_a2a (GEMM->All-to-All of token rows), a2a_gemm (All-to-All of token rows->GEMM),\n"
      "     ag_moe (AllGather of tokens->gather->grouped GEMM), moe_rs (grouped GEMM->top-k reduce->ReduceScatter),\n"
      "     ag_attention (AllGather of K and V->self-attention, sequence parallel; weft's attention kernel on the GPU, bf16)\n\n"
      "strategies:\n");
  for (const auto& s : weft::strategies())
    std::printf("  %-11s (%s) %s\n", s.name.c_str(), s.paper.c_str(), s.description.c_str());
  std::printf(
      "\nexit codes: 0 done; 1 a result did not check (a mismatch, a choice slower than sequential);\n"
      "            2 bad input or an error; %d a command that needs a GPU found none (nothing ran)\n",
      weft::cli::kExitNoGpu);
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
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "version")) {
    if (argc > 2) {
      std::fprintf(stderr, "weft --version: takes no arguments (got '%s')\n", argv[2]);
      return 2;
    }
    std::printf("weft %s\n", WEFT_VERSION);  // the CMake project version
    return 0;
  }
  // "bench gemm", "bench rmsnorm", "bench tilelink", "bench kernels", "bench attention": two words.
  std::string command = argv[1];
  int first = 2;
  if (command == "bench" && argc > 2 && argv[2][0] != '-') {
    command += std::string(" ") + argv[2];
    first = 3;
  }
  try {
    const weft::cli::CommandSpec& spec = weft::cli::find_command(command);
    for (int i = first; i < argc; ++i)
      if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
        std::printf("%s", weft::cli::command_help(spec).c_str());
        return 0;
      }
    const weft::cli::Arguments args(argc, argv, first, spec);
    int code = 2;
    if (command == "bench gemm") code = weft::cli::command_bench_gemm(args);
    else if (command == "bench rmsnorm") code = weft::cli::command_bench_rmsnorm(args);
    else if (command == "bench tilelink") code = weft::cli::command_bench_tilelink(args);
    else if (command == "bench kernels") code = weft::cli::command_bench_kernels(args);
    else if (command == "bench attention") code = weft::cli::command_bench_attention(args);
    else if (command == "bench") code = weft::cli::command_bench(args);
    else if (command == "check") code = weft::cli::command_check(args);
    else if (command == "characterize") code = weft::cli::command_characterize(args);
    else if (command == "tune") code = weft::cli::command_tune(args);
    else if (command == "plan") code = weft::cli::command_plan(args);
    else if (command == "simulate") code = weft::cli::command_simulate(args);
    for (const auto& name : args.unread())
      std::fprintf(stderr, "weft %s: warning: %s was given but does not apply here\n", command.c_str(), name.c_str());
    // Everything printed must have reached its destination (a full disk, a closed pipe): exit 0
    // only when it did.
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      std::fprintf(stderr, "weft %s: writing the output failed\n", command.c_str());
      return code == 0 ? 1 : code;
    }
    return code;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "weft %s: out of memory (the shapes or world size given are too large for this machine)\n", command.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft %s: %s\n", command.c_str(), e.what());
    return 2;
  }
}
