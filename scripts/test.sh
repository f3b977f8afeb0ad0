#!/usr/bin/env bash
# test.sh: every check the project holds itself to. This is the README's
# test command and what CI runs. Needs root and /dev/fuse for the FUSE
# integration tests (in CI, with CI=true, they fail rather than skip).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [[ -n "$bad" ]]; then
	echo "gofmt would change:"; echo "$bad"; exit 1
fi
# go.mod and go.sum say exactly what the code imports (a direct import
# marked indirect, or a sum missing, fails here rather than in a user's
# build).
echo "== go mod tidy"
go mod tidy -diff
# The C library first: the Go tests that run programs on it use this build
# (libibverbs/libtest, the scripts). check-asan builds it again with ASan
# and UBSan into libibverbs/build-asan and runs the C tests against that.
echo "== libibverbs: make, make check, make check-asan"
make -C libibverbs
make -C libibverbs check
make -C libibverbs check-asan
# librdmacm links against the libibverbs above (ours at run time); its
# tests run against both builds (check-asan against libibverbs's ASan one).
echo "== librdmacm: make, make check, make check-asan"
make -C librdmacm
make -C librdmacm check
make -C librdmacm check-asan
export RDMAFS_LIBDIR=$PWD/libibverbs/build
echo "== go vet"
go vet ./...
# The lock annotations (lockcheck:guarded, internal/lockcheck): a guarded
# field touched without its lock, here or in the packages' tests, fails.
echo "== lockcheck"
go run ./internal/lockcheck/cmd/lockcheck ./device/... ./link/... ./fsnode/...
echo "== go test -race"
# Each script's time goes to a file, printed after the run (the longest
# first), so that what the suite's half hour is spent on stays in view.
export RDMAFS_SCRIPT_TIMES=$(mktemp)
trap 'rm -f "$RDMAFS_SCRIPT_TIMES"' EXIT
rc=0
go test -race -count=1 -timeout 20m ./... || rc=$?
echo "== script times"
sort -k2 -nr "$RDMAFS_SCRIPT_TIMES"
((rc == 0)) || exit $rc
# The engine's behavioural suite again: with the packets between a
# device's own QPs on the link chain instead of the direct path
# (-device.packets), and across RoCEv2, each test's device sending them
# through the wire to its own loopback address (-device.wire). Raw
# sockets: root.
echo "== device suite across the wire"
go test -race -count=1 -timeout 10m ./device -device.packets
go test -race -count=1 -timeout 10m ./device -device.wire
# And with several engines (Config.Engines): connected pairs on one engine
# as mount --engines runs them, then kept on different engines, so that
# every packet between them goes through the QPs' inboxes and every
# LOCAL_INV/BIND_MW/SEND_WITH_INV turn runs under the whole device lock.
echo "== device suite on several engines"
go test -race -count=1 -timeout 10m ./device -device.engines 2
go test -race -count=1 -timeout 10m ./device -device.engines 3 -device.apart
# Several engines on a wire device: the receive goroutine hands each
# datagram's turn to its QP's engine instead of running it.
go test -race -count=1 -timeout 10m ./device -device.wire -device.engines 3 -device.apart
