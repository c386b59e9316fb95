// ONNX backend conformance runner: every case of the ONNX backend test data of the linked onnx
// version (tests/conformance/generate_data.py writes it; scripts/setup.sh caches it) through an
// InferenceSession. Each case runs in a child process (a crash or hang fails that case, not the
// run). Prints the pass rate per folder; exits non-zero when a case fails that is not on the
// expected-failures list. Test tensors are read as the model declares them where the data's own
// type is a stand-in (bfloat16 stored as UINT16 bits: see asDeclaredType).
#include <onnx/onnx_pb.h>
// onnx_pb.h first: it defines ONNX_API, which onnx-data.pb.h needs.
#include <onnx/onnx-data.pb.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <graft/graft.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "onnx/proto_convert.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/low_precision.hpp"
#include "runtime/session_impl.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define GRAFT_HAS_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GRAFT_HAS_LSAN 1
#endif
#endif
#if GRAFT_HAS_LSAN
#include <sanitizer/lsan_interface.h>
#endif

namespace fs = std::filesystem;
using namespace graft;

namespace {
// In an expected-failures reason: the case draws unseeded random numbers that can match the stored
// ones, so its passing does not make the entry stale.
constexpr const char* kMayPassByChance = "may pass by chance";
}  // namespace

namespace {

std::string readAll(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Debian's libonnx-testdata (ONNX 1.12) stores bfloat16 test tensors as UINT16 tensors holding
// the raw bits (ONNX's numpy helpers had no bfloat16 type then). Where the model declares
// BFLOAT16 at that position, the UINT16 tensor is read back as the BFLOAT16 it stands for: same
// shape, same 16 bits per element.
NDArray asDeclaredType(NDArray a, const ir::ValueType& type) {
  if (a.dtype() != DataType::UInt16 || type.info.dataType() != DataType::BFloat16) return a;
  NDArray b(DataType::BFloat16, a.shape());
  if (a.nbytes() > 0) std::memcpy(b.rawData(), a.rawData(), a.nbytes());
  return b;
}

ops::Value valueFromFile(const fs::path& p, const ir::ValueType& type) {
  std::string bytes = readAll(p);
  auto tensorOf = [&](const ::onnx::TensorProto& t) {
    return asDeclaredType(onnxio::tensorFromProto(t, "test data '" + t.name() + "'"), type);
  };
  auto seqOf = [&](const ::onnx::SequenceProto& s) {
    std::vector<NDArray> v;
    for (const auto& t : s.tensor_values()) v.push_back(tensorOf(t));
    return ops::Value::fromSequence(std::move(v));
  };
  if (type.kind == ir::ValueKind::Sequence) {
    ::onnx::SequenceProto s;
    if (!s.ParseFromString(bytes)) throw Error("cannot parse " + p.string());
    return seqOf(s);
  }
  if (type.kind == ir::ValueKind::Optional) {
    ::onnx::OptionalProto o;
    if (!o.ParseFromString(bytes)) throw Error("cannot parse " + p.string());
    if (o.has_tensor_value()) return ops::Value::fromTensor(tensorOf(o.tensor_value()));
    if (o.has_sequence_value()) return seqOf(o.sequence_value());
    return ops::Value::none();
  }
  ::onnx::TensorProto t;
  if (!t.ParseFromString(bytes)) throw Error("cannot parse " + p.string());
  return ops::Value::fromTensor(tensorOf(t));
}

std::string compareTensors(const NDArray& got, const NDArray& want, const std::string& what) {
  if (got.dtype() != want.dtype())
    return fmt::format("{}: dtype {} != expected {}", what, dtypeName(got.dtype()), dtypeName(want.dtype()));
  if (got.shape() != want.shape())
    return fmt::format("{}: shape {} != expected {}", what, shapeToString(got.shape()), shapeToString(want.shape()));
  std::string err;
  if (isLowPrecision(got.dtype())) {
    // One element per byte (float8, float4, int4, uint4): compare the values the codes stand for,
    // exactly (NaN matches NaN).
    const auto* a = static_cast<const uint8_t*>(got.rawData());
    const auto* b = static_cast<const uint8_t*>(want.rawData());
    for (int64_t i = 0; i < got.numel() && err.empty(); ++i) {
      double x = ops::lowPrecisionToDouble(got.dtype(), a[i]), y = ops::lowPrecisionToDouble(got.dtype(), b[i]);
      if (!(x == y || (std::isnan(x) && std::isnan(y))))
        err = fmt::format("{}: element {} is {}, expected {}", what, i, x, y);
    }
    return err;
  }
  ops::dispatch<ops::kAll>(got.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a = got.data<T>();
    const T* b = want.data<T>();
    for (int64_t i = 0; i < got.numel() && err.empty(); ++i) {
      if constexpr (std::is_same_v<T, std::string>) {
        if (a[i] != b[i]) err = fmt::format("{}: element {} is '{}', expected '{}'", what, i, a[i], b[i]);
      } else {
        double x = static_cast<double>(static_cast<ops::ComputeType<T>>(a[i]));
        double y = static_cast<double>(static_cast<ops::ComputeType<T>>(b[i]));
        bool ok = (std::isnan(x) && std::isnan(y)) || x == y || std::abs(x - y) <= 1e-7 + 1e-3 * std::abs(y);
        if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
          ok = ok || std::abs(x - y) <= 1e-3 + 1e-2 * std::abs(y);
        if (!ok) err = fmt::format("{}: element {} is {}, expected {}", what, i, x, y);
      }
    }
  });
  return err;
}

// Runs one case; returns "" on success or the failure message.
std::string runCase(const fs::path& dir, const std::string& deviceKind) {
  auto device = deviceKind == "reference" ? DeviceManager::createDeviceManager().createReferenceDevice()
                                          : DeviceManager::createDeviceManager().createCpuDevice();
  // The outputs are the model's graph outputs.
  ::onnx::ModelProto mp;
  if (!mp.ParseFromString(readAll(dir / "model.onnx"))) return "cannot parse model.onnx";
  std::vector<TensorId> outIds;
  for (const auto& o : mp.graph().output()) outIds.push_back(o.name());
  auto session = InferenceSession::createFromOnnxModel((dir / "model.onnx").string(), DataFlow(1, outIds), device);
  auto& impl = session->impl();
  const ir::Graph& g = *impl.model.graph;
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return "no test data sets";
  for (const auto& set : sets) {
    std::vector<ops::Value> inputs;
    for (size_t i = 0; i < g.inputs().size(); ++i) {
      fs::path p = set / ("input_" + std::to_string(i) + ".pb");
      if (!fs::exists(p)) return "missing " + p.string();
      const ir::ValueType& declared = g.inputs()[i]->type();
      ops::Value v = valueFromFile(p, declared);
      // Sessions check their inputs' types (Session::run); execute() does not, so check here:
      // a mismatch is the test data's problem, not a result of graft's.
      if (v.isTensor() && declared.isTensor() && declared.known() && v.tensor.dtype() != declared.info.dataType())
        return fmt::format("{}: input {} ('{}') is {}, but the model declares {}", set.filename().string(), i,
                           g.inputs()[i]->id(), dtypeName(v.tensor.dtype()), dtypeName(declared.info.dataType()));
      inputs.push_back(std::move(v));
    }
    session->prepareDevice();
    auto outs = impl.execute(std::move(inputs));
    for (size_t i = 0; i < outIds.size(); ++i) {
      fs::path p = set / ("output_" + std::to_string(i) + ".pb");
      const ir::Tensor* t = g.findTensor(outIds[i]);
      ir::ValueType type = t ? t->type() : ir::ValueType{};
      // The expected file's own kind decides: tensors unless the output is a sequence/optional.
      ops::Value want = valueFromFile(p, type);
      const ops::Value& got = outs[i];
      std::string what = fmt::format("{} output '{}'", set.filename().string(), outIds[i]);
      if (want.kind != got.kind) return what + ": value kind differs from expected";
      if (want.isTensor()) {
        std::string err = compareTensors(got.tensor, want.tensor, what);
        if (!err.empty()) return err;
      } else if (want.isSequence()) {
        if (want.sequence->size() != got.sequence->size())
          return fmt::format("{}: sequence length {} != expected {}", what, got.sequence->size(), want.sequence->size());
        for (size_t k = 0; k < want.sequence->size(); ++k) {
          std::string err = compareTensors((*got.sequence)[k], (*want.sequence)[k], what + "[" + std::to_string(k) + "]");
          if (!err.empty()) return err;
        }
      }
    }
  }
  return "";
}

struct Outcome {
  bool pass;
  std::string message;
  /// The child crashed, hung or exited abnormally (a sanitizer report ends the child this way).
  bool crashed = false;
};

bool gNoFork = false;

Outcome runIsolated(const fs::path& dir, const std::string& device, int timeoutSec) {
  if (gNoFork) {  // debugging: run in this process (a crash takes the runner down)
    try {
      std::string m = runCase(dir, device);
      return {m.empty(), m};
    } catch (const std::exception& e) {
      return {false, e.what()};
    }
  }
  int fds[2];
  if (pipe(fds) != 0) return {false, "pipe failed"};
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string msg;
    try {
      msg = runCase(dir, device);
    } catch (const std::exception& e) {
      msg = e.what();
      if (msg.empty()) msg = "exception";
    }
    std::string line = msg.empty() ? "PASS" : "FAIL " + msg;
#if GRAFT_HAS_LSAN
    // _exit skips LeakSanitizer's exit-time check; run it here so that a case that leaks fails
    // (it exits non-zero after printing the report).
    __lsan_do_leak_check();
#endif
    ssize_t w = write(fds[1], line.data(), line.size());
    (void)w;
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeoutSec);
  char buf[4096];
  bool timedOut = false;
  for (;;) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
    if (left <= 0) {
      timedOut = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int r = poll(&p, 1, left);
    if (r <= 0) continue;
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  if (timedOut) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return {false, fmt::format("timed out after {} s", timeoutSec), true};
  }
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return {false, fmt::format("crashed with signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status))), true};
  // The child ends with _exit(0) after reporting; any other status means it died early, for
  // example through a sanitizer report (ASan and UBSan exit with status 1 by default).
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    return {false, fmt::format("child exited with status {} (a sanitizer report, if any, is printed above)",
                               WEXITSTATUS(status)), true};
  if (out == "PASS") return {true, ""};
  if (out.rfind("FAIL ", 0) == 0) return {false, out.substr(5)};
  return {false, "child exited without a result", true};
}

std::string oneLine(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  if (s.size() > 300) s = s.substr(0, 300) + "...";
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dataDir = GRAFT_ONNX_TESTDATA;
  std::string expectedFile, filter, device = "cpu", reportFile;
  int timeout = 120;
  bool listFailures = false;
  bool onlyCrashes = false;
  bool failOnStale = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--data") dataDir = next();
    else if (a == "--expected") expectedFile = next();
    else if (a == "--filter") filter = next();
    else if (a == "--device") device = next();
    else if (a == "--timeout") timeout = std::stoi(next());
    else if (a == "--report") reportFile = next();
    else if (a == "--list-failures") listFailures = true;
    else if (a == "--no-fork") gNoFork = true;
    else if (a == "--only-crashes") onlyCrashes = true;
    else if (a == "--fail-on-stale")
      failOnStale = true;
    else {
      std::cerr << "usage: conformance [--data DIR] [--expected FILE] [--filter SUBSTR] [--device cpu|reference] "
                   "[--timeout S] [--report FILE.md] [--list-failures] [--no-fork] [--only-crashes] [--fail-on-stale]\n"
                   "  --only-crashes: fail only when a case crashes, hangs or its child exits abnormally (sanitizer\n"
                   "                  builds); ordinary failures are counted but do not fail the run\n"
                   "  --fail-on-stale: fail when a case on the expected-failures list passes\n"
                   "  expected-failures entries 'folder/case @cpu: why' (or @reference) apply to that device only\n";
      return 2;
    }
  }
  std::map<std::string, std::string> expected;
  std::set<std::string> byChance;  // entries that may pass by chance (kMayPassByChance)
  if (!expectedFile.empty()) {
    std::ifstream f(expectedFile);
    if (!f) {
      std::cerr << "cannot read " << expectedFile << "\n";
      return 2;
    }
    std::string line;
    while (std::getline(f, line)) {
      if (line.empty() || line[0] == '#') continue;
      auto colon = line.find(':');
      std::string name = line.substr(0, colon);
      while (!name.empty() && name.back() == ' ') name.pop_back();
      // "folder/case @device: why" applies on that device only.
      if (auto at = name.find(" @"); at != std::string::npos) {
        std::string only = name.substr(at + 2);
        name = name.substr(0, at);
        if (only != "cpu" && only != "reference") {
          std::cerr << expectedFile << ": entry '" << name << "' names an unknown device '" << only << "'\n";
          return 2;
        }
        if (only != device) continue;
      }
      std::string why = colon == std::string::npos ? "" : line.substr(colon + 1);
      if (why.find_first_not_of(' ') == std::string::npos) {
        std::cerr << expectedFile << ": entry '" << name << "' has no reason\n";
        return 2;
      }
      expected[name] = why;
      if (why.find(kMayPassByChance) != std::string::npos) byChance.insert(name);
    }
  }
  const std::vector<std::string> folders = {"node", "simple", "pytorch-converted", "pytorch-operator", "light"};
  if (!fs::exists(fs::path(dataDir) / "node")) {
    std::cerr << "conformance: no ONNX test data in " << dataDir
              << " (scripts/setup.sh writes it: tests/conformance/generate_data.py)\n";
    return 2;
  }
  std::map<std::string, std::pair<int, int>> rate;  // folder -> (passed, total)
  std::vector<std::string> unexpectedFailures, unexpectedPasses, chancePasses, failures, crashes;
  for (const auto& folder : folders) {
    fs::path root = fs::path(dataDir) / folder;
    if (!fs::exists(root)) continue;
    std::vector<fs::path> cases;
    for (const auto& e : fs::directory_iterator(root))
      if (e.is_directory() && fs::exists(e.path() / "model.onnx")) cases.push_back(e.path());
    std::sort(cases.begin(), cases.end());
    for (const auto& c : cases) {
      std::string name = folder + "/" + c.filename().string();
      if (!filter.empty() && name.find(filter) == std::string::npos) continue;
      Outcome o = runIsolated(c, device, timeout);
      auto& r = rate[folder];
      r.second++;
      if (o.pass) r.first++;
      bool isExpected = expected.count(name) != 0;
      if (!o.pass) failures.push_back(name + ": " + oneLine(o.message));
      if (o.crashed) crashes.push_back(name + ": " + oneLine(o.message));
      if (!o.pass && !isExpected) unexpectedFailures.push_back(name + ": " + oneLine(o.message));
      if (o.pass && isExpected) (byChance.count(name) ? chancePasses : unexpectedPasses).push_back(name);
    }
  }
  std::ostringstream report;
  report << "| folder | passed | total | rate |\n|---|---|---|---|\n";
  int passed = 0, total = 0;
  for (const auto& folder : folders) {
    if (!rate.count(folder)) continue;
    auto [p, t] = rate[folder];
    passed += p;
    total += t;
    report << fmt::format("| {} | {} | {} | {:.1f}% |\n", folder, p, t, t ? 100.0 * p / t : 0.0);
  }
  report << fmt::format("| all | {} | {} | {:.1f}% |\n", passed, total, total ? 100.0 * passed / total : 0.0);
  std::cout << "ONNX backend conformance (" << device << " device)\n" << report.str();
  if (listFailures) {
    std::cout << "\nfailures:\n";
    for (const auto& f : failures) std::cout << "  " << f << "\n";
  }
  if (!unexpectedPasses.empty()) {
    std::cout << "\n" << unexpectedPasses.size() << " case(s) on the expected-failures list now pass (remove them):\n";
    for (const auto& n : unexpectedPasses) std::cout << "  " << n << "\n";
  }
  if (!chancePasses.empty()) {
    std::cout << "\n"
              << chancePasses.size() << " case(s) on the list passed this time by chance (random draws that"
              << " matched the stored ones; marked '" << kMayPassByChance << "'):\n";
    for (const auto& n : chancePasses) std::cout << "  " << n << "\n";
  }
  if (!reportFile.empty()) {
    std::ofstream f(reportFile);
    f << report.str();
  }
  if (onlyCrashes) {
    if (crashes.empty()) {
      std::cout << "\nno case crashed, hung or exited abnormally\n";
      return 0;
    }
    std::cout << "\n" << crashes.size() << " case(s) crashed, hung or exited abnormally:\n";
    for (const auto& n : crashes) std::cout << "  " << n << "\n";
    return 1;
  }
  if (!unexpectedFailures.empty()) {
    std::cout << "\n" << unexpectedFailures.size() << " unexpected failure(s):\n";
    for (const auto& n : unexpectedFailures) std::cout << "  " << n << "\n";
    return 1;
  }
  // --fail-on-stale keeps the list honest: a listed case that passes fails the run until its
  // entry goes. Entries whose reason says kMayPassByChance are left out: unseeded random ops whose
  // fresh draws can match the stored ones (Bernoulli's 10 draws: 1 run in 164 each, 4 such cases on two
  // devices: about 1 make test in 20 failed, as on 2026-12-05). With --filter, only the cases run
  // are judged.
  if (failOnStale && !unexpectedPasses.empty()) return 1;
  return 0;
}
