#!/usr/bin/env bash
# Checks that the C++ lines changed since the merge base with $1 (default main) are as
# clang-format (the root .clang-format) writes them: git clang-format on those lines only, so
# older, unformatted code around them is not dragged in. FORMAT_ALL=1 checks every tracked file
# whole instead. Prints what clang-format would change and fails; `git clang-format <base>` (or
# clang-format -i FILE) applies it.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-main}
command -v clang-format >/dev/null || { echo "format-check: no clang-format (scripts/setup.sh installs it)"; exit 1; }
if [ "${FORMAT_ALL:-0}" = 1 ]; then
  bad=()
  while IFS= read -r f; do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done < <(git ls-files '*.cpp' '*.hpp')
  echo "format-check: ${#bad[@]} files not clang-formatted"
  for f in "${bad[@]}"; do echo "  $f"; done
  ((${#bad[@]} == 0))
  exit
fi
mb=$(git merge-base HEAD "$base" 2>/dev/null) || { echo "format-check: no merge base with '$base'"; exit 1; }
out=$(git clang-format --diff --extensions cpp,hpp "$mb" 2>&1 || true)
if [[ "$out" == diff* ]]; then
  echo "$out"
  echo "format-check: the changed lines above are not clang-formatted (git clang-format $mb fixes them)"
  exit 1
fi
echo "format-check: changed lines since $(git rev-parse --short "$mb") are clang-formatted"
