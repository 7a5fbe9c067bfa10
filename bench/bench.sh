#!/bin/sh
# SPDX-License-Identifier: MIT
#
# bench.sh: runs the benchmarks of docs/performance.md and prints their tables (markdown).
#
#   sh bench.sh bench OUT   ours: interleaved ns/op, callgrind instructions, slow path,
#                           drain, snapshot, memory, drops under snapshots
#   sh bench.sh callgrind OUT  only the callgrind instruction counts (malloc+free, C++ new+delete)
#   sh bench.sh peers OUT   the same interleaved run with heaptrack, jemalloc, tcmalloc
#                           (gperftools) and Go 1.19 beside ours, plus peers' memory
#   sh bench.sh deps OUT    install the Debian packages the peers need (missing ones only)
#   sh bench.sh inuse OUT   only the in-use tracking rows (free path, live-heap memory, rate 1)
#   sh bench.sh otel OUT    only the cost of OpenTelemetry's otel_memory probes, unattached
#   sh bench.sh attach OUT  only what a process pays after llgo-heap attach and detach
#
# OUT is the absolute build folder (bin/, lib/, bench/). One private llgo-heapd runs on a
# socket in a temporary folder for the whole run; it is started here and stopped by its pid.
# Knobs: ROUNDS (11), PEER_ROUNDS (5), SLOW_ROUNDS (3), DROP_SECONDS (10), RESULTS (a file
# that receives a copy of the report).
set -eu

MODE=${1:?usage: bench.sh bench|callgrind|peers|deps OUT}
OUT=${2:?usage: bench.sh bench|callgrind|peers|deps OUT}
B=$OUT/bench
SHIM=$OUT/lib/libllgoheap.so
HEAPD=$OUT/bin/llgo-heapd
CLI=$OUT/bin/llgo-heap
ROUNDS=${ROUNDS:-11}
PEER_ROUNDS=${PEER_ROUNDS:-5}
SLOW_ROUNDS=${SLOW_ROUNDS:-3}
DROP_SECONDS=${DROP_SECONDS:-10}
LIVE_SEEDS=${LIVE_SEEDS:-15}
FORK_ROUNDS=${FORK_ROUNDS:-15}
LIBDIR=/usr/lib/x86_64-linux-gnu
JEMALLOC=$LIBDIR/libjemalloc.so.2
TCMALLOC=$LIBDIR/libtcmalloc.so.4
PEER_PKGS="heaptrack libjemalloc2 libgoogle-perftools4 golang-go valgrind"

# ---- deps --------------------------------------------------------------------------------
install_missing() { # packages...
	missing=""
	for p in "$@"; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' \
			|| missing="$missing $p"
	done
	if [ -z "$missing" ]; then
		echo "bench deps: all present"
		return 0
	fi
	echo "bench deps: installing$missing"
	if [ "$(id -u)" != 0 ]; then
		echo "bench deps: run as root (or install:$missing)" >&2
		return 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	# shellcheck disable=SC2086
	apt-get install -y -q --no-install-recommends $missing >/dev/null ||
		{ apt-get update -q >/dev/null &&
			apt-get install -y -q --no-install-recommends $missing >/dev/null; }
}

if [ "$MODE" = deps ]; then
	install_missing $PEER_PKGS
	exit 0
fi
if { [ "$MODE" = bench ] || [ "$MODE" = callgrind ]; } && ! command -v valgrind >/dev/null; then
	# the instruction counts need callgrind; best effort (the section says so if absent)
	install_missing valgrind || true
fi

for f in "$SHIM" "$HEAPD" "$CLI" "$B/alloc_bench" "$B/alloc_driver" "$B/slowpath_bench" \
	"$B/capture_bench" "$B/snapshot_bench" "$B/attach_bench"; do
	[ -e "$f" ] || { echo "bench.sh: missing $f (run make first)" >&2; exit 1; }
done

TMP=$(mktemp -d /tmp/llgo-bench.XXXXXX)
SOCK=$TMP/heapd.sock
DPID=""
REPORT=$TMP/report.md

