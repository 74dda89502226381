#!/usr/bin/env bash
# bench/report.sh RESULTS_DIR
# The targets table from belbench's ratio records (*.jsonl). Targets are
# reported, never asserted: the exit status is 0 whether they are met or not.
set -euo pipefail
dir=${1:?usage: report.sh RESULTS_DIR}
ls "$dir"/*.jsonl >/dev/null 2>&1 || { echo "report: no results in $dir" >&2; exit 0; }

cat "$dir"/*.jsonl | awk '
function field(k,   re, m) {
	re = "\"" k "\":(\"[^\"]*\"|[-0-9.e+]+|null)"
	if (!match($0, re))
		return ""
	m = substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3)
	gsub(/"/, "", m)
	return m
}
function what(   s) {
	s = field("name")
	if (field("medium") != "") s = s " [" field("medium") "]"
	if (field("backend") != "") s = s " [" field("backend") " " field("op") " " field("threads") "thr]"
	return s
}
/"kind":"ratio"/ && field("target") != "" {
	t = field("target"); g = field("goal"); v = field("value") + 0
	if (t == "within") goal = "1 +- " g; else goal = t " " g
	n = field("n"); if (n == "") n = field("large")
	key = field("env") "  " what() "  n=" n
	printf "%-12s %-64s %6s %9.3f  %-10s %s\n", field("env"), substr(what(), 1, 64), n, v, goal, field("met") == "1" ? "met" : "MISSED"
	total++; if (field("met") == "1") met++
}
END {
	if (!total) { print "(no target records)"; exit }
	printf "%d of %d target figures met\n", met, total
}' | { echo; echo "== targets (ratios in the same run; reported, not asserted) =="; printf "%-12s %-64s %6s %9s  %-10s %s\n" env figure n value target status; cat; }
