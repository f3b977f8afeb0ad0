# rdmafs and its programs in one container. Build and run (docker or
# rootful podman; the flags are what FUSE passthrough needs, see
# docs/install.md, "The container"):
#
#   docker build -t rdmafs .
#   docker run --rm --device /dev/fuse --cap-add SYS_ADMIN rdmafs
#   docker run --rm --device /dev/fuse --cap-add SYS_ADMIN rdmafs \
#       sh -c 'rdmafs exec -- ibv_rc_pingpong & sleep 1; rdmafs exec -- ibv_rc_pingpong localhost'
#
# The entry point mounts a device at $RDMAFS_MOUNT (/mnt/rdma) with
# $RDMAFS_FLAGS, runs rdmafs doctor, then the command (default: ibv_devinfo
# on the device), and unmounts when the command ends.

# The build: Go for rdmafs, gcc and rdma-core's headers for the drop-in
# libraries (their export sets are taken from this stage's rdma-core, the
# same Debian release as the runtime stage's).
FROM golang:1.26-bookworm AS build
RUN apt-get update -q && \
    apt-get install -y -q --no-install-recommends gcc make binutils libibverbs-dev librdmacm-dev && \
    rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make install DESTDIR=/out PREFIX=/usr/local

# The runtime: rdma-core's libraries and the programs to run on rdmafs.
FROM debian:bookworm-slim
RUN apt-get update -q && \
    apt-get install -y -q --no-install-recommends \
        libibverbs1 librdmacm1 ibverbs-utils rdmacm-utils perftest iproute2 && \
    rm -rf /var/lib/apt/lists/*
COPY --from=build /out/usr/local /usr/local
COPY dist/container-entry.sh /usr/local/bin/rdmafs-entry
ENV RDMAFS_MOUNT=/mnt/rdma RDMAFS_FLAGS=
ENTRYPOINT ["/usr/local/bin/rdmafs-entry"]
CMD ["rdmafs", "exec", "--", "ibv_devinfo"]
