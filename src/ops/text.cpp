// Text ops: StringNormalizer, TfIdfVectorizer, and opset 20's StringConcat, StringSplit and
// RegexFullMatch.
#include <locale.h>
#include <wctype.h>

#include <algorithm>
#include <map>
#include <memory>
#include <regex>
#include <set>

#include "ops/dtype_dispatch.hpp"
#include "ops/elementwise.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

// ---- StringNormalizer ---------------------------------------------------------------------------

// Case mapping of UTF-8 text under a C library locale. Code points are mapped one to one
// (towlower_l/towupper_l), so multi-character mappings such as German sharp s stay unchanged;
// bytes that are not valid UTF-8 pass through untouched.
class CaseMapper {
 public:
  /// "" means the default (en_US); a name without an encoding also tries "<name>.UTF-8".
  CaseMapper(const std::string& name, const std::string& what) {
    std::vector<std::string> candidates;
    if (name.empty() || name == "en_US" || name == "en_US.UTF-8" || name == "en_US.utf8" || name == "C" ||
        name == "POSIX" || name == "C.UTF-8") {
      // en_US and C.UTF-8 have the same case tables; C.UTF-8 ships with every glibc.
      candidates = {"en_US.UTF-8", "C.UTF-8", "C.utf8"};
    } else {
      candidates = {name + ".UTF-8", name + ".utf8", name};
    }
    for (const auto& cand : candidates)
      if (locale_t l = newlocale(LC_CTYPE_MASK, cand.c_str(), static_cast<locale_t>(nullptr))) {
        locale_ = std::shared_ptr<std::remove_pointer_t<locale_t>>(l, [](locale_t p) { freelocale(p); });
        return;
      }
    bool isDefault = candidates.front() == "en_US.UTF-8";
    // Without any UTF-8 locale on the system the default still works, for ASCII letters.
    GRAFT_CHECK(isDefault, "{}: locale '{}' is not available on this system (tried {})", what, name,
                fmt::join(candidates, ", "));
  }

  std::string lower(const std::string& s) const { return map(s, false); }
  std::string upper(const std::string& s) const { return map(s, true); }

 private:
  std::string map(const std::string& s, bool toUpper) const {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
      char32_t cp = 0;
      size_t len = decode(s, i, &cp);
      if (len == 0) {  // invalid UTF-8: copy the byte
        out.push_back(s[i++]);
        continue;
      }
      char32_t m = cp;
      if (locale_) {
        auto wc = static_cast<wint_t>(cp);
        m = static_cast<char32_t>(toUpper ? towupper_l(wc, locale_.get()) : towlower_l(wc, locale_.get()));
      } else if (cp < 128) {
        m = static_cast<char32_t>(toUpper ? std::toupper(static_cast<int>(cp)) : std::tolower(static_cast<int>(cp)));
      }
      encode(m, &out);
      i += len;
    }
    return out;
  }

  // Length of the UTF-8 sequence at s[i] (0 if invalid), and its code point.
  static size_t decode(const std::string& s, size_t i, char32_t* cp) {
    auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    unsigned char c0 = b(i);
    size_t len = c0 < 0x80 ? 1 : (c0 >> 5) == 0x6 ? 2 : (c0 >> 4) == 0xE ? 3 : (c0 >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return 0;
    char32_t v = len == 1 ? c0 : len == 2 ? (c0 & 0x1F) : len == 3 ? (c0 & 0x0F) : (c0 & 0x07);
    for (size_t k = 1; k < len; ++k) {
      if ((b(i + k) >> 6) != 0x2) return 0;
      v = (v << 6) | (b(i + k) & 0x3F);
    }
    static const char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < kMin[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;  // overlong or not a scalar value
    *cp = v;
    return len;
  }

  static void encode(char32_t v, std::string* out) {
    if (v < 0x80) {
      out->push_back(static_cast<char>(v));
    } else if (v < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (v >> 6)));
      out->push_back(static_cast<char>(0x80 | (v & 0x3F)));
    } else if (v < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (v >> 12)));
      out->push_back(static_cast<char>(0x80 | ((v >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (v & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (v >> 18)));
      out->push_back(static_cast<char>(0x80 | ((v >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((v >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (v & 0x3F)));
    }
  }

  std::shared_ptr<std::remove_pointer_t<locale_t>> locale_;
};

KernelFn stringNormalizerKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  std::string action = n.attrString("case_change_action", "NONE");
  GRAFT_CHECK(action == "NONE" || action == "LOWER" || action == "UPPER",
              "{}: case_change_action must be NONE, LOWER or UPPER, got '{}'", what, action);
  bool caseSensitive = n.attrInt("is_case_sensitive", 0) != 0;
  auto mapper = std::make_shared<CaseMapper>(n.attrString("locale", ""), what);
  std::set<std::string> stopwords;
  for (const auto& w : n.attrStrings("stopwords", {})) stopwords.insert(caseSensitive ? w : mapper->lower(w));
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.dtype() == DataType::String, "{}: X must be STRING, got {}", what, dtypeName(x.dtype()));
    GRAFT_CHECK(x.rank() == 1 || (x.rank() == 2 && x.dim(0) == 1), "{}: X must have shape [C] or [1, C], got {}", what,
                shapeToString(x.shape()));
    std::vector<std::string> kept;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const std::string& s = x.data<std::string>()[i];
      if (!stopwords.empty() && stopwords.count(caseSensitive ? s : mapper->lower(s))) continue;
      kept.push_back(action == "LOWER" ? mapper->lower(s) : action == "UPPER" ? mapper->upper(s) : s);
    }
    // An input with every element removed gives one empty string, keeping the input's rank.
    if (kept.empty()) kept.emplace_back();
    auto count = static_cast<int64_t>(kept.size());
    NDArray& y = k.allocOutput(0, DataType::String, x.rank() == 1 ? Shape{count} : Shape{1, count});
    std::move(kept.begin(), kept.end(), y.data<std::string>());
  };
}

