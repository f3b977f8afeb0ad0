#!/bin/sh
# The container's entry point (Dockerfile): mount a device at
# $RDMAFS_MOUNT with $RDMAFS_FLAGS, run the command, unmount at the end.
# rdmafs doctor runs first, so a container started without /dev/fuse or
# CAP_SYS_ADMIN says which, and what flag fixes it.
set -eu
mnt=${RDMAFS_MOUNT:-/mnt/rdma}
if ! doc=$(rdmafs doctor 2>&1); then
	echo "$doc" >&2
	echo "rdmafs-entry: run the container with --device /dev/fuse --cap-add SYS_ADMIN (or --privileged)" >&2
	exit 1
fi
mkdir -p "$mnt"
# shellcheck disable=SC2086
rdmafs mount $RDMAFS_FLAGS "$mnt"
trap 'rdmafs umount "$mnt"' EXIT
trap 'exit 130' INT TERM
"$@"
