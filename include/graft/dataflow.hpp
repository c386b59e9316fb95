#pragma once
/// @file dataflow.hpp  Which tensors a step returns (anchors) and how (PopART's DataFlow).
#include <map>
#include <string>
#include <vector>

namespace graft {

using TensorId = std::string;

enum class AnchorReturnTypeId {
  Final,   ///< the value from the last batch of the step
  EveryN,  ///< the value from every N-th batch
  All,     ///< the value from every batch
  Sum,     ///< the sum over the step's batches
};

/// How an anchor is returned: AnchorReturnType("All"), AnchorReturnType("EveryN", 2), ...
/// Names are case-insensitive ("ALL" and "All" both work).
class AnchorReturnType {
 public:
  AnchorReturnType() : AnchorReturnType("All") {}
  explicit AnchorReturnType(const std::string& name, int returnPeriod = 0);
  AnchorReturnTypeId id() const { return id_; }
  /// N for EveryN (0 otherwise).
  int rp() const { return period_; }
  const std::string& str() const { return name_; }

 private:
  AnchorReturnTypeId id_;
  int period_;
  std::string name_;
};

using AnchorReturnTypeMap = std::map<TensorId, AnchorReturnType>;

/// Batches per step and the anchors to return.
class DataFlow {
 public:
  DataFlow() : DataFlow(1, AnchorReturnTypeMap{}) {}
  /// Throws graft::Error when batchesPerStep < 1 or an EveryN period does not divide it.
  DataFlow(int batchesPerStep, const AnchorReturnTypeMap& anchors);
  /// Every listed tensor returned with `art`.
  DataFlow(int batchesPerStep, const std::vector<TensorId>& anchorIds, const AnchorReturnType& art = AnchorReturnType("All"));

  int batchesPerStep() const { return batchesPerStep_; }
  const std::vector<TensorId>& anchors() const { return order_; }
  const AnchorReturnTypeMap& anchorReturnTypes() const { return map_; }
  const AnchorReturnType& art(const TensorId& id) const;
  bool isAnchored(const TensorId& id) const { return map_.count(id) != 0; }

 private:
  int batchesPerStep_;
  AnchorReturnTypeMap map_;
  std::vector<TensorId> order_;
};

}  // namespace graft
