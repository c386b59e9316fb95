// The fuzzing campaign and regression replay (issue 16), built with every build (no libFuzzer
// needed). Every case runs in a forked child under an address-space cap and a timeout; the parent
// classifies how it ended:
//   ok        the input was accepted (imported, compiled, resumed)
//   refused   graft::Error, the only acceptable way to refuse an input
//   internal  graft::InternalError (a bug, but a clean one)
//   other     another C++ exception escaped
//   blow-up   std::bad_alloc under the cap, or killed for memory
//   crash     the child died of a signal
//   hang      the child ran past the timeout
//
//   fuzz_campaign replay FILE_OR_DIR...        every file as a model and as a checkpoint; fails
//                                              (exit 1) on anything but ok/refused
//   fuzz_campaign mutate --seeds DIR [--count N] [--rng S] [--findings DIR] [--timeout SEC] [--seconds T]
//                                              N mutants of the seeds; prints the counts; fails
//                                              on any crash, hang, blow-up, internal or other
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fuzz_entries.hpp"
#include "support/logging.hpp"

namespace fs = std::filesystem;

namespace {

constexpr rlim_t kMemoryCap = rlim_t{4} << 30;  // bytes of address space per child

enum Outcome { kOk, kRefused, kInternal, kOther, kBlowUp, kCrash, kHang, kOutcomes };
const char* kNames[] = {"ok", "refused", "internal", "other", "blow-up", "crash", "hang"};

// What a child does with one input: `checkpoint` loads it as a checkpoint, else as a model.
int childMain(const std::string& bytes, bool checkpoint) {
  struct rlimit rl {
    kMemoryCap, kMemoryCap
  };
  setrlimit(RLIMIT_AS, &rl);
  try {
    if (checkpoint)
      graft::fuzz::loadCheckpoint(bytes);
    else
      graft::fuzz::importModel(bytes, true);
  } catch (const graft::InternalError& e) {
    std::fprintf(stderr, "internal: %s\n", e.what());
    return 12;
  } catch (const graft::Error&) {
    return 10;
  } catch (const std::bad_alloc&) {
    return 20;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "other: %s\n", e.what());
    return 30;
  }
  return 0;
}

Outcome runCase(const std::string& bytes, bool checkpoint, double timeoutSeconds) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    std::exit(2);
  }
  if (pid == 0) {
    // Quiet children: the parent reports.
    graft::support::setLogLevel(graft::support::LogLevel::Off);
    if (!std::getenv("GRAFT_CAMPAIGN_VERBOSE")) {
      (void)!freopen("/dev/null", "w", stdout);
      (void)!freopen("/dev/null", "w", stderr);
    }
    _exit(childMain(bytes, checkpoint));
  }
  auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeoutSeconds) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return kHang;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (WIFSIGNALED(status)) return WTERMSIG(status) == SIGKILL ? kBlowUp : kCrash;
  switch (WEXITSTATUS(status)) {
    case 0:
      return kOk;
    case 10:
      return kRefused;
    case 12:
      return kInternal;
    case 20:
      return kBlowUp;
    default:
      return kOther;
  }
}