cleanup() {
	if [ -n "$DPID" ]; then
		kill "$DPID" 2>/dev/null || true
		wait "$DPID" 2>/dev/null || true
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

out() { printf '%s\n' "$*" | tee -a "$REPORT"; }
outf() { tee -a "$REPORT"; }

start_daemon() {
	"$HEAPD" --socket "$SOCK" --foreground >"$TMP/heapd.log" 2>&1 &
	DPID=$!
	i=0
	while [ ! -S "$SOCK" ]; do
		i=$((i + 1))
		if [ $i -gt 100 ] || ! kill -0 "$DPID" 2>/dev/null; then
			echo "bench.sh: llgo-heapd did not start:" >&2
			cat "$TMP/heapd.log" >&2
			exit 1
		fi
		sleep 0.05
	done
}

# Accounting of one pid from `llgo-heap list`: "sampled delivered dropped corrupt" or "".
acct() {
	"$CLI" list --socket "$SOCK" 2>/dev/null | awk -v pid="$1" '
		NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
		$1 == pid { print $col["SAMPLED"], $col["DELIVERED"], $col["DROPPED"], $col["CORRUPT"] }'
}

machine() {
	out "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), \
$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), \
Debian $(cat /etc/debian_version), $(uname -r), glibc $(ldd --version | head -1 | awk '{print $NF}'), \
$(cc --version | head -1)"
	out "Date: $(date -u '+%Y-%m-%d %H:%M UTC'); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	out ""
}

# ---- 1. interleaved ns/op -----------------------------------------------------------------
run_driver() { # set rounds
	"$B/alloc_driver" --bench "$B/alloc_bench" --shim "$SHIM" --socket "$SOCK" \
		--passthrough "$B/libpassthrough.so" --tmp "$TMP" --rounds "$2" --slow-rounds "$SLOW_ROUNDS" --set "$1" \
		--pids "$TMP/pids.$1" ${3:+$3} >"$TMP/driver.$1" 2>"$TMP/driver.$1.err" &
	drv=$!
	# progress lines to the terminal while it runs
	tail -f "$TMP/driver.$1" --pid "$drv" 2>/dev/null | grep --line-buffered '^round' >&2 || true
	wait "$drv" || { cat "$TMP/driver.$1.err" >&2; exit 1; }
	cat "$TMP/driver.$1.err" >&2
	sed -n '/^###/,$p' "$TMP/driver.$1" | outf
	# Accounting of the rate-1 runs (the daemon keeps exited processes in its list).
	out "Records of the profiled runs (llgo-heap list, summed over every process of a row):"
	out ""
	out "| configuration | processes | sampled | delivered | dropped | corrupt |"
	out "|---|---:|---:|---:|---:|---:|"
	"$CLI" list --socket "$SOCK" >"$TMP/list" 2>/dev/null || true
	awk -F'|' '
		FILENAME == ARGV[1] { cfg[$1] = $2 " (" $3 ")"; next }
		FNR == 1 { next }
		{ split($0, f, " ")
		  if (!(f[1] in cfg)) next
		  k = cfg[f[1]]
		  n[k]++; s[k] += f[4]; d[k] += f[5]; dr[k] += f[6]; co[k] += f[7] }
		END { for (k in n) printf "| %s | %d | %d | %d | %d | %d |\n", k, n[k], s[k], d[k], dr[k], co[k] }
	' "$TMP/pids.$1" FS=' ' "$TMP/list" | sort | outf
	out ""
}

# ---- 2. callgrind ---------------------------------------------------------------------------
callgrind_ir() { # file -> total Ir of the collected region
	awk '/^(summary|totals):/ { print $2; exit }' "$1"
}

callgrind_section() {
	if ! command -v valgrind >/dev/null; then
		out "callgrind: valgrind is not installed (make deps installs it); skipped."
		return
	fi
	out "### Instructions per malloc+free pair (callgrind, Ir in bench_loop inclusive)"
	out ""
	out "| workload | pairs | glibc Ir/pair | llgo rate 0 | added | llgo default | added | llgo rate 1 | added |"
	out "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	for wl in small mixed; do
		np=400000
		np1=20000
		row="| $wl |"
		for cfg in none 0 524288 1; do
			n=$np
			[ "$cfg" = 1 ] && n=$np1
			f=$TMP/cg.$wl.$cfg
			if [ "$cfg" = none ]; then
				valgrind --tool=callgrind --callgrind-out-file="$f.n" \
					--toggle-collect=bench_loop "$B/alloc_bench" -w "$wl" --pairs "$n" \
					>/dev/null 2>"$f.log"
				valgrind --tool=callgrind --callgrind-out-file="$f" \
					--toggle-collect=bench_loop "$B/alloc_bench" -w "$wl" --pairs "$np1" \
					>/dev/null 2>>"$f.log"
				base=$(callgrind_ir "$f.n")
				base1=$(callgrind_ir "$f")
				row="$row $n | $(echo "$base $n" | awk '{printf "%.1f", $1/$2}') |"
			else
				LD_PRELOAD=$SHIM LLGO_HEAP_SOCKET=$SOCK LLGO_HEAP_RATE=$cfg \
					valgrind --tool=callgrind --callgrind-out-file="$f" \
					--toggle-collect=bench_loop "$B/alloc_bench" -w "$wl" --pairs "$n" \
					>/dev/null 2>"$f.log"
				ir=$(callgrind_ir "$f")
				b=$base
				[ "$cfg" = 1 ] && b=$base1
				row="$row $(echo "$ir $n" | awk '{printf "%.1f", $1/$2}') | $(echo "$ir $b $n" | awk '{printf "%+.2f", ($1-$2)/$3}') |"
			fi
		done
		out "$row"
	done
	out ""
	out "Rate 1 uses 20,000 pairs against a 20,000-pair glibc run; the others 400,000."
	out ""
	# Check that callgrind ran the shim's malloc (callgrind does not replace malloc; only
	# memcheck-like tools do) and show where the instructions go.
	f=$TMP/cg.small.524288
	if callgrind_annotate "$f" 2>/dev/null | grep -q 'libllgoheap'; then
		out "Verified: the callgrind profile of the shim runs contains libllgoheap.so's functions"
		out "(callgrind keeps the program's malloc; valgrind replaces malloc only for memcheck-like tools)."
	else
		out "WARNING: no libllgoheap.so function in the callgrind profile: the shim was not measured."
	fi
	out ""
	for wl in small mixed; do
		for cfg in none 0 524288; do
			out "Per-function self cost, $wl, $([ $cfg = none ] && echo glibc alone || echo "llgo rate $cfg") (callgrind_annotate --inclusive=no, top 10):"
			out ""
			out '```'
			ff=$TMP/cg.$wl.$cfg
			[ "$cfg" = none ] && ff=$ff.n
			callgrind_annotate --inclusive=no --threshold=100 "$ff" 2>/dev/null |
				awk '/file:function/ { f = 1; getline; next } f && /^-+$/ { exit }
					f && NF { print; if (++n >= 10) exit }' |
				sed -E 's/^ *//; s#  [^ ]*:([^ :]+)#  \1#; s#\[[^]]*/([^]/]+)\]#[\1]#' | outf
			out '```'
			out ""
		done
	done
}

# Ir of a callgrind output file spent outside glibc (libc.so.6): the program's loop, libstdc++,
# the shim and the PLT stubs. Names are compressed as "(n) name" on first use, in ob= and cob=
# lines alike; a "calls=" line is followed by the call's inclusive cost, not a self cost.
callgrind_ir_outside_libc() { # file
	awk '
		function obname(v,   id, rest) {
			if (!match(v, /^\([0-9]+\)/))
				return v
			id = substr(v, RSTART, RLENGTH)
			rest = substr(v, RLENGTH + 2)
			if (rest != "")
				name[id] = rest
			return name[id]
		}
		/^ob=/ { ob = obname(substr($0, 4)); next }
		/^cob=/ { obname(substr($0, 5)); next }
		/^calls=/ { skip = 1; next }
		/^[0-9+*-]/ { if (skip) { skip = 0; next } if (ob !~ /\/libc\.so\.6$/) n += $2; next }
		END { print n + 0 }' "$1"
}

# C++ operator new + sized delete pairs, beside the malloc+free pairs above.
callgrind_cxx_section() {
	command -v valgrind >/dev/null || return 0
	out "### Instructions per C++ new+delete pair (callgrind, Ir in bench_loop inclusive)"
	out ""
	out "| workload | pairs | no shim Ir/pair | llgo rate 0 | added | added outside glibc | llgo default | added | added outside glibc |"
	out "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	for wl in new new-aligned; do
		n=400000
		row="| $wl | $n |"
		for cfg in none 0 524288; do
			f=$TMP/cg.$wl.$cfg
			if [ "$cfg" = none ]; then
				valgrind --tool=callgrind --callgrind-out-file="$f" \
					--toggle-collect=bench_loop "$B/alloc_bench" -w "$wl" --pairs "$n" \
					>/dev/null 2>"$f.log"
				base=$(callgrind_ir "$f")
				base_out=$(callgrind_ir_outside_libc "$f")
				row="$row $(echo "$base $n" | awk '{printf "%.1f", $1/$2}') |"
			else
				LD_PRELOAD=$SHIM LLGO_HEAP_SOCKET=$SOCK LLGO_HEAP_RATE=$cfg \
					valgrind --tool=callgrind --callgrind-out-file="$f" \
					--toggle-collect=bench_loop "$B/alloc_bench" -w "$wl" --pairs "$n" \
					>/dev/null 2>"$f.log"
				ir=$(callgrind_ir "$f")
				ir_out=$(callgrind_ir_outside_libc "$f")
				row="$row $(echo "$ir $n" | awk '{printf "%.1f", $1/$2}') | $(echo "$ir $base $n" | awk '{printf "%+.2f", ($1-$2)/$3}') | $(echo "$ir_out $base_out $n" | awk '{printf "%+.2f", ($1-$2)/$3}') |"
			fi
		done
		out "$row"
	done
	out ""
	out "new: operator new(16) + operator delete(p, 16); new-aligned: operator new(64, align_val_t(64))"
	out "+ operator delete(p, 64, align_val_t(64)). Without the shim these are libstdc++'s operators"
	out "(new calls malloc through its PLT, sized delete jumps to delete, which jumps to free);"
	out "with it, the shim's (one jump to the operator, the rate load, the countdown at a positive"
	out "rate, a call of the real malloc or aligned_alloc; delete is two jumps into free)."
	out "\"Outside glibc\" leaves out libc.so.6's own instructions: the same malloc(16) costs the"
	out "same in both runs, but glibc's aligned_alloc depends on the heap's layout, which the shim's"
	out "start-up allocations change."
	out ""
	for wl in new new-aligned; do
		for cfg in none 0; do
			out "Per-function self cost, $wl, $([ $cfg = none ] && echo "no shim" || echo "llgo rate $cfg") (callgrind_annotate --inclusive=no, top 8):"
			out ""
			out '```'
			callgrind_annotate --inclusive=no --threshold=100 "$TMP/cg.$wl.$cfg" 2>/dev/null |
				awk '/file:function/ { f = 1; getline; next } f && /^-+$/ { exit }
					f && NF { print; if (++n >= 8) exit }' |
				sed -E 's/^ *//; s#  [^ ]*:([^ :]+)#  \1#; s#\[[^]]*/([^]/]+)\]#[\1]#' | outf
			out '```'
			out ""
		done
	done
}

# ---- 3. slow path, drain, snapshot -------------------------------------------------------------
median3() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

slowpath_section() {
	out "### Sampled path alone: stack_capture + emit_push_alloc (shim objects linked in, rdtscp per sample)"
	out ""
	out "| frames | median ns | mean ns (< p99) | p99 ns | p99.9 ns | threshold draw median ns | draw p99 ns |"
	out "|---:|---:|---:|---:|---:|---:|---:|"
	for fr in 10 50; do
		: >"$TMP/push"
		for rep in 1 2 3; do
			"$B/slowpath_bench" push --frames $fr --samples 200000 >>"$TMP/push"
		done
		get() { sed -n "s/.* $2=\([0-9.]*\).*/\1/p" "$1" | median3; }
		seen=$(sed -n 's/.*frames=\([0-9]*\).*/\1/p' "$TMP/push" | head -1)
		out "| $seen | $(get "$TMP/push" median_ns) | $(get "$TMP/push" mean_ns) | $(get "$TMP/push" p99_ns) | $(get "$TMP/push" p999_ns) | $(get "$TMP/push" draw_median_ns) | $(get "$TMP/push" draw_p99_ns) |"
	done
	out ""
	out "Median of 3 processes x 200,000 samples; the ring is emptied between samples (untimed)."
	out ""
	out "### Sampled path: one malloc(16) timed alone (rdtscp), shim at rate 1 vs glibc alone"
	out ""
	out "| frames | glibc median ns | glibc mean (< p99) | llgo rate 1 median ns | mean (< p99) | p99 ns | p99.9 ns | added median ns | added mean ns | added p99 ns | samples dropped |"
	out "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for fr in 10 50; do
		: >"$TMP/cap.base"
		: >"$TMP/cap.shim"
		for rep in 1 2 3; do
			"$B/slowpath_bench" capture --frames $fr --samples 200000 --gap-ns 2000 \
				>>"$TMP/cap.base"
			LD_PRELOAD=$SHIM LLGO_HEAP_SOCKET=$SOCK LLGO_HEAP_RATE=1 \
				"$B/slowpath_bench" capture --frames $fr --samples 200000 --gap-ns 2000 \
				>>"$TMP/cap.shim"
		done
		get() { sed -n "s/.* $2=\([0-9.]*\).*/\1/p" "$1" | median3; }
		bm=$(get "$TMP/cap.base" median_ns)
		bp=$(get "$TMP/cap.base" p99_ns)
		sm=$(get "$TMP/cap.shim" median_ns)
		sp=$(get "$TMP/cap.shim" p99_ns)
		s9=$(get "$TMP/cap.shim" p999_ns)
		seen=$(sed -n 's/.*frames=\([0-9]*\).*/\1/p' "$TMP/cap.shim" | head -1)
		drops=0
		for pid in $(sed -n 's/.*pid=\([0-9]*\).*/\1/p' "$TMP/cap.shim"); do
			a=$(acct "$pid")
			d=$(echo "$a" | awk '{print $3 + 0}')
			drops=$((drops + d))
		done
		ba=$(get "$TMP/cap.base" mean_ns)
		sa=$(get "$TMP/cap.shim" mean_ns)
		out "| $seen | $bm | $ba | $sm | $sa | $sp | $s9 | $(echo "$sm $bm" | awk '{printf "%.1f", $1-$2}') | $(echo "$sa $ba" | awk '{printf "%.1f", $1-$2}') | $(echo "$sp $bp" | awk '{printf "%.1f", $1-$2}') | $drops |"
	done
	out ""
	out "Median of 3 processes x 200,000 timed calls each; 2 us of untimed spinning between calls"
	out "lets the daemon keep the ring drained, so each timed call is a real push."
	out ""
	out "### Daemon drain throughput (one core, ring_reader_drain, 16 MiB ring)"
	out ""
	out "| frames/record | callback | records/s | ns/record |"
	out "|---:|---|---:|---:|"
	for fr in 10 50; do
		"$B/slowpath_bench" drain --frames $fr --records 5000000 |
			sed -n 's/DRAIN frames=\([0-9]*\) callback=\([a-z_]*\) .*records_per_sec=\([0-9]*\) ns_per_record=\([0-9.]*\).*/| \1 | \2 | \3 | \4 |/p' |
			outf
	done
	out ""
	out "### Snapshot time and daemon memory"
	out ""
	out "| buckets | stacks | snapshot cold ms | warm ms | pprof bytes | table bytes | RSS table KiB | RSS table+maps+snapshot KiB |"
	out "|---:|---:|---:|---:|---:|---:|---:|---:|"
	for nb in 10000 100000; do
		"$B/slowpath_bench" snapshot --buckets $nb |
			sed -n 's/SNAPSHOT buckets=\([0-9]*\) stacks=\([0-9]*\) cold_ms=\([0-9.]*\) warm_ms=\([0-9.]*\) pprof_bytes=\([0-9]*\) table_bytes=\([0-9]*\) rss_table_kb=\([-0-9]*\) rss_total_kb=\([-0-9]*\).*/| \1 | \2 | \3 | \4 | \5 | \6 | \7 | \8 |/p' |
			outf
	done
	out ""
	out "### Drain delay while snapshots are built (100,000 buckets and their live table)"
	out ""
	out "| phase | buckets | snapshots | snapshot median ms | delay p50 us | p99 us | max us | probes |"
	out "|---|---:|---:|---:|---:|---:|---:|---:|"
	"$B/snapshot_bench" --buckets 100000 --seconds 3 |
		sed -n 's/SNAPBENCH phase=\([a-z]*\) buckets=\([0-9]*\) snapshots=\([0-9]*\) snapshot_ms=\([0-9.]*\) delay_p50_us=\([0-9]*\) delay_p99_us=\([0-9]*\) delay_max_us=\([0-9]*\) probes=\([0-9]*\).*/| \1 | \2 | \3 | \4 | \5 | \6 | \7 | \8 |/p' |
		outf
	out ""
	out "A probe record every 200 us into a ring of the session; the delay is the time until the"
	out "daemon consumed it (its ring tail). Baseline: the drain thread alone (it polls every 1 ms"
	out "while busy); snapshots: pprof snapshots back to back through the snapshot service."
	out ""
}

# ---- 3a. OpenTelemetry's otel_memory probes, nothing attached (issue 23) ------------------
# The same callgrind count as section 2 under the shim and under the same sources built
# without the probes (LLGO_HEAP_BENCH_NO_OTEL): at rate 1 every malloc takes the sampled
# path (emit_sample tests llgo_heap:sample's and otel_memory:alloc's semaphores in one word)
# and every free is a tracked object's (otel_memory:free's semaphore after the lookup).
otel_section() {
	NOOTEL=$OUT/bench/libllgoheap-nootel.so
	if ! command -v valgrind >/dev/null || [ ! -e "$NOOTEL" ]; then
		out "otel probes: valgrind or $NOOTEL missing (make bench builds it); skipped."
		return
	fi
	out "### OpenTelemetry's otel_memory probes, nothing attached: Ir per malloc+free pair (callgrind, bench_loop inclusive)"
	out ""
	out "| workload | rate | pairs | shim without the probes | shim | added Ir/pair |"
	out "|---|---:|---:|---:|---:|---:|"
	for wl in small mixed; do
		for r in 1 524288; do
			n=400000
			[ "$r" = 1 ] && n=20000
			for v in nootel otel; do
				lib=$SHIM
				[ $v = nootel ] && lib=$NOOTEL
				LD_PRELOAD=$lib LLGO_HEAP_SOCKET=$SOCK LLGO_HEAP_RATE=$r LLGO_HEAP_UNWIND=fp \
					valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.otel.$v" \
					--toggle-collect=bench_loop "$B/alloc_bench" -w "$wl" --pairs "$n" \
					>/dev/null 2>"$TMP/cg.otel.$v.log"
			done
			a=$(callgrind_ir "$TMP/cg.otel.nootel")
			b=$(callgrind_ir "$TMP/cg.otel.otel")
			out "| $wl | $r | $n | $(echo "$a $n" | awk '{printf "%.2f", $1/$2}') | $(echo "$b $n" | awk '{printf "%.2f", $1/$2}') | $(echo "$a $b $n" | awk '{printf "%+.2f", ($2-$1)/$3}') |"
		done
	done
	out ""
	out "Rate 1: every pair is a sampled allocation and a tracked object's free, the paths the"
	out "probes' semaphore tests sit on. The default rate: the fast paths, which are the same"
	out "instructions in both shims; its rows vary by up to 2 Ir/pair from run to run with either"
	out "shim (how many samples the random draws give, and what the first one sets up)."
	out "LLGO_HEAP_UNWIND=fp: under the default (auto) the first samples copy stacks until the"
	out "daemon's tables arrive, a number that varies from run to run."
	out ""
}

# ---- 3b. the sampled path under llgo-heap verify ---------------------------------------------
# The capture run at rate 1 (every malloc sampled) alone and with `llgo-heap verify` attached
# for the whole timed loop (the program sleeps 2.5 s before it; verify starts at 0.3 s and
# collects for 4 s): the difference is the kernel's capture per sample (uprobe, BPF program,
# bpf_get_stack, ring buffer).
verify_section() {
	out "### Sampled path with llgo-heap verify attached: one malloc(16) at rate 1 (rdtscp)"
	out ""
	out "| unwinding | frames | rate 1 median ns | mean (< p99) | with verify median ns | mean (< p99) | p99 ns | added median ns | added mean ns | samples verified | agree |"
	out "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	# fp: the kernel walks frame pointers (bpf_get_stack); dwarf: the shim copies the stack and
	# the kernel copies it too (48 KiB per sample), fewer calls for the same wall time
	for mode in fp dwarf; do
	n=200000
	[ "$mode" = dwarf ] && n=20000
	for fr in 10 50; do
		: >"$TMP/ver.base"
		: >"$TMP/ver.on"
		: >"$TMP/ver.out"
		for rep in 1 2 3; do
			LD_PRELOAD=$SHIM LLGO_HEAP_SOCKET=$SOCK LLGO_HEAP_RATE=1 LLGO_HEAP_UNWIND=$mode \
				"$B/capture_bench" capture --frames $fr --samples $n --gap-ns 2000 \
				--delay-ms 2500 >>"$TMP/ver.base"
			LD_PRELOAD=$SHIM LLGO_HEAP_SOCKET=$SOCK LLGO_HEAP_RATE=1 LLGO_HEAP_UNWIND=$mode \
				"$B/capture_bench" capture --frames $fr --samples $n --gap-ns 2000 \
				--delay-ms 2500 >>"$TMP/ver.on" &
			bp=$!
			sleep 0.3
			"$CLI" verify "$bp" --seconds 4 --socket "$SOCK" >>"$TMP/ver.out" 2>&1 || true
			wait "$bp"
		done
		get() { sed -n "s/.* $2=\([0-9.]*\).*/\1/p" "$1" | median3; }
		bm=$(get "$TMP/ver.base" median_ns)
		ba=$(get "$TMP/ver.base" mean_ns)
		vm=$(get "$TMP/ver.on" median_ns)
		va=$(get "$TMP/ver.on" mean_ns)
		vp=$(get "$TMP/ver.on" p99_ns)
		if grep -q "BPF unavailable" "$TMP/ver.out"; then
			out ""
			out "verify: skipped ($(grep -m1 "BPF unavailable" "$TMP/ver.out"))"
			out ""
			return
		fi
		seen=$(sed -n 's/.*frames=\([0-9]*\).*/\1/p' "$TMP/ver.on" | head -1)
		ns=$(sed -n 's/^verify: \([0-9]*\) samples, \([0-9]*\) agree.*/\1/p' "$TMP/ver.out" | awk '{s += $1} END {print s + 0}')
		na=$(sed -n 's/^verify: \([0-9]*\) samples, \([0-9]*\) agree.*/\2/p' "$TMP/ver.out" | awk '{s += $1} END {print s + 0}')
		out "| $mode | $seen | $bm | $ba | $vm | $va | $vp | $(echo "$vm $bm" | awk '{printf "%.1f", $1-$2}') | $(echo "$va $ba" | awk '{printf "%.1f", $1-$2}') | $ns | $na |"
	done
	done
	out ""
	out "Median of 3 processes x 200,000 timed calls each (fp; 20,000 for dwarf) with 2 us of"
	out "untimed spinning between calls; samples verified/agree are summed over the 3 verify"
	out "runs (each also covers the untimed warm-up). Without verify the probe costs one load"
	out "and a branch per sample."
	out ""
}

# ---- 3c. process lifecycle -------------------------------------------------------------------------
# Start to exit of short processes, and fork, with and without the shim, in one run (medians;
# lifecycle_bench.c). A second daemon, SIGSTOPped, stands for a stopped or hung one.
lifecycle_section() {
	out "### Process lifecycle: wall time with and without the shim (medians, interleaved)"
	out ""
	out "| workload | no shim | shim, default rate | added |"
	out "|---|---:|---:|---:|"
	for cmd in "/bin/true" "/bin/bash -c :"; do
		# shellcheck disable=SC2086
		r=$("$B/lifecycle_bench" spawn "$SHIM" "$SOCK" 300 $cmd) || return 1
		echo "$r" | awk -v c="$cmd" '{printf "| start+exit `%s` | %.0f us | %.0f us | %+.0f us |\n", c, $2, $4, $6}' | outf
	done
	"$HEAPD" --socket "$TMP/stopped.sock" --foreground >"$TMP/stopped.log" 2>&1 &
	spid=$!
	i=0
	while [ ! -S "$TMP/stopped.sock" ] && [ $i -lt 100 ]; do i=$((i + 1)); sleep 0.05; done
	kill -STOP "$spid"
	r=$("$B/lifecycle_bench" spawn "$SHIM" "$TMP/stopped.sock" 100 /bin/true)
	kill -CONT "$spid"
	kill "$spid"
	wait "$spid" 2>/dev/null || true
	echo "$r" | awk '{printf "| start+exit `/bin/true`, daemon SIGSTOPped | %.0f us | %.0f us | %+.0f us |\n", $2, $4, $6}' | outf
	: >"$TMP/fork.plain"
	: >"$TMP/fork.shim"
	rep=1
	while [ $rep -le "$FORK_ROUNDS" ]; do
		"$B/lifecycle_bench" fork 500 3 >>"$TMP/fork.plain"
		LD_PRELOAD=$SHIM LLGO_HEAP_SOCKET=$SOCK "$B/lifecycle_bench" fork 500 3 >>"$TMP/fork.shim"
		rep=$((rep + 1))
	done
	fp=$(awk '{print $2}' "$TMP/fork.plain" | median3)
	fs=$(awk '{print $2}' "$TMP/fork.shim" | median3)
	rp=$(awk '{print $4}' "$TMP/fork.plain" | median3)
	rs=$(awk '{print $4}' "$TMP/fork.shim" | median3)
	cp=$(awk '{print $6}' "$TMP/fork.plain" | median3)
	cs=$(awk '{print $6}' "$TMP/fork.shim" | median3)
	# the ratio of each round's two runs (run one after the other), then their median: the
	# machine's state drifts between rounds more than within one
	ratio() { paste "$TMP/fork.plain" "$TMP/fork.shim" | awk -v c="$1" '{ print $(c + 6) / $c }' | median3; }
	fr=$(ratio 2)
	cr=$(ratio 6)
	rr=$(ratio 4)
	awk -v a="$fp" -v b="$fs" -v r="$fr" 'BEGIN {printf "| fork(), 3 busy threads in the parent | %.0f us | %.0f us | %.2fx (median of the rounds: %.2fx) |\n", a, b, b / a, r}' | outf
	awk -v a="$cp" -v b="$cs" -v r="$cr" 'BEGIN {printf "| fork(), 3 busy threads: CPU time of the forking thread | %.0f us | %.0f us | %.2fx (median of the rounds: %.2fx) |\n", a, b, b / a, r}' | outf
	awk -v a="$rp" -v b="$rs" -v r="$rr" 'BEGIN {printf "| fork to child reaped (child _exit(0)) | %.0f us | %.0f us | %.2fx (median of the rounds: %.2fx) |\n", a, b, b / a, r}' | outf
	out ""
	out "(fork rows: median of $FORK_ROUNDS runs of 500 forks each, runs alternating with and without the shim)"
	out ""
}

# ---- 3b. DWARF unwinding (issue 9) -------------------------------------------------------------
unwind_section() {
	out "### Sampled path with the stack copy: one malloc(16) timed alone (rdtscp), rate 1, by LLGO_HEAP_UNWIND"
	out ""
	out "| frames | mode | median ns | mean ns (< p99) | p99 ns | p99.9 ns | added median ns (vs glibc) | added p99 ns |"
	out "|---:|---|---:|---:|---:|---:|---:|---:|"
	for fr in 10 50; do
		: >"$TMP/uwcap.base"
		for rep in 1 2 3; do
			"$B/slowpath_bench" capture --frames $fr --samples 50000 --gap-ns 20000 \
				>>"$TMP/uwcap.base"
		done
		get() { sed -n "s/.* $2=\([0-9.]*\).*/\1/p" "$1" | median3; }
		bm=$(get "$TMP/uwcap.base" median_ns)
		bp=$(get "$TMP/uwcap.base" p99_ns)
		for mode in fp dwarf auto; do
			f=$TMP/uwcap.$mode
			: >"$f"
			for rep in 1 2 3; do
				LD_PRELOAD=$SHIM LLGO_HEAP_SOCKET=$SOCK LLGO_HEAP_RATE=1 LLGO_HEAP_UNWIND=$mode \
					"$B/slowpath_bench" capture --frames $fr --samples 50000 \
					--gap-ns 20000 >>"$f"
			done
			seen=$(sed -n 's/.*frames=\([0-9]*\).*/\1/p' "$f" | head -1)
			sm=$(get "$f" median_ns)
			sp=$(get "$f" p99_ns)
			out "| $seen | $mode | $sm | $(get "$f" mean_ns) | $sp | $(get "$f" p999_ns) | $(echo "$sm $bm" | awk '{printf "%.1f", $1-$2}') | $(echo "$sp $bp" | awk '{printf "%.1f", $1-$2}') |"
		done
	done
	out ""
	out "Median of 3 processes x 50,000 timed calls; 20 us of untimed spinning between calls (the"
	out "daemon unwinds every copy as it comes). glibc alone: median $bm ns, p99 $bp ns at 50 frames."
	out ""
	out "### Daemon DWARF unwinding on one core (unwind_stack, this process's stack copies)"
	out ""
	out "| frames | walk | record bytes (stack copy) | cold first unwind us | warm CPU ns/sample | wall ns/sample | samples/s (CPU) | libunwind table searches/sample | files cached | cache RSS KiB |"
	out "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	for fr in 10 30 50; do
		# the fast path (agent/unwind/unwind_fast.c, the default) and libunwind alone (before issue 21)
		for opt in "" --libunwind; do
			"$B/slowpath_bench" unwind --frames $fr --records 200000 $opt |
				awk '/^UNWIND/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
					printf "| %s | %s | %s (%s) | %s | %s | %s | %s | %s | %s | %s |\n", v["frames"],
						v["path"], v["record_bytes"], v["stack_bytes"], v["cold_us"], v["warm_ns"],
						v["wall_ns"], v["samples_per_sec"], v["table_searches_per_sample"],
						v["files"], v["cache_rss_kb"] }' |
				outf
		done
	done
	out ""
	out "walk: fast = agent/unwind/unwind_fast.c's rows (the default), libunwind = libunwind's remote"
	out "unw_step alone (LLGO_HEAP_UNWIND_FAST=0 in the daemon's environment)."
	out ""
}

