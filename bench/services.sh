#!/bin/sh
# SPDX-License-Identifier: MIT
#
# services.sh: `make bench-services`, the cost of profiling real servers under load. Debian's
# redis-server (redis-benchmark GET, SET, LPUSH, 50 clients), nginx (wrk, a static file),
# memcached (kv_load, 50 connections) and PostgreSQL 15 (pgbench -S and -N, scale 2) each run
# three ways, interleaved within every round: no shim; the shim at the default rate while
# this script takes a snapshot of every attached process each SNAP_EVERY (10) seconds, as a
# scraper would; the shim at rate 4096. Reported: the throughput and p99 latency of each
# workload as ratios against no shim (the median of the per-round ratios), llgo-heapd's CPU
# (percent of one core, over the load) and RSS, and the top 5 sites of each server's profile
# at the default rate.
#
#   sh services.sh run OUT     the benchmark (installs the servers when missing)
#   sh services.sh deps OUT    install the servers and clients only
#
# OUT is the absolute build folder (bin/, lib/, bench/). Servers listen on loopback only, on
# ports this script checks are free, are started here and stopped by their pids; every
# load is bounded in time. Knobs: ROUNDS (3), SECONDS_PER_RUN (20), SNAP_EVERY (10),
# SERVICES (redis nginx memcached postgres), RESULTS (a file that receives the report).
set -eu

MODE=${1:?usage: services.sh run|deps OUT}
OUT=${2:?usage: services.sh run|deps OUT}
SHIM=$OUT/lib/libllgoheap.so
HEAPD=$OUT/bin/llgo-heapd
CLI=$OUT/bin/llgo-heap
KV=$OUT/bench/kv_load
ROUNDS=${ROUNDS:-3}
SECS=${SECONDS_PER_RUN:-20}
SNAP_EVERY=${SNAP_EVERY:-10}
SERVICES=${SERVICES:-redis nginx memcached postgres}
PGBIN=/usr/lib/postgresql/15/bin
PKGS="redis-server redis-tools nginx-light memcached postgresql-15 wrk"

install_missing() {
	missing=""
	for p in $PKGS; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' \
			|| missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	echo "services: installing$missing"
	# the packages' own services must not start: the benchmark runs its own servers
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing >/dev/null \
		|| { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -q $missing >/dev/null; }
	rm -f /usr/sbin/policy-rc.d
}

if [ "$(id -u)" != 0 ]; then
	echo "services.sh: run as root (PostgreSQL runs as its own user, nginx's worker as nobody)" >&2
	exit 1
fi
install_missing
[ "$MODE" = deps ] && exit 0
for f in "$SHIM" "$HEAPD" "$CLI" "$KV"; do
	[ -e "$f" ] || { echo "services.sh: missing $f (run make first)" >&2; exit 1; }
done

TMP=$(mktemp -d /tmp/llgo-services.XXXXXX)
chmod 755 "$TMP" # the servers' own users reach the daemon's socket and their folders
SOCK=$TMP/heapd.sock
DPID=""
SPID=""   # the server being measured (its main process)
SNAPPID=""
REPORT=$TMP/report.md
DATA=$TMP/results.tsv # workload config round throughput p99_us cpu_pct rss_kib

stop_pid() { # pid [signal]
	[ -n "$1" ] || return 0
	kill "-${2:-TERM}" "$1" 2>/dev/null || true
	i=0
	while kill -0 "$1" 2>/dev/null && [ $i -lt 200 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	kill -KILL "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

cleanup() {
	stop_pid "$SNAPPID"
	stop_pid "$SPID" INT
	stop_pid "$DPID"
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

out() { printf '%s\n' "$*" | tee -a "$REPORT"; }

port_free() { ! ss -Hltn "sport = :$1" | grep -q .; }
pick_port() { # base
	p=$1
	while ! port_free "$p"; do p=$((p + 1)); done
	echo "$p"
}

"$HEAPD" --socket "$SOCK" --foreground --keep-exited 64 >"$TMP/heapd.log" 2>&1 &
DPID=$!
i=0
while [ ! -S "$SOCK" ]; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 "$DPID" 2>/dev/null; then
		echo "services.sh: llgo-heapd did not start:" >&2
		cat "$TMP/heapd.log" >&2
		exit 1
	fi
	sleep 0.05
done

# CPU ticks (utime + stime) of a pid
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
HZ=$(getconf CLK_TCK)

# The environment of a server in one configuration: none, default, r4096.
shim_env() { # config
	case $1 in
	none) echo "LLGO_BENCH_CONFIG=none" ;;
	default) echo "LD_PRELOAD=$SHIM LLGO_HEAP_SOCKET=$SOCK" ;;
	r4096) echo "LD_PRELOAD=$SHIM LLGO_HEAP_SOCKET=$SOCK LLGO_HEAP_RATE=4096" ;;
	esac
}

