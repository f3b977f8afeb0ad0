#!/usr/bin/env bash
# rxe-cm-guest.sh HARNESS OUT: the rxe harness's guest with RDMA CM modes,
# without changing the harness. OUT (a work directory for run-guest.sh's
# WORK) gets vmlinuz (a link) and initrd.cpio: the harness's initramfs with
# one more cpio archive appended (the kernel unpacks archives in a row) that
# holds /init-cm, the harness's guest-init.sh with these modes added before
# its "shell" case; boot it with rdinit=/init-cm:
#   rpingserver   loop: rping -s -a IP -C ITERS -S SIZE -v
#   rpingclient   rping -c -a PEER -C ITERS -S SIZE -v (retried while REJECTED/UNREACHABLE)
#   perfRserver   loop: $PERF -d rxe0 -i 1 -n ITERS -F -R (connections by rdma_cm)
#   perfRclient   $PERF -d rxe0 -i 1 -n ITERS -F -R PEER
#   cmtimeserver  loop: cmtime -b IP
#   cmtimeclient  cmtime -s PEER -c ITERS (ITERS connections)
#   udaddyserver  loop: udaddy -b IP -C ITERS (UD, SIDR_REQ/SIDR_REP)
#   udaddyclient  udaddy -s PEER -C ITERS (retried while it fails)
#   rstreamserver loop: rstream -b IP -S SIZE -C ITERS -T b -T v (rsockets)
#   rstreamclient rstream -s PEER -S SIZE -C ITERS -T b -T v (retried while it fails)
#   mckeyrecv, mckeysend: multicast (their block below)
# Every mode logs "MODE rc=N" as the harness's modes do.
set -euo pipefail
H=$1 OUT=$2
[[ -e /tmp/rxe/initrd.cpio ]] || { echo "no /tmp/rxe/initrd.cpio: run $H/build-guest.sh" >&2; exit 1; }
mkdir -p "$OUT/ov"
ln -sf /tmp/rxe/vmlinuz "$OUT/vmlinuz"
cat >"$OUT/modes.sh" <<'MODES'
  rpingserver)
    while true; do log "rping server"; t0=$(date +%s%N); timeout 300 rping -s -a $IP -C $ITERS -S $SIZE -v; rc=$?; t1=$(date +%s%N); log "rping server rc=$rc wall_ms=$(( (t1 - t0) / 1000000 ))"; done ;;
  rpingclient)
    log "rping client -> $PEER"
    for i in $(seq 60); do
      t0=$(date +%s%N); timeout 120 rping -c -a $PEER -C $ITERS -S $SIZE -v >/tmp/client.out 2>&1; rc=$?; t1=$(date +%s%N)
      grep -q "REJECTED\|UNREACHABLE\|ADDR_ERROR" /tmp/client.out || break
      sleep 1
    done
    cat /tmp/client.out
    log "rping client rc=$rc wall_ms=$(( (t1 - t0) / 1000000 ))" ;;
  perfRserver)
    while true; do log "$PERF -R server"; $PERF -d rxe0 -i 1 -n $ITERS -F -R; log "$PERF -R server rc=$?"; done ;;
  perfRclient)
    log "$PERF -R client -> $PEER"
    for i in $(seq 60); do
      t0=$(date +%s%N); timeout 300 $PERF -d rxe0 -i 1 -n $ITERS -F -R $PEER >/tmp/client.out 2>&1; rc=$?; t1=$(date +%s%N)
      grep -qi "REJECTED\|UNREACHABLE\|Unable to perform rdma_client" /tmp/client.out || break
      sleep 1
    done
    cat /tmp/client.out
    log "$PERF -R client rc=$rc wall_ms=$(( (t1 - t0) / 1000000 ))" ;;
  cmtimeserver)
    while true; do log "cmtime server"; cmtime -b $IP; log "cmtime server rc=$?"; done ;;
  cmtimeclient)
    log "cmtime client -> $PEER"
    for i in $(seq 60); do
      t0=$(date +%s%N); timeout 300 cmtime -s $PEER -c $ITERS >/tmp/client.out 2>&1; rc=$?; t1=$(date +%s%N)
      [ $rc = 0 ] && break
      sleep 1
    done
    cat /tmp/client.out
    log "cmtime client rc=$rc wall_ms=$(( (t1 - t0) / 1000000 ))" ;;
  udaddyserver)
    while true; do log "udaddy server"; timeout 300 udaddy -b $IP -C $ITERS; log "udaddy server rc=$?"; done ;;
  udaddyclient)
    log "udaddy client -> $PEER"
    for i in $(seq 60); do
      t0=$(date +%s%N); timeout 120 udaddy -s $PEER -C $ITERS >/tmp/client.out 2>&1; rc=$?; t1=$(date +%s%N)
      [ $rc = 0 ] && break
      sleep 1
    done
    cat /tmp/client.out
    log "udaddy client rc=$rc wall_ms=$(( (t1 - t0) / 1000000 ))" ;;
  rstreamserver)
    while true; do log "rstream server"; timeout 300 rstream -b $IP -S $SIZE -C $ITERS -T b -T v; log "rstream server rc=$?"; done ;;
  rstreamclient)
    log "rstream client -> $PEER"
    for i in $(seq 60); do
      t0=$(date +%s%N); timeout 300 rstream -s $PEER -S $SIZE -C $ITERS -T b -T v >/tmp/client.out 2>&1; rc=$?; t1=$(date +%s%N)
      [ $rc = 0 ] && break
      sleep 1
    done
    cat /tmp/client.out
    log "rstream client rc=$rc wall_ms=$(( (t1 - t0) / 1000000 ))" ;;
MODES
# The multicast modes, mckey in group rxe.group=A.B.C.D (kernel command
# line), in their own block (other modes are added above):
#   mckeyrecv     mckey -m GROUP -b IP -C ITERS -S SIZE: joins, waits for ITERS
#   mckeysend     mckey -m GROUP -b IP -s -C ITERS -S SIZE: joins, sends ITERS
cat >>"$OUT/modes.sh" <<'MCAST'
  mckeyrecv|mckeysend)
    GROUP=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^rxe\.group=//p')
    role=receiver; [ $MODE = mckeysend ] && role=sender
    flags=; [ $role = sender ] && flags=-s
    log "mckey $role group=$GROUP"
    t0=$(date +%s%N); timeout 150 mckey -m $GROUP -b $IP $flags -C $ITERS -S $SIZE; rc=$?; t1=$(date +%s%N)
    log "mckey $role rc=$rc wall_ms=$(( (t1 - t0) / 1000000 ))" ;;
MCAST
awk -v f="$OUT/modes.sh" '/^  shell\) ;;/ { while ((getline l < f) > 0) print l } { print }' \
	"$H/guest-init.sh" >"$OUT/ov/init-cm"
grep -q rpingserver "$OUT/ov/init-cm" || { echo "guest-init.sh has no 'shell) ;;' case to extend" >&2; exit 1; }
chmod 755 "$OUT/ov/init-cm"
(cd "$OUT/ov" && echo init-cm | cpio -o -H newc --quiet) >"$OUT/ov.cpio"
cat /tmp/rxe/initrd.cpio "$OUT/ov.cpio" >"$OUT/initrd.cpio"
