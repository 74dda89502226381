#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# scripts/bench.sh [options]
# Beluga against the designs it replaces, every baseline in the same run
# (bench/README.md). Runs belbench natively on the host (the portable core and
# the AF_UNIX baseline server) and in a Linux 6.12 QEMU guest (TCG) with
# emulated CXL memory (device-dax), a RAM-speed device-dax made from memmap=
# legacy pmem, and the node backend. Prints the tables, writes
#   build/bench/results.json     every record of every run, one JSON document
#                                (a full run also keeps it as bench/results.json,
#                                beside the RESULTS.md made from it)
#                                (--smoke: build/bench/smoke-results{.json,/})
#   build/bench/results/*.jsonl  the same per section and environment
#   build/bench/results/*.dat    plot data
#   bench/plots/*.png            plots (full run; --smoke writes build/bench/plots);
#                                optional: bench/draw-plots.sh reports a failure, which
#                                does not fail the run
# and ends with the targets table (reported, never asserted).
#
# Options:
#   --smoke          CI: host sections with --quick, no guest unless --guest
#   --guest          with --smoke: also a short guest run
#   --host-only      skip the guest
#   --guest-only     skip the host sections
#   --sections LIST  subset of "meta data scale replay conc ring probe python peers"
#                    (default all); conc: 1 vs 2 workers of pinned LOOKUP+RELEASE
#                    (kernel, core, rpc-shm-polled); ring: 64-key LOOKUPs through
#                    the ioctl, io_uring (1/8/64 per submit, SQPOLL), the polled
#                    server and the core; probe: the core's lock hold times and
#                    the metadata bytes per block (host only);
#                    python: bench/python (the binding's and KVStore's overhead
#                    against C, the mini engine's TTFT on a scaled-down trace
#                    replay); in the
#                    guest it runs the host's /usr/bin/python3 over 9p;
#                    peers: Mooncake Store and LMCache's CPU and redis
#                    backends beside Beluga's fake-kernel core, and engine
#                    processes replaying the trace with each (host only,
#                    bench/peers; the lmcache engine venv, built here by a
#                    full run; redis-server from install-deps.sh)
#   --trace FILE     the Mooncake trace (default ../shared/data/mooncake_conversation_trace.jsonl)
#   --timeout SECS   guest time limit (default 5400; smoke 900)
#   --guest-cmd ARGS instead of the sections, run "belbench ARGS" in the guest
#                    (repeatable; @CXL@ and @RAMDAX@ name the devices), e.g.
#                    --guest-only --guest-cmd "meta --pool dax:/dev/@CXL@ --lens 64"
set -euo pipefail
. "$(dirname "$0")/vm/lib.sh"

all_sections="meta data scale replay conc ring probe python peers"
smoke=0 guest=1 host=1 guest_smoke=0 sections=$all_sections tmo="" gcmds=""
trace=$BELUGA_ROOT/../shared/data/mooncake_conversation_trace.jsonl
while [ $# -gt 0 ]; do
	case $1 in
	--smoke) smoke=1 ;;
	--guest) guest_smoke=1 ;;
	--host-only) guest=0 ;;
	--guest-only) host=0 ;;
	--sections) sections=$2; shift ;;
	--trace) trace=$2; shift ;;
	--timeout) tmo=$2; shift ;;
	--guest-cmd) gcmds+="$2"$'\n'; shift ;;
	-h | --help) awk 'NR >= 3 && /^set -e/ { exit } NR >= 3' "$0"; exit 0 ;;
	*) die "unknown option $1 (see --help)" ;;
	esac
	shift
done
if [ $smoke -eq 1 ] && [ $guest_smoke -eq 0 ]; then guest=0; fi
tmo=${tmo:-$([ $smoke -eq 1 ] && echo 900 || echo 5400)}

out=$BELUGA_BUILD/bench
res=$out/results json=$out/results.json
# A smoke run keeps its own results, so that it never mixes with a full run's.
[ $smoke -eq 1 ] && res=$out/smoke-results json=$out/smoke-results.json
mkdir -p "$res"
# A partial run (--host-only, --guest-only, --sections) keeps the results of
# the environments and sections it does not run.
for s in $sections; do
	[ $host -eq 1 ] && rm -f "$res/$s"-host.* "$res/$s"-*-host.* "$res/$s"-*-host-fake.*
	[ $guest -eq 1 ] && rm -f "$res/$s"-guest-6.12.* "$res/$s"-*-guest-6.12.*