// ---- TfIdfVectorizer ----------------------------------------------------------------------------

struct TfIdfParams {
  enum class Mode { TF, IDF, TFIDF } mode = Mode::TF;
  int64_t minGram = 1, maxGram = 1, maxSkip = 0, outputSize = 0;
  std::vector<float> weights;  // by output column; empty: all ones
  // n-gram -> output column, for the n-gram sizes in [minGram, maxGram]. Tokens are int64 or
  // strings, whichever pool the model gives.
  std::map<std::vector<int64_t>, int64_t> intGrams;
  std::map<std::vector<std::string>, int64_t> stringGrams;
  bool strings = false;
};

TfIdfParams parseTfIdf(const ir::Node& n) {
  std::string what = n.describe();
  TfIdfParams p;
  std::string mode = n.attrString("mode");
  if (mode == "TF") p.mode = TfIdfParams::Mode::TF;
  else if (mode == "IDF") p.mode = TfIdfParams::Mode::IDF;
  else if (mode == "TFIDF") p.mode = TfIdfParams::Mode::TFIDF;
  else GRAFT_THROW("{}: mode must be TF, IDF or TFIDF, got '{}'", what, mode);
  p.minGram = n.attrInt("min_gram_length");
  p.maxGram = n.attrInt("max_gram_length");
  p.maxSkip = n.attrInt("max_skip_count");
  GRAFT_CHECK(p.minGram >= 1 && p.minGram <= p.maxGram, "{}: expected 1 <= min_gram_length <= max_gram_length, got {} and {}",
              what, p.minGram, p.maxGram);
  GRAFT_CHECK(p.maxSkip >= 0, "{}: max_skip_count must be >= 0, got {}", what, p.maxSkip);
  std::vector<int64_t> counts = n.attrInts("ngram_counts");
  std::vector<int64_t> indexes = n.attrInts("ngram_indexes");
  std::vector<int64_t> ints = n.attrInts("pool_int64s", {});
  std::vector<std::string> strs = n.attrStrings("pool_strings", {});
  GRAFT_CHECK(ints.empty() != strs.empty(), "{}: exactly one of pool_int64s and pool_strings must be given", what);
  p.strings = !strs.empty();
  const auto poolSize = static_cast<int64_t>(p.strings ? strs.size() : ints.size());
  GRAFT_CHECK(!indexes.empty(), "{}: ngram_indexes must not be empty", what);
  for (int64_t idx : indexes)
    GRAFT_CHECK(idx >= 0 && idx < (int64_t{1} << 31), "{}: ngram_indexes must be in [0, 2^31), got {}", what, idx);
  p.outputSize = *std::max_element(indexes.begin(), indexes.end()) + 1;
  p.weights = n.attrFloats("weights", {});
  GRAFT_CHECK(p.weights.empty() || static_cast<int64_t>(p.weights.size()) >= p.outputSize,
              "{}: weights has {} values, fewer than the {} output columns", what, p.weights.size(), p.outputSize);
  // ngram_counts[i] is where the (i+1)-grams start in the pool; the n-gram id (the position in
  // ngram_indexes) runs over all sizes in pool order.
  int64_t id = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const auto size = static_cast<int64_t>(i) + 1;
    int64_t begin = counts[i], end = i + 1 < counts.size() ? counts[i + 1] : poolSize;
    GRAFT_CHECK(begin >= 0 && begin <= end && end <= poolSize && (end - begin) % size == 0,
                "{}: ngram_counts {} does not split the pool of {} items into whole n-grams", what,
                shapeToString(counts), poolSize);
    for (int64_t at = begin; at < end; at += size, ++id) {
      GRAFT_CHECK(id < static_cast<int64_t>(indexes.size()), "{}: the pool holds more n-grams than ngram_indexes ({})",
                  what, indexes.size());
      if (size < p.minGram || size > p.maxGram) continue;
      // A repeated n-gram counts towards its last column, like the reference implementation.
      if (p.strings) p.stringGrams[std::vector<std::string>(strs.begin() + at, strs.begin() + at + size)] = indexes[id];
      else p.intGrams[std::vector<int64_t>(ints.begin() + at, ints.begin() + at + size)] = indexes[id];
    }
  }
  return p;
}

