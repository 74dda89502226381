#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# bench/report.sh [--all] RESULTS_DIR
# The targets table from belbench's ratio records (*.jsonl): one line per
# figure and environment, over all the sizes it was measured at (min..max of
# the ratio, and how many of them meet the target). --all: one line per size.
# Targets are reported, never asserted: the exit status is 0 either way.
set -euo pipefail
all=0
[ "${1:-}" = --all ] && { all=1; shift; }
dir=${1:?usage: report.sh [--all] RESULTS_DIR}
ls "$dir"/*.jsonl >/dev/null 2>&1 || { echo "report: no results in $dir" >&2; exit 0; }

cat "$dir"/*.jsonl | awk -v all=$all '
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
	goal = (t == "within") ? "1 +- " g : t " " g
	n = field("n"); if (n == "") n = field("large") "/" field("small")
	k = field("env") SUBSEP what()
	if (all) k = k SUBSEP n
	if (!(k in cnt)) { order[++nk] = k; lo[k] = v; hi[k] = v; ns[k] = n }
	else { if (v < lo[k]) lo[k] = v; if (v > hi[k]) hi[k] = v; if (ns[k] != n) last[k] = n }
	cnt[k]++; tg[k] = goal; if (field("met") == "1") ok[k]++
	total++; if (field("met") == "1") met++
}
END {
	if (!total) { print "(no target records)"; exit }
	for (i = 1; i <= nk; i++) {
		k = order[i]; split(k, p, SUBSEP)
		sizes = (k in last) ? ns[k] ".." last[k] : ns[k]
		val = (lo[k] == hi[k]) ? sprintf("%.2f", lo[k]) : sprintf("%.2f..%.2f", lo[k], hi[k])
		printf "%-11s %-62s %-13s %-13s %-9s %d/%d\n", p[1], substr(p[2], 1, 62), sizes, val, tg[k], ok[k] + 0, cnt[k]
	}
	printf "%d of %d target figures met (each size counted once)\n", met, total
}' | {
	echo
	echo "== targets (ratios in the same run; reported, not asserted) =="
	printf "%-11s %-62s %-13s %-13s %-9s %s\n" env figure "n / sizes" value target met
	cat
}