done
plots=$BELUGA_ROOT/bench/plots
[ $smoke -eq 1 ] && plots=$out/plots

# how busy the machine was when the run started, for the write-up
loadavg=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
# the code measured: the commit, marked when the tree differs from it
commit=$(git -C "$BELUGA_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$BELUGA_ROOT" diff --quiet HEAD -- . ":!bench/RESULTS.md" ":!bench/plots" ":!README.md" 2>/dev/null ||
	commit="$commit+changes"
full_run=0
[ $smoke -eq 0 ] && [ $host -eq 1 ] && [ $guest -eq 1 ] && [ -z "$gcmds" ] &&
	[ "$sections" = "$all_sections" ] && full_run=1
log "building belbench (host and static)"
make -s -C "$BELUGA_ROOT/bench" all OUT="$out" >&2
B=$out/host/belbench

has() { case " $sections " in *" $1 "*) return 0 ;; esac; return 1; }
[ -f "$trace" ] || { log "no trace at $trace: the replay is skipped (see ../shared/data/README.md)"; trace=; }

# bench/python needs the binding (real for the guest, fake-kernel for the
# host's smoke rows) and the C side of the overhead figure.
py_ok=0
if has python; then
	if make -s -C "$BELUGA_ROOT/userspace" python static >&2 &&
		make -s -C "$BELUGA_ROOT/bench/python" all OUT="$out" >&2; then
		py_ok=1
	else
		log "the Python binding or bench/python does not build: the python rows are skipped"
	fi
fi

# ---- host: the portable core natively, and the baseline server ------------
if [ $host -eq 1 ]; then
	q=()
	[ $smoke -eq 1 ] && q=(--quick)
	hb() { "$B" --env host --out "$res" "${q[@]}" "$@"; }
	if [ $smoke -eq 1 ]; then
		lens=1,64,256 counts=1,4,16 sizes=1K,16K caps=10,100
	else
		lens=1,16,64,256,4096 counts=1,2,4,8,16,32,64 sizes=1K,16K,256K,4M caps=10,25,50,100
	fi
	log "host: $(nproc) cpus; sections: $sections"
	has meta && hb meta --pool none --lens $lens
	# the core's arena is a memfd; the limit is a second mapping of it
	has data && hb data --medium host-memfd --pool none --raw memfd --counts $counts
	# the control beside each round; a pool whose working set fits in the
	# caches (128 chains per worker) and one of about 256K blocks
	has conc && hb conc --pool none --targets core,shm,control --chains 128,1365
	# No module here: the ring's rows are the core plus the syscall floor (a
	# model). Samples of 0.25 ms: on a shared host a 2 ms sample is often
	# preempted, and the polled server's and the core's rounds then differ
	# by 5x; shorter samples are more often clean (the guest's reason too).
	if has ring; then
		if [ $smoke -eq 1 ]; then hb ring --pool none; else hb --samples 61 --sample-ms 0.25 ring --pool none; fi
	fi
	has probe && "$out/host/belprobe" --env host --out "$res" "${q[@]}"
	has scale && hb scale --pool none --targets core --sizes $sizes --threads 1,2
	# misses per key, counted under a simulated cache (valgrind): 1K and 256K
	if has scale; then
		"$BELUGA_ROOT/bench/scale-misses.sh" "$B" "$res/scale-misses-host.jsonl" 1K 256K ||
			log "bench/scale-misses.sh failed"
	fi
	if has replay && [ -n "$trace" ]; then
		hb replay --trace "$trace" --targets core,rpc --caps $caps
	fi
	# On the host only the fake kernel exists: these rows are a smoke check
	# of the benches (env host-fake), never the overhead figure.
	if [ $py_ok -eq 1 ]; then
		pyq=()
		[ $smoke -eq 1 ] && pyq=(--rounds 2 --samples 9)
		PYTHONPATH=$BELUGA_ROOT/userspace/build/python-fake /usr/bin/python3 \
			"$BELUGA_ROOT/bench/python/overhead.py" --fake --env host-fake --out "$res" \
			--c-lib "$out/python/liblookup64-fake.so" "${pyq[@]}" || log "bench/python/overhead.py failed"
		pyq=()
		[ $smoke -eq 1 ] && pyq=(--requests 8 --reps 1)
		if [ -n "$trace" ]; then
			PYTHONPATH=$BELUGA_ROOT/userspace/build/python-fake /usr/bin/python3 \
				"$BELUGA_ROOT/bench/python/mini_replay.py" --fake --env host-fake --out "$res" \
				--trace "$trace" "${pyq[@]}" || log "bench/python/mini_replay.py failed"
		fi
	fi