# Attached processes that are still running, as "pid sampled" lines.
attached() {
	"$CLI" list --socket "$SOCK" 2>/dev/null | awk '
		NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
		$1 ~ /^[0-9]+$/ && $col["STATE"] == "live" { print $1, $col["SAMPLED"] }'
}

# Every session the daemon keeps (exited ones too), as "pid sampled" lines.
all_sessions() {
	"$CLI" list --socket "$SOCK" 2>/dev/null | awk '
		NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
		$1 ~ /^[0-9]+$/ { print $1, $col["SAMPLED"] }'
}

# Every SNAP_EVERY seconds, a pprof snapshot of every attached process (to a file, as a
# scraper keeps it).
snap_loop() {
	while :; do
		sleep "$SNAP_EVERY"
		attached | while read -r pid _; do
			"$CLI" snapshot "$pid" --socket "$SOCK" -o "$TMP/snap.pb.gz" >/dev/null 2>&1 || true
		done
	done
}

# ---- the servers: start_X PORT CONFIG (sets SPID), load_X PORT (prints "tput p99_us" lines)

start_redis() {
	env $(shim_env "$2") redis-server --port "$1" --bind 127.0.0.1 --save '' \
		--appendonly no --daemonize no --dir "$TMP/redis" --logfile "$TMP/redis.log" &
	SPID=$!
	until redis-cli -p "$1" ping >/dev/null 2>&1; do sleep 0.05; done
}
load_redis() { # port -> one line per test: name tput p99
	n=$(( SECS * ${REDIS_OPS_PER_SEC:-25000} / 3 ))
	# --csv: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",
	# "p95_latency_ms","p99_latency_ms","max_latency_ms"
	redis-benchmark -p "$1" -c 50 -n "$n" -r 100000 -d 64 -t get,set,lpush --csv 2>/dev/null |
		awk -F, 'NR > 1 { for (i = 1; i <= NF; i++) gsub(/"/, "", $i)
			t = $1; sub(/ .*/, "", t); print "redis-" tolower(t), $2, $7 * 1000 }'
}

start_nginx() {
	mkdir -p "$TMP/nginx/www" "$TMP/nginx/logs"
	head -c 4096 /dev/urandom | base64 >"$TMP/nginx/www/page.html"
	chmod -R a+rX "$TMP/nginx"
	cat >"$TMP/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/logs/error.log;
events { worker_connections 1024; }
http {
	access_log off;
	sendfile on;
	client_body_temp_path $TMP/nginx/tmp;
	proxy_temp_path $TMP/nginx/tmp;
	fastcgi_temp_path $TMP/nginx/tmp;
	uwsgi_temp_path $TMP/nginx/tmp;
	scgi_temp_path $TMP/nginx/tmp;
	server { listen 127.0.0.1:$1; root $TMP/nginx/www; }
}
EOF
	env $(shim_env "$2") nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/logs/error.log" &
	SPID=$!
	until curl -fs "http://127.0.0.1:$1/page.html" >/dev/null 2>&1; do sleep 0.05; done
}
load_nginx() {
	wrk -t1 -c50 -d"${SECS}s" --latency "http://127.0.0.1:$1/page.html" 2>/dev/null | awk '
		/^ +99%/ { v = $2; u = v; sub(/[a-z]+$/, "", v); sub(/^[0-9.]+/, "", u)
			   p = v * (u == "ms" ? 1000 : u == "s" ? 1000000 : 1) }
		/^Requests\/sec:/ { r = $2 }
		END { print "nginx-static", r, p }'
}

