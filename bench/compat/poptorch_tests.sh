#!/usr/bin/env bash
# Runs PopTorch's own tests (graphcore/poptorch, tests/) with `import poptorch` answered by
# graft.torch, and reports passed / failed / needs-IPU counts with the failures grouped by cause.
#
#   bench/compat/poptorch_tests.sh POPTORCH_CHECKOUT [pytest args...]
#
# POPTORCH_CHECKOUT: a checkout of graphcore/poptorch (only its tests/ folder is read; nothing of it
# is copied into graft). Not part of CI: the suite takes a while and needs torch.
# Environment: FILES="a_test.py b_test.py" narrows the target files; PER_FILE_TIMEOUT (s, 1800): a
# file still running then gets SIGINT, and pytest reports the cases it finished (the report counts
# only cases that ran); OUT (a folder for the junit files and the report, default a temporary one);
# JOBS (1): how many files run at once.
# Needs torch, onnx and expecttest (torch's testing helpers import it) in the Python used.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
checkout="${1:?usage: $0 POPTORCH_CHECKOUT [pytest args...]}"
shift
[ -f "$checkout/tests/helpers.py" ] || { echo "$checkout has no tests/helpers.py: not a poptorch checkout" >&2; exit 2; }
py="${PYTHON:-$root/.venv/bin/python}"
out="${OUT:-$(mktemp -d /tmp/poptorch-tests.XXXXXX)}"
mkdir -p "$out"
files="${FILES:-activations_test.py blas_test.py convs_test.py losses_test.py norms_test.py
pooling_and_padding_test.py reduce_ops_test.py math_ops_test.py index_ops_test.py tensor_ops_test.py
optimizers_test.py inputs_test.py outputs_test.py batching_test.py dataloader_test.py weights_writing_test.py
requires_grad_test.py lstm_test.py gru_test.py rnn_test.py torch_nn_test.py}"

export PYTHONPATH="$here/poptorch_shim:$root/python${PYTHONPATH:+:$PYTHONPATH}"
export GRAFT_LOG_LEVEL="${GRAFT_LOG_LEVEL:-ERR}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
cd "$checkout/tests"
run_one() {  # FILE [pytest args...]
  local f="$1"
  shift
  timeout -s INT -k 60 "${PER_FILE_TIMEOUT:-1800}" "$py" -m pytest -q -p no:cacheprovider --junitxml="$out/${f%.py}.xml" \
    "$f" "$@" >"$out/${f%.py}.log" 2>&1 || true
  echo "== $f: $(tail -1 "$out/${f%.py}.log")" >&2
}
export -f run_one
export py out
# JOBS (1): files run this many at a time, each in its own pytest process.
printf '%s\n' $files | xargs -P "${JOBS:-1}" -I{} bash -c 'run_one "$@"' _ {} "$@"
"$py" "$here/poptorch_report.py" "$out" | tee "$out/report.txt"