# ---- 4. memory ---------------------------------------------------------------------------------
rss_row() { # label, env...
	label=$1
	shift
	: >"$TMP/rss"
	for rep in 1 2 3 4 5; do
		env "$@" "$B/alloc_bench" -w small --rss | sed -n 's/^RSS //p' >>"$TMP/rss"
	done
	v=$(sed -n 's/vmrss_kb=\([0-9]*\).*/\1/p' "$TMP/rss" | median3)
	a=$(sed -n 's/.*anon_kb=\([0-9]*\).*/\1/p' "$TMP/rss" | median3)
	fl=$(sed -n 's/.*file_kb=\([0-9]*\).*/\1/p' "$TMP/rss" | median3)
	sh=$(sed -n 's/.*shmem_kb=\([0-9]*\).*/\1/p' "$TMP/rss" | median3)
	echo "$label $v $a $fl $sh"
}

memory_section() {
	out "### Resident memory at the end of the single-threaded 16 B run (median of 5)"
	out ""
	out "| configuration | VmRSS KiB | RssAnon | RssFile | RssShmem | added VmRSS KiB |"
	out "|---|---:|---:|---:|---:|---:|"
	base=$(rss_row glibc X=1)
	bv=$(echo "$base" | awk '{print $2}')
	echo "$base" | awk '{printf "| %s | %d | %d | %d | %d | - |\n", $1, $2, $3, $4, $5}' | outf
	for r in 0 524288 1; do
		rss_row "llgo_rate_$r" LD_PRELOAD="$SHIM" LLGO_HEAP_SOCKET="$SOCK" LLGO_HEAP_RATE=$r |
			awk -v bv="$bv" '{ gsub(/_/, " ", $1)
				printf "| %s | %d | %d | %d | %d | %+d |\n", $1, $2, $3, $4, $5, $2 - bv }' |
			outf
	done
	if [ "$MODE" = peers ]; then
		jb=$(rss_row jemalloc LD_PRELOAD="$JEMALLOC")
		jv=$(echo "$jb" | awk '{print $2}')
		echo "$jb" | awk '{printf "| %s | %d | %d | %d | %d | - |\n", $1, $2, $3, $4, $5}' | outf
		rss_row "jemalloc_prof_lg19" LD_PRELOAD="$JEMALLOC" MALLOC_CONF=prof:true,lg_prof_sample:19 |
			awk -v bv="$jv" '{ gsub(/_/, " ", $1); printf "| %s | %d | %d | %d | %d | %+d (vs jemalloc) |\n", $1, $2, $3, $4, $5, $2 - bv }' | outf
		tb=$(rss_row tcmalloc LD_PRELOAD="$TCMALLOC" TCMALLOC_SAMPLE_PARAMETER=0)
		tv=$(echo "$tb" | awk '{print $2}')
		echo "$tb" | awk '{printf "| %s | %d | %d | %d | %d | - |\n", $1, $2, $3, $4, $5}' | outf
		rss_row "tcmalloc_sample_512K" LD_PRELOAD="$TCMALLOC" TCMALLOC_SAMPLE_PARAMETER=524288 |
			awk -v bv="$tv" '{ gsub(/_/, " ", $1); printf "| %s | %d | %d | %d | %d | %+d (vs tcmalloc) |\n", $1, $2, $3, $4, $5, $2 - bv }' | outf
	fi
	out ""
}