std::string readFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<fs::path> filesUnder(const std::vector<std::string>& args) {
  std::vector<fs::path> out;
  for (const auto& a : args) {
    if (fs::is_directory(a)) {
      for (const auto& e : fs::recursive_directory_iterator(a))
        if (e.is_regular_file() && e.path().filename().string()[0] != '.' && e.path().extension() != ".md")
          out.push_back(e.path());
    } else {
      out.emplace_back(a);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// One mutant of `s`: a few random edits of the kinds that break protobuf framing, lengths, varints
// and tensor payloads.
std::string mutate(std::string s, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; };
  int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !s.empty(); ++e) {
    size_t at = pick(s.size());
    switch (rng() % 9) {
      case 0:
        s[at] = static_cast<char>(s[at] ^ (1u << (rng() % 8)));
        break;  // flip a bit
      case 1:
        s[at] = static_cast<char>(rng());
        break;  // random byte
      case 2:
        s[at] = static_cast<char>("\x00\xff\x7f\x80\x01"[rng() % 5]);
        break;  // edge bytes
      case 3:
        s.erase(at, 1 + pick(8));
        break;  // delete
      case 4:
        s.insert(at, std::string(1 + pick(8), static_cast<char>(rng())));
        break;  // insert
      case 5:
        s.resize(at);
        break;   // truncate
      case 6: {  // duplicate a chunk
        size_t len = 1 + pick(std::min<size_t>(64, s.size() - at));
        s.insert(pick(s.size()), s.substr(at, len));
        break;
      }
      case 7: {  // a huge varint where a length or dimension may be
        std::string v = "\xff\xff\xff\xff\xff\xff\xff\xff\x7f";
        s.replace(at, std::min<size_t>(2, s.size() - at), v.substr(0, 1 + pick(9)));
        break;
      }
      default:
        s[at] = static_cast<char>(s[at] + (rng() % 2 ? 1 : -1));
        break;  // off by one
    }
  }
  return s;
}

int usage() {
  std::fprintf(stderr,
               "usage: fuzz_campaign replay FILE_OR_DIR...\n"
               "       fuzz_campaign mutate --seeds DIR [--count N] [--rng S] [--findings DIR] [--timeout SEC] [--seconds T]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  std::string mode = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  int counts[kOutcomes] = {};
  bool failed = false;
  if (mode == "replay") {
    auto files = filesUnder(args);
    for (const auto& f : files) {
      std::string bytes = readFile(f);
      for (bool ck : {false, true}) {
        Outcome o = runCase(bytes, ck, 60);
        ++counts[o];
        if (o != kOk && o != kRefused) {
          failed = true;
          std::printf("FINDING %s: %s (as a %s)\n", f.c_str(), kNames[o], ck ? "checkpoint" : "model");
        }
      }
    }
    std::printf("replayed %zu files (as models and as checkpoints):", files.size());
  } else if (mode == "mutate") {
    std::string seeds, findings;
    long count = 1000;
    uint64_t seed = 1;
    double timeout = 30;
    double seconds = -1;  // no time bound
    for (size_t i = 0; i + 1 < args.size(); i += 2) {
      if (args[i] == "--seeds")
        seeds = args[i + 1];
      else if (args[i] == "--count")
        count = std::stol(args[i + 1]);
      else if (args[i] == "--rng")
        seed = std::stoull(args[i + 1]);
      else if (args[i] == "--findings")
        findings = args[i + 1];
      else if (args[i] == "--timeout")
        timeout = std::stod(args[i + 1]);
      else if (args[i] == "--seconds")
        seconds = std::stod(args[i + 1]);
      else
        return usage();
    }
    if (seeds.empty()) return usage();
    auto files = filesUnder({seeds});
    if (files.empty()) {
      std::fprintf(stderr, "no seeds in %s\n", seeds.c_str());
      return 2;
    }
    std::vector<std::string> corpus;
    for (const auto& f : files) corpus.push_back(readFile(f));
    std::mt19937_64 rng(seed);
    auto t0 = std::chrono::steady_clock::now();
    long i = 0;  // after the loop: the mutants tried
    for (; i < count; ++i) {
      // --seconds: stop once the time is up (the cases so far are counted).
      if (seconds >= 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds)
        break;
      size_t k = rng() % corpus.size();
      std::string m = mutate(corpus[k], rng);
      // Seeds named ckpt_* are checkpoints: their mutants are loaded as checkpoints too.
      bool ck = files[k].filename().string().rfind("ckpt_", 0) == 0 && rng() % 2;
      Outcome o = runCase(m, ck, timeout);
      ++counts[o];
      if (o != kOk && o != kRefused) {
        failed = true;
        std::printf("FINDING mutant %ld of %s: %s\n", i, files[k].filename().c_str(), kNames[o]);
        if (!findings.empty()) {
          fs::create_directories(findings);
          std::ofstream(fs::path(findings) / fmt::format("{}_{}_{}.onnx", kNames[o], i, files[k].stem().string()),
                        std::ios::binary)
              << m;
        }
      }
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%ld mutants of %zu seeds in %.0f s:", i, files.size(), secs);
  } else {
    return usage();
  }
  for (int o = 0; o < kOutcomes; ++o) std::printf(" %s %d%s", kNames[o], counts[o], o + 1 < kOutcomes ? "," : "\n");
  return failed ? 1 : 0;
}
