#pragma once
/// @file device.hpp  Devices and the DeviceManager that creates them (PopART's names).
#include <map>
#include <memory>
#include <string>

namespace graft {

enum class DeviceType {
  Cpu,        ///< the fast CPU backend
  Reference,  ///< the reference kernels: slow, obviously correct (the golden model)
};

/// A device a session runs on: its kind, its number of virtual devices (for sharding and
/// pipelining) and the threads each one uses.
class DeviceInfo {
 public:
  DeviceInfo(DeviceType type, int numVirtualDevices, int threadsPerVirtualDevice);
  DeviceType type() const { return type_; }
  /// "cpu" or "reference".
  std::string typeName() const;
  int numVirtualDevices() const { return numVirtual_; }
  /// PopART's name for numVirtualDevices().
  int getNumIpus() const { return numVirtual_; }
  int threadsPerVirtualDevice() const { return threads_; }
  int id() const { return id_; }
  std::string str() const;

 private:
  DeviceType type_;
  int numVirtual_;
  int threads_;
  int id_;
};

class DeviceManager {
 public:
  /// The process-wide manager (PopART: DeviceManager::createDeviceManager()).
  static DeviceManager& createDeviceManager();
  /// The CPU device. `coresPerVirtualDevice` 0 shares all cores among the virtual devices.
  std::shared_ptr<DeviceInfo> createCpuDevice(int numVirtualDevices = 1, int coresPerVirtualDevice = 0);
  /// The reference device (reference kernels, single thread).
  std::shared_ptr<DeviceInfo> createReferenceDevice(int numVirtualDevices = 1);
  /// PopART compatibility: an IPU model becomes a CPU device with "numIPUs" virtual devices.
  std::shared_ptr<DeviceInfo> createIpuModelDevice(const std::map<std::string, std::string>& options = {});
  /// PopART compatibility: a CPU device with `numIpus` virtual devices.
  std::shared_ptr<DeviceInfo> acquireAvailableDevice(int numIpus = 1);
  /// PopART compatibility: same as acquireAvailableDevice.
  std::shared_ptr<DeviceInfo> createOfflineIpuDevice(const std::map<std::string, std::string>& options = {});
};

}  // namespace graft