# ---- 4b. in-use tracking (issue 10) -------------------------------------------------------------
live_rss_row() { # label, env... (LIVE_TOUCH=--touch: the blocks are written whole)
	# One run per seed (each seed another sequence of sizes, the same seeds for every
	# configuration): glibc's heap ends a megabyte larger or smaller with any change in the
	# sequence, the shim's sampling included, so one sequence says little; the means over
	# LIVE_SEEDS sequences do. Prints: label, mean VmRSS, RssAnon, RssShmem, and VmRSS
	# outside glibc's [heap] mapping (what libraries and the shim add), KiB.
	label=$1
	shift
	: >"$TMP/lrss"
	s=1
	while [ $s -le "$LIVE_SEEDS" ]; do
		env "$@" "$B/alloc_bench" -w mixed --live 100000 --pairs 2000000 --rss ${LIVE_TOUCH:-} --seed $s |
			sed -n 's/^RSS //p' >>"$TMP/lrss"
		s=$((s + 1))
	done
	sed 's/[a-z_]*=//g' "$TMP/lrss" | awk -v l="$label" '
		{ v += $1; a += $2; sh += $4; out += $1 - $5; n++ }
		END { if (n) printf "%s %.0f %.0f %.0f %.0f\n", l, v / n, a / n, sh / n, out / n }'
}

