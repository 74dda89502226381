#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The answers to the engines' conformance review (Documentation/review-findings.md,
# section "The engines' conformance review") stay complete and true:
#   - one row per mismatch ID of the review (M-V1..M-V10, M-S1..M-S7, M-L1..M-L8;
#     where the review itself is at ../shared/reviews/engines-conformance.md, its IDs too);
#   - a row that is not open names its fix and at least one test, and every test
#     named there (tests/...py::test_name) is defined in that file;
#   - the engine versions the READMEs and the adapters say they are tested with are
#     the ones tests/engines/*.lock pins (review M-V9: a version claim nobody ran).
# TAP.
#
# Usage: test_engine_review.sh [REPO_ROOT]
set -u
root=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
. "$root/tests/lib/tap.sh"

while IFS= read -r line; do
	case $line in
	OK\ *) ok "${line#OK }" ;;
	NOTOK\ *) not_ok "${line#NOTOK }" ;;
	*) echo "# $line" ;;
	esac
done < <(/usr/bin/python3 - "$root" <<'PY' 2>&1
import pathlib, re, sys

root = pathlib.Path(sys.argv[1])
doc = root / "Documentation" / "review-findings.md"
title = "## The engines' conformance review"
text = doc.read_text()
if title not in text:
    print(f"NOTOK {doc.name} has a section '{title[3:]}'")
    sys.exit()
section = text.split(title, 1)[1].split("\n## ", 1)[0]

# The review's IDs: its counts (vLLM 10, SGLang 7, LMCache 8), and the review
# itself where the checkout sits beside the shared folder.
want = {f"M-V{i}" for i in range(1, 11)} | {f"M-S{i}" for i in range(1, 8)} | \
    {f"M-L{i}" for i in range(1, 9)}
review = root.parent / "shared" / "reviews" / "engines-conformance.md"
if review.exists():
    want |= set(re.findall(r"^\| (M-[VSL]\d+) \|", review.read_text(), re.M))

rows = {}
dup = []
for line in section.splitlines():
    m = re.match(r"^\| (M-[VSL]\d+) \|", line)
    if m:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if m.group(1) in rows:
            dup.append(m.group(1))
        rows[m.group(1)] = cells

key = lambda i: (i[2], int(i[3:]))
missing = sorted(want - set(rows), key=key)
extra = sorted(set(rows) - want, key=key)
if missing or extra or dup:
    print(f"NOTOK engine review table: one row per mismatch ID: missing {missing}, "
          f"not in the review {extra}, twice {dup}")
else:
    print(f"OK engine review table: one row for each of the review's {len(want)} mismatch IDs")

bad = []
for mid, cells in sorted(rows.items(), key=lambda kv: key(kv[0])):
    if len(cells) != 5:
        bad.append(f"{mid}: {len(cells)} cells, not 5 (# | mismatch | answer | fix | test)")
        continue
    answer, fix, test = cells[2], cells[3], cells[4]
    if answer.startswith("open"):
        continue
    if not re.search(r"\b[0-9a-f]{7,40}\b", fix):
        bad.append(f"{mid}: no fix commit in '{fix}'")
    if "::test_" not in test:
        bad.append(f"{mid}: names no test (file::test_name)")
if bad:
    print("NOTOK engine review table: each row not open names its fix and a test: " + "; ".join(bad))
else:
    print("OK engine review table: each row not open names its fix commit and a test")

named = set(re.findall(r"(tests/[\w/.-]+\.py)::(test_\w+)", section))
gone = []
for path, name in sorted(named):
    f = root / path
    if not f.exists() or not re.search(rf"^(async )?def {name}\(", f.read_text(), re.M):
        gone.append(f"{path}::{name}")
if gone or not named:
    print(f"NOTOK engine review table: the tests it names exist: missing {gone}")
else:
    print(f"OK engine review table: the {len(named)} tests it names exist")

# The versions claimed, against the locks.
engines = {"vllm": "vLLM", "sglang": "SGLang", "lmcache": "LMCache"}
texts = [root / "README.md", root / "userspace" / "python" / "README.md",
         root / "Documentation" / "testing.md"]
texts += sorted((root / "userspace" / "python" / "beluga" / "adapters").glob("*.py"))
for env, name in engines.items():
    lock = root / "tests" / "engines" / f"{env}.lock"
    pin = re.search(rf"^{env}==(\S+)", lock.read_text(), re.M)
    if not pin:
        print(f"NOTOK {name}: {lock.name} pins {env}")
        continue
    version = pin.group(1)
    claims, wrong = 0, []
    for t in texts:
        flat = re.sub(r"\s+", " ", t.read_text())        # a claim may wrap in a docstring
        for v in re.findall(rf"\b{name} v?(\d+\.\d+(?:\.\d+)?)", flat):
            claims += 1
            if not (v == version or version.startswith(v + ".")):
                wrong.append(f"{t.relative_to(root)}: {name} {v}")
    if wrong or not claims:
        print(f"NOTOK {name}: the versions named are {version} ({lock.name}): "
              f"{wrong or 'none named'}")
    else:
        print(f"OK {name}: the {claims} versions named in the READMEs and adapters are "
              f"{version}, as {lock.name} pins")
PY
)
tap_done
