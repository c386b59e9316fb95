#pragma once
// Sliding-window geometry shared by Conv, ConvTranspose and the pooling ops (auto_pad, pads,
// strides, dilations, ceil_mode), and the direct convolution loops. The loops are templates over
// the accumulator type and read elements through callables, so that integer and quantized
// convolutions (ConvInteger, QLinearConv) reuse them with zero-point-adjusting loaders.
#include <graft/ndarray.hpp>
#include <initializer_list>
#include <string>
#include <vector>

#include "ir/graph.hpp"
#include "support/check.hpp"

namespace graft::ops {

/// The enum value named by string attribute `name` of `n` (or `def` when absent); throws listing
/// the accepted names.
template <class E>
E attrChoice(const ir::Node& n, const char* name, const char* def,
             std::initializer_list<std::pair<const char*, E>> opts) {
  std::string v = n.attrString(name, def);
  std::string names;
  for (const auto& [s, e] : opts) {
    if (v == s) return e;
    names += (names.empty() ? "" : ", ") + std::string(s);
  }
  GRAFT_THROW("{}: {} must be one of {}; got '{}'", n.describe(), name, names, v);
}

/// The ONNX auto_pad attribute.
enum class AutoPad { NotSet, SameUpper, SameLower, Valid };

/// Window attributes as written on a node; empty vectors mean "not given".
struct WindowAttrs {
  AutoPad autoPad = AutoPad::NotSet;
  std::vector<int64_t> kernel;     ///< kernel_shape
  std::vector<int64_t> strides;    ///< default all 1
  std::vector<int64_t> dilations;  ///< default all 1
  std::vector<int64_t> pads;       ///< [x1_begin, x2_begin, ..., x1_end, x2_end, ...]
  bool ceilMode = false;
  std::string what;  ///< the node, for messages
};

/// Reads auto_pad, kernel_shape, strides, pads and (when the op has them) dilations and
/// ceil_mode. Checks what can be checked without shapes: values positive (pads >= 0), auto_pad
/// known, pads not combined with auto_pad. Throws graft::Error naming the node.
WindowAttrs parseWindowAttrs(const ir::Node& n, bool hasDilations, bool hasCeilMode);

/// One window resolved against an input: per spatial axis.
struct Window {
  Shape in;      ///< input spatial extent
  Shape out;     ///< output spatial extent
  Shape kernel;  ///< kernel extent (taps)
  Shape stride;
  Shape dilation;
  Shape padBegin;
  Shape padEnd;
  int64_t rank() const { return static_cast<int64_t>(in.size()); }
};

/// Resolves a forward (Conv/pool) window over spatial extent `in` with the given kernel (from
/// the weights or kernel_shape): applies auto_pad, computes the output extent
/// floor((in + pads - ((k - 1) * d + 1)) / s) + 1 (ceil with ceil_mode, where a last window may
/// then cover padding only, as in ONNX 1.12's shape inference). Throws when sizes disagree or the
/// window does not fit.
Window resolveWindow(const WindowAttrs& a, const Shape& in, const Shape& kernel);

/// The spatial extents (dims 2...) of an [N, C, spatial...] shape.
Shape spatialDims(const Shape& s);

/// Row-major odometer over a shape: next() returns false after the last index.
struct Odometer {
  explicit Odometer(const Shape& s) : shape(s), idx(s.size(), 0) {}
  bool next() {
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) return true;
      idx[d] = 0;
    }
    return false;
  }
  const Shape& shape;
  std::vector<int64_t> idx;
};

/// For output position `o` of window `w`, the (kernel offset, input offset) pairs of the taps that
/// fall inside the input (padding taps are skipped). Offsets are row-major within the kernel and
/// within the input's spatial block.
void windowTaps(const Window& w, const std::vector<int64_t>& o, std::vector<std::pair<int64_t, int64_t>>& taps);

/// The taps k (0 <= k < kernel, per axis) with base + k * dilation inside [0, extent), as
/// (row-major kernel offset, row-major offset within `extent`) pairs. Only taps that land inside
/// are visited, so the cost is bounded by the extent, not by the kernel attribute.
void tapsWithin(const Shape& kernel, const std::vector<int64_t>& base, const Shape& dilation, const Shape& extent,
                std::vector<std::pair<int64_t, int64_t>>& taps);

/// Shapes of a grouped convolution: X [N, C, in...], W [M, C/group, k...], Y [N, M, out...].
struct ConvShape {
  int64_t batch = 0, inChannels = 0, outChannels = 0, group = 1;
  Window win;
};

/// Checks X [N, C, in...] and W (Conv: [M, C/group, k...]; transposed: [C, M/group, k...])
/// against each other, kernel_shape and group. Throws graft::Error naming the node.
void checkConvShapes(const WindowAttrs& wa, const Shape& x, const Shape& w, int64_t group, bool transposed);

