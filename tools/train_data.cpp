#include "train_data.hpp"

#include <cstring>
#include <limits>
#include <set>

#include "idx.hpp"
#include "ops/cast_util.hpp"
#include "ops/dtype_dispatch.hpp"
#include "support/check.hpp"

namespace graft::tools {

std::vector<NamedArray> readNamedArrays(const std::vector<std::string>& args, const std::string& option) {
  std::vector<NamedArray> out;
  std::set<std::string> names;
  for (const auto& a : args) {
    auto eq = a.find('=');
    GRAFT_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < a.size(),
                "{} '{}': expected NAME=FILE (a .npy or IDX file)", option, a);
    NamedArray n;
    n.name = a.substr(0, eq);
    n.path = a.substr(eq + 1);
    GRAFT_CHECK(names.insert(n.name).second, "{} {} is given twice", option, n.name);
    n.array = readArrayFile(n.path);
    GRAFT_CHECK(n.array.rank() >= 1, "{} {}: '{}' holds a scalar; its first axis must count the samples", option,
                n.name, n.path);
    out.push_back(std::move(n));
  }
  return out;
}

namespace {

// Values of at most 64 bits, widened to __int128, as text.
std::string intText(__int128 v) {
  return v < 0 ? std::to_string(static_cast<long long>(v)) : std::to_string(static_cast<unsigned long long>(v));
}

// The smallest and largest values of an integer or bool array, widened.
std::pair<__int128, __int128> integerRange(const NDArray& a) {
  __int128 lo = 0, hi = 0;
  ops::dispatch<ops::kInts | ops::kBool>(a.dtype(), "integerRange", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = a.data<T>();
    for (int64_t i = 0; i < a.numel(); ++i) {
      auto v = static_cast<__int128>(p[i]);
      if (i == 0 || v < lo) lo = v;
      if (i == 0 || v > hi) hi = v;
    }
  });
  return {lo, hi};
}

std::pair<__int128, __int128> limitsOf(DataType dt) {
  std::pair<__int128, __int128> r;
  ops::dispatch<ops::kInts>(dt, "limitsOf", [&](auto tag) {
    using T = typename decltype(tag)::type;
    r = {static_cast<__int128>(std::numeric_limits<T>::lowest()), static_cast<__int128>(std::numeric_limits<T>::max())};
  });
  return r;
}

}  // namespace

NDArray convertForInput(const NDArray& a, DataType to, const std::string& what) {
  DataType from = a.dtype();
  if (from == to) return a;
  bool fromNumber = isInteger(from) || isFloatingPoint(from) || from == DataType::Bool;
  bool ok = fromNumber && (isFloatingPoint(to) || (isInteger(to) && !isFloatingPoint(from)));
  GRAFT_CHECK(ok,
              "{} holds {} values but the model expects {}; graft train converts integers to floating point and "
              "between integer types, never floating point to integers",
              what, dtypeNumpyName(from), dtypeNumpyName(to));
  if (isInteger(to) && a.numel()) {
    auto [lo, hi] = integerRange(a);
    auto [min, max] = limitsOf(to);
    GRAFT_CHECK(lo >= min && hi <= max, "{} holds {} values from {} to {}, which do not fit in the model's {}", what,
                dtypeNumpyName(from), intText(lo), intText(hi), dtypeNumpyName(to));
  }
  return ops::castArray(a, to);
}

void gatherRows(const NDArray& src, const int64_t* indices, int64_t count, NDArray& dst) {
  int64_t rows = src.dim(0);
  size_t rowBytes = rows ? src.nbytes() / static_cast<size_t>(rows) : 0;
  GRAFT_ASSERT(dst.dtype() == src.dtype() && dst.nbytes() == rowBytes * static_cast<size_t>(count),
               "gatherRows: destination of {} bytes for {} rows of {} bytes", dst.nbytes(), count, rowBytes);
  if (rowBytes == 0 || count == 0) return;
  const auto* s = static_cast<const char*>(src.rawData());
  auto* d = static_cast<char*>(dst.rawData());
  for (int64_t i = 0; i < count; ++i) {
    GRAFT_ASSERT(indices[i] >= 0 && indices[i] < rows, "gatherRows: row {} of {}", indices[i], rows);
    std::memcpy(d + static_cast<size_t>(i) * rowBytes, s + static_cast<size_t>(indices[i]) * rowBytes, rowBytes);
  }
}

void checkClassLabels(const NDArray& labels, int64_t classes, const std::string& what) {
  ops::dispatch<ops::kInts>(labels.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = labels.data<T>();
    for (int64_t i = 0; i < labels.numel(); ++i) {
      auto v = static_cast<__int128>(p[i]);
      GRAFT_CHECK(v >= 0 && (classes < 0 || v < classes), "{}: label {} at position {} is not a class index{}", what,
                  intText(v), i, classes < 0 ? " (it is negative)" : fmt::format(" in [0, {})", classes));
    }
  });
}

int64_t countCorrect(const NDArray& scores, const NDArray& labels, int64_t axis) {
  NDArray s = scores.dtype() == DataType::Double ? scores : ops::castArray(scores, DataType::Double);
  NDArray l = labels.dtype() == DataType::Int64 ? labels : ops::castArray(labels, DataType::Int64);
  GRAFT_ASSERT(axis >= 0 && axis < s.rank(), "countCorrect: axis {} of rank {}", axis, s.rank());
  int64_t outer = 1, inner = 1, classes = s.dim(axis);
  for (int64_t d = 0; d < axis; ++d) outer *= s.dim(d);
  for (int64_t d = axis + 1; d < s.rank(); ++d) inner *= s.dim(d);
  GRAFT_ASSERT(l.numel() == outer * inner, "countCorrect: {} labels for {} positions", l.numel(), outer * inner);
  const double* p = s.data<double>();
  const int64_t* y = l.data<int64_t>();
  int64_t correct = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const double* row = p + o * classes * inner + i;
      int64_t best = 0;
      for (int64_t c = 1; c < classes; ++c)
        if (row[c * inner] > row[best * inner]) best = c;  // NaN never wins: the first class stays
      if (classes > 0 && best == y[o * inner + i]) ++correct;
    }
  return correct;
}

}  // namespace graft::tools
