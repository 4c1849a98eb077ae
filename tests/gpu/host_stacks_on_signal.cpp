// Every thread's host stack on SIGUSR1, without a debugger: scripts/hang_probe.sh sends it to a GPU
// test that outlived its limit. cuda-gdb, the only debugger on the GPU machines, can take longer to
// attach than the probe waits; this prints the stacks in a second. The process-directed SIGUSR1 lands on some thread, which forwards SIGUSR2 to
// every thread of the process (itself included); each writes its own backtrace to
// $WEFT_HOST_STACKS_DIR/host_stacks_<pid>.txt (default /tmp). Symbols need the executable's
// exports (ENABLE_EXPORTS); `c++filt` demangles. backtrace() is not formally async-signal-safe; it
// is called once at start-up so that its library is loaded before any signal, the usual practice.
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

char g_path[512];
std::atomic_flag g_writing = ATOMIC_FLAG_INIT;

void write_text(int fd, const char* text) { (void)!write(fd, text, std::strlen(text)); }

void write_number(int fd, long value) {
  char digits[24];
  int n = 0;
  do digits[n++] = static_cast<char>('0' + value % 10); while ((value /= 10) > 0);
  char text[24];
  for (int i = 0; i < n; ++i) text[i] = digits[n - 1 - i];
  (void)!write(fd, text, static_cast<size_t>(n));
}

void dump_this_thread(int) {
  void* frames[48];
  const int depth = backtrace(frames, 48);
  while (g_writing.test_and_set(std::memory_order_acquire)) {}
  const int fd = open(g_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    write_text(fd, "thread ");
    write_number(fd, static_cast<long>(syscall(SYS_gettid)));
    write_text(fd, ":\n");
    backtrace_symbols_fd(frames, depth, fd);
    close(fd);
  }
  g_writing.clear(std::memory_order_release);
}

// The thread list through open and getdents64 into a stack buffer: no allocation (opendir's would
// deadlock where the signal lands on a thread inside malloc).
void forward_to_every_thread(int) {
  const pid_t pid = getpid();
  const int tasks = open("/proc/self/task", O_RDONLY | O_DIRECTORY);
  if (tasks < 0) return;
  alignas(8) char buffer[4096];
  for (;;) {
    const long got = syscall(SYS_getdents64, tasks, buffer, sizeof buffer);
    if (got <= 0) break;
    for (long at = 0; at < got;) {
      // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
      unsigned short length = 0;
      std::memcpy(&length, buffer + at + 16, sizeof length);
      long tid = 0;
      for (const char* c = buffer + at + 19; *c >= '0' && *c <= '9'; ++c) tid = tid * 10 + (*c - '0');
      if (tid > 0) syscall(SYS_tgkill, pid, tid, SIGUSR2);
      at += length;
    }
  }
  close(tasks);
}

[[maybe_unused]] const bool g_installed = [] {
  const char* dir = std::getenv("WEFT_HOST_STACKS_DIR");
  std::snprintf(g_path, sizeof g_path, "%s/host_stacks_%d.txt", dir != nullptr ? dir : "/tmp", static_cast<int>(getpid()));
  unlink(g_path);  // an earlier process's stacks under a reused pid
  void* warm[2];
  (void)backtrace(warm, 2);
  struct sigaction forward {}, dump {};
  forward.sa_handler = forward_to_every_thread;
  dump.sa_handler = dump_this_thread;
  sigemptyset(&forward.sa_mask);
  sigemptyset(&dump.sa_mask);
  dump.sa_flags = SA_RESTART;
  forward.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &forward, nullptr);
  sigaction(SIGUSR2, &dump, nullptr);
  return true;
}();

}  // namespace
