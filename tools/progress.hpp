#pragma once
// A progress bar for long loops (graft train's epochs): steps done, the running loss, samples per
// second and the time left.
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace graft::tools {

/// How progress is shown.
enum class ProgressMode {
  Bar,    ///< one line redrawn in place ('\r'), for a terminal
  Lines,  ///< a line at every tenth of the loop, for logs and pipes
  None,   ///< nothing
};

/// "1:05", "12:00:03": seconds as [h:]mm:ss (whole seconds, rounded down; "--:--" when unknown).
std::string clockTime(double seconds);

/// Progress of one loop of `total` steps of `samplesPerStep` samples each, written to `out`.
class ProgressBar {
 public:
  ProgressBar(std::ostream& out, ProgressMode mode, std::string label, int64_t total, int64_t samplesPerStep);
  /// `done` steps are finished; `loss` is the value to show (NaN: none yet). Redraws at most
  /// ten times a second, and always for the last step.
  void update(int64_t done, double loss);
  /// Ends the bar's line (Bar mode) so that the next output starts on a fresh line.
  void finish();
  /// Seconds since the bar was created.
  double elapsed() const;

 private:
  std::string line(int64_t done, double loss) const;

  std::ostream& out_;
  ProgressMode mode_;
  std::string label_;
  int64_t total_, samplesPerStep_;
  int64_t nextLine_ = 0;  // Lines mode: the next step count that prints
  std::chrono::steady_clock::time_point start_, lastDraw_;
  bool drawn_ = false;
};

}  // namespace graft::tools
