#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# bench/plots.sh RESULTS_DIR PLOT_DIR
# PNG plots (gnuplot) from belbench's plot data (*.dat):
#   hit-ratio.png   replay hit ratio against pool capacity, with the bound
#   lookup.png      LOOKUP cost against chain length: Beluga vs baselines
#   bandwidth.png   data path MB/s against block count, per medium
#   scale.png       cost per operation against pool size
# A plot whose data is missing is skipped with a note.
set -euo pipefail
res=${1:?usage: plots.sh RESULTS_DIR PLOT_DIR}
dst=${2:?usage: plots.sh RESULTS_DIR PLOT_DIR}
mkdir -p "$dst"
G=guest-6.12

term='set terminal pngcairo size 960,600 font "sans,10" noenhanced'
pick() { # first existing file
	local f
	for f in "$@"; do [ -s "$f" ] && { echo "$f"; return 0; }; done
	return 1
}

# 1. hit ratio against capacity (the kernel's replay in the guest, else the
# host core's), with the exact-LRU reference. The trace's constants (distinct
# blocks, the bound) come from the replay's "trace" record, not from here.
if f=$(pick "$res/replay-$G.dat" "$res/replay-host.dat"); then
	j=${f%.dat}.jsonl
	tr=$(grep -m1 '"kind":"trace"' "$j" 2>/dev/null || true)
	distinct=$(echo "$tr" | sed -n 's/.*"distinct":\([0-9]*\).*/\1/p')
	bound=$(echo "$tr" | sed -n 's/.*"bound_ratio":\([0-9.e+-]*\).*/\1/p')
	if [ -z "$distinct" ] || [ -z "$bound" ]; then
		echo "plots: no trace record in $j: hit-ratio.png without the bound" >&2
		distinct="?" bound=1
	fi
	gnuplot <<EOF
$term
set output "$dst/hit-ratio.png"
set title "Mooncake trace replay: hit ratio against pool capacity\n$(basename "$f" .dat)"
set xlabel "pool capacity (% of the trace's $distinct distinct blocks)"
set ylabel "hit ratio (block references)"
set yrange [0:$bound * 1.15]
set xrange [0:105]
set key bottom right
set grid
plot "$f" using 1:3 with linespoints lw 2 pt 7 title "Beluga pool", \
     "$f" using 1:11 with linespoints lw 1 pt 6 dt 3 title "exact LRU simulation", \
     $bound with lines lw 2 dt 2 title sprintf("infinite-cache bound (%.4f)", $bound)
EOF
else
	echo "plots: no replay data: hit-ratio.png skipped" >&2
fi

# 2. LOOKUP cost against chain length
if f=$(pick "$res/meta-$G.dat"); then
	gnuplot <<EOF
$term
set output "$dst/lookup.png"
set title "LOOKUP cost against chain length (6.12 TCG guest; absolute times mean little, compare lines)"
set xlabel "keys in the chain"
set ylabel "ns per LOOKUP (guest clock)"
set logscale xy
set key outside below
set grid
plot "$f" using 1:2 with linespoints lw 2 pt 7 title "Beluga ioctl, count-only", \
     "$f" using 1:3 with linespoints lw 2 pt 5 title "Beluga ioctl, pinned", \
     "$f" using 1:6 with linespoints lw 2 pt 9 title "rpc-unix-blocking, count-only", \
     "$f" using 1:7 with linespoints lw 2 pt 11 title "rpc-unix-blocking, pinned", \
     "$f" using 1:11 with linespoints lw 2 pt 13 title "rpc-shm-polled, count-only", \
     "$f" using 1:12 with linespoints lw 2 pt 15 title "rpc-shm-polled, pinned", \
     "$f" using 1:4 with linespoints lw 1 pt 1 title "core in process (no transport)", \
     "$f" using 1:8 with lines dt 2 lw 1 title "syscall floor (ENOTTY ioctl)", \
     "$f" using 1:9 with lines dt 3 lw 1 title "RPC floor (ping)"
EOF
elif f=$(pick "$res/meta-host.dat"); then
	gnuplot <<EOF
$term
set output "$dst/lookup.png"
set title "LOOKUP cost against chain length (host, no module: core vs AF_UNIX server)"
set xlabel "keys in the chain"
set ylabel "ns per LOOKUP"
set logscale xy
set key top left
set grid
plot "$f" using 1:4 with linespoints lw 2 title "core in process", \
     "$f" using 1:6 with linespoints lw 2 title "rpc-unix-blocking, count-only", \
     "$f" using 1:7 with linespoints lw 2 title "rpc-unix-blocking, pinned", \
     "$f" using 1:11 with linespoints lw 2 title "rpc-shm-polled, count-only", \
     "$f" using 1:12 with linespoints lw 2 title "rpc-shm-polled, pinned", \
     "$f" using 1:9 with lines dt 3 title "RPC floor (ping)"