rate1_ns() { # env... -> median ns/op of alloc_bench small at rate 1 (3 runs of 1 + 11 batches)
	: >"$TMP/r1"
	for rep in 1 2 3; do
		env "$@" "$B/alloc_bench" -w small -W 1 -n 11 | sed -n 's/^RESULT median=\([0-9.]*\).*/\1/p' >>"$TMP/r1"
	done
	median3 <"$TMP/r1"
}

inuse_section() {
	out "### In-use tracking: the free path, resident memory of a live heap, lossless rate 1"
	out ""
	if command -v valgrind >/dev/null; then
		f=$TMP/cg.free
		LD_PRELOAD=$SHIM LLGO_HEAP_SOCKET=$SOCK LLGO_HEAP_RATE=524288 \
			valgrind --tool=callgrind --callgrind-out-file="$f" \
			--toggle-collect=bench_loop "$B/alloc_bench" -w mixed --pairs 400000 \
			>/dev/null 2>"$f.log"
		callgrind_annotate --inclusive=no --threshold=100 "$f" 2>/dev/null >"$f.txt" || true
		# free is its jump plus, once an object is tracked, override_free_paged's test
		fr=$(sed -n 's/^ *\([0-9,]*\) .*override.c:\(free\|override_free_paged\) \[.*libllgoheap.so\].*/\1/p' "$f.txt" | tr -d , | awk '{ n += $1 } END { print n + 0 }')
		lf=$(sed -n 's/^ *\([0-9,]*\) .*live.c:live_free \[.*libllgoheap.so\].*/\1/p' "$f.txt" | tr -d , | head -1)
		out "free (callgrind, mixed sizes, default rate, 400,000 frees): libllgoheap.so's free $(echo "${fr:-0}" | awk '{printf "%.2f", $1/400000}') Ir per call (a jump before in-use tracking: 1.00; the jump and the page test after), its slow path live_free $(echo "${lf:-0}" | awk '{printf "%.2f", $1/400000}') Ir per free on average."
		out ""
	fi
	for LIVE_TOUCH in "" --touch; do
		if [ -z "$LIVE_TOUCH" ]; then
			out "Resident memory after a live mixed-size heap (100,000 blocks of 16 B..4 KiB, FIFO, 2,000,000 replacements; means over $LIVE_SEEDS size sequences, --seed 1..$LIVE_SEEDS), blocks never written:"
		else
			out "The same, every block written whole when allocated (as programs do: sampled objects in the shim's arena take pages of their own, resident only once written):"
		fi
		out ""
		out "| configuration | VmRSS KiB | RssAnon | RssShmem | outside [heap] | added VmRSS | added outside [heap] |"
		out "|---|---:|---:|---:|---:|---:|---:|"
		base=$(LIVE_TOUCH=$LIVE_TOUCH live_rss_row glibc X=1)
		bv=$(echo "$base" | awk '{print $2}')
		bo=$(echo "$base" | awk '{print $5}')
		echo "$base" | awk '{printf "| %s | %d | %d | %d | %d | - | - |\n", $1, $2, $3, $4, $5}' | outf
		for r in 0 524288; do
			LIVE_TOUCH=$LIVE_TOUCH live_rss_row "llgo_rate_$r" LD_PRELOAD="$SHIM" LLGO_HEAP_SOCKET="$SOCK" LLGO_HEAP_RATE=$r |
				awk -v bv="$bv" -v bo="$bo" '{ gsub(/_/, " ", $1)
					printf "| %s | %d | %d | %d | %d | %+d (%+.2f%%) | %+d (%+.2f%% of VmRSS) |\n", $1, $2, $3, $4, $5, $2 - bv, 100 * ($2 - bv) / bv, $5 - bo, 100 * ($5 - bo) / bv }' |
				outf
		done
		out ""
	done
	out "Rate 1, 16 B malloc+free, 1 thread (median ns/op of 3 runs of 11 batches of 250,000):"
	out ""
	out "| configuration | ns/op |"
	out "|---|---:|"
	out "| glibc | $(rate1_ns X=1) |"
	out "| llgo rate 1, LLGO_HEAP_FULL=wait (the default at rate 1) | $(rate1_ns LD_PRELOAD="$SHIM" LLGO_HEAP_SOCKET="$SOCK" LLGO_HEAP_RATE=1 LLGO_HEAP_FULL=wait) |"
	out "| llgo rate 1, LLGO_HEAP_FULL=drop | $(rate1_ns LD_PRELOAD="$SHIM" LLGO_HEAP_SOCKET="$SOCK" LLGO_HEAP_RATE=1 LLGO_HEAP_FULL=drop) |"
	if command -v heaptrack >/dev/null; then
		: >"$TMP/r1"
		for rep in 1 2 3; do
			heaptrack -o "$TMP/ht.$rep" "$B/alloc_bench" -w small -W 1 -n 11 2>/dev/null |
				sed -n 's/^RESULT median=\([0-9.]*\).*/\1/p' >>"$TMP/r1"
			rm -f "$TMP"/ht.$rep*
		done
		out "| heaptrack (records every allocation and free, never drops) | $(median3 <"$TMP/r1") |"
	fi
	out ""
	for full in wait drop; do
		pid=$(LD_PRELOAD="$SHIM" LLGO_HEAP_SOCKET="$SOCK" LLGO_HEAP_RATE=1 LLGO_HEAP_FULL=$full \
			"$B/alloc_bench" -w small --seconds 2 | sed -n 's/.*pid=\([0-9]*\).*/\1/p')
		sleep 1
		out "Rate 1 flat out for 2 s, LLGO_HEAP_FULL=$full: sampled delivered dropped corrupt = $(acct "$pid")"
		out ""
	done
}