start_memcached() {
	env $(shim_env "$2") memcached -u nobody -l 127.0.0.1 -p "$1" -U 0 -t 1 -m 64 -c 1024 &
	SPID=$!
	until "$KV" --port "$1" --conns 1 --seconds 1 --keys 1 >/dev/null 2>&1; do sleep 0.05; done
}
load_memcached() {
	"$KV" --port "$1" --conns 50 --seconds "$SECS" | awk '
		{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
		END { print "memcached-getset", v["ops_per_sec"], v["p99_us"] }'
}

PGDATA=$TMP/pg/data
pg_init() {
	mkdir -p "$TMP/pg/sock"
	chown -R postgres:postgres "$TMP/pg"
	setpriv --reuid=postgres --regid=postgres --init-groups -- \
		"$PGBIN/initdb" -D "$PGDATA" --auth=trust -U postgres >"$TMP/pg/initdb.log" 2>&1
}
start_postgres() {
	[ -d "$PGDATA" ] || pg_init
	env $(shim_env "$2") setpriv --reuid=postgres --regid=postgres --init-groups -- \
		"$PGBIN/postgres" -D "$PGDATA" -p "$1" -k "$TMP/pg/sock" -c listen_addresses=127.0.0.1 \
		-c shared_buffers=64MB -c synchronous_commit=off -c max_connections=40 \
		>"$TMP/pg/server.log" 2>&1 &
	SPID=$!
	until "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$1"; do sleep 0.1; done
	if [ ! -e "$TMP/pg/initialized" ]; then
		"$PGBIN/pgbench" -h 127.0.0.1 -p "$1" -U postgres -i -s 2 -q postgres >/dev/null 2>&1
		: >"$TMP/pg/initialized"
	fi
}
pg_run() { # port name flags: pgbench's per-transaction log gives the exact p99
	rm -rf "$TMP/pg/log" && mkdir -p "$TMP/pg/log"
	tps=$("$PGBIN/pgbench" -h 127.0.0.1 -p "$1" -U postgres -c 10 -j 2 -T $((SECS / 2)) $3 \
		-l --log-prefix="$TMP/pg/log/tx" postgres 2>/dev/null |
		awk '/^tps = / { print $3; exit }')
	p99=$(cat "$TMP/pg/log"/tx* | awk '{ print $3 }' | sort -n |
		awk '{ a[NR] = $1 } END { k = int(NR * 0.99); if (k < NR * 0.99) k++; print (NR ? a[k] : 0) }')
	echo "$2 $tps $p99"
}
load_postgres() {
	pg_run "$1" pgbench-select -S
	pg_run "$1" pgbench-nosync -N
}

# ---- one run: a server in one configuration, under its load --------------------------------

run_one() { # service config round
	port=$(pick_port "$(case $1 in redis) echo 26379 ;; nginx) echo 28080 ;;
		memcached) echo 21211 ;; postgres) echo 25432 ;; esac)")
	mkdir -p "$TMP/redis"
	all_sessions >"$TMP/before"
	"start_$1" "$port" "$2"
	sleep 1 # the server settles; under the shim its processes have attached
	SNAPPID=""
	[ "$2" = default ] && { snap_loop & SNAPPID=$!; }
	t0=$(ticks "$DPID")
	w0=$(date +%s%N)
	"load_$1" "$port" >"$TMP/load.out"
	w1=$(date +%s%N)
	t1=$(ticks "$DPID")
	stop_pid "$SNAPPID"
	SNAPPID=""
	cpu=$(awk -v t="$((t1 - t0))" -v hz="$HZ" -v w="$((w1 - w0))" \
		'BEGIN { printf "%.2f", (w > 0 ? 100 * t / hz / (w / 1e9) : 0) }')
	rss=$(rss_kib "$DPID")
	if [ "$2" = default ] && [ "$3" = 1 ]; then
		# the top sites of the busiest process of this run (forked workers and backends
		# included, live or exited: pids the daemon did not list before the run)
		# (read with getline: NR == FNR would take every line for old when the list
		# before was empty, as it is before the first service's first shim run)
		top=$(all_sessions | awk -v before="$TMP/before" '
			BEGIN { while ((getline l < before) > 0) { split(l, f, " "); old[f[1]] = 1 } }
			!($1 in old)' | sort -k2,2nr | head -1 | cut -d' ' -f1)
		if [ -n "$top" ]; then
			"$CLI" top "$top" --socket "$SOCK" -n 5 >"$TMP/top-$1.txt" 2>&1 || true
		fi
	fi
	stop_pid "$SPID" INT
	SPID=""
	while read -r name tput p99; do
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$2" "$3" "$tput" "$p99" "$cpu" "$rss" >>"$DATA"
	done <"$TMP/load.out"
}

