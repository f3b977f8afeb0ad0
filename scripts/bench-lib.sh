# bench-lib.sh: what the benchmark scripts share (bench-vs-peers.sh,
# bench-wire.sh). Source it after setting repo, work, results (a TSV file of
# ROUND NAME VALUE), UCX_TLS_LIST, UCX_PORT, UCX_TIMEOUT, and DPID (the
# daemons' pids, space-separated) before others_mark. ucx leaves the pid of
# a running ucx_perftest server in ucx_srv for the caller's cleanup.

# bench_teardown: what an EXIT trap does besides unmounting: stops a
# ucx_perftest server an interrupted run left, and copies the results and
# raw outputs to $KEEP when it is set.
bench_teardown() {
	if [[ -n "${ucx_srv:-}" ]] && kill -0 "$ucx_srv" 2>/dev/null; then
		kill "$ucx_srv" 2>/dev/null || true
		wait "$ucx_srv" 2>/dev/null || true
	fi
	if [[ -n "${KEEP:-}" ]]; then
		mkdir -p "$KEEP"
		cp -r "$work"/*.tsv "$work"/*.txt "$work"/*.log "$KEEP"/ 2>/dev/null || true
	fi
}

die() {
	echo "FAIL: $*" >&2
	exit 1
}

# busy: the share of the CPUs others used over half a second (the load
# average counts processes stuck in D state, which use none).
busy() {
	local a b
	a=$(awk '/^cpu / { print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8 }' /proc/stat)
	sleep 0.5
	b=$(awk '/^cpu / { print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8 }' /proc/stat)
	awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%.0f%%", 100 * (y[1] - x[1]) / (y[2] - x[2] + 1e-9) }'
}

# tools_and_machine: builds rdmafs unless $RDMAFS names one, installs
# ucx-utils when ucx_perftest is missing, prints the machine.
tools_and_machine() {
	if [[ -z "${RDMAFS:-}" ]]; then
		RDMAFS=$work/rdmafs
		(cd "$repo" && go build -o "$RDMAFS" ./cmd/rdmafs)
	fi
	if ! command -v ucx_perftest >/dev/null 2>&1; then
		echo "# installing ucx-utils (ucx_perftest)"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ucx-utils >/dev/null
	fi

	echo "# machine"
	echo "  nproc:  $(nproc)"
	echo "  cpu:    $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
	echo "  kernel: $(uname -r)"
	echo "  go:     $(go version 2>/dev/null | awk '{print $3}')"
	echo "  ucx:    $(ucx_info -v 2>/dev/null | sed -n 's/^# Version //p' | head -n 1)"
	echo "  rdmafs: $(cd "$repo" && git describe --always --dirty 2>/dev/null || echo unknown)"
	echo "  busy:   $(busy) of the CPUs busy before the runs (load average $(cut -d' ' -f1-3 /proc/loadavg))"
}

# jnum KEY: a number out of the JSON line on stdin.
jnum() { grep -o "\"$1\":[-0-9.e+]*" | head -n 1 | cut -d: -f2; }

# record ROUND NAME VALUE
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$results"; }

# rb ROUND NAME KEY ARGS...: an rdmafs bench run, KEY out of its JSON (the
# whole JSON line stays in RB_OUT).
rb() {
	local round=$1 name=$2 key=$3 out
	shift 3
	out=$("$RDMAFS" bench --json "$@") || die "rdmafs bench $*"
	RB_OUT=$out
	echo "$out" >>"$work/rdmafs-bench.txt"
	grep -q '"check":"ok"' <<<"$out" || die "rdmafs bench $*: data check: $out"
	record "$round" "$name" "$(jnum "$key" <<<"$out")"
	# Doorbells and syscalls of the timed phase, per WR, for the record.
	record "$round" "$name.doorbells_per_wr" "$(awk -v d="$(jnum dev_doorbells <<<"$out")" -v n="$(jnum wrs <<<"$out")" 'BEGIN{printf "%.6f", d/(n>0?n:1)}')"
}

# ucx TEST SIZE N: one ucx_perftest run (a fresh server each time); prints
# the CSV line iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,
# overall_bw,avg_mr,overall_mr, or nothing when the run did not finish in
# UCX_TIMEOUT seconds (a ping-pong of two spinning processes crawls when
# other processes want the same two CPUs).
ucx() {
	local test=$1 size=$2 n=$3 out="" i rc
	# The server is bounded too: a client that never connects must not
	# leave it behind.
	UCX_TLS=$UCX_TLS_LIST timeout $((2 * UCX_TIMEOUT + 10)) ucx_perftest -p "$UCX_PORT" >>"$work/ucx-server.log" 2>&1 &
	ucx_srv=$!
	for i in $(seq 1 50); do
		rc=0
		out=$(UCX_TLS=$UCX_TLS_LIST timeout "$UCX_TIMEOUT" ucx_perftest 127.0.0.1 -p "$UCX_PORT" -t "$test" -s "$size" -n "$n" -f -v 2>>"$work/ucx-client.log") || rc=$?
		((rc == 0)) && break
		out=""
		if ((rc == 124)); then
			echo "  (ucx_perftest -t $test -s $size: no result in ${UCX_TIMEOUT}s, skipped)" >&2
			break
		fi
		kill -0 "$ucx_srv" 2>/dev/null || break
		sleep 0.1 # the server is not listening yet
	done
	kill "$ucx_srv" 2>/dev/null || true
	wait "$ucx_srv" 2>/dev/null || true
	ucx_srv=""
	[[ -n "$out" ]] || return 0
	echo "$out" >>"$work/ucx-perftest.txt"
	tail -n 1 <<<"$out"
}

# ru ROUND NAME FIELD TEST SIZE N: FIELD (1-based) of the CSV, scaled to
# Mpps for message rates.
# Also NAME.cpu_per_gb: the CPU seconds of both ucx_perftest processes
# (this shell's children's, from times) per GB (1e9 bytes) moved.
ru() {
	local round=$1 name=$2 field=$3 line v k0
	kids_ticks
	k0=$KT
	line=$(ucx "$4" "$5" "$6")
	[[ -n "$line" ]] || return 0
	kids_ticks
	record "$round" "$name.cpu_per_gb" "$(awk -v t=$((KT - k0)) -v hz="$(getconf CLK_TCK)" -v b="$(($5 * $6))" 'BEGIN{printf "%.3f", t / hz / (b / 1e9)}')"
	v=$(cut -d, -f"$field" <<<"$line")
	if ((field == 8)); then
		v=$(awk -v v="$v" 'BEGIN{printf "%.6f", v/1e6}')
	fi
	record "$round" "$name" "$v"
}

# others_mark / others_since: how much CPU everything but this script's
# children and the daemons used since the mark, as a share of both CPUs:
# /proc/stat's busy ticks less the children's (bash's times) and the
# daemon's (/proc/PID/stat).
cpu_ticks() { awk '/^cpu / { print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8 }' /proc/stat; }
# kids_ticks sets KT; times must run in this shell, not in a $(...) subshell.
kids_ticks() {
	times >"$work/times"
	KT=$(tail -n 1 "$work/times" | awk -v hz="$(getconf CLK_TCK)" '{ t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); t += a[1] * 60 + a[2] } printf "%d", t * hz }')
}
# daemon_ticks: utime+stime of the daemons whose pids $DPID lists.
daemon_ticks() {
	local p
	for p in $DPID; do cat "/proc/$p/stat"; done |
		awk '{ i = index($0, ") "); split(substr($0, i + 2), f, " "); t += f[12] + f[13] } END { print t + 0 }'
}
others_mark() { om_cpu=$(cpu_ticks); kids_ticks; om_kids=$KT; om_d=$(daemon_ticks); }
# others_since sets OTHERS.
others_since() {
	local now d
	now=$(cpu_ticks); kids_ticks; d=$(daemon_ticks)
	OTHERS=$(awk -v a="$om_cpu" -v b="$now" -v k0="$om_kids" -v k1="$KT" -v d0="$om_d" -v d1="$d" 'BEGIN {
		split(a, x, " "); split(b, y, " ")
		o = (y[1] - x[1]) - (k1 - k0) - (d1 - d0); if (o < 0) o = 0
		printf "%.0f%%", 100 * o / (y[2] - x[2] + 1e-9) }')
}

# median NAME: the median of a series over the rounds.
median() {
	awk -F'\t' -v k="$1" '$2 == k { print $3 }' "$results" | sort -g |
		awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit } if (NR % 2) print v[(NR + 1) / 2]; else printf "%.6g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# range NAME: min..max over the rounds.
range() {
	awk -F'\t' -v k="$1" '$2 == k { print $3 }' "$results" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.3f..%.3f", lo, hi }'
}
# ratios A B: the per-round ratios A/B, their median and range.
ratios() {
	awk -F'\t' -v a="$1" -v b="$2" '$2 == a { x[$1] = $3 } $2 == b { y[$1] = $3 } END { for (r in x) if (r in y && y[r] > 0) printf "%.4f\n", x[r] / y[r] }' "$results" | sort -g |
		awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan nan nan"; exit } m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f %.3f %.3f\n", m, v[1], v[NR] }'
}
verdict() { # RATIO OP LIMIT
	awk -v r="$1" -v op="$2" -v l="$3" 'BEGIN { ok = (op == ">=") ? r >= l : r <= l; print ok ? "met" : "MISSED" }'
}
row() { # LABEL A B OP LIMIT
	local m lo hi
	read -r m lo hi < <(ratios "$2" "$3")
	if [[ -n "${4:-}" ]]; then
		printf '  %-48s %8s %18s %10s %8s\n' "$1" "$m" "[$lo..$hi]" "$4 $5" "$(verdict "$m" "$4" "$5")"
	else
		printf '  %-48s %8s %18s %10s %8s\n' "$1" "$m" "[$lo..$hi]" "-" "-"
	fi
}
