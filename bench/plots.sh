#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# bench/plots.sh RESULTS_DIR PLOT_DIR
# PNG plots (gnuplot) from belbench's plot data (*.dat):
#   hit-ratio.png   replay hit ratio against pool capacity, with the bound and the
#                   goal band (exact LRU +- 1%)
#   lookup.png      LOOKUP cost against chain length: Beluga vs baselines, with the
#                   goal (syscall floor + 3 x the in-process core, from 64 keys)
#   bandwidth.png   data path MB/s against block count, one panel per medium, all on
#                   the same axes, with the goals (0.9 x limit, 3 x staged) and the
#                   invalid points (Beluga above 1.1 x its limit) marked
#   scale.png       growth of the cost per operation with the pool size, against the
#                   goal (1.5 x the smallest pool's cost)
#   e2e.png         end to end (bench/peers/e2e.py): TTFT p50 and requests per second
#                   against engine processes, one line per store (warm pass)
# Reading at a glance: each system has one colour in every plot (Beluga blue, the
# in-process core green, rpc-unix-blocking orange, rpc-shm-polled purple, limits and
# floors grey, goals red), legends sit outside the data, each title says which way
# is better. A plot whose data is missing is skipped with a note.
set -euo pipefail
res=${1:?usage: plots.sh RESULTS_DIR PLOT_DIR}
dst=${2:?usage: plots.sh RESULTS_DIR PLOT_DIR}
mkdir -p "$dst"
G=guest-6.12

# One colour per system, the same in every plot.
C_BELUGA='#1f5fbf' C_CORE='#2a9d3a' C_UNIX='#e07b00' C_SHM='#8e44ad'
C_LIMIT='#333333' C_FLOOR='#8a8a8a' C_GOAL='#d62728' C_BAND='#f6c6c6'

term='set terminal pngcairo size 1100,620 font "sans,10" noenhanced'
# what every plot shares: grid, a legend outside the data on the right
common='set grid lc rgb "#dddddd"
set key outside right top vertical Left reverse samplen 3 spacing 1.2 box lc rgb "#bbbbbb"
set border lc rgb "#555555"'