EOF
else
	echo "plots: no meta data: lookup.png skipped" >&2
fi

# 3. bandwidth against block count, one panel per medium
media=()
for m in cxl ramdax node0; do [ -s "$res/data-$m-$G.dat" ] && media+=("$m"); done
[ -s "$res/data-host-memfd-host.dat" ] && media+=(host-memfd)
if [ ${#media[@]} -gt 0 ]; then
	{
		echo "$term"
		echo "set terminal pngcairo size 1200,$((360 * ((${#media[@]} + 1) / 2))) font \"sans,10\" noenhanced"
		echo "set output \"$dst/bandwidth.png\""
		echo "set multiplot layout $(((${#media[@]} + 1) / 2)),2 title \"Reading a hit prefix of 2 MiB blocks into a destination buffer (MB/s)\""
		echo "set logscale x 2"
		echo "set logscale y"
		echo "set grid"
		echo "set key bottom right opaque box samplen 2 font \",8\""
		echo "set xlabel \"blocks\""
		echo "set ylabel \"MB/s (log)\""
		for m in "${media[@]}"; do
			if [ "$m" = host-memfd ]; then f=$res/data-host-memfd-host.dat; t="host memfd (in-process core; limit = a second mapping of the same memfd)"; else f=$res/data-$m-$G.dat; t="6.12 guest: $m"; fi
			case $m in
			cxl) t="$t (emulated CXL: limit = raw /dev/dax mapping)" ;;
			ramdax) t="$t (memmap= devdax: limit = anon memcpy)" ;;
			node0) t="$t (node backend on RAM: limit = anon memcpy)" ;;
			esac
			echo "set title \"$t\""
			# columns: blocks beluga raw anon staged limit
			echo "plot \"$f\" using 1:2 with linespoints lw 2 pt 7 title \"Beluga (mapping)\", \"$f\" using 1:6 with linespoints lw 2 dt 2 pt 6 title \"limit\", \"$f\" using 1:5 with linespoints lw 2 pt 5 title \"staged (rpc-unix-blocking)\", \"$f\" using 1:3 with lines lw 1 dt 3 title \"raw mapping\", \"$f\" using 1:4 with lines lw 1 dt 4 title \"anon memcpy\""
		done
		echo "unset multiplot"
	} | gnuplot
else
	echo "plots: no data-path data: bandwidth.png skipped" >&2
fi

# 4. cost per operation against pool size (columns: see the .dat header), one
# panel per environment: the guest (kernel and core) and the host (core)
panels=()
for e in "$G" host; do [ -s "$res/scale-$e.dat" ] && panels+=("$e"); done
if [ ${#panels[@]} -gt 0 ]; then
	{
		echo "set terminal pngcairo size $((640 * ${#panels[@]})),560 font \"sans,10\" noenhanced"
		echo "set output \"$dst/scale.png\""
		echo "set multiplot layout 1,${#panels[@]} title \"Cost per operation against pool size (full pool, 1 thread)\""
		echo "set xlabel \"blocks in the pool\""
		echo "set ylabel \"ns per operation (log)\""
		echo "set logscale x 2"
		echo "set logscale y"
		echo "set format x \"%.0s%c\""
		echo "set key top left font \",8\" samplen 2"
		echo "set grid"
		# after blocks: target (kernel core rpc) x op (lookup64_hot lookup64 pin64 alloc_pub64) x threads (1 2)
		echo "c(t, o, th) = 2 + t * 8 + o * 2 + th"
		for e in "${panels[@]}"; do
			f=$res/scale-$e.dat
			if [ "$e" = host ]; then t0=1; echo "set title \"host, natively (the portable core)\""; else t0=0; echo "set title \"6.12 TCG guest (module and core)\""; fi
			echo "plot for [t=$t0:1] for [o=0:3] \"$f\" using 1:(column(c(t, o, 0))) with linespoints lw 2 title sprintf(\"%s %s\", word(\"kernel core rpc\", t + 1), word(\"lookup64_hot lookup64 pin64 alloc_pub64\", o + 1))"
		done
		echo "unset multiplot"
	} | gnuplot
else
	echo "plots: no scale data: scale.png skipped" >&2
fi