# ---- 5. drops under snapshots -------------------------------------------------------------------
drop_section() {
	out "### Two threads flat out at the default rate, a snapshot every second (${DROP_SECONDS} s)"
	out ""
	out "| workload | pairs | snapshots ok | snapshot ms (max) | sampled | delivered | dropped | corrupt |"
	out "|---|---:|---:|---:|---:|---:|---:|---:|"
	for wl in small mixed; do
		LD_PRELOAD=$SHIM LLGO_HEAP_SOCKET=$SOCK LLGO_HEAP_RATE=524288 \
			"$B/alloc_bench" -w $wl -t 2 --seconds "$DROP_SECONDS" >"$TMP/drop.out" &
		bpid=$!
		ok=0
		maxms=0
		sleep 1
		while kill -0 "$bpid" 2>/dev/null; do
			t0=$(date +%s%N)
			if "$CLI" snapshot "$bpid" -o /dev/null --socket "$SOCK" >/dev/null 2>&1; then
				ok=$((ok + 1))
			fi
			t1=$(date +%s%N)
			ms=$(( (t1 - t0) / 1000000 ))
			[ $ms -gt $maxms ] && maxms=$ms
			sleep 1
		done
		wait "$bpid"
		pairs=$(sed -n 's/DONE pairs=\([0-9]*\).*/\1/p' "$TMP/drop.out")
		a=$(acct "$bpid")
		set -- $a
		out "| $wl | $pairs | $ok | $maxms | ${1:-?} | ${2:-?} | ${3:-?} | ${4:-?} |"
	done
	out ""
}

