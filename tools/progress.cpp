#include "progress.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ostream>

#include "format_util.hpp"

namespace graft::tools {

std::string clockTime(double s) {
  if (!std::isfinite(s) || s < 0 || s > 1e8) return "--:--";
  auto t = static_cast<int64_t>(s);
  int64_t h = t / 3600, m = t / 60 % 60, sec = t % 60;
  return h ? fmt::format("{}:{:02}:{:02}", h, m, sec) : fmt::format("{}:{:02}", m, sec);
}

ProgressBar::ProgressBar(std::ostream& out, ProgressMode mode, std::string label, int64_t total, int64_t samplesPerStep)
    : out_(out),
      mode_(mode),
      label_(std::move(label)),
      total_(std::max<int64_t>(total, 1)),
      samplesPerStep_(samplesPerStep),
      start_(std::chrono::steady_clock::now()),
      lastDraw_(start_) {
  nextLine_ = (total_ + 9) / 10;
}

double ProgressBar::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string ProgressBar::line(int64_t done, double loss) const {
  double t = elapsed();
  double rate = t > 0 ? static_cast<double>(done * samplesPerStep_) / t : 0;
  double eta = done > 0 ? t * static_cast<double>(total_ - done) / static_cast<double>(done) : NAN;
  std::string s = label_;
  if (mode_ == ProgressMode::Bar) {
    constexpr int kWidth = 24;
    int filled = static_cast<int>(kWidth * done / total_);
    std::string bar(static_cast<size_t>(filled), '=');
    if (filled < kWidth) bar += done ? ">" : " ";
    bar.resize(kWidth, ' ');
    s += " [" + bar + "]";
  }
  int width = static_cast<int>(std::to_string(total_).size());
  s += fmt::format(" {:>{}}/{} steps", done, width, total_);
  s += std::isnan(loss) ? "  loss    -   " : fmt::format("  loss {:.4f}", loss);
  s += fmt::format("  {:>7} samples/s", done ? groupDigits(std::llround(rate)) : "-");
  s += done == total_ ? fmt::format("  {} total", clockTime(t)) : fmt::format("  ETA {}", clockTime(eta));
  return s;
}

void ProgressBar::update(int64_t done, double loss) {
  if (mode_ == ProgressMode::None) return;
  done = std::clamp<int64_t>(done, 0, total_);
  if (mode_ == ProgressMode::Lines) {
    if (done < nextLine_ && done != total_) return;
    while (nextLine_ <= done) nextLine_ += (total_ + 9) / 10;
    out_ << line(done, loss) << "\n" << std::flush;
    return;
  }
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && done != total_ && now - lastDraw_ < std::chrono::milliseconds(100)) return;
  lastDraw_ = now;
  drawn_ = true;
  // '\r' back to the start of the line, ESC[K clears what a longer previous line left.
  out_ << '\r' << line(done, loss) << "\x1b[K" << std::flush;
}

void ProgressBar::finish() {
  if (mode_ == ProgressMode::Bar && drawn_) out_ << "\n" << std::flush;
  drawn_ = false;
}

}  // namespace graft::tools