fi

# ---- host: the peers (bench/peers/README.md) -----------------------------------
# peers_python: sets ppy to the lmcache engine venv's python when it has
# LMCache and Mooncake Store (a full run builds it; a smoke run uses it where
# the engine lane built it), else fails with the reason in peers_why
peers_python() {
	ppy=$BELUGA_BUILD/venv-lmcache/bin/python peers_why=
	if [ $smoke -eq 0 ] && ! "$BELUGA_ROOT/scripts/engine-venv.sh" lmcache >&2; then
		peers_why="scripts/engine-venv.sh lmcache failed (see above)"
	elif [ ! -x "$ppy" ]; then
		peers_why="no $ppy (scripts/engine-venv.sh lmcache builds it: about 6.5 GB, torch included)"
	elif ! "$ppy" -c 'import lmcache, mooncake.store' 2>/dev/null; then
		peers_why="$ppy lacks lmcache or mooncake: rebuild it with scripts/engine-venv.sh lmcache"
	fi
	[ -z "$peers_why" ]
}

# in_private_net CMD...: CMD in a network namespace of its own (root, unshare
# and veth needed), so that what a peer binds to 0.0.0.0 (Mooncake's transfer
# engine does, whatever MC_TCP_BIND_ADDRESS says) is reachable from inside it
# only. Besides the loopback it holds a veth pair with a private address, both
# ends inside: Mooncake's transfer engine refuses to start without an
# interface other than the loopback. Otherwise CMD as it is, recorded as
# netns=no.
in_private_net() {
	local setup='ip link set lo up && ip link add peers0 type veth peer name peers1 &&
		ip addr add 10.254.0.1/32 dev peers0 && ip link set peers0 up && ip link set peers1 up'
	if [ "$(id -u)" -eq 0 ] && command -v ip >/dev/null && unshare -n sh -c "$setup" 2>/dev/null; then
		unshare -n sh -c "$setup"' && BELUGA_PEERS_NETNS=private exec "$@"' sh "$@"
	else
		log "peers: no private network namespace (needs root, unshare and veth): the peers listen on this host's interfaces"
		BELUGA_PEERS_NETNS=no "$@"
	fi
}

peers_ok=1
if [ $host -eq 1 ] && has peers; then
	if [ $py_ok -eq 0 ] && ! make -s -C "$BELUGA_ROOT/userspace" python >&2; then
		log "peers: SKIP: the Python binding does not build"
	elif ! peers_python; then
		log "peers: SKIP: $peers_why"
	else
		pargs=(--out "$res" --run-dir "$out/peers-run")
		if [ $smoke -eq 1 ]; then
			parts=("meta,data --block-size 16K --rounds 1 --ops 20 --counts 1,16 --samples 2")
		else
			parts=("meta,data --block-size 16K" "data --block-size 4M")
		fi
		rm -rf "$out/peers-run"
		for part in "${parts[@]}"; do
			# shellcheck disable=SC2086 # the part's words are options
			in_private_net env PYTHONPATH="$BELUGA_ROOT/userspace/build/python-fake:$BELUGA_ROOT/bench/python" \
				"$ppy" "$BELUGA_ROOT/bench/peers/peers.py" "${pargs[@]}" --parts $part ||
				{ log "bench/peers/peers.py --parts $part failed (logs in $out/peers-run)"; peers_ok=0; }
		done
		# end to end: engine processes replaying the trace, KV in each store
		e2eq=()
		[ $smoke -eq 1 ] && e2eq=(--requests 12 --block-size 16K --engines 2 --rounds 1)
		if [ -z "$trace" ]; then
			log "peers e2e: SKIP: no trace (see ../shared/data/README.md)"
		elif ! in_private_net env PYTHONPATH="$BELUGA_ROOT/userspace/build/python-fake:$BELUGA_ROOT/bench/python" \
			"$ppy" "$BELUGA_ROOT/bench/peers/e2e.py" "${pargs[@]}" --trace "$trace" "${e2eq[@]}"; then
			log "bench/peers/e2e.py failed (logs in $out/peers-run/e2e)"
			peers_ok=0
		fi
	fi