# ---- 6. llgo-heap attach, then detach ------------------------------------------------------------
# The instructions of attach_bench_measure's malloc+free loop in a process (attach_bench.c):
# never attached, attached with the CLI and detached, and attached (for scale). Counted by
# single-stepping the call with ptrace: callgrind's guest cannot be attached to (there are no
# registers ptrace could set), and this machine's kernel offers no hardware instruction counter
# to perf_event_open.
attach_steps() { # workload mode(none|detached|attached) pairs -> instructions
	rm -f "$TMP/at.in"
	mkfifo "$TMP/at.in"
	ATTACH_BENCH_WORKLOAD=$1 "$B/attach_bench" target "$3" <"$TMP/at.in" >"$TMP/at.out" 2>&1 &
	tp=$!
	exec 8>"$TMP/at.in"
	i=0
	until grep -q '^ready' "$TMP/at.out"; do
		i=$((i + 1))
		[ $i -gt 400 ] && { echo "bench.sh: attach_bench did not start" >&2; exit 1; }
		sleep 0.05
	done
	addr=$(awk '/^ready/ { print $2 }' "$TMP/at.out")
	case $2 in
	detached) "$CLI" attach "$tp" --socket "$SOCK" >/dev/null &&
		"$CLI" detach "$tp" --socket "$SOCK" >/dev/null ;;
	attached) "$CLI" attach "$tp" --socket "$SOCK" >/dev/null ;;
	esac
	"$B/attach_bench" count "$tp" "$addr" >"$TMP/at.count" 2>"$TMP/at.err" &
	cp=$!
	i=0
	until grep -q armed "$TMP/at.err"; do
		i=$((i + 1))
		[ $i -gt 400 ] && { echo "bench.sh: attach_bench count did not arm" >&2; exit 1; }
		sleep 0.02
	done
	printf g >&8
	wait "$cp"
	wait "$tp"
	exec 8>&-
	cat "$TMP/at.count"
}