/// The shapes and resolved window of a (forward) Conv of X by W: checkConvShapes, then the window
/// from W's spatial extent. Integer and quantized convolutions start here too.
ConvShape convShapeOf(const WindowAttrs& wa, const Shape& x, const Shape& w, int64_t group);

/// The window of a ConvTranspose of X by W (X [N, C, in...], W [C, M/group, k...]): output
/// extents and pads from pads, auto_pad, output_padding and output_shape, as ONNX defines them.
/// `win.in` is X's spatial extent, `win.out` the output's; pads may be negative when output_shape
/// asks for more than the input covers. Throws graft::Error naming the node.
ConvShape transposedConvShape(const WindowAttrs& wa, const Shape& xs, const Shape& ws, int64_t group,
                              const std::vector<int64_t>& outputPadding, const std::vector<int64_t>& outputShape);

/// Checks ConvTranspose's output_padding and output_shape values (bounded, >= 0).
void checkOutputAttrs(const std::string& what, const std::vector<int64_t>& outputPadding,
                      const std::vector<int64_t>& outputShape);

/// Direct grouped N-D convolution.
///   acc = sum over taps and input channels of loadX(flat x index) * loadW(flat w index)
///   store(flat y index, output channel, acc)
/// loadX/loadW return Acc (a quantized variant subtracts zero points there); store converts and
/// adds bias (a quantized variant requantizes there). Every output element is stored once.
template <class Acc, class LoadX, class LoadW, class Store>
void convDirect(const ConvShape& s, LoadX&& loadX, LoadW&& loadW, Store&& store) {
  const Window& w = s.win;
  int64_t inBlock = shapeNumel(w.in), outBlock = shapeNumel(w.out), kBlock = shapeNumel(w.kernel);
  int64_t cg = s.inChannels / s.group, mg = s.outChannels / s.group;
  std::vector<std::pair<int64_t, int64_t>> taps;
  if (outBlock == 0 || s.batch == 0 || s.outChannels == 0) return;
  Odometer o(w.out);
  int64_t op = 0;
  do {
    windowTaps(w, o.idx, taps);
    for (int64_t n = 0; n < s.batch; ++n)
      for (int64_t g = 0; g < s.group; ++g)
        for (int64_t m = 0; m < mg; ++m) {
          int64_t oc = g * mg + m;
          Acc acc = 0;
          for (int64_t c = 0; c < cg; ++c) {
            int64_t xBase = (n * s.inChannels + g * cg + c) * inBlock;
            int64_t wBase = (oc * cg + c) * kBlock;
            for (const auto& [kOff, iOff] : taps) acc += loadX(xBase + iOff) * loadW(wBase + kOff);
          }
          store((n * s.outChannels + oc) * outBlock + op, oc, acc);
        }
    ++op;
  } while (o.next());
}

/// Direct grouped N-D transposed convolution (the adjoint of convDirect):
/// X [N, C, in...], W [C, M/group, k...], y [N, M, out...] (accumulated into `y`, which the
/// caller zero-fills). Output position of tap k from input position i: i * s - padBegin + k * d.
template <class Acc, class LoadX, class LoadW>
void convTransposeDirect(const ConvShape& s, LoadX&& loadX, LoadW&& loadW, Acc* y) {
  const Window& w = s.win;
  int64_t r = w.rank();
  int64_t inBlock = shapeNumel(w.in), outBlock = shapeNumel(w.out), kBlock = shapeNumel(w.kernel);
  int64_t cg = s.inChannels / s.group, mg = s.outChannels / s.group;
  if (inBlock == 0 || kBlock == 0 || s.batch == 0) return;
  std::vector<std::pair<int64_t, int64_t>> taps;  // (kernel offset, output offset)
  std::vector<int64_t> base(r);
  Odometer i(w.in);
  int64_t ip = 0;
  do {
    for (int64_t d = 0; d < r; ++d) base[d] = i.idx[d] * w.stride[d] - w.padBegin[d];
    tapsWithin(w.kernel, base, w.dilation, w.out, taps);
    for (int64_t n = 0; n < s.batch; ++n)
      for (int64_t g = 0; g < s.group; ++g)
        for (int64_t c = 0; c < cg; ++c) {
          int64_t ic = g * cg + c;
          Acc xv = loadX((n * s.inChannels + ic) * inBlock + ip);
          for (int64_t m = 0; m < mg; ++m) {
            Acc* yb = y + (n * s.outChannels + g * mg + m) * outBlock;
            int64_t wBase = (ic * mg + m) * kBlock;
            for (const auto& [kOff, oOff] : taps) yb[oOff] += xv * loadW(wBase + kOff);
          }
        }
    ++ip;
  } while (i.next());
}

}  // namespace graft::ops