// Adds the counts of one row of `len` tokens to freq[outputSize].
template <class Tok>
void countRow(const TfIdfParams& p, const std::map<std::vector<Tok>, int64_t>& grams, const Tok* row, int64_t len,
              std::vector<int64_t>& freq) {
  std::vector<Tok> key;
  for (int64_t n = p.minGram; n <= p.maxGram; ++n) {
    // Unigrams have no gaps, so they are counted once, not once per skip distance.
    int64_t maxSkip = n == 1 ? 0 : p.maxSkip;
    for (int64_t skip = 0; skip <= maxSkip; ++skip) {
      const int64_t stride = skip + 1;
      for (int64_t start = 0; start + (n - 1) * stride < len; ++start) {
        key.clear();
        for (int64_t j = 0; j < n; ++j) key.push_back(row[start + j * stride]);
        auto it = grams.find(key);
        if (it != grams.end()) ++freq[it->second];
      }
    }
  }
}

KernelFn tfIdfKernel(CompileContext& c) {
  std::string what = c.node().describe();
  auto p = std::make_shared<const TfIdfParams>(parseTfIdf(c.node()));
  return [p, what](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() <= 2, "{}: X must have shape [C] or [N, C], got {}", what, shapeToString(x.shape()));
    const bool batched = x.rank() == 2;
    const int64_t rows = batched ? x.dim(0) : 1, len = batched ? x.dim(1) : x.numel();
    std::vector<int64_t> freq(static_cast<size_t>(shapeNumel({rows, p->outputSize})), 0);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<int64_t> f(static_cast<size_t>(p->outputSize), 0);
      if (p->strings) {
        GRAFT_CHECK(x.dtype() == DataType::String, "{}: the pool is strings, so X must be STRING, got {}", what,
                    dtypeName(x.dtype()));
        countRow(*p, p->stringGrams, x.data<std::string>() + r * len, len, f);
      } else if (x.dtype() == DataType::Int64) {
        countRow(*p, p->intGrams, x.data<int64_t>() + r * len, len, f);
      } else {
        GRAFT_CHECK(x.dtype() == DataType::Int32, "{}: the pool is integers, so X must be INT32 or INT64, got {}", what,
                    dtypeName(x.dtype()));
        std::vector<int64_t> row(x.data<int32_t>() + r * len, x.data<int32_t>() + (r + 1) * len);
        countRow(*p, p->intGrams, row.data(), len, f);
      }
      std::copy(f.begin(), f.end(), freq.begin() + r * p->outputSize);
    }
    NDArray& y = k.allocOutputUninit(0, DataType::Float, batched ? Shape{rows, p->outputSize} : Shape{p->outputSize});
    for (int64_t i = 0; i < y.numel(); ++i) {
      double w = p->weights.empty() ? 1.0 : p->weights[i % p->outputSize];
      auto f = static_cast<double>(freq[i]);
      double v = p->mode == TfIdfParams::Mode::TF ? f : p->mode == TfIdfParams::Mode::IDF ? (f > 0 ? w : 0.0) : w * f;
      y.data<float>()[i] = static_cast<float>(v);
    }
  };
}

