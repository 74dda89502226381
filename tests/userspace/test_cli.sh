#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# belugactl and beluga-demo from the outside: argument and size parsing,
# exit codes (0 ok, 1 failed, 2 usage), error messages that name the
# cause and the fix, JSON and Prometheus output, the boot-time config.
# Needs no /dev/beluga: the *-fake builds carry an in-process fake kernel
# (tests/userspace/fake_kernel.c), enabled by BELUGA_FAKE_KERNEL.
#
# Usage: tests/userspace/test_cli.sh BUILD_DIR   (prints TAP)
set -u

bin=${1:?usage: test_cli.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
ctl=$bin/belugactl
fctl=$bin/belugactl-fake
demo=$bin/beluga-demo
fdemo=$bin/beluga-demo-fake

tmp=$(mktemp -d /tmp/beluga-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$bin/test_sysfs" --make-tree "$tmp/sys"
mkdir -p "$tmp/nosys"
: >"$tmp/dev"

# shellcheck source=../lib/tap.sh
. "$(dirname "$0")/../lib/tap.sh"

have_python=0
command -v python3 >/dev/null 2>&1 && have_python=1

# rc_ok NAME RC ERRFILE: a command run beforehand exited 0
rc_ok() {
	if [ "$2" -eq 0 ]; then
		ok "$1"
	else
		not_ok "$1 (exit $2: $(head -3 "$3" | tr '\n' ' '))"
	fi
}

# stderr_only NAME CMD...: a usage error writes to stderr, not stdout
stderr_only() {
	local name=$1 out
	shift
	out=$("$@" 2>/dev/null)
	if [ -z "$out" ]; then ok "$name"; else not_ok "$name (wrote to stdout: $out)"; fi
}

# json_check NAME FILE [PYTHON-ASSERTION]: valid JSON, and the assertion on it (d) holds
json_check() {
	local name=$1 file=$2 assertion=${3:-True}
	if [ $have_python -eq 0 ]; then
		skip "$name" "python3 not installed"
		return
	fi
	if ! python3 -m json.tool "$file" >/dev/null 2>"$tmp/json.err"; then
		not_ok "$name (invalid JSON: $(head -1 "$tmp/json.err"))"
		sed 's/^/#   /' "$file" | head -20
	elif ! python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if ($assertion) else 1)" "$file"; then
		not_ok "$name (assertion failed: $assertion)"
		sed 's/^/#   /' "$file" | head -20
	else
		ok "$name"
	fi
}

export BELUGA_DEVICE=/nonexistent/beluga
export BELUGA_SYSFS_ROOT=$tmp/sys
# the /dev/daxX.Y nodes belugactl guards, and where it keeps their modes
export BELUGA_DEV_ROOT=$tmp/devroot BELUGA_RUN_DIR=$tmp/run
mkdir -p "$tmp/devroot"

# ---- usage errors: exit 2, the message names the problem ----
expect "no command is a usage error" 2 "Usage: belugactl" "$ctl"
expect "unknown command" 2 "unknown command 'frobnicate'" "$ctl" frobnicate
expect "unknown global option" 2 "unknown option '--bogus'" "$ctl" --bogus status
expect "attach: invalid size names it" 2 "invalid size '12X'" "$ctl" attach --node 1 --size 12X
stderr_only "attach: usage errors go to stderr" "$ctl" attach --node 1 --size 12X
expect "attach: size with a fraction" 2 "invalid size '1.5G'" "$ctl" attach --node 1 --size 1.5G
expect "attach: negative size" 2 "invalid size '-1'" "$ctl" attach --node 1 --size -1
expect "attach: zero size" 2 "invalid size '0'" "$ctl" attach --node 1 --size 0
expect "attach: size overflow" 2 "invalid size '99999999999999999999G'" \
	"$ctl" attach --node 1 --size 99999999999999999999G
expect "attach: --node without --size" 2 "--node needs --size" "$ctl" attach --node 1
expect "attach: nothing to attach" 2 "attach what?" "$ctl" attach
expect "attach: device and --node together" 2 "not both" "$ctl" attach /dev/dax0.0 --node 1 --size 1G
expect "attach: --size with a dax device" 2 "--size applies to --node only" "$ctl" attach dax0.0 --size 1G
expect "attach: bad node" 2 "invalid NUMA node 'x'" "$ctl" attach --node x --size 1G
expect "attach: block size not a 4K multiple" 2 "multiple of 4K" "$ctl" attach dax0.0 --block-size 3000
expect "attach: block size above 1G" 2 "multiple of 4K" "$ctl" attach dax0.0 --block-size 2G
expect "attach: unknown option" 2 "unknown option '--bogus'" "$ctl" attach --bogus
expect "attach: option without its value" 2 "option '--node' needs a value" "$ctl" attach --node
expect "attach: not a dax path" 2 "not a device-dax path" "$ctl" attach /dev/sda
expect "detach: nothing to detach" 2 "detach what?" "$ctl" detach
expect "detach: two regions" 2 "unexpected argument '1': detach one region at a time" \
	"$ctl" detach 0 1
expect "attach: two devices" 2 "unexpected argument 'dax1.0': attach one region at a time" \
	"$ctl" attach dax0.0 dax1.0
expect "apply: two config files" 2 "unexpected argument 'b.conf': give one config file" \
	"$ctl" apply a.conf b.conf
expect "evict: stray argument" 2 "unexpected argument 'now'" "$ctl" evict --ns 1 --all now
expect "detach: --help" 0 "Usage: belugactl detach" "$ctl" detach --help
expect "evict: --ns is required" 2 "--ns is required" "$ctl" evict --all
expect "evict: key or all" 2 "exactly one of --key HEX and --all" "$ctl" evict --ns 1
expect "evict: both key and all" 2 "exactly one of --key HEX and --all" "$ctl" evict --ns 1 --all --key 1
expect "evict: bad key" 2 "invalid key 'xyz'" "$ctl" evict --ns 1 --key xyz
expect "evict: key longer than 128 bits" 2 "invalid key" "$ctl" evict --ns 1 --key 0x123456789012345678901234567890123
expect "evict: bad namespace" 2 "invalid namespace '-3'" "$ctl" evict --ns -3 --all
expect "status: --json and --prometheus" 2 "one of --json and --prometheus" "$ctl" status --json --prometheus
expect "list: no --prometheus" 2 "--prometheus is not available" "$ctl" list --prometheus
expect "stats: stray argument" 2 "unexpected argument 'now'" "$ctl" stats now

# ---- sizes that parse: the command gets as far as opening the device ----
for s in 4096 64K 2M 2m 2MiB 2MB 1G 1T; do
	expect "attach: size '$s' is accepted" 1 "modprobe beluga" "$ctl" attach --node 0 --size "$s"
done
expect "attach: block size 4K is accepted" 1 "modprobe beluga" "$ctl" attach dax0.0 --block-size 4K

# ---- the device is missing or wrong ----
expect "status: missing device says modprobe beluga" 1 \
	"/nonexistent/beluga not found: load the module with \`modprobe beluga\`" "$ctl" status
expect "stats: -d names the device" 1 "/nope not found: load the module" "$ctl" -d /nope stats
expect "status: a non-Beluga file" 1 "not a Beluga device" env BELUGA_DEVICE=/dev/null "$ctl" status

# ---- --help for every command ----
for c in attach detach status stats evict list apply; do
	expect "$c --help" 0 "Usage: belugactl $c" "$ctl" "$c" --help
done
expect "help COMMAND" 0 "Usage: belugactl status" "$ctl" help status
expect "--help" 0 "Exit status: 0 ok, 1 the operation failed, 2 usage error" "$ctl" --help
expect "--version" 0 "belugactl 1." "$ctl" --version

# ---- list, against the fake sysfs ----
"$ctl" list --json >"$tmp/list.json" 2>"$tmp/list.err"
rc=$?
rc_ok "list --json exits 0" "$rc" "$tmp/list.err"
json_check "list --json is valid JSON with every device" "$tmp/list.json" \
	"len(d['devices']) == 7 and [x['name'] for x in d['devices']][-1] == 'dax10.0'"
json_check "list --json: dax0.0 fields" "$tmp/list.json" \
	"[x for x in d['devices'] if x['name'] == 'dax0.0'][0] == {'name': 'dax0.0', 'path': '/dev/dax0.0', 'size': 268435456, 'start': 0x390000000, 'mode': 'devdax', 'driver': 'device_dax', 'target_node': 1, 'numa_node': 0, 'align': 2097152, 'ranges': 1, 'source': 'cxl', 'system_ram': False, 'attachable': True, 'beluga_region': None}"
json_check "list --json: System RAM, unbound and multi-range are not attachable" "$tmp/list.json" \
	"[(x['system_ram'], x['attachable'], x['driver']) for x in d['devices'] if x['name'] in ('dax1.0', 'dax2.0', 'dax3.0')] == [(True, False, 'kmem'), (False, False, None), (False, False, 'device_dax')]"
expect "list: human table" 0 "system-ram" "$ctl" list
expect "list: human table has a header" 0 "NAME" "$ctl" list
expect "list: nothing found explains" 0 "no dax devices" env BELUGA_SYSFS_ROOT="$tmp/nosys" "$ctl" list
BELUGA_SYSFS_ROOT=$tmp/nosys "$ctl" list --json >"$tmp/empty.json"
json_check "list --json: an empty list" "$tmp/empty.json" "d == {'devices': []}"

# ---- status / stats output through the fake kernel ----
fake_env=(env BELUGA_FAKE_KERNEL=1 BELUGA_DEVICE="$tmp/dev" BELUGA_FAKE_REGIONS="dax0.0:4M,node1:2M")
"${fake_env[@]}" "$fctl" status --json >"$tmp/status.json"
json_check "status --json: pool and regions" "$tmp/status.json" \
	"d['nr_regions'] == 2 and d['block_size'] == 65536 and d['nr_blocks'] == 96 and [r['name'] for r in d['regions']] == ['dax0.0', 'node1'] and d['regions'][1]['backend'] == 'node' and d['regions'][0]['free_blocks'] == 64"
"${fake_env[@]}" "$fctl" stats --json >"$tmp/stats.json"
# Every field of the uapi's list, in its order (stats-fields.sh reads it).
stat_names=$("$here/stats-fields.sh" | sed "s/^\([a-z_]*\) .*/'\1'/" | paste -sd, -)
json_check "stats --json: every counter" "$tmp/stats.json" \
	"len(d) >= 18 and list(d) == [$stat_names] and d['total_blocks'] == 96"
expect "status: human table" 0 "2 regions, 96 blocks of 64 KiB (6 MiB)" "${fake_env[@]}" "$fctl" status
expect "status: region line" 0 "node1" "${fake_env[@]}" "$fctl" status
expect "status: no regions says how to attach" 0 "no regions attached: run \`belugactl attach" \
	env BELUGA_FAKE_KERNEL=1 BELUGA_DEVICE="$tmp/dev" "$fctl" status
"${fake_env[@]}" "$fctl" status --prometheus >"$tmp/status.prom"
"${fake_env[@]}" "$fctl" stats --prometheus >"$tmp/stats.prom"
# Prometheus text format: HELP/TYPE before samples, names and labels well formed
prom_ok() {
	awk '
	/^# HELP beluga_[a-z_]+ .+$/ { help[$3] = 1; next }
	/^# TYPE beluga_[a-z_]+ (gauge|counter)$/ { if (!help[$3]) bad = "TYPE before HELP: " $0; type[$3] = 1; next }
	/^beluga_[a-z_]+(\{[a-z_]+="([^"\\]|\\.)*"(,[a-z_]+="([^"\\]|\\.)*")*\})? [0-9]+$/ {
		name = $1; sub(/\{.*/, "", name)
		if (!type[name]) bad = "sample without TYPE: " $0
		samples++; next }
	{ bad = "malformed line: " $0 }
	END { if (bad) { print bad; exit 1 } if (!samples) { print "no samples"; exit 1 } }' "$1"
}
if out=$(prom_ok "$tmp/status.prom"); then ok "status --prometheus is valid text format"; else not_ok "status --prometheus is valid text format ($out)"; fi
if out=$(prom_ok "$tmp/stats.prom"); then ok "stats --prometheus is valid text format"; else not_ok "stats --prometheus is valid text format ($out)"; fi
expect "status --prometheus: region labels" 0 'beluga_region_blocks{pool="dev",region="dax0.0",id="0",backend="dax",node="-1"} 64' \
	cat "$tmp/status.prom"
expect "stats --prometheus: counters end in _total" 0 "# TYPE beluga_allocs_total counter" cat "$tmp/stats.prom"
# every_sample_has_pool FILE POOL: each sample's first label is pool="POOL"
every_sample_has_pool() {
	grep -v '^#' "$1" | grep -v "^beluga_[a-z_]*{pool=\"$2\"[,}]"
}
# Two pools (pools=N: /dev/beluga, /dev/beluga1) export the same names; the
# pool label, the device's name, keeps their series apart.
: >"$tmp/beluga" && : >"$tmp/beluga1"
for cmd in status stats; do
	"${fake_env[@]}" BELUGA_DEVICE="$tmp/beluga" "$fctl" $cmd --prometheus >"$tmp/pool0.prom"
	"${fake_env[@]}" "$fctl" -d "$tmp/beluga1" $cmd --prometheus >"$tmp/pool1.prom"
	if out=$(every_sample_has_pool "$tmp/pool0.prom" beluga; every_sample_has_pool "$tmp/pool1.prom" beluga1); then
		not_ok "$cmd --prometheus: a sample without pool=\"beluga\" or pool=\"beluga1\" first: $(head -1 <<<"$out")"
	else
		ok "$cmd --prometheus: every sample is labelled with its pool (\$BELUGA_DEVICE, -d)"
	fi
	series() { grep -v '^#' "$1" | sed 's/ [0-9]*$//' | sort; }
	if [ "$(series "$tmp/pool0.prom" | wc -l)" -gt 0 ] &&
	   [ "$(series "$tmp/pool0.prom" | wc -l)" = "$(series "$tmp/pool1.prom" | wc -l)" ] &&
	   [ -z "$(comm -12 <(series "$tmp/pool0.prom") <(series "$tmp/pool1.prom"))" ]; then
		ok "$cmd --prometheus: two pools export as many series, none the same"
	else
		not_ok "$cmd --prometheus: two pools export as many series, none the same ($(comm -12 <(series "$tmp/pool0.prom") <(series "$tmp/pool1.prom") | head -1))"
	fi
done
if grep -h '^# TYPE' "$tmp/status.prom" "$tmp/stats.prom" | awk '{print $3}' | sort | uniq -d | grep -q .; then
	not_ok "status and stats metric names do not collide (one textfile each)"
else
	ok "status and stats metric names do not collide (one textfile each)"
fi
# ---- a shared pool's hosts (BELUGA_IOC_HOSTS, beluga_hosts()) in status ----
json_check "status --json: a pool without hosts, empty hosts" "$tmp/status.json" "d['hosts'] == []"
if grep -q beluga_pool_host "$tmp/status.prom"; then
	not_ok "status --prometheus: no host series without a shared pool"
else
	ok "status --prometheus: no host series without a shared pool"
fi
# The fake kernel answers HOSTS with these records (fake_kernel.c): host 1's
# devices pin with W = 10 s, host 2 runs a module that ignores device leases.
cat >"$tmp/hosts" <<'HOSTS'
0 active 2 3514 d1 alive 9 self node-a
1 active 1 3438 2e alive 0 - node-b 10000 aware
2 active 1 120 0 dead 61234 - - 1500 old
3 none 0 0 0 dead 185218 - -
4 left 3 77 0 dead 5 - node-"q"
HOSTS
fake_env_nohosts=("${fake_env[@]}")
fake_env+=(BELUGA_FAKE_HOSTS="$tmp/hosts")
"${fake_env[@]}" "$fctl" status --json >"$tmp/hosts.json"
json_check "status --json: hosts of the shared pool" "$tmp/hosts.json" \
	"[h['id'] for h in d['hosts']] == [0, 1, 2, 3, 4] and d['hosts'][0] == {'id': 0, 'state': 'active', 'incarnation': 2, 'heartbeat': 3514, 'alive': True, 'silent_ms': 9, 'self': True, 'name': 'node-a', 'owned_mask': 0xd1, 'owned_partitions': [0, 4, 6, 7], 'device_pins': False, 'device_fence_ms': None, 'lease_aware': True}"
json_check "status --json: a dead host, a nameless one, a left one" "$tmp/hosts.json" \
	"(d['hosts'][2]['alive'], d['hosts'][2]['name'], d['hosts'][2]['owned_partitions'], d['hosts'][3]['state'], d['hosts'][4]['name']) == (False, None, [], 'none', 'node-\"q\"') and d['nr_regions'] == 2"
"${fake_env[@]}" "$fctl" status --prometheus >"$tmp/hosts.prom"
if out=$(prom_ok "$tmp/hosts.prom"); then ok "status --prometheus with hosts is valid text format"; else not_ok "status --prometheus with hosts is valid text format ($out)"; fi
expect "status --prometheus: hosts alive" 0 'beluga_pool_hosts_alive{pool="dev"} 2' cat "$tmp/hosts.prom"
expect "status --prometheus: host info labels (escaped name)" 0 \
	'beluga_pool_host_info{pool="dev",host="4",name="node-\"q\"",state="left",self="0"} 1' cat "$tmp/hosts.prom"
expect "status --prometheus: owned partitions" 0 'beluga_pool_host_owned_partitions{pool="dev",host="1"} 4' cat "$tmp/hosts.prom"
expect "status --prometheus: dead host" 0 'beluga_pool_host_alive{pool="dev",host="2"} 0' cat "$tmp/hosts.prom"
expect "status --prometheus: silence" 0 'beluga_pool_host_silent_milliseconds{pool="dev",host="2"} 61234' cat "$tmp/hosts.prom"
if out=$(every_sample_has_pool "$tmp/hosts.prom" dev); then
	not_ok "status --prometheus with hosts: a sample without pool=\"dev\" first: $(head -1 <<<"$out")"
else
	ok "status --prometheus with hosts: every sample is labelled with its pool"
fi
if grep -q 'host="3"' "$tmp/hosts.prom"; then
	not_ok "status --prometheus: unused records (state none) are left out"
else
	ok "status --prometheus: unused records (state none) are left out"
fi
json_check "status --json: a host's device lease, and a module that ignores them" "$tmp/hosts.json" \
	"[(h['device_pins'], h['device_fence_ms'], h['lease_aware']) for h in d['hosts'][:3]] == [(False, None, True), (True, 10000, True), (True, 1500, False)]"
expect "status --prometheus: device pins" 0 'beluga_pool_host_device_pins{pool="dev",host="1"} 1' cat "$tmp/hosts.prom"
expect "status --prometheus: W" 0 'beluga_pool_host_device_fence_milliseconds{pool="dev",host="1"} 10000' cat "$tmp/hosts.prom"
expect "status --prometheus: a host that ignores device leases" 0 'beluga_pool_host_lease_aware{pool="dev",host="2"} 0' cat "$tmp/hosts.prom"
expect "status: human table lists the hosts" 0 "0    active  alive      2        3514          9      0xd1 no              - yes    node-a (this host)" \
	"${fake_env[@]}" "$fctl" status
expect "status: human table shows devpins and W" 0 "1    active  alive      1        3438          0      0x2e yes          10 s yes    node-b" \
	"${fake_env[@]}" "$fctl" status
expect "status: W that is not whole seconds, and an old module" 0 " 0 yes       1.500 s no     -" \
	"${fake_env[@]}" "$fctl" status
if env BELUGA_FAKE_KERNEL=1 BELUGA_DEVICE="$tmp/dev" BELUGA_FAKE_REGIONS="dax0.0:4M" BELUGA_FAKE_HOSTS="$tmp/hosts" "$fctl" -d "$tmp/dev" status | grep -q "shared pool hosts"; then
	ok "status: -d DEVICE asks DEVICE for its hosts"
else
	not_ok "status: -d DEVICE asks DEVICE for its hosts"
fi
fake_env=("${fake_env_nohosts[@]}")
expect "detach by name through the fake" 0 "detached region 1 (node1)" "${fake_env[@]}" "$fctl" detach node1
expect "detach: unknown name" 1 "no attached region named 'dax7.0'" "${fake_env[@]}" "$fctl" detach dax7.0
expect "detach: id out of range" 1 "region ids are 0..15" "${fake_env[@]}" "$fctl" detach 99
expect "detach: an empty slot names the fix, then where to look" 1 \
	"no region in slot 5: give the id of an attached region (see \`belugactl status\`)" \
	"${fake_env[@]}" "$fctl" detach 5
expect "evict: a missing key names it" 1 "key 00000000000000000000000000000abc is not present in namespace 3" \
	"${fake_env[@]}" "$fctl" evict --ns 3 --key abc
expect "evict --all" 0 "namespace 3: evicted 0 blocks" "${fake_env[@]}" "$fctl" evict --ns 3 --all
expect "attach a node through the fake" 0 "attached node2: region 2, 32 blocks of 64 KiB (2 MiB)" \
	"${fake_env[@]}" "$fctl" attach --node 2 --size 2M
expect "attach a dax device through the fake" 0 "attached dax0.0: region 0, 128 blocks of 2 MiB" \
	env BELUGA_FAKE_KERNEL=1 BELUGA_FAKE_BLOCK_SIZE=2097152 BELUGA_DEVICE="$tmp/dev" "$fctl" attach /dev/dax0.0
expect "attach: System RAM is refused with the fix" 1 \
	"dax1.0 is online as System RAM (kmem): run \`daxctl reconfigure-device --mode=devdax dax1.0\` or use \`belugactl attach --node 2" \
	env BELUGA_FAKE_KERNEL=1 BELUGA_DEVICE="$tmp/dev" "$fctl" attach dax1.0

# ---- the dax node while attached: holders refuse, mode 0000, restored at detach ----
node=$tmp/devroot/dax0.0
fake_dax=(env BELUGA_FAKE_KERNEL=1 BELUGA_FAKE_BLOCK_SIZE=2097152 BELUGA_DEVICE="$tmp/dev")
truncate -s 4096 "$node"
chmod 0640 "$node"
sleep 60 3<"$node" &
holder=$!
expect "attach: refused while another process has the node open, naming it and the fix" 1 \
	"$node is open in pid $holder (sleep): it could write the pool's blocks behind Beluga's back; stop it, or attach anyway with --force" \
	"${fake_dax[@]}" "$fctl" attach dax0.0
if [ "$(stat -c %a "$node")" = 640 ] && [ ! -e "$tmp/run/dax0.0.mode" ]; then
	ok "attach: a refusal leaves the node's mode alone"
else
	not_ok "attach: a refusal leaves the node's mode alone (mode $(stat -c %a "$node"), state: $(cat "$tmp/run/dax0.0.mode" 2>&1))"
fi
expect "attach --force: attaches, and warns about the holder" 0 "is open in pid $holder (sleep) (--force)" \
	"${fake_dax[@]}" "$fctl" attach --force /dev/dax0.0
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
if [ "$(stat -c %a "$node")" = 0 ] && [ "$(cat "$tmp/run/dax0.0.mode")" = "$node 0640" ]; then
	ok "attach: the node is mode 0000 while attached, its old mode saved"
else
	not_ok "attach: the node is mode 0000 while attached (mode $(stat -c %a "$node"), state: $(cat "$tmp/run/dax0.0.mode" 2>&1))"
fi
expect "detach gives the node its mode back" 0 "detached region 0 (dax0.0)" \
	"${fake_dax[@]}" BELUGA_FAKE_REGIONS="dax0.0:4M" "$fctl" detach dax0.0
if [ "$(stat -c %a "$node")" = 640 ] && [ ! -e "$tmp/run/dax0.0.mode" ]; then
	ok "detach: mode 0640 again, the saved mode removed"
else
	not_ok "detach: mode 0640 again (mode $(stat -c %a "$node"), state: $(cat "$tmp/run/dax0.0.mode" 2>&1))"
fi
expect "attach with nobody holding the node" 0 "attached dax0.0" "${fake_dax[@]}" "$fctl" attach dax0.0
if [ "$(stat -c %a "$node")" = 0 ]; then ok "attach: the node is mode 0000"; else not_ok "attach: the node is mode 0000 (mode $(stat -c %a "$node"))"; fi
expect "attach again fails in the module, naming the fix" 1 \
	"dax0.0 is already attached, or overlaps an attached region: detach that region first, or attach another range (see \`belugactl status\`)" \
	"${fake_dax[@]}" BELUGA_FAKE_REGIONS="dax0.0:4M" "$fctl" attach dax0.0
if [ "$(stat -c %a "$node")" = 0 ] && [ "$(cat "$tmp/run/dax0.0.mode")" = "$node 0640" ]; then
	ok "a failed second attach keeps the first one's mode 0000 and saved mode"
else
	not_ok "a failed second attach keeps the first one's mode 0000 (mode $(stat -c %a "$node"), state: $(cat "$tmp/run/dax0.0.mode" 2>&1))"
fi
"${fake_dax[@]}" BELUGA_FAKE_REGIONS="dax0.0:4M" "$fctl" detach dax0.0 >/dev/null 2>&1
if [ -x /usr/bin/python3 ]; then
	# mapped, with its descriptor closed: the mapping still writes the memory
	/usr/bin/python3 -c 'import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY); m = mmap.mmap(fd, 4096, prot=mmap.PROT_READ); os.close(fd)
print("mapped", flush=True); time.sleep(60)' "$node" >"$tmp/mapper.out" 2>&1 &
	mapper=$!
	for _ in 1 2 3 4 5 6 7 8 9 10; do grep -q mapped "$tmp/mapper.out" && break; sleep 0.5; done
	expect "attach: refused while another process maps the node" 1 "$node is open in pid $mapper (python3)" \
		"${fake_dax[@]}" "$fctl" attach dax0.0
	kill "$mapper" 2>/dev/null
	wait "$mapper" 2>/dev/null
else
	echo "ok $((n += 1)) attach: refused while another process maps the node # SKIP /usr/bin/python3 is not installed"
fi
: >"$tmp/devroot/dax1.0"
chmod 0644 "$tmp/devroot/dax1.0"
expect "attach refused by the library" 1 "System RAM" "${fake_dax[@]}" "$fctl" attach dax1.0
if [ "$(stat -c %a "$tmp/devroot/dax1.0")" = 644 ] && [ ! -e "$tmp/run/dax1.0.mode" ]; then
	ok "a failed attach gives the node its mode back"
else
	not_ok "a failed attach gives the node its mode back (mode $(stat -c %a "$tmp/devroot/dax1.0"))"
fi
expect "attach: --force with --node is a usage error" 2 "--force applies to a dax device only" \
	"$ctl" attach --force --node 1 --size 2M

# ---- apply and the config file ----
expect "apply --check packaging/beluga.conf" 0 "block size" "$ctl" apply --check "$top/packaging/beluga.conf"
cat >"$tmp/good.conf" <<'CONF'
# test config
block_size = 64K   # small blocks
dax = /dev/dax0.0
node = 1 2M
CONF
expect "apply --check: plan" 0 "attach node 1, 2 MiB" "$ctl" apply --check "$tmp/good.conf"
printf 'block_size = 2M\ndax = dax0.0\nfrobs = 3\n' >"$tmp/bad.conf"
expect "apply: unknown key names file and line" 2 "bad.conf:3: unknown key 'frobs'" "$ctl" apply --check "$tmp/bad.conf"
printf 'node = 1\n' >"$tmp/bad2.conf"
expect "apply: node without size" 2 "expected 'node = NODE SIZE'" "$ctl" apply --check "$tmp/bad2.conf"
printf 'block_size = 3000\n' >"$tmp/bad3.conf"
expect "apply: bad block size" 2 "invalid block_size '3000'" "$ctl" apply --check "$tmp/bad3.conf"
printf 'block_size = 2M\nblock_size = 4M\n' >"$tmp/bad4.conf"
expect "apply: block size twice" 2 "block_size given twice" "$ctl" apply --check "$tmp/bad4.conf"
expect "apply: missing file" 1 "cannot read $tmp/none.conf" "$ctl" apply "$tmp/none.conf"
expect "apply: without the module" 1 "modprobe beluga" "$ctl" apply "$tmp/good.conf"
expect "apply through the fake attaches everything" 0 "attached node1" \
	env BELUGA_FAKE_KERNEL=1 BELUGA_DEVICE="$tmp/dev" "$fctl" apply "$tmp/good.conf"
expect "apply skips what is attached" 0 "node1: already attached as region 1" \
	env BELUGA_FAKE_KERNEL=1 BELUGA_DEVICE="$tmp/dev" BELUGA_FAKE_REGIONS="dax9.0:2M,node1:2M" "$fctl" apply "$tmp/good.conf"
printf 'dax = dax0.0\ndax = dax1.0\n' >"$tmp/part.conf"
expect "apply: one failure fails the run but attaches the rest" 1 "1 of 2 regions failed" \
	env BELUGA_FAKE_KERNEL=1 BELUGA_FAKE_BLOCK_SIZE=2097152 BELUGA_DEVICE="$tmp/dev" "$fctl" apply "$tmp/part.conf"

# ---- beluga-demo ----
expect "demo: bad block tokens" 2 "invalid block token count '0'" "$demo" --block-tokens 0
expect "demo: unknown option" 2 "unknown option '--frob'" "$demo" --frob
expect "demo: no device says modprobe beluga" 1 "load the module with \`modprobe beluga\`" "$demo"
"$demo" --dry-run --json >"$tmp/d1.json"
"$demo" --dry-run --json >"$tmp/d2.json"
json_check "demo --dry-run --json is valid JSON" "$tmp/d1.json" "d['requests'] == 32 and 0.5 < d['hit_ratio'] < 1 and d['hits'] + d['misses'] == d['keys']"
if diff <(grep -v seconds "$tmp/d1.json") <(grep -v seconds "$tmp/d2.json") >/dev/null; then
	ok "demo: the synthetic workload is deterministic"
else
	not_ok "demo: the synthetic workload is deterministic"
fi
"$demo" --dry-run --json --seed 2 >"$tmp/d3.json"
if ! diff <(grep -v seconds "$tmp/d1.json") <(grep -v seconds "$tmp/d3.json") >/dev/null; then
	ok "demo: --seed changes the workload"
else
	not_ok "demo: --seed changes the workload"
fi
cat >"$tmp/trace.jsonl" <<'TRACE'
{"timestamp": 0, "input_length": 1536, "output_length": 10, "hash_ids": [1, 2, 3]}
{"timestamp": 5, "input_length": 1536, "output_length": 10, "hash_ids": [1,2,4]}

{"timestamp": 9, "hash_ids": [ 1, 2, 3, 5 ], "output_length": 3}
{"hash_ids": [7]}
TRACE
"$demo" --dry-run --json --trace "$tmp/trace.jsonl" >"$tmp/t.json"
json_check "demo --trace: Mooncake hash_ids replay" "$tmp/t.json" \
	"(d['requests'], d['keys'], d['hits'], d['misses']) == (4, 11, 5, 6)"
"$demo" --dry-run --json --trace "$tmp/trace.jsonl" -n 2 >"$tmp/t2.json"
json_check "demo --trace -n caps the requests" "$tmp/t2.json" "d['requests'] == 2 and d['hits'] == 2"
printf '{"hash_ids": [1, 2]}\n{"hash_ids": [1, x]}\n' >"$tmp/bad.jsonl"
expect "demo --trace: malformed hash_ids names the line" 1 "bad.jsonl:2: malformed" \
	"$demo" --dry-run --trace "$tmp/bad.jsonl"
printf '{"input_length": 3}\n' >"$tmp/nohash.jsonl"
expect "demo --trace: a line without hash_ids" 1 "nohash.jsonl:1: no \"hash_ids\" field" \
	"$demo" --dry-run --trace "$tmp/nohash.jsonl"
expect "demo --trace: missing file" 1 "cannot open trace" "$demo" --dry-run --trace "$tmp/none.jsonl"

# The demo end to end through the fake kernel: mapping, verification, eviction.
demo_env=(env BELUGA_FAKE_KERNEL=1 BELUGA_DEVICE="$tmp/dev" BELUGA_FAKE_BLOCK_SIZE=16384)
"${demo_env[@]}" BELUGA_FAKE_REGIONS="dax0.0:64M" "$fdemo" --json -n 100 --verify full >"$tmp/e.json" 2>"$tmp/e.err"
rc=$?
rc_ok "demo through the fake kernel exits 0" "$rc" "$tmp/e.err"
json_check "demo through the fake kernel: hits verified, misses published" "$tmp/e.json" \
	"d['verify_errors'] == 0 and d['hits'] > 0 and d['bytes_verified'] == d['hits'] * 16384 and d['published'] == d['misses'] and d['bytes_written'] == d['misses'] * 16384"
"$demo" --dry-run --json -n 100 >"$tmp/e-dry.json"
json_check "demo: the fake kernel's hits equal the ideal cache's" "$tmp/e.json" \
	"d['hits'] == json.load(open('$tmp/e-dry.json'))['hits']"
"${demo_env[@]}" BELUGA_FAKE_REGIONS="dax0.0:4M" BELUGA_FAKE_MAX_BATCH=64 "$fdemo" --json -n 100 --flush \
	--bytes-per-block 4096 >"$tmp/s.json" 2>"$tmp/s.err"
rc=$?
rc_ok "demo in a small pool (eviction, batches of 64) exits 0" "$rc" "$tmp/s.err"
json_check "demo in a small pool: fewer hits, no errors" "$tmp/s.json" \
	"d['verify_errors'] == 0 and d['hits'] < json.load(open('$tmp/e.json'))['hits'] and d['bytes_verified'] == d['hits'] * 4096"
"${demo_env[@]}" BELUGA_FAKE_REGIONS="dax0.0:64M" "$fdemo" --json -n 100 --verify pages >"$tmp/p.json" 2>&1
json_check "demo --verify pages: 64 bytes of each 4 KiB page" "$tmp/p.json" \
	"d['verify_errors'] == 0 and d['verify'] == 'pages' and d['bytes_verified'] == d['hits'] * 256 and d['bytes_written'] == d['misses'] * 256 and d['hits'] == json.load(open('$tmp/e.json'))['hits']"
expect "demo: a wrong offset from LOOKUP is caught" 1 "should hold ns 1 key" \
	"${demo_env[@]}" BELUGA_FAKE_REGIONS="dax0.0:64M" BELUGA_FAKE_LOOKUP_SKEW=1 "$fdemo" -n 20
expect "demo: verify errors are counted at the end" 1 "blocks failed verification" \
	"${demo_env[@]}" BELUGA_FAKE_REGIONS="dax0.0:64M" BELUGA_FAKE_LOOKUP_SKEW=1 "$fdemo" -n 20 --verify pages
expect "demo: bad verify mode" 2 "invalid verify mode 'some'" "$demo" --verify some
"${demo_env[@]}" BELUGA_FAKE_REGIONS="dax0.0:64M" "$fdemo" --json -n 10 >"$tmp/auto.json" 2>&1
json_check "demo --verify auto measures the pool and picks a mode" "$tmp/auto.json" \
	"d['verify_auto'] and d['calibrated_mbps'] > 0 and d['verify'] in ('full', 'pages') and d['verify_errors'] == 0"
"${demo_env[@]}" BELUGA_FAKE_REGIONS="dax0.0:4M" "$fdemo" --json --trace "$tmp/trace.jsonl" >"$tmp/tf.json" 2>&1
json_check "demo --trace through the fake kernel" "$tmp/tf.json" \
	"(d['hits'], d['misses'], d['verify_errors']) == (5, 6, 0)"

# ---- scripts/beluga-setup, against the same fake sysfs ----
setup=$top/scripts/beluga-setup
mkdir -p "$tmp/sys/devices/system/node/node0" "$tmp/sys/devices/system/node/node2"
echo 0-3 >"$tmp/sys/devices/system/node/node0/cpulist"
echo >"$tmp/sys/devices/system/node/node2/cpulist"
printf 'Node 2 MemTotal:       262144 kB\nNode 2 MemFree:        204800 kB\n' \
	>"$tmp/sys/devices/system/node/node2/meminfo"
expect "beluga-setup lists modes and nodes" 0 "dax1.0        256 MiB 0x3a0000000    system-ram     2 cxl" "$setup"
expect "beluga-setup lists memory-only nodes" 0 "node2: 256 MiB total, 200 MiB free" "$setup"
expect "beluga-setup refuses a device without --to-devdax" 2 "only with an explicit --to-devdax dax1.0" \
	"$setup" dax1.0
out=$("$setup" --to-devdax /dev/dax1.0 --dry-run 2>&1 | grep '^+ ' | tr '\n' ';')
if [ "$out" = "+ daxctl offline-memory dax1.0;+ daxctl reconfigure-device --mode=devdax dax1.0;" ]; then
	ok "beluga-setup --to-devdax offlines the memory, then reconfigures"
else
	not_ok "beluga-setup --to-devdax offlines the memory, then reconfigures (ran: $out)"
fi
expect "beluga-setup --to-devdax on a devdax device" 0 "already in devdax mode" "$setup" --to-devdax dax0.0
expect "beluga-setup --to-devdax on a missing device" 1 "dax7.0: no such dax device" "$setup" --to-devdax dax7.0
expect "beluga-setup --to-devdax with a bad name" 2 "not a dax device" "$setup" --to-devdax sda

tap_done