attach_section() {
	pairs=${ATTACH_PAIRS:-2000}
	out "### What a process pays after llgo-heap detach"
	out ""
	out "Instructions of a malloc+free loop of $pairs pairs run after the detach (user space,"
	out "counted by single-stepping the loop's call with ptrace in the real process that"
	out "\`llgo-heap attach\` and \`llgo-heap detach\` worked on; the loop warmed up before and"
	out "after, so that the allocator's caches are full in every run):"
	out ""
	out "| workload | never attached | attached, then detached | difference | per pair | attached (not detached) | per pair |"
	out "|---|---:|---:|---:|---:|---:|---:|"
	for wl in small mixed; do
		n=$(attach_steps $wl none "$pairs")
		d=$(attach_steps $wl detached "$pairs")
		a=$(attach_steps $wl attached "$pairs")
		out "| $wl | $n | $d | $((d - n)) | $(echo "$d $n $pairs" | awk '{printf "%+.3f", ($1-$2)/$3}') | $a | $(echo "$a $n $pairs" | awk '{printf "%+.2f", ($1-$2)/$3}') |"
	done
	out ""
	if ! command -v valgrind >/dev/null; then
		out "callgrind: valgrind is not installed; skipped."
		out ""
		return
	fi
	cpairs=${ATTACH_CG_PAIRS:-20000}
	out "The same under callgrind (Ir of attach_bench_measure inclusive, $cpairs pairs), the"
	out "process attaching and detaching itself: it dlopens the shim and calls"
	out "llgo_heap_attach_start and llgo_heap_attach_stop, the two calls the CLI makes a stopped"
	out "thread run (callgrind cannot be attached to from outside):"
	out ""
	out "| workload | never attached | attached, then detached | difference | per pair | libllgoheap.so functions in the loop |"
	out "|---|---:|---:|---:|---:|---:|"
	for wl in small mixed; do
		for cfg in none "$SHIM"; do
			f=$TMP/cg.attach.$wl.$(basename "$cfg")
			ATTACH_BENCH_WORKLOAD=$wl valgrind --tool=callgrind --callgrind-out-file="$f" \
				--toggle-collect=attach_bench_measure "$B/attach_bench" inproc "$cfg" \
				"$SOCK" 524288 "$cpairs" >/dev/null 2>"$f.log"
		done
		n=$(callgrind_ir "$TMP/cg.attach.$wl.none")
		d=$(callgrind_ir "$TMP/cg.attach.$wl.libllgoheap.so")
		shim_fns=$(callgrind_annotate --inclusive=no --threshold=100 \
			"$TMP/cg.attach.$wl.libllgoheap.so" 2>/dev/null |
			awk '/file:function/ { f = 1; getline; next } f && /^-+$/ { exit }
				f && /libllgoheap/ { n++ } END { print n + 0 }')
		out "| $wl | $n | $d | $((d - n)) | $(echo "$d $n $cpairs" | awk '{printf "%+.3f", ($1-$2)/$3}') | $shim_fns |"
	done
	out ""
	f=$TMP/cg.attach.mixed.libllgoheap.so
	out "Per-function self cost of the mixed run after the detach (callgrind_annotate --inclusive=no):"
	out ""
	out '```'
	callgrind_annotate --inclusive=no --threshold=100 "$f" 2>/dev/null |
		awk '/file:function/ { f = 1; getline; next } f && /^-+$/ { exit }
			f && NF { print; if (++n >= 8) exit }' |
		sed -E 's/^ *//; s#  [^ ]*:([^ :]+)#  \1#; s#\[[^]]*/([^]/]+)\]#[\1]#' | outf
	out '```'
	out ""
}

# ---- main ---------------------------------------------------------------------------------------
start_daemon
case "$MODE" in
bench)
	out "## make bench"
	out ""
	machine
	out "### Interleaved ns/op ($ROUNDS rounds; 5 warm-up + 61 measured batches of 250,000 per process)"
	out ""
	run_driver ours "$ROUNDS"
	callgrind_section
	callgrind_cxx_section
	slowpath_section
	otel_section
	verify_section
	lifecycle_section
	unwind_section
	memory_section
	inuse_section
	drop_section
	attach_section
	;;
attach)
	out "## llgo-heap attach and detach"
	out ""
	machine
	attach_section
	;;
lifecycle)
	out "## process lifecycle"
	out ""
	machine
	lifecycle_section
	;;
verify)
	out "## llgo-heap verify"
	out ""
	machine
	verify_section
	;;
otel)
	out "## OpenTelemetry's otel_memory probes"
	out ""
	machine
	otel_section
	;;
callgrind)
	out "## callgrind instruction counts"
	out ""
	machine
	callgrind_section
	callgrind_cxx_section
	;;
inuse)
	out "## bench.sh inuse"
	out ""
	machine
	inuse_section
	;;
peers)
	for f in "$JEMALLOC" "$TCMALLOC" "$B/go_alloc_bench"; do
		[ -e "$f" ] || { echo "bench.sh: missing $f (make bench-peers installs it)" >&2; exit 1; }
	done
	command -v heaptrack >/dev/null || { echo "bench.sh: heaptrack missing" >&2; exit 1; }
	out "## make bench-peers"
	out ""
	machine
	cfg=$(LD_PRELOAD=$JEMALLOC MALLOC_CONF=prof:true "$B/alloc_bench" --pairs 1 2>&1 >/dev/null | head -2 || true)
	[ -n "$cfg" ] && out "jemalloc with prof:true printed: $cfg"
	out "### Interleaved ns/op, ours and the peers ($PEER_ROUNDS rounds; slow profilers: $SLOW_ROUNDS rounds of 1 + 5 batches)"
	out ""
	"$B/alloc_driver" --bench "$B/alloc_bench" --go "$B/go_alloc_bench" --shim "$SHIM" \
		--passthrough "$B/libpassthrough.so" --socket "$SOCK" --tmp "$TMP" --rounds "$PEER_ROUNDS" --slow-rounds "$SLOW_ROUNDS" \
		--set peers --heaptrack "$(command -v heaptrack)" --jemalloc "$JEMALLOC" \
		--tcmalloc "$TCMALLOC" --pids "$TMP/pids.peers" >"$TMP/driver.peers" &
	drv=$!
	tail -f "$TMP/driver.peers" --pid "$drv" 2>/dev/null | grep --line-buffered '^round' >&2 || true
	wait "$drv"
	sed -n '/^###/,$p' "$TMP/driver.peers" | outf
	memory_section
	;;
unwind)
	out "## make bench-unwind"
	out ""
	machine
	unwind_section
	;;
*)
	echo "usage: bench.sh bench|callgrind|lifecycle|inuse|unwind|otel|attach|peers|deps OUT" >&2
	exit 2
	;;
esac
out "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews every figure)."
if [ -n "${RESULTS:-}" ]; then
	cp "$REPORT" "$RESULTS"
	echo "bench.sh: report copied to $RESULTS" >&2
fi
