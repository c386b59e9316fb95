"""Summarises a junit xml of PopART's operators_test run against graft (popart_tests.sh).

Counts passed / failed / needs-IPU cases, reports cases that fail for a third-party reference
missing from PyPI apart, and groups the other failures by cause: the first line of the error,
with numbers and paths folded so that one cause is one line.
"""
import collections
import re
import sys
import xml.etree.ElementTree as ET

# torchvision is on PyPI but not in graft's environment; the others are not on PyPI.
THIRD_PARTY = ("torch_scatter", "torch_spline_conv", "pva", "torchvision")
NEEDS_IPU = re.compile(r"Test requires \d+ IPUs")


def cause_of(message):
    """One line naming why a case failed."""
    lines = [l.strip() for l in (message or "").splitlines() if l.strip()]
    # pytest puts the exception's last line first in 'message'; prefer an E line when present.
    line = lines[0] if lines else "(no message)"
    line = re.sub(r"/[^\s:'\"]+/", "", line)
    line = re.sub(r"\b\d+(\.\d+)?(e[-+]?\d+)?\b", "N", line)
    line = re.sub(r"0xN?[0-9a-f]+", "0x..", line)
    return line[:160]


def main(path):
    root = ET.parse(path).getroot()
    passed, failed, ipu, third, skipped = 0, [], 0, collections.Counter(), 0
    collection_errors = []
    for case in root.iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if case.find("skipped") is not None:
            skipped += 1
            continue
        name = f"{case.get('classname')}::{case.get('name')}"
        if problem is None:
            passed += 1
            continue
        text = (problem.get("message") or "") + "\n" + (problem.text or "")
        missing = [m for m in THIRD_PARTY if re.search(rf"No module named '{m}'", text)]
        if missing:
            third[missing[0]] += 1
            continue
        if NEEDS_IPU.search(text):
            ipu += 1
            continue
        if not case.get("name") or case.get("name") == case.get("classname"):
            collection_errors.append((name, cause_of(problem.get("message"))))
        failed.append((name, cause_of(problem.get("message"))))
    judged = passed + len(failed)
    pct = 100.0 * passed / judged if judged else 0.0
    print(f"passed {passed}  failed {len(failed)}  needs-IPU {ipu}  skipped {skipped}  "
          f"missing-third-party {sum(third.values())} {dict(third)}")
    print(f"pass rate of the cases that need no IPU (third-party-missing left out): {passed}/{judged} = {pct:.1f}%")
    by_cause = collections.defaultdict(list)
    for name, cause in failed:
        by_cause[cause].append(name)
    print("\nfailures by cause (cases, cause, an example):")
    for cause, names in sorted(by_cause.items(), key=lambda kv: -len(kv[1])):
        print(f"{len(names):5d}  {cause}\n       e.g. {names[0]}")


if __name__ == "__main__":
    main(sys.argv[1])