out "# make bench-services"
out ""
out "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores, \
Debian $(cat /etc/debian_version), $(uname -r); $(date -u '+%Y-%m-%d %H:%M UTC'); \
ROUNDS=$ROUNDS SECONDS_PER_RUN=$SECS SNAP_EVERY=$SNAP_EVERY"
out "Servers: $(redis-server --version | awk '{print $1, $2, $3}'); $(nginx -v 2>&1 | sed 's/.*: //'); \
memcached $(memcached -V | awk '{print $2}'); PostgreSQL $("$PGBIN/postgres" -V | awk '{print $3}')"
out ""

: >"$DATA"
r=1
while [ $r -le "$ROUNDS" ]; do
	for s in $SERVICES; do
		# the order of the three configurations turns with the round
		case $((r % 3)) in
		1) order="none default r4096" ;;
		2) order="default r4096 none" ;;
		0) order="r4096 none default" ;;
		esac
		for c in $order; do
			echo "services: round $r/$ROUNDS $s $c" >&2
			run_one "$s" "$c" "$r"
		done
	done
	r=$((r + 1))
done

out "| workload | no shim: ops/s | p99 µs | default rate: ops/s ratio | p99 ratio | daemon CPU % | daemon RSS MiB | rate 4096: ops/s ratio | p99 ratio | daemon CPU % |"
out "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
awk -F'\t' '
	{ key = $1 SUBSEP $2 SUBSEP $3; tput[key] = $4; p99[key] = $5; cpu[key] = $6; rss[key] = $7
	  if (!($1 in seen)) { seen[$1] = 1; order[++nw] = $1 }
	  if ($3 > nr) nr = $3 }
	function median(a, n,   i, j, t) {
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	function stat(w, c, what,   r, n, a, b, v) {
		n = 0
		for (r = 1; r <= nr; r++) {
			b = w SUBSEP "none" SUBSEP r; v = w SUBSEP c SUBSEP r
			if (!(v in tput) || !(b in tput)) continue
			if (what == "tput" && tput[b] > 0) a[++n] = tput[v] / tput[b]
			else if (what == "p99" && p99[b] > 0) a[++n] = p99[v] / p99[b]
			else if (what == "cpu") a[++n] = cpu[v]
			else if (what == "rss") a[++n] = rss[v] / 1024
			else if (what == "base_tput") a[++n] = tput[b]
			else if (what == "base_p99") a[++n] = p99[b]
		}
		return n ? median(a, n) : -1
	}
	END {
		for (i = 1; i <= nw; i++) {
			w = order[i]
			printf "| %s | %.0f | %.0f | %.3f | %.3f | %.2f | %.1f | %.3f | %.3f | %.2f |\n", w,
				stat(w, "none", "base_tput"), stat(w, "none", "base_p99"),
				stat(w, "default", "tput"), stat(w, "default", "p99"),
				stat(w, "default", "cpu"), stat(w, "default", "rss"),
				stat(w, "r4096", "tput"), stat(w, "r4096", "p99"), stat(w, "r4096", "cpu")
		}
	}' "$DATA" | tee -a "$REPORT"
out ""
out "Ratios are medians over rounds of (shim run / no-shim run of the same round); CPU is the"
out "daemon's user+system time over the load, in percent of one core."
out ""
for s in $SERVICES; do
	if [ -s "$TMP/top-$s.txt" ]; then
		out "Top 5 sites, $s at the default rate (round 1):"
		out '```'
		tee -a "$REPORT" <"$TMP/top-$s.txt"
		out '```'
	fi
done
out "Raw rows (workload config round ops/s p99_us daemon_cpu% daemon_rss_kib):"
out '```'
tee -a "$REPORT" <"$DATA"
out '```'
[ -n "${RESULTS:-}" ] && cp "$REPORT" "$RESULTS"
exit 0