# env_text ENV: the environment in words, for a subtitle
env_text() {
	case $1 in
	"$G") echo "Linux 6.12 guest under QEMU TCG (no KVM): compare lines, not absolute values" ;;
	host) echo "host, natively, without the module (the portable core in process)" ;;
	*) echo "$1" ;;
	esac
}

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
	e=${f##*/replay-}
	e=${e%.dat}
	tr=$(grep -m1 '"kind":"trace"' "$j" 2>/dev/null || true)
	distinct=$(echo "$tr" | sed -n 's/.*"distinct":\([0-9]*\).*/\1/p')
	bound=$(echo "$tr" | sed -n 's/.*"bound_ratio":\([0-9.e+-]*\).*/\1/p')
	if [ -z "$distinct" ] || [ -z "$bound" ]; then
		echo "plots: no trace record in $j: hit-ratio.png without the bound" >&2
		distinct="?" bound=1
	fi
	gnuplot <<EOF
$term
$common
set output "$dst/hit-ratio.png"
set title "Mooncake trace replay: hit ratio against pool capacity (higher is better)\n$(env_text "$e")"
set xlabel "pool capacity (% of the trace's $distinct distinct blocks)"
set ylabel "hit ratio (block references)"
set yrange [0:$bound * 1.15]
set xrange [0:105]
set key outside below center horizontal maxrows 2
plot "$f" using 1:(\$11 * 0.99):(\$11 * 1.01) with filledcurves fc rgb "$C_BAND" fs solid 1.0 \
	title "goal: within 1% of an exact LRU", \
     "$f" using 1:11 with lines lw 4 lc rgb "$C_FLOOR" \
	title "exact LRU simulation (identical: under Beluga's line)", \
     "$f" using 1:3 with linespoints lw 2.5 pt 7 ps 1.2 lc rgb "$C_BELUGA" title "Beluga pool", \
     $bound with lines lw 2 dt 2 lc rgb "$C_LIMIT" title sprintf("infinite-cache bound (%.4f)", $bound)
EOF
else
	echo "plots: no replay data: hit-ratio.png skipped" >&2
fi

# 2. LOOKUP cost against chain length. Columns: keys kernel_count kernel_pin
# core_count core_pin unix_count unix_pin kernel_floor unix_floor null_ioctl
# shm_count shm_pin shm_floor. The goal (targets kernel_minus_floor_over_core_
# lookup_count, 64 keys and more): count-only LOOKUP <= syscall floor + 3 x core.
# rpc_series FILE: the two RPC baselines and their floor, the same in both plots
rpc_series() {
	local f=$1
	cat <<EOF
     "$f" using 1:6 with linespoints lw 1.5 pt 9 lc rgb "$C_UNIX" title "rpc-unix-blocking, count-only", \\
     "$f" using 1:7 with linespoints lw 1.5 dt 2 pt 11 lc rgb "$C_UNIX" title "rpc-unix-blocking, pinned", \\
     "$f" using 1:11 with linespoints lw 1.5 pt 13 lc rgb "$C_SHM" title "rpc-shm-polled, count-only", \\
     "$f" using 1:12 with linespoints lw 1.5 dt 2 pt 15 lc rgb "$C_SHM" title "rpc-shm-polled, pinned", \\
     "$f" using 1:9 with lines lw 1.5 dt 3 lc rgb "$C_UNIX" title "RPC floor (ping)", \\
EOF
}
if f=$(pick "$res/meta-$G.dat"); then
	gnuplot <<EOF
$term
$common
set output "$dst/lookup.png"
set title "LOOKUP cost against chain length (lower is better)\n$(env_text "$G")"
set xlabel "keys in the chain"
set ylabel "ns per LOOKUP (guest clock, log)"
set logscale xy
set autoscale xfix
plot "$f" using 1:2 with linespoints lw 3 pt 7 lc rgb "$C_BELUGA" title "Beluga ioctl, count-only", \
     "$f" using 1:3 with linespoints lw 3 dt 2 pt 5 lc rgb "$C_BELUGA" title "Beluga ioctl, pinned", \
     "$f" using 1:(\$1 >= 64 ? \$8 + 3 * \$4 : NaN) with lines lw 2 dt 4 lc rgb "$C_GOAL" \
	title "goal, 64 keys on: count-only <= floor + 3 x core", \
     "$f" using 1:4 with linespoints lw 1.5 pt 1 lc rgb "$C_CORE" title "core in process (no transport)", \
$(rpc_series "$f")
     "$f" using 1:8 with lines lw 1.5 dt 3 lc rgb "$C_FLOOR" title "syscall floor (ENOTTY ioctl)"
EOF
elif f=$(pick "$res/meta-host.dat"); then
	gnuplot <<EOF
$term
$common
set output "$dst/lookup.png"
set title "LOOKUP cost against chain length (lower is better)\n$(env_text host): core vs the RPC servers"
set xlabel "keys in the chain"
set ylabel "ns per LOOKUP (log)"
set logscale xy
set autoscale xfix
plot "$f" using 1:4 with linespoints lw 3 pt 7 lc rgb "$C_CORE" title "core in process, count-only", \
     "$f" using 1:5 with linespoints lw 3 dt 2 pt 5 lc rgb "$C_CORE" title "core in process, pinned", \
$(rpc_series "$f")
     "$f" using 1:10 with lines lw 1.5 dt 3 lc rgb "$C_FLOOR" title "syscall floor (/dev/null ioctl)"
EOF
else
	echo "plots: no meta data: lookup.png skipped" >&2
fi

# legend_panel PLOTS: a multiplot panel with no axes that holds only the legend,
# so that panels share one legend and keep their whole area for the data
legend_panel() {
	printf '%s\n' "unset title" "unset xlabel" "unset ylabel" "unset logscale" "unset grid" \
		"unset border" "unset tics" "set xrange [0:1]" "set yrange [0:1]" \
		"set key center center vertical Left reverse noautotitle box lc rgb \"#bbbbbb\" samplen 3 spacing 1.3" \
		"plot $1" "set border" "set tics" "set grid"
}

# 3. bandwidth against block count, one panel per medium. Every panel has the same
# x axis and the same y scale (a factor of ten is the same height everywhere), each
# around its own data: ratios read alike in every panel, and no panel is flattened
# by another's bandwidth (emulated CXL is 40 times slower than RAM under TCG).
# Columns: blocks beluga raw anon staged limit (MB/s).
media=()
for m in cxl ramdax node0; do [ -s "$res/data-$m-$G.dat" ] && media+=("$m"); done
[ -s "$res/data-host-memfd-host.dat" ] && media+=(host-memfd)
if [ ${#media[@]} -gt 0 ]; then
	files=()
	for m in "${media[@]}"; do
		if [ "$m" = host-memfd ]; then files+=("$res/data-host-memfd-host.dat"); else files+=("$res/data-$m-$G.dat"); fi
	done
	# per file: "blocks_max lo hi" over every series and goal line
	span_of() {
		awk '!/^#/ && NF >= 6 {
			if ($1 > x) x = $1
			for (i = 2; i <= 6; i++) if ($i ~ /^[0-9.]+([eE][-+]?[0-9]+)?$/ && $i > 0) {
				if (lo == "" || $i < lo) lo = $i; if ($i > hi) hi = $i }
			if (3 * $5 > hi) hi = 3 * $5
			if (0.9 * $6 < lo) lo = 0.9 * $6
		} END { print x, lo / 1.25, hi * 1.25 }' "$1"
	}
	# the widest panel sets the decades every panel shows, and the x axis
	read -r xmax decades < <(for f in "${files[@]}"; do span_of "$f"; done |
		awk '{ if ($1 > x) x = $1; d = log($3 / $2) / log(10); if (d > m) m = d } END { print x, m }')
	cols=$((${#media[@]} > 1 ? 2 : 1))
	rows=$(((${#media[@]} + cols - 1) / cols))
	# the legend keeps its width in pixels whatever the number of panels
	width=$((520 * cols + 360))
	legend_w=$(awk -v w=$width 'BEGIN { print 360 / w }')
	{
		echo "set terminal pngcairo size $width,$((340 * rows + 50)) font \"sans,10\" noenhanced"
		echo "set output \"$dst/bandwidth.png\""
		echo "set multiplot title \"Reading a hit prefix of 2 MiB blocks into a destination buffer (MB/s; higher is better; the same scales in every panel)\""
		echo "set logscale x 2"
		echo "set logscale y"
		echo "set xrange [1:$xmax]"
		echo "set grid lc rgb \"#dddddd\""
		echo "unset key"
		echo "set xlabel \"blocks\""
		echo "set ylabel \"MB/s (log)\""
		for i in "${!media[@]}"; do
			m=${media[$i]} f=${files[$i]}
			case $m in
			cxl) t="6.12 guest: emulated CXL (dax0.0); limit = raw /dev/dax mapping" ;;
			ramdax) t="6.12 guest: memmap= devdax (RAM speed); limit = anon memcpy" ;;
			node0) t="6.12 guest: node backend on RAM; limit = anon memcpy" ;;
			host-memfd) t="host: in-process core on a memfd; limit = a second mapping of it" ;;
			esac
			# this panel's range: its data, widened to the common number of decades;
			# tics at 1, 2 and 5 times the powers of ten inside it
			read -r ylo yhi ytics < <(span_of "$f" | awk -v d="$decades" '{
				lo = $2 / sqrt(10 ^ d * $2 / $3); hi = lo * 10 ^ d; t = ""
				for (k = int(log(lo) / log(10)) - 1; 10 ^ k <= hi; k++)
					for (j = 1; j <= 3; j++) { v = (j == 1 ? 1 : j == 2 ? 2 : 5) * 10 ^ k
						if (v >= lo && v <= hi) t = t (t == "" ? "" : ",") v }
				print lo, hi, t }')
			echo "set origin $(awk -v i="$i" -v c="$cols" -v l="$legend_w" 'BEGIN { print (i % c) * (1 - l) / c }'),$(awk -v i="$i" -v c="$cols" -v r="$rows" 'BEGIN { print (r - 1 - int(i / c)) * 0.95 / r }')"
			echo "set size $(awk -v c="$cols" -v l="$legend_w" 'BEGIN { print (1 - l) / c }'),$(awk -v r="$rows" 'BEGIN { print 0.95 / r }')"
			echo "set yrange [$ylo:$yhi]"
			echo "set ytics ($ytics)"
			echo "set title \"$t\""
			echo "plot \"$f\" using 1:(3 * \$5) with lines lw 1.5 dt 3 lc rgb \"$C_GOAL\", \\
\"$f\" using 1:(0.9 * \$6) with lines lw 1.5 dt 4 lc rgb \"$C_GOAL\", \\
\"$f\" using 1:6 with linespoints lw 1.5 dt 2 pt 6 lc rgb \"$C_LIMIT\", \\
\"$f\" using 1:3 with lines lw 1 dt 3 lc rgb \"$C_FLOOR\", \\
\"$f\" using 1:4 with lines lw 1 dt 5 lc rgb \"$C_FLOOR\", \\
\"$f\" using 1:5 with linespoints lw 2 pt 5 lc rgb \"$C_UNIX\", \\
\"$f\" using 1:2 with linespoints lw 3 pt 7 lc rgb \"$C_BELUGA\", \\
\"$f\" using 1:(\$2 > 1.1 * \$6 ? \$2 : NaN) with points pt 2 ps 3 lw 3 lc rgb \"$C_GOAL\""
		done
		echo "set origin $(awk -v l="$legend_w" 'BEGIN { print 1 - l }'),0"
		echo "set size $legend_w,0.95"
		legend_panel "NaN with linespoints lw 3 pt 7 lc rgb \"$C_BELUGA\" title \"Beluga (the pool's mapping)\", \\
NaN with linespoints lw 1.5 dt 2 pt 6 lc rgb \"$C_LIMIT\" title \"limit (see each panel's title)\", \\
NaN with linespoints lw 2 pt 5 lc rgb \"$C_UNIX\" title \"staged: a GET to rpc-unix-blocking\", \\
NaN with lines lw 1 dt 3 lc rgb \"$C_FLOOR\" title \"raw mapping of the medium\", \\
NaN with lines lw 1 dt 5 lc rgb \"$C_FLOOR\" title \"anon memcpy\", \\
NaN with lines lw 1.5 dt 4 lc rgb \"$C_GOAL\" title \"goal: Beluga >= 0.9 x limit\", \\
NaN with lines lw 1.5 dt 3 lc rgb \"$C_GOAL\" title \"goal: Beluga >= 3 x staged\", \\
NaN with points pt 2 ps 3 lw 3 lc rgb \"$C_GOAL\" title \"invalid: Beluga above 1.1 x limit\""
		echo "unset multiplot"
	} | gnuplot
else
	echo "plots: no data-path data: bandwidth.png skipped" >&2
fi

# 4. growth of the cost per operation with the pool size, one panel per environment
# (the guest: module and core; the host: core), one thread. Columns of the .dat after
# blocks: target (kernel core rpc) x op (lookup64_hot lookup64 pin64 alloc_pub64) x
# threads (1 2); each series is divided by its cost on the smallest pool, so that
# the goal (scale_cost_ratio <= 1.5 from 1K to 256K blocks) is one line for all.
panels=()
for e in "$G" host; do [ -s "$res/scale-$e.dat" ] && panels+=("$e"); done
if [ ${#panels[@]} -gt 0 ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	ops=(lookup64_hot lookup64 pin64 alloc_pub64)
	pts=(7 5 9 13)
	# the targets each panel has numbers for: the host has no module
	targets_of() { if [ "$1" = host ]; then echo 1; else echo 0 1; fi; }
	# panels side by side, then a narrower column for the one legend
	# (the legend keeps its width in pixels whatever the number of panels)
	width=$((480 * ${#panels[@]} + 330))
	legend_w=$(awk -v w=$width 'BEGIN { print 330 / w }')
	panel_w=$(awk -v n=${#panels[@]} -v l="$legend_w" 'BEGIN { print (1 - l) / n }')
	{
		echo "set terminal pngcairo size $width,560 font \"sans,10\" noenhanced"
		echo "set output \"$dst/scale.png\""
		echo "set multiplot title \"Cost per operation as the pool grows, relative to the smallest pool (full pool, 1 thread; lower is better)\""
		echo "set logscale x 2"
		echo "set xtics (\"1K\" 1024, \"4K\" 4096, \"16K\" 16384, \"64K\" 65536, \"256K\" 262144, \"1M\" 1048576, \"4M\" 4194304)"
		echo "set grid lc rgb \"#dddddd\""
		echo "unset key"
		echo "set xlabel \"blocks in the pool (4 KiB blocks)\""
		echo "set ylabel \"cost / cost with 1K blocks\""
		# normalised copies: every column divided by its first data row's value
		# (a number is digits: the files say "nan" where a target has no value)
		for e in "${panels[@]}"; do
			awk 'function num(v) { return v ~ /^[0-9.]+([eE][-+]?[0-9]+)?$/ }
				/^#/ { next } !seen { for (i = 2; i <= NF; i++) base[i] = $i; seen = 1 }
				{ printf "%s", $1; for (i = 2; i <= NF; i++) printf " %s", ((num(base[i]) && base[i] > 0 && num($i)) ? $i / base[i] : "nan"); printf "\n" }' \
				"$res/scale-$e.dat" >"$tmp/scale-$e.dat"
		done
		# one y axis for every panel: up to the highest 1-thread value (even columns)
		ymax=$(awk '{ for (i = 2; i <= NF; i += 2) if ($i != "nan" && $i + 0 > m) m = $i + 0 }
			END { print (m > 2 ? m * 1.1 : 2.2) }' "$tmp"/scale-*.dat)
		echo "set yrange [0:$ymax]"
		for i in "${!panels[@]}"; do
			e=${panels[$i]}
			f=$tmp/scale-$e.dat
			read -r xmin xmax < <(awk '{ if (lo == "" || $1 < lo) lo = $1; if ($1 > hi) hi = $1 }
				END { print lo / 1.3, hi * 1.3 }' "$f")
			echo "set origin $(awk -v i="$i" -v w="$panel_w" 'BEGIN { print i * w }'),0"
			echo "set size $panel_w,0.94"
			echo "set xrange [$xmin:$xmax]"
			if [ "$e" = host ]; then echo "set title \"host, natively (the portable core)\""; else echo "set title \"6.12 TCG guest (the module and the core)\""; fi
			plot="plot 1.5 with lines lw 2 dt 4 lc rgb \"$C_GOAL\""
			for t in $(targets_of "$e"); do
				c=$([ "$t" -eq 0 ] && echo "$C_BELUGA" || echo "$C_CORE")
				lw=$([ "$t" -eq 0 ] && echo 2.5 || echo 1.5)
				for o in 0 1 2 3; do
					plot+=", \"$f\" using 1:$((2 + t * 8 + o * 2)) with linespoints lw $lw pt ${pts[$o]} ps 1.2 lc rgb \"$c\""
				done
			done
			echo "$plot"
		done
		leg="NaN with lines lw 2 dt 4 lc rgb \"$C_GOAL\" title \"goal: at most 1.5 x at 256K blocks\""
		for t in $(for e in "${panels[@]}"; do targets_of "$e"; done | tr ' ' '\n' | sort -u); do
			c=$([ "$t" -eq 0 ] && echo "$C_BELUGA" || echo "$C_CORE")
			n=$([ "$t" -eq 0 ] && echo "Beluga module" || echo "core in process")
			for o in 0 1 2 3; do
				leg+=", NaN with linespoints lw 2 pt ${pts[$o]} ps 1.2 lc rgb \"$c\" title \"$n: ${ops[$o]}\""
			done
		done
		echo "set origin $(awk -v n=${#panels[@]} -v w="$panel_w" 'BEGIN { print n * w }'),0"
		echo "set size $legend_w,0.94"
		legend_panel "$leg"
		echo "unset multiplot"
	} | gnuplot
else
	echo "plots: no scale data: scale.png skipped" >&2
fi

# 5. end to end (bench/peers/e2e.py): the warm pass's TTFT p50 and requests per
# second against the number of engine processes, one line per store. Columns:
# engines, then per store (in the order of the header: STORE_ttft_p50_ms
# STORE_rps) TTFT p50 (ms), req/s.
if f=$(pick "$res/peers-e2e-host-fake.dat"); then
	C_PEER1='#e07b00' C_PEER2='#8e44ad' C_PEER3='#17a2b8' C_LOCAL='#7fb3e6'
	# the series of each panel and of the legend, one per store of the header
	series=("" "" "") sep="" s=0
	for col in $(head -n 1 "$f" | tr ' ' '\n' | sed -n 's/_rps$//p'); do
		case $col in
		beluga)
			if grep -q '^# .*beluga-local_rps' "$f"; then
				name="Beluga (fake kernel, one multi-host pool shared)"
			else
				name="Beluga (fake kernel, per-process pool)"
			fi
			color=$C_BELUGA ;;
		beluga-local) name="Beluga (fake kernel, per-process pool)" color=$C_LOCAL ;;
		mooncake) name="Mooncake Store (TCP, shared)" color=$C_PEER1 ;;
		lmcache-cpu) name="LMCache CPU (per process)" color=$C_PEER2 ;;
		lmcache-redis) name="LMCache remote: redis-server (shared)" color=$C_PEER3 ;;
		*) name="$col (no store)" color=$C_FLOOR ;;
		esac
		style="with linespoints lw 2 pt 7 ps 1.2 lc rgb \"$color\""
		series[0]+="$sep \"$f\" using 1:$((2 + s * 2)) $style"
		series[1]+="$sep \"$f\" using 1:$((3 + s * 2)) $style"
		series[2]+="$sep NaN $style title \"$name\""
		sep=, s=$((s + 1))
	done
	{
		echo "set terminal pngcairo size 1300,560 font \"sans,10\" noenhanced"
		echo "set output \"$dst/e2e.png\""
		echo "set multiplot title \"End to end, warm pass: engines replaying the Mooncake trace, KV in each store (host; compute paced to 1.6 GB/s of KV)\""
		echo "set grid lc rgb \"#dddddd\""
		echo "unset key"
		echo "set xlabel \"engine processes\""
		echo "set xtics 1"
		echo "set xrange [0.7:4.3]"
		for panel in 0 1; do
			echo "set origin $(awk -v i=$panel 'BEGIN { print i * 0.37 }'),0"
			echo "set size 0.37,0.94"
			if [ $panel -eq 0 ]; then
				echo "set title \"TTFT p50 (lower is better)\""
				echo "set ylabel \"ms\""
				echo "set logscale y"
			else
				echo "set title \"requests per second (higher is better)\""
				echo "set ylabel \"req/s\""
				echo "unset logscale y"
				echo "set yrange [0:*]"
			fi
			echo "plot ${series[$panel]}"
		done
		echo "set origin 0.74,0"
		echo "set size 0.26,0.94"
		legend_panel "${series[2]}"
		echo "unset multiplot"
	} | gnuplot
else
	echo "plots: no end-to-end data: e2e.png skipped" >&2
fi