// ---- StringConcat, StringSplit, RegexFullMatch ---------------------------------------------------

KernelFn stringConcatKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    const NDArray& a = k.input(0);
    const NDArray& b = k.input(1);
    GRAFT_CHECK(a.dtype() == DataType::String && b.dtype() == DataType::String,
                "{}: X and Y must be STRING tensors, got {} and {}", what, dtypeName(a.dtype()), dtypeName(b.dtype()));
    NDArray& y = k.allocOutput(0, DataType::String, broadcastShapes(a.shape(), b.shape(), what));
    broadcastBinary<std::string, std::string>(a, b, y, [](const std::string& x, const std::string& z) { return x + z; });
  };
}

// Python's str.split: with a delimiter every field counts (empty ones too); without one, runs of
// whitespace separate and leading/trailing whitespace makes no field. At most maxsplit splits
// (the rest of the string is the last field).
std::vector<std::string> splitString(const std::string& s, const std::string& delim, int64_t maxsplit) {
  std::vector<std::string> out;
  if (!delim.empty()) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t at = s.find(delim, start);
      if (at == std::string::npos) break;
      out.push_back(s.substr(start, at - start));
      start = at + delim.size();
    }
    out.push_back(s.substr(start));
    return out;
  }
  auto space = [](char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r') || (ch >= '\x1c' && ch <= '\x1f'); };
  size_t i = 0;
  while (true) {
    while (i < s.size() && space(s[i])) ++i;
    if (i == s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(s.substr(i));  // the remainder keeps its trailing whitespace, as Python
      break;
    }
    size_t j = i;
    while (j < s.size() && !space(s[j])) ++j;
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

KernelFn stringSplitKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  std::string delim = n.attrString("delimiter", "");
  bool hasMax = n.attrs().has("maxsplit");
  int64_t maxsplit = hasMax ? n.attrInt("maxsplit") : -1;
  GRAFT_CHECK(maxsplit >= -1, "{}: maxsplit must be >= 0, got {}", what, maxsplit);
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.dtype() == DataType::String, "{}: X must be a STRING tensor, got {}", what, dtypeName(x.dtype()));
    std::vector<std::vector<std::string>> parts(static_cast<size_t>(x.numel()));
    int64_t width = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      parts[i] = splitString(x.data<std::string>()[i], delim, maxsplit);
      width = std::max<int64_t>(width, static_cast<int64_t>(parts[i].size()));
    }
    Shape ys = x.shape();
    ys.push_back(width);
    NDArray& y = k.allocOutput(0, DataType::String, ys);
    NDArray& z = k.allocOutputUninit(1, DataType::Int64, x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) {
      for (size_t j = 0; j < parts[i].size(); ++j) y.data<std::string>()[i * width + static_cast<int64_t>(j)] = parts[i][j];
      z.data<int64_t>()[i] = static_cast<int64_t>(parts[i].size());
    }
  };
}

// RE2 syntax is what ONNX specifies; std::regex's ECMAScript grammar is what graft has. The
// common subset (classes, quantifiers, groups, alternation, anchors, \d \w \s) agrees; RE2-only
// constructs ((?P<name>...), (?i) flags, \pL classes) fail to compile and are refused by name.
KernelFn regexFullMatchKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  std::string pattern = n.attrString("pattern");
  std::shared_ptr<std::regex> re;
  try {
    re = std::make_shared<std::regex>(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    GRAFT_THROW("{}: pattern '{}' is not supported: graft matches with std::regex (ECMAScript syntax), not RE2, and "
                "it rejects this pattern ({})",
                what, pattern, e.what());
  }
  return [what, re](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.dtype() == DataType::String, "{}: X must be a STRING tensor, got {}", what, dtypeName(x.dtype()));
    NDArray& y = k.allocOutputUninit(0, DataType::Bool, x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) y.data<bool>()[i] = std::regex_match(x.data<std::string>()[i], *re);
  };
}

}  // namespace

GRAFT_REGISTER_OPS(text) {
  r.add("StringNormalizer").setReference(stringNormalizerKernel);
  r.add("TfIdfVectorizer").setReference(tfIdfKernel);
  r.add("StringConcat").setReference(stringConcatKernel);
  r.add("StringSplit").setReference(stringSplitKernel);
  r.add("RegexFullMatch").setReference(regexFullMatchKernel);
}

}  // namespace graft::ops
