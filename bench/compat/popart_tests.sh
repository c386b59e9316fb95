#!/usr/bin/env bash
# Runs PopART's own operator tests (graphcore/popart tests/integration/operators_test) against
# graft, with `import popart` answered by a module that only re-exports graft (no stand-ins).
#
#   bench/compat/popart_tests.sh POPART_CHECKOUT [pytest arguments...] [test files...]
#
# Test files and node ids are relative to tests/integration/operators_test; when none is given
# the whole folder runs.
#
# POPART_CHECKOUT is a checkout of graphcore/popart, or a git directory of it (then
# tests/integration is extracted from HEAD into a temporary folder). Prints passed / failed /
# needs-IPU counts and the failures grouped by cause. Not part of CI: CI has no checkout.
# Environment: PYTHON (default: the worktree's .venv), GRAFT_JUDGE_TIMEOUT (seconds per test,
# default 120), GRAFT_JUDGE_OUT (folder for the junit xml and the log; default a temporary one).
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 POPART_CHECKOUT [pytest arguments...]" >&2
  exit 2
fi
checkout=$1
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
out=${GRAFT_JUDGE_OUT:-$(mktemp -d /tmp/graft_popart_judge.XXXXXX)}
mkdir -p "$out"

if [[ -d $checkout/tests/integration/operators_test ]]; then
  tests=$(cd "$checkout/tests/integration" && pwd)
elif git --git-dir="$checkout" rev-parse --verify -q HEAD >/dev/null 2>&1; then
  mkdir -p "$out/src"
  git --git-dir="$checkout" archive HEAD tests/integration | tar -x -C "$out/src"
  tests=$out/src/tests/integration
else
  echo "$checkout is neither a popart checkout nor a git directory of one" >&2
  exit 2
fi

# The graft of this checkout when it has a development build (the extension next to the package
# sources), rather than whichever one the venv's path names.
pkg=
compgen -G "$root/python/graft/_graft*.so" >/dev/null && pkg=":$root/python"
export PYTHONPATH="$here/popart_shim$pkg${PYTHONPATH:+:$PYTHONPATH}"
export TEST_TARGET=Cpu
export GRAFT_JUDGE_TIMEOUT=${GRAFT_JUDGE_TIMEOUT:-120}

# The shim must be graft and nothing else.
"$python" -c 'import popart, graft; assert popart.Builder is graft.Builder; print("graft from", graft.__file__)' || exit 1

cd "$tests/operators_test"
# Test files or node ids (relative to operators_test, e.g. `logsoftmax_test.py::test_x`) narrow
# the run; without any, the whole folder runs.
selected=0
for arg in "$@"; do
  [[ $arg != -* && -e ${arg%%::*} ]] && selected=1
done
targets=()
[[ $selected == 0 ]] && targets=(.)
set +e
"$python" -m pytest -p no:cacheprovider -p graft_judge_plugin -q -rN --tb=line --continue-on-collection-errors \
  --junitxml="$out/junit.xml" --rootdir="$tests/operators_test" "$@" "${targets[@]}" >"$out/pytest.log" 2>&1
set -e
echo "pytest log and junit xml: $out"
"$python" "$here/popart_tests_report.py" "$out/junit.xml"
