#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# bench/draw-plots.sh RESULTS_DIR PLOT_DIR: the plot step of scripts/bench.sh.
# Runs bench/plots.sh and says what came of it, on stderr:
#   "plots in DIR"                         drawn (exit 0);
#   "no plots: gnuplot is not installed"   with the package to install (exit 3);
#   "the plots FAILED"                     with plots.sh's exit status and last
#                                          lines, and how to redraw (exit 3).
# The plots are optional: they are drawn from the run's records after the
# results (results.json, RESULTS.md, the README's table) are written, and
# those are complete whatever happens here. So bench.sh does not fail the run
# on exit 3; it repeats the message at its end, because a full run's PLOT_DIR
# is bench/plots and its PNGs would then be from an earlier run.
set -u
res=${1:?usage: draw-plots.sh RESULTS_DIR PLOT_DIR}
dst=${2:?usage: draw-plots.sh RESULTS_DIR PLOT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
say() { echo "bench: $*" >&2; }
redraw="redraw them with \`bench/plots.sh $res $dst\`"

if ! command -v gnuplot >/dev/null; then
	say "no plots: gnuplot is not installed; install it (apt-get install gnuplot-nox, or" \
		"scripts/install-deps.sh), then $redraw"
	exit 3
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$here/plots.sh" "$res" "$dst" 2>"$log"
rc=$?
# plots.sh's notes (a plot skipped for want of data) are worth seeing either way
if [ $rc -eq 0 ]; then
	cat "$log" >&2
	say "plots in $dst"
	exit 0
fi
say "the plots FAILED: bench/plots.sh exited $rc; its last messages:"
tail -n 8 "$log" | sed 's/^/bench:   /' >&2
say "the results (results.json, RESULTS.md, the README's table) are complete; the plots in $dst" \
	"are missing or from an earlier run, so do not commit them with these results. Fix the" \
	"cause above, then $redraw"
exit 3