fi

# ---- the 6.12 guest ---------------------------------------------------------
run_guest() {
	local alias=6.12 kver groot stage initrd mem console tap gtmo
	kver=$(kver_of $alias)
	need_cmd qemu-system-x86_64 timeout
	groot=$("$BELUGA_ROOT/scripts/vm/guest-kernel.sh" $alias) || return 1
	stage=$out/guest-stage
	rm -rf "$stage"
	mkdir -p "$stage" "$out/vm"
	cp "$out/static/belbench" "$stage/"
	[ -n "$trace" ] && cp "$trace" "$stage/trace.jsonl"
	printf 'BENCH_MODE=%s\nBENCH_SECTIONS="%s"\nBENCH_CMDS="%s"\n' \
		"$([ $smoke -eq 1 ] && echo smoke || echo full)" "$sections" "$gcmds" >"$stage/config"
	# bench/python in the guest reads the trace in place, through the share
	if [ $py_ok -eq 1 ]; then
		printf 'BENCH_PY_TRACE="%s"\nBENCH_PY_CLIB="%s"\n' \
			"${trace:+$(realpath "$trace")}" "$(realpath "$out/python/liblookup64.so")" >>"$stage/config"
	fi
	# A private build directory: other guests build the module and their
	# initramfs in build/ at the same time.
	local ko
	ko=$(BELUGA_BUILD=$out/vm "$BELUGA_ROOT/scripts/vm/build-module.sh" $alias) ||
		{ log "beluga.ko does not build for $kver"; return 1; }
	initrd=$(BELUGA_BUILD=$out/vm "$BELUGA_ROOT/scripts/vm/mkinitramfs.sh" \
		-o "$out/vm/initramfs.cpio" -k "$ko" -r "$BELUGA_ROOT/bench/guest-run.sh" \
		-d "$stage:/bench" $alias) || { log "mkinitramfs.sh failed"; return 1; }
	rm -rf "$stage"	# the trace copy must not linger

	# The 6.12 topology of scripts/vm/run-guest.sh (three 256 MiB CXL type-3
	# volatile devices behind one host bridge: dax0.0, dax1.0 and a kmem node),
	# plus what the benchmark needs and run-guest.sh has no option for: 4 GiB
	# of RAM and a 1.5 GiB memmap= legacy pmem range (RAM-speed device-dax)
	# at 4 GiB, inside the RAM above the PCI hole.
	mem=$out/vm/cxl
	mkdir -p "$mem"
	console=$out/vm/console.log
	tap=$out/vm/guest-output.txt
	rm -f "$console" "$tap"
	gtmo=$((tmo > 120 ? tmo - 60 : tmo))
	# shellcheck disable=SC2054 # QEMU options are comma-separated
	local qemu=(qemu-system-x86_64 -accel tcg -nodefaults -no-user-config -display none
		-no-reboot -smp 2 -kernel "$groot/boot/vmlinuz-$kver" -initrd "$initrd"
		-serial "file:$console" -serial stdio
		-M q35,cxl=on -cpu qemu64,-hypervisor -m 4G,maxmem=8G,slots=8
		-device pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1)
	local i
	for i in 0 1 2; do
		qemu+=(-object "memory-backend-file,id=cxl-mem$i,share=on,mem-path=$mem/mem$i,size=256M"
			-device "cxl-rp,port=$i,bus=cxl.1,id=cxl-rp$i,chassis=0,slot=$((2 + i))"
			-device "cxl-type3,bus=cxl-rp$i,volatile-memdev=cxl-mem$i,id=cxl-vmem$i")
	done
	# shellcheck disable=SC2054
	qemu+=(-M cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G)
	local append="console=ttyS0 loglevel=5 panic=-1 beluga_kernel=$alias beluga_timeout=$gtmo memmap=1536M!4G"
	if [ $py_ok -eq 1 ]; then
		# the host's root, read-only, for Debian's python3 and the repository
		# (scripts/vm/guest-python.sh, the mechanism of the test guest)
		# (-fsdev + -device on pcie.0: -virtfs would plug into the pxb-cxl bus;
		# multidevs=remap: the export spans several host file systems, whose
		# inode numbers must not collide in the guest, as in run-guest.sh)
		qemu+=(-fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap"
			-device "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot,bus=pcie.0")
		append+=" beluga_hostroot=$(realpath "$BELUGA_ROOT")"
	fi
	qemu+=(-append "$append")
	log "booting $kver for the benchmark (TCG, timeout ${tmo}s); console: $console"
	local t0=$SECONDS qrc
	set +e
	timeout -k 10 "$tmo" "${qemu[@]}" </dev/null | sed -u 's/\r$//' | tee "$tap"
	qrc=${PIPESTATUS[0]}
	set -e
	rm -rf "$mem"
	log "guest finished after $((SECONDS - t0)) s (QEMU status $qrc)"
	grep -q '^BELUGA-GUEST-EXIT' "$tap" || {
		log "the guest did not finish: last console lines:"
		tail -n 30 "$console" | sed 's/^/    /' >&2
		return 1
	}
	# cut the files out of the serial stream
	awk -v dir="$res" '
		/^BELBENCH-FILE / { f = dir "/" $2; printf "" > f; next }
		/^BELBENCH-END$/ { if (f) close(f); f = ""; next }
		f { print >> f }' "$tap"
}

