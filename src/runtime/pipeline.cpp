#include "runtime/pipeline.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <map>

#include "support/check.hpp"
#include "support/logging.hpp"

namespace graft::pipeline {

// ---- Timeline ----------------------------------------------------------------------------------

Timeline::Timeline(std::vector<std::string> threadNames)
    : names_(std::move(threadNames)), t0_(std::chrono::steady_clock::now()) {}

double Timeline::now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

void Timeline::add(Event e) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(std::move(e));
}

std::vector<double> Timeline::busySeconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<double> busy(names_.size(), 0);
  for (const Event& e : events_)
    if (e.thread >= 0 && e.thread < static_cast<int>(busy.size())) busy[e.thread] += e.duration;
  return busy;
}

namespace {
std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
      continue;
    }
    out += c;
  }
  return out + "\"";
}
}  // namespace

std::string Timeline::chromeTraceJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> items;
  for (size_t t = 0; t < names_.size(); ++t)
    items.push_back(fmt::format(R"({{"name":"thread_name","ph":"M","pid":1,"tid":{},"args":{{"name":{}}}}})", t,
                                jsonString(names_[t])));
  double end = 0;
  for (const Event& e : events_) end = std::max(end, e.start + e.duration);
  auto us = [](double s) { return s * 1e6; };
  std::map<int, std::vector<const Event*>> byThread;
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    byThread[e.thread].push_back(&e);
    // seq: the order the events were recorded in (ties of ts stay ordered).
    std::string args = e.microBatch >= 0 ? fmt::format(R"(,"args":{{"microBatch":{},"seq":{}}})", e.microBatch, i)
                                         : fmt::format(R"(,"args":{{"seq":{}}})", i);
    items.push_back(fmt::format(R"({{"name":{},"cat":"busy","ph":"X","pid":1,"tid":{},"ts":{:.3f},"dur":{:.3f}{}}})",
                                jsonString(e.name), e.thread, us(e.start), us(e.duration), args));
  }
  // Workers' idle time, explicit: the gaps between their busy events within the step.
  for (auto& [t, evs] : byThread) {
    if (t == 0) continue;
    std::sort(evs.begin(), evs.end(), [](const Event* a, const Event* b) { return a->start < b->start; });
    double at = 0;
    for (const Event* e : evs) {
      if (e->start > at)
        items.push_back(
            fmt::format(R"({{"name":"idle","cat":"idle","ph":"X","pid":1,"tid":{},"ts":{:.3f},"dur":{:.3f}}})", t,
                        us(at), us(e->start - at)));
      at = std::max(at, e->start + e->duration);
    }
    if (end > at)
      items.push_back(
          fmt::format(R"({{"name":"idle","cat":"idle","ph":"X","pid":1,"tid":{},"ts":{:.3f},"dur":{:.3f}}})", t, us(at),
                      us(end - at)));
  }
  return fmt::format("{{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n{}\n]}}\n", fmt::join(items, ",\n"));
}

// ---- VirtualDevices ----------------------------------------------------------------------------

struct VirtualDevices::Worker {
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  std::function<void()> job;
  bool hasJob = false, stop = false, ready = false;
  std::exception_ptr error;
  std::unique_ptr<support::ThreadPool> pool;
  std::unique_ptr<backends::Backend> backend;
  bool pinned = false;

  void loop(int threads, const std::vector<int>& cpus) {
    if (!cpus.empty()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int c : cpus) CPU_SET(c, &set);
      pinned = pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
    }
    // Created on this thread so that its threads (and OpenMP's) inherit the affinity.
    auto p = std::make_unique<support::ThreadPool>(threads);
    {
      std::lock_guard<std::mutex> lock(mu);
      pool = std::move(p);
      ready = true;
    }
    cv.notify_all();
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || hasJob; });
        if (stop) return;
        fn = std::move(job);
      }
      std::exception_ptr err;
      try {
        fn();
      } catch (...) {
        err = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        error = err;
        hasJob = false;
      }
      cv.notify_all();
    }
  }
};

VirtualDevices::VirtualDevices(DeviceType type, int count, int threadsEach, const std::vector<std::vector<int>>& cpus,
                               bool bf16) {
  for (int i = 0; i < count; ++i) {
    auto w = std::make_unique<Worker>();
    w->backend =
        type == DeviceType::Reference ? backends::makeReferenceBackend() : backends::makeCpuBackend(threadsEach, bf16);
    std::vector<int> mine = i < static_cast<int>(cpus.size()) ? cpus[i] : std::vector<int>{};
    int threads = w->backend->numThreads();
    Worker* raw = w.get();
    w->thread = std::thread([raw, threads, mine] { raw->loop(threads, mine); });
    workers_.push_back(std::move(w));
  }
  for (auto& w : workers_) {
    std::unique_lock<std::mutex> lock(w->mu);
    w->cv.wait(lock, [&] { return w->ready; });
  }
}

