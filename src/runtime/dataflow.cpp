#include <graft/dataflow.hpp>

#include <algorithm>

#include "support/check.hpp"

namespace graft {

AnchorReturnType::AnchorReturnType(const std::string& name, int returnPeriod) : period_(returnPeriod) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "final") id_ = AnchorReturnTypeId::Final, name_ = "Final";
  else if (lower == "all") id_ = AnchorReturnTypeId::All, name_ = "All";
  else if (lower == "sum") id_ = AnchorReturnTypeId::Sum, name_ = "Sum";
  else if (lower == "everyn") id_ = AnchorReturnTypeId::EveryN, name_ = "EveryN";
  else GRAFT_THROW("unknown anchor return type '{}' (expected All, Final, EveryN or Sum)", name);
  if (id_ == AnchorReturnTypeId::EveryN)
    GRAFT_CHECK(returnPeriod > 0, "AnchorReturnType EveryN needs a return period > 0, got {}", returnPeriod);
  else
    period_ = 0;
}

DataFlow::DataFlow(int batchesPerStep, const AnchorReturnTypeMap& anchors) : batchesPerStep_(batchesPerStep), map_(anchors) {
  GRAFT_CHECK(batchesPerStep >= 1, "DataFlow: batchesPerStep must be at least 1, got {}", batchesPerStep);
  for (const auto& [id, art] : anchors) {
    GRAFT_CHECK(!id.empty(), "DataFlow: an anchor has an empty tensor id");
    if (art.id() == AnchorReturnTypeId::EveryN)
      GRAFT_CHECK(batchesPerStep % art.rp() == 0,
                  "DataFlow: anchor '{}' returns every {} batches, which does not divide batchesPerStep {}", id, art.rp(),
                  batchesPerStep);
    order_.push_back(id);
  }
}

DataFlow::DataFlow(int batchesPerStep, const std::vector<TensorId>& ids, const AnchorReturnType& art)
    : DataFlow(batchesPerStep, [&] {
        AnchorReturnTypeMap m;
        for (const auto& id : ids) m.emplace(id, art);
        return m;
      }()) {
  order_ = ids;
  order_.erase(std::unique(order_.begin(), order_.end()), order_.end());
}

const AnchorReturnType& DataFlow::art(const TensorId& id) const {
  auto it = map_.find(id);
  GRAFT_CHECK(it != map_.end(), "'{}' is not an anchor of this DataFlow", id);
  return it->second;
}

}  // namespace graft