guest_ok=1
if [ $guest -eq 1 ]; then
	if [ ! -s "$BELUGA_CACHE/kver-6.12" ] || ! command -v qemu-system-x86_64 >/dev/null; then
		log "no 6.12 guest kernel or QEMU (scripts/install-deps.sh): guest rows skipped"
		guest_ok=0
	else
		run_guest || guest_ok=0
	fi
fi

# ---- results.json, targets, plots ------------------------------------------
{
	printf '{"generated":"%s","commit":"%s","host":"%s","smoke":%s,"loadavg":"%s","cpus":%s,"records":[\n' \
		"$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$commit" "$(uname -nr | tr -d '"')" \
		"$([ $smoke -eq 1 ] && echo true || echo false)" "$loadavg" "$(nproc)"
	# (a run whose sections all skipped has no records: an empty list)
	{ cat "$res"/*.jsonl 2>/dev/null || true; } | sed '$!s/$/,/'
	printf ']}\n'
} >"$json"
log "wrote $json ($({ cat "$res"/*.jsonl 2>/dev/null || true; } | wc -l) records)"

"$BELUGA_ROOT/bench/report.sh" "$res"

# bench/RESULTS.md and the README's table, generated from the JSON. Only a
# full run replaces bench/RESULTS.md and the README's block; any other run
# writes next to its JSON.
md=$out/RESULTS.md frag=$out/readme-results.md readme=()
[ $smoke -eq 1 ] && md=$out/smoke-RESULTS.md frag=$out/smoke-readme-results.md
if [ $full_run -eq 1 ]; then
	# the records stay beside the tables made from them (tests/userspace/test_reports.sh
	# regenerates RESULTS.md from them and compares)
	cp "$json" "$BELUGA_ROOT/bench/results.json"
	json=$BELUGA_ROOT/bench/results.json
	md=$BELUGA_ROOT/bench/RESULTS.md readme=("$BELUGA_ROOT/README.md")
fi
if /usr/bin/python3 "$BELUGA_ROOT/bench/gen-results.py" "$json" "$md" "$frag" "${readme[@]}"; then
	log "wrote $md and the README table fragment $frag"
else
	log "bench/gen-results.py failed"
	guest_ok=0
fi

# The status box of the README quotes bench/RESULTS.md: a full run renews it.
if [ $full_run -eq 1 ] && ! /usr/bin/python3 "$BELUGA_ROOT/scripts/gen-status.py"; then
	log "scripts/gen-status.py failed: the README's status box still quotes the previous run"
	guest_ok=0
fi

# The plots are optional (bench/draw-plots.sh): a failure is reported, here
# and again as the last line, but does not fail the run.
plots_msg=$("$BELUGA_ROOT/bench/draw-plots.sh" "$res" "$plots" 2>&1) || plots_failed=1
echo "$plots_msg" >&2
[ -z "${plots_failed:-}" ] || log "the plots were not drawn (see above: bench/draw-plots.sh); the results are complete"
[ $guest_ok -eq 1 ] && [ $peers_ok -eq 1 ] || exit 1
exit 0
