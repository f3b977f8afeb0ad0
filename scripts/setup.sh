#!/usr/bin/env bash
# setup.sh: the Debian packages the C library and the tests that run real
# programs need, installed only when missing (so a prepared machine needs no
# network): a compiler and binutils, the system's <infiniband/verbs.h> and
# libibverbs.so.1 (whose export set ours reproduces), and the unmodified
# programs run on it. Needs root for apt-get. Used by .ci/run, test.sh and
# the scripts that run C programs.
set -euo pipefail
pkgs=(gcc make binutils libibverbs-dev ibverbs-utils perftest python3-pyverbs
	rdma-core librdmacm-dev rdmacm-utils ucx-utils libfabric-bin iproute2
	qperf infiniband-diags openmpi-bin libopenmpi-dev mpich libmpich-dev iperf3)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
		missing+=("$p")
done
((${#missing[@]})) || exit 0
if ((EUID != 0)); then
	echo "setup.sh: missing ${missing[*]}; run as root to install them" >&2
	exit 1
fi
echo "== apt-get install ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