VirtualDevices::~VirtualDevices() {
  for (auto& w : workers_) {
    {
      std::lock_guard<std::mutex> lock(w->mu);
      w->stop = true;
    }
    w->cv.notify_all();
  }
  for (auto& w : workers_) w->thread.join();
}

support::ThreadPool& VirtualDevices::pool(int i) { return *workers_.at(i)->pool; }
backends::Backend& VirtualDevices::backend(int i) { return *workers_.at(i)->backend; }
bool VirtualDevices::pinned(int i) const { return workers_.at(i)->pinned; }

void VirtualDevices::start(const std::function<void(int)>& fn) {
  for (int i = 0; i < size(); ++i) {
    Worker& w = *workers_[i];
    {
      std::lock_guard<std::mutex> lock(w.mu);
      GRAFT_ASSERT(!w.hasJob, "virtual device {} is still busy", i);
      w.job = [fn, i] { fn(i); };
      w.hasJob = true;
      w.error = nullptr;
    }
    w.cv.notify_all();
  }
}

void VirtualDevices::runOn(int i, const std::function<void()>& fn) {
  Worker& w = *workers_.at(i);
  {
    std::lock_guard<std::mutex> lock(w.mu);
    GRAFT_ASSERT(!w.hasJob, "virtual device {} is still busy", i);
    w.job = fn;
    w.hasJob = true;
    w.error = nullptr;
  }
  w.cv.notify_all();
  std::unique_lock<std::mutex> lock(w.mu);
  w.cv.wait(lock, [&] { return !w.hasJob; });
  if (w.error) std::rethrow_exception(w.error);
}

void VirtualDevices::wait() {
  std::exception_ptr first;
  for (auto& w : workers_) {
    std::unique_lock<std::mutex> lock(w->mu);
    w->cv.wait(lock, [&] { return !w->hasJob; });
    if (w->error && !first) first = w->error;
  }
  if (first) std::rethrow_exception(first);
}

std::vector<std::vector<int>> VirtualDevices::cpuBlocks(int count, int threadsEach, int share, int shares) {
  std::vector<std::vector<int>> out(count);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  const int64_t each = static_cast<int64_t>(count) * threadsEach;
  if (shares < 1 || share < 0 || share >= shares || each * shares > static_cast<int64_t>(cpus.size())) return out;
  const int64_t first = each * share;
  for (int i = 0; i < count; ++i) {
    const int64_t from = first + static_cast<int64_t>(i) * threadsEach;
    out[i].assign(cpus.begin() + from, cpus.begin() + from + threadsEach);
  }
  return out;
}

// ---- PipelineExecutor --------------------------------------------------------------------------

PipelineExecutor::PipelineExecutor(VirtualDevices& devices, std::vector<ProgramRun> programs,
                                   std::vector<Source> anchors, int maxInFlight)
    : devices_(devices),
      programs_(std::move(programs)),
      anchors_(std::move(anchors)),
      maxInFlight_(std::max(1, maxInFlight)) {
  consumers_.resize(programs_.size());
  for (size_t p = 0; p < programs_.size(); ++p) {
    GRAFT_ASSERT(programs_[p].device >= 0 && programs_[p].device < devices_.size(), "program {} on a missing device",
                 p);
    consumers_[p].resize(programs_[p].exe->outputIds().size());
  }
  auto addEdge = [&](const Source& s, Edge e) {
    if (s.program < 0) {
      if (static_cast<int>(hostConsumers_.size()) <= s.index) hostConsumers_.resize(s.index + 1);
      hostConsumers_[s.index].push_back(e);
    } else {
      GRAFT_ASSERT(
          s.program < static_cast<int>(programs_.size()) && s.index < static_cast<int>(consumers_[s.program].size()),
          "bad source");
      consumers_[s.program][s.index].push_back(e);
    }
  };
  for (size_t p = 0; p < programs_.size(); ++p)
    for (size_t i = 0; i < programs_[p].inputs.size(); ++i) {
      GRAFT_ASSERT(programs_[p].inputs[i].program < static_cast<int>(p), "program {} reads a later program", p);
      addEdge(programs_[p].inputs[i], {static_cast<int>(p), static_cast<int>(i)});
    }
  for (size_t a = 0; a < anchors_.size(); ++a) addEdge(anchors_[a], {-1, static_cast<int>(a)});
}

