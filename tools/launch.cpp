// `graft launch`: PopRun's role for graft. Starts N instances of a training script under mpirun,
// and tells each, through the environment, how many instances and replicas there are; the script
// reads them with graft.distributed (popdist's names) and sets its SessionOptions from them.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "cli.hpp"
#include "support/check.hpp"

namespace graft::tools {

std::vector<std::string> launchArguments(const LaunchOptions& o) {
  GRAFT_CHECK(o.numInstances >= 1, "graft launch: --num-instances must be at least 1, got {}", o.numInstances);
  int replicas = o.numReplicas > 0 ? o.numReplicas : o.numInstances;
  GRAFT_CHECK(replicas % o.numInstances == 0,
              "graft launch: --num-replicas ({}) must be a multiple of --num-instances "
              "({}): every instance holds the same number of replicas",
              replicas, o.numInstances);
  GRAFT_CHECK(!o.command.empty(),
              "graft launch: no command to launch (graft launch --num-instances N -- python "
              "train.py)");
  GRAFT_CHECK(o.collectiveTimeout > 0, "graft launch: --timeout must be > 0 seconds, got {}", o.collectiveTimeout);
  std::vector<std::string> a{o.mpirun, "-np", std::to_string(o.numInstances)};
  if (!o.hosts.empty()) {
    GRAFT_CHECK(o.numInstances % static_cast<int>(o.hosts.size()) == 0,
                "graft launch: {} instances do not divide "
                "evenly over {} hosts (--host)",
                o.numInstances, o.hosts.size());
    std::string list;
    for (const auto& h : o.hosts)
      list += (list.empty() ? "" : ",") + h + ":" + std::to_string(o.numInstances / o.hosts.size());
    a.insert(a.end(), {"--host", list});
  } else {
    a.push_back("--oversubscribe");  // one host: as many instances as asked, whatever its slots
  }
  if (geteuid() == 0) a.push_back("--allow-run-as-root");
  // graft pins its own threads (one core group per replica); MPI's binding would confine them.
  a.insert(a.end(), {"--bind-to", "none"});
  for (const auto& m : o.mpiArgs) {
    std::istringstream words(m);
    for (std::string w; words >> w;) a.push_back(w);
  }
  const std::pair<const char*, std::string> env[] = {
      {"GRAFT_NUM_INSTANCES", std::to_string(o.numInstances)},
      {"GRAFT_NUM_REPLICAS", std::to_string(replicas)},
      {"GRAFT_COLLECTIVE_TIMEOUT", fmt::format("{}", o.collectiveTimeout)},
  };
  for (const auto& [k, v] : env) a.insert(a.end(), {"-x", std::string(k) + "=" + v});
  a.insert(a.end(), o.command.begin(), o.command.end());
  return a;
}

int launchCommand(const LaunchOptions& o, std::ostream& out) {
  std::vector<std::string> a = launchArguments(o);
  if (o.printOnly) {
    for (size_t i = 0; i < a.size(); ++i) out << (i ? " " : "") << a[i];
    out << "\n";
    return 0;
  }
  out.flush();
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  GRAFT_THROW("graft launch: cannot run '{}' ({}); install OpenMPI (scripts/setup.sh) or give --mpirun PATH", a[0],
              std::strerror(errno));
}

}  // namespace graft::tools
