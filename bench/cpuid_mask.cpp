/* An AVX2-only x86 host on an AVX-512 one, for every library in a process (`bench/run.py --isa avx2`).
 *
 * LD_PRELOAD it: its constructor turns on the CPU's CPUID faulting for the process (Linux
 * arch_prctl(ARCH_SET_CPUID, 0), the `cpuid_fault` flag in /proc/cpuinfo; inherited by the threads
 * and processes created after it, reset on exec) and emulates each CPUID instruction in its SIGSEGV
 * handler, with the AVX-512 and AMX feature bits cleared. ONNX Runtime's MLAS, PyTorch's
 * dispatch and oneDNN (Xbyak) then choose their AVX2 kernels as they would on an AVX2-only EPYC:
 * without it, an "AVX2 host class" run capped graft alone (GRAFT_CPU_ISA=avx2) and compared it with
 * peers on AVX-512 kernels. Libraries that asked CPUID before this constructor ran (the dynamic
 * loader's own string functions; a library initialised earlier) keep what they saw, so run.py caps
 * graft, oneDNN and PyTorch by their environment variables as well.
 *
 * CPUID faulting has a cost of its own: the kernel switches it per thread in a model-specific
 * register at every context switch, which in a VM is an exit to the hypervisor (graft's mobilenet_v2
 * b1 step under passive waits 5.2 -> 5.5 ms with it on). So a process that has made its choices
 * (bench/child.py: after the warm-up steps) calls graft_cpuid_mask_release(), which turns it off in
 * every thread; a CPUID after that sees the host's real features.
 *
 * Where the CPU or kernel has no CPUID faulting it says so on stderr and the process exits with
 * status 3, rather than silently measuring the AVX-512 host.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <asm/prctl.h>
#include <cpuid.h>
#include <dirent.h>
#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifndef ARCH_SET_CPUID
#define ARCH_SET_CPUID 0x1012
#endif

namespace {

struct sigaction previous;

long set_cpuid(int enabled) { return syscall(SYS_arch_prctl, ARCH_SET_CPUID, static_cast<unsigned long>(enabled)); }

/* The feature bits an AVX2-only EPYC (Zen 2/3) does not have. */
void mask(uint32_t leaf, uint32_t subleaf, uint32_t* a, uint32_t* b, uint32_t* c, uint32_t* d) {
  if (leaf == 7 && subleaf == 0) {
    /* EBX: AVX512F 16, DQ 17, IFMA 21, PF 26, ER 27, CD 28, BW 30, VL 31. */
    *b &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) | (1u << 30) | (1u << 31));
    /* ECX: VBMI 1, VBMI2 6, VNNI 11, BITALG 12, VPOPCNTDQ 14. */
    *c &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
    /* EDX: 4VNNIW 2, 4FMAPS 3, VP2INTERSECT 8, AMX-BF16 22, AVX512_FP16 23, AMX-TILE 24, AMX-INT8 25. */
    *d &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 22) | (1u << 23) | (1u << 24) | (1u << 25));
  } else if (leaf == 7 && subleaf == 1) {
    *a &= ~(1u << 5); /* AVX512_BF16 */
  }
}

void on_segv(int sig, siginfo_t* info, void* context) {
  auto* uc = static_cast<ucontext_t*>(context);
  greg_t* r = uc->uc_mcontext.gregs;
  const auto* ip = reinterpret_cast<const unsigned char*>(r[REG_RIP]);
  // A faulting CPUID is a general-protection fault (SI_KERNEL); a bad address has its own code and
  // is not read here.
  if (info->si_code == SI_KERNEL && ip[0] == 0x0f && ip[1] == 0xa2) {
    uint32_t leaf = static_cast<uint32_t>(r[REG_RAX]), subleaf = static_cast<uint32_t>(r[REG_RCX]), a, b, c, d;
    set_cpuid(1);
    __cpuid_count(leaf, subleaf, a, b, c, d);
    set_cpuid(0);
    mask(leaf, subleaf, &a, &b, &c, &d);
    r[REG_RAX] = a;
    r[REG_RBX] = b;
    r[REG_RCX] = c;
    r[REG_RDX] = d;
    r[REG_RIP] += 2;
    return;
  }
  /* A real fault, or a SIGSEGV sent: hand it to whoever had SIGSEGV before, or die of it. */
  if (previous.sa_flags & SA_SIGINFO) {
    previous.sa_sigaction(sig, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
  } else {
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
  }
}

std::atomic<int> pending{0};

void on_release(int /*sig*/) {
  set_cpuid(1);
  pending.fetch_sub(1);
}

__attribute__((constructor)) void start() {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, &previous) != 0 || set_cpuid(0) != 0) {
    fprintf(stderr,
            "cpuid_mask: this CPU or kernel has no CPUID faulting (arch_prctl ARCH_SET_CPUID); "
            "cannot emulate an AVX2-only host here\n");
    _exit(3);
  }
}

}  // namespace

/* CPUID faulting off in every thread of the process (each thread switches its own: a signal to
 * each, then a wait of up to a second for them). Returns the threads released, -1 on failure. */
extern "C" __attribute__((visibility("default"))) int graft_cpuid_mask_release() {
  const int sig = SIGRTMIN + 7;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_release;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(sig, &sa, nullptr) != 0) return -1;
  const pid_t self = static_cast<pid_t>(syscall(SYS_gettid));
  int released = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      const pid_t tid = static_cast<pid_t>(atoi(e->d_name));
      if (tid <= 0 || tid == self) continue;
      pending.fetch_add(1);
      if (syscall(SYS_tgkill, getpid(), tid, sig) == 0) {
        ++released;
      } else {
        pending.fetch_sub(1);
      }
    }
    closedir(d);
  }
  set_cpuid(1);
  for (int i = 0; i < 1000 && pending.load() > 0; ++i) usleep(1000);
  return pending.load() > 0 ? -1 : released + 1;
}