bool PipelineExecutor::runnable(int p, int count) const {
  int m = next_[p];
  if (m >= count || m >= fed_) return false;
  for (const auto& q : queues_[p])
    if (q.empty()) return false;
  return true;
}

void PipelineExecutor::fail(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::move(e);
    abort_ = true;
  }
  cv_.notify_all();
}

void PipelineExecutor::workerLoop(int device, int count, Timeline* tl) {
  std::vector<int> mine;
  for (size_t p = 0; p < programs_.size(); ++p)
    if (programs_[p].device == device) mine.push_back(static_cast<int>(p));
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    int pick = -1;
    bool allDone = true;
    cv_.wait(lock, [&] {
      if (abort_) return true;
      pick = -1;
      allDone = true;
      // Later programs first (backward before forward in training): micro-batches leave sooner.
      for (auto it = mine.rbegin(); it != mine.rend(); ++it) {
        if (next_[*it] < count) allDone = false;
        if (pick < 0 && runnable(*it, count)) pick = *it;
      }
      return allDone || pick >= 0;
    });
    if (abort_ || pick < 0) return;
    int m = next_[pick];
    std::vector<ops::Value> ins;
    for (auto& q : queues_[pick]) {
      ins.push_back(std::move(q.front()));
      q.pop_front();
    }
    lock.unlock();
    std::vector<ops::Value> outs;
    try {
      double t0 = tl ? tl->now() : 0;
      outs = programs_[pick].exe->run(std::move(ins));
      if (tl) tl->add({device + 1, programs_[pick].name, t0, tl->now() - t0, m});
    } catch (...) {
      fail(std::current_exception());
      return;
    }
    lock.lock();
    for (size_t o = 0; o < outs.size(); ++o)
      for (const Edge& e : consumers_[pick][o]) {
        auto& q = e.program < 0 ? anchorQueues_[e.input] : queues_[e.program][e.input];
        GRAFT_ASSERT(static_cast<int>(q.size()) < maxInFlight_, "a pipeline queue overflowed");
        q.push_back(outs[o]);
      }
    next_[pick]++;
    finished_[m % maxInFlight_]++;
    cv_.notify_all();
  }
}

void PipelineExecutor::run(int count, const HostIO& io, Timeline* tl) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queues_.assign(programs_.size(), {});
    for (size_t p = 0; p < programs_.size(); ++p) queues_[p].resize(programs_[p].inputs.size());
    anchorQueues_.assign(anchors_.size(), {});
    next_.assign(programs_.size(), 0);
    finished_.assign(maxInFlight_, 0);
    fed_ = collected_ = inFlight_ = 0;
    abort_ = false;
    error_ = nullptr;
  }
  if (count <= 0) return;
  devices_.start([this, count, tl](int d) {
    try {
      workerLoop(d, count, tl);
    } catch (...) {
      fail(std::current_exception());
    }
  });
  const int numPrograms = static_cast<int>(programs_.size());
  try {
    std::unique_lock<std::mutex> lock(mu_);
    while (collected_ < count) {
      cv_.wait(lock, [&] {
        return abort_ || finished_[collected_ % maxInFlight_] == numPrograms ||
               (fed_ < count && inFlight_ < maxInFlight_);
      });
      if (abort_) break;
      if (finished_[collected_ % maxInFlight_] == numPrograms) {
        int m = collected_;
        std::vector<ops::Value> anchors;
        for (auto& q : anchorQueues_) {
          GRAFT_ASSERT(!q.empty(), "anchor of micro-batch {} missing", m);
          anchors.push_back(std::move(q.front()));
          q.pop_front();
        }
        lock.unlock();
        double t0 = tl ? tl->now() : 0;
        io.deliver(m, anchors);
        if (tl) tl->add({0, "deliver anchors", t0, tl->now() - t0, m});
        lock.lock();
        finished_[m % maxInFlight_] = 0;
        --inFlight_;
        ++collected_;
        cv_.notify_all();
        continue;
      }
      int m = fed_;
      lock.unlock();
      double t0 = tl ? tl->now() : 0;
      std::vector<ops::Value> inputs = io.read(m);
      if (tl) tl->add({0, "read inputs", t0, tl->now() - t0, m});
      lock.lock();
      for (size_t i = 0; i < hostConsumers_.size() && i < inputs.size(); ++i)
        for (const Edge& e : hostConsumers_[i]) {
          auto& q = e.program < 0 ? anchorQueues_[e.input] : queues_[e.program][e.input];
          q.push_back(inputs[i]);
        }
      ++fed_;
      ++inFlight_;
      cv_.notify_all();
    }
  } catch (...) {
    fail(std::current_exception());
  }
  devices_.wait();
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace graft::pipeline
