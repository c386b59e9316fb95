// The library's version string.
namespace graft {
const char* versionString() { return "0.1.0"; }
}  // namespace graft
