#include <graft/device.hpp>

#include <atomic>

#include "support/check.hpp"
#include "support/limits.hpp"
#include "support/thread_pool.hpp"

namespace graft {
namespace {
std::atomic<int> nextDeviceId{0};
}

DeviceInfo::DeviceInfo(DeviceType type, int numVirtualDevices, int threads)
    : type_(type), numVirtual_(numVirtualDevices), threads_(threads), id_(nextDeviceId++) {
  GRAFT_CHECK(numVirtualDevices >= 1, "a device needs at least 1 virtual device, got {}", numVirtualDevices);
  GRAFT_CHECK(threads >= 1, "a virtual device needs at least 1 thread, got {}", threads);
  support::checkThreadCount("threads per virtual device", threads);
  support::checkVirtualDeviceCount("numVirtualDevices", numVirtualDevices, threads);
}

std::string DeviceInfo::typeName() const { return type_ == DeviceType::Cpu ? "cpu" : "reference"; }

std::string DeviceInfo::str() const {
  return fmt::format("{} device #{} ({} virtual device{}, {} thread{} each)", typeName(), id_, numVirtual_,
                     numVirtual_ == 1 ? "" : "s", threads_, threads_ == 1 ? "" : "s");
}

DeviceManager& DeviceManager::createDeviceManager() {
  static DeviceManager m;
  return m;
}

std::shared_ptr<DeviceInfo> DeviceManager::createCpuDevice(int numVirtualDevices, int coresPerVirtualDevice) {
  GRAFT_CHECK(numVirtualDevices >= 1, "createCpuDevice: numVirtualDevices must be at least 1, got {}", numVirtualDevices);
  GRAFT_CHECK(coresPerVirtualDevice >= 0, "createCpuDevice: coresPerVirtualDevice must be >= 0, got {}", coresPerVirtualDevice);
  support::checkThreadCount("createCpuDevice: coresPerVirtualDevice", coresPerVirtualDevice);
  support::checkVirtualDeviceCount("createCpuDevice: numVirtualDevices", numVirtualDevices, 1);
  int cores = support::ThreadPool::hardwareThreads();
  int threads = coresPerVirtualDevice > 0 ? coresPerVirtualDevice : std::max(1, cores / numVirtualDevices);
  return std::make_shared<DeviceInfo>(DeviceType::Cpu, numVirtualDevices, threads);
}

std::shared_ptr<DeviceInfo> DeviceManager::createReferenceDevice(int numVirtualDevices) {
  support::checkVirtualDeviceCount("createReferenceDevice: numVirtualDevices", numVirtualDevices, 1);
  return std::make_shared<DeviceInfo>(DeviceType::Reference, numVirtualDevices, 1);
}

std::shared_ptr<DeviceInfo> DeviceManager::createIpuModelDevice(const std::map<std::string, std::string>& options) {
  int n = 1;
  auto it = options.find("numIPUs");
  if (it != options.end()) {
    try {
      n = std::stoi(it->second);
    } catch (const std::exception&) {
      GRAFT_THROW("createIpuModelDevice: numIPUs must be an integer, got '{}'", it->second);
    }
  }
  return createCpuDevice(n);
}

std::shared_ptr<DeviceInfo> DeviceManager::acquireAvailableDevice(int numIpus) { return createCpuDevice(numIpus); }

std::shared_ptr<DeviceInfo> DeviceManager::createOfflineIpuDevice(const std::map<std::string, std::string>& options) {
  return createIpuModelDevice(options);
}

}  // namespace graft
