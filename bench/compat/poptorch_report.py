"""Summarises the junit files poptorch_tests.sh wrote: counts per file, and failures grouped by
cause (the exception type and the first line of its message, with numbers and names blurred)."""
import collections
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET

IPU = re.compile(r"Hardware IPU needed|ipuHardwareRequired|IPU hardware", re.I)


def cause(text):
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    err = next((ln for ln in reversed(lines) if re.match(r"^E\s+\S", ln)), lines[-1] if lines else "?")
    err = re.sub(r"^E\s+", "", err)
    err = re.sub(r"'[^']*'", "'…'", err)
    err = re.sub(r"\b\d+(\.\d+)?(e-?\d+)?\b", "N", err)
    err = re.sub(r"\[[^\]]*\]", "[…]", err)
    return err[:140]


def main(folder):
    totals = collections.Counter()
    causes = collections.Counter()
    examples = {}
    rows = []
    for path in sorted(glob.glob(os.path.join(folder, "*.xml"))):
        name = os.path.basename(path)[:-4] + ".py"
        c = collections.Counter()
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError:
            rows.append((name, "junit file unreadable (timed out?)"))
            continue
        for case in root.iter("testcase"):
            failure = case.find("failure")
            if failure is None:
                failure = case.find("error")
            skipped = case.find("skipped")
            if failure is not None:
                c["failed"] += 1
                k = cause(failure.get("message", "") + "\n" + (failure.text or ""))
                causes[k] += 1
                examples.setdefault(k, f"{name}::{case.get('name')}")
            elif skipped is not None:
                msg = skipped.get("message", "") + (skipped.text or "")
                c["needs IPU" if IPU.search(msg) else "skipped"] += 1
            else:
                c["passed"] += 1
        totals.update(c)
        rows.append((name, ", ".join(f"{k} {v}" for k, v in sorted(c.items()))))
    print("PopTorch tests through graft.torch")
    for name, text in rows:
        print(f"  {name:<34} {text}")
    runnable = totals["passed"] + totals["failed"]
    share = 100.0 * totals["passed"] / runnable if runnable else 0.0
    print(f"total: passed {totals['passed']}, failed {totals['failed']}, needs IPU {totals['needs IPU']}, "
          f"skipped (by the suite) {totals['skipped']}; passed {share:.1f}% of the cases that run without an IPU")
    print("failures by cause:")
    for k, v in causes.most_common():
        print(f"  {v:5d}  {k}    (e.g. {examples[k]})")


if __name__ == "__main__":
    main(sys.argv[1])
