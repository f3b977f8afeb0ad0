#!/usr/bin/env bash
# bench-ab.sh: one rdmafs against another (a change against its base), in
# the same run, on a machine too noisy for figures of two runs to compare.
#
# Mounts a device with each binary's daemon and runs ROUNDS rounds, each
# alternating, measurement by measurement, base and new rdmafs bench runs
# (WRITE and READ 64 KiB bandwidth, WRITE 8 B rate and latency,
# FETCH_AND_ADD rate) with memcpy of 64 KiB and the cross-core limit
# (bench/c/xcore.c) beside them; then prints the medians, each binary's
# ratios to memcpy and the limit, and new/base per measurement.
#
#   sudo BASE=/tmp/base/rdmafs scripts/bench-ab.sh    # new: built from this tree
#   sudo BASE=... NEW=... ROUNDS=7 DUR=1 scripts/bench-ab.sh
#   KEEP=/tmp/ab-out ...   # keep the per-round results and raw outputs
#
# Build the base with e.g. git worktree add /tmp/base main && (cd /tmp/base
# && go build -o /tmp/base/rdmafs ./cmd/rdmafs). Needs root, /dev/fuse, Go
# and a C compiler. Takes about ROUNDS * 12 * DUR s.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DUR=${DUR:-1}
[[ -n "${BASE:-}" && -x "$BASE" ]] || {
	echo "BASE must name the base rdmafs binary" >&2
	exit 2
}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
source "$here/bench-lib.sh"
work=$(mktemp -d /tmp/rdmafs-ab.XXXXXX)
results=$work/results.tsv
: >"$results"
mounted=()

cleanup() {
	local rc=$? m
	for m in "${mounted[@]}"; do
		"$NEW" umount "$m" 2>/dev/null || true
	done
	if [[ -n "${KEEP:-}" ]]; then
		mkdir -p "$KEEP"
		cp "$results" "$work"/*.txt "$KEEP"/ 2>/dev/null || true
	fi
	rm -rf "$work"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -z "${NEW:-}" ]]; then
	NEW=$work/rdmafs
	(cd "$repo" && go build -o "$NEW" ./cmd/rdmafs)
fi
XCORE=$work/xcore
cc -O2 -g -Wall -Wextra -Werror -pthread -I"$repo/libibverbs" -o "$XCORE" "$repo/bench/c/xcore.c"

for side in base new; do
	mkdir -p "$work/$side"
	bin=$BASE
	[[ $side == new ]] && bin=$NEW
	"$bin" mount --log "$work/$side.log" "$work/$side"
	mounted+=("$work/$side")
done
echo "# base $BASE, new $NEW; $ROUNDS rounds of ${DUR}s runs, CPUs $(busy) busy before them"

# ab ROUND NAME KEY ARGS...: the base's run and the new one's, on their
# own mounts; which goes first alternates with the round.
ab() {
	local r=$1 name=$2 key=$3 side
	shift 3
	local order=(base new)
	((r % 2 == 0)) && order=(new base)
	for side in "${order[@]}"; do
		if [[ $side == base ]]; then
			RDMAFS=$BASE rb "$r" "base_$name" "$key" "$@" "$work/base"
		else
			RDMAFS=$NEW rb "$r" "new_$name" "$key" "$@" "$work/new"
		fi
	done
}
rx() {
	local out
	out=$(timeout $((DUR + 30)) "$XCORE" "$4" "$DUR") || die "xcore $4 $DUR"
	record "$1" "$2" "$(jnum "$3" <<<"$out")"
}

for r in $(seq 1 "$ROUNDS"); do
	printf '  round %d ' "$r"
	RDMAFS=$NEW rb "$r" memcpy_64k bw_avg_mbs --op memcpy -s 65536 -D "${DUR}s"
	ab "$r" write_bw_64k bw_avg_mbs --op write -s 65536 -D "${DUR}s"
	ab "$r" read_bw_64k bw_avg_mbs --op read -s 65536 -D "${DUR}s"
	printf '.'
	ab "$r" write_bw_8 msg_rate_mpps --op write -s 8 -D "${DUR}s"
	rx "$r" xcore_bw_8 msg_rate_mpps bw
	printf '.'
	ab "$r" write_lat_8 t_typical_us --op write --mode lat -s 8 -D "${DUR}s"
	rx "$r" xcore_lat_8 t_typical_us lat
	printf '.'
	ab "$r" fetch_add_bw msg_rate_mpps --op fetch_add -D "${DUR}s"
	echo ". done"
done

echo
echo "# medians over $ROUNDS rounds (min..max in brackets)"
for k in memcpy_64k base_write_bw_64k new_write_bw_64k base_read_bw_64k new_read_bw_64k \
	base_write_bw_8 new_write_bw_8 xcore_bw_8 base_write_lat_8 new_write_lat_8 xcore_lat_8 \
	base_fetch_add_bw new_fetch_add_bw; do
	printf '  %-24s %14.3f %24s\n' "$k" "$(median "$k")" "[$(range "$k")]"
done
echo
echo "# ratios (median of the per-round ratios, [min..max])"
printf '  %-48s %8s %18s %10s %8s\n' "ratio" "median" "range" "target" "result"
for side in base new; do
	row "$side: WRITE 64K bw / memcpy 64K" "${side}_write_bw_64k" memcpy_64k ">=" 0.85
	row "$side: READ 64K bw / memcpy 64K" "${side}_read_bw_64k" memcpy_64k ">=" 0.85
	row "$side: WRITE 8B rate / cross-core limit" "${side}_write_bw_8" xcore_bw_8
	row "$side: WRITE 8B t_typical / cross-core limit" "${side}_write_lat_8" xcore_lat_8
	row "$side: FETCH_AND_ADD rate / cross-core limit" "${side}_fetch_add_bw" xcore_bw_8
done
for k in write_bw_64k read_bw_64k write_bw_8 write_lat_8 fetch_add_bw; do
	row "new/base: $k" "new_$k" "base_$k"
done
