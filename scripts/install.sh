#!/usr/bin/env bash
# install.sh: the install round trip. make install into a staging tree
# (DESTDIR, PREFIX=/usr/local), then, from only that tree (no
# RDMAFS_LIBDIR, no source-tree libraries): rdmafs doctor, mount,
# ibv_rc_pingpong and rping through rdmafs exec, the bash completion in an
# interactive bash, both manual pages through man -l, the systemd unit
# (systemd-analyze verify, then its ExecStart run by hand and stopped as
# systemd stops it), umount; then make uninstall must leave no file.
# Needs root, /dev/fuse and the packages of setup.sh.
NEED_LIBIBVERBS=1
source "$(dirname "$0")/lib.sh"

T=${TMO:-60}
dest=$work/dest
prefix=/usr/local
unset RDMAFS_LIBDIR

pp timeout 600 make -s -C "$repo" install DESTDIR="$dest" PREFIX="$prefix"
at_exit 'timeout 120 make -s -C "$repo" uninstall DESTDIR="$dest" PREFIX="$prefix" >/dev/null 2>&1'
bin=$dest$prefix/bin/rdmafs
lib=$dest$prefix/lib/rdmafs
for f in "$bin" "$lib/libibverbs.so.1" "$lib/librdmacm.so.1" \
	"$dest$prefix/share/man/man8/rdmafs.8" "$dest$prefix/share/man/man5/rdmafs.5" \
	"$dest$prefix/share/bash-completion/completions/rdmafs" \
	"$dest$prefix/lib/systemd/system/rdmafs@.service"; do
	[[ -e "$f" ]] || die "make install did not install $f"
done
# The installed rdmafs, with the source tree out of reach: a copy of the
# tree's build could otherwise pass for the installed libraries.
RDMAFS=$bin
[[ $(timeout $T "$RDMAFS" libdir) == "$lib" ]] || die "rdmafs libdir is $("$RDMAFS" libdir), want $lib"
echo "rdmafs libdir: $lib"

pp timeout $T "$RDMAFS" doctor || die "rdmafs doctor failed on a machine that runs rdmafs"
# Each output is read whole before grep -q looks at it: grep -q stops at
# its match, and a writer with lines still to write then dies of SIGPIPE,
# which pipefail takes for a failure (doctor's later checks did so in CI).
doc=$(timeout $T "$RDMAFS" doctor)
grep -q "^ok    libibverbs.so.1 $lib/libibverbs.so.1 exports exactly" <<<"$doc" ||
	die "doctor did not check the installed libibverbs.so.1"

pp timeout $T "$RDMAFS" mount --log "$work/daemon.log" "$M"
# Before the uninstall hook (hooks run latest first): lib.sh's own
# unmount uses $RDMAFS, which the uninstall removes.
at_exit 'timeout $T "$RDMAFS" umount "$M" 2>/dev/null'
timeout $T "$RDMAFS" exec --mount "$M" -- sh -c 'echo "$LD_LIBRARY_PATH"' | grep -qx "$lib" ||
	die "rdmafs exec does not put only $lib on LD_LIBRARY_PATH"

# pair "SERVER" "CLIENT" WAIT: the server in the background, the client
# once WAIT (a command) succeeds; both must exit 0.
pair() {
	local s=$1 c=$2 ready=$3 spid rc=0 src=0
	# shellcheck disable=SC2086
	timeout $T "$RDMAFS" exec --mount "$M" -- $s >"$work/server.log" 2>&1 &
	spid=$!
	for _ in $(seq 200); do
		eval "$ready" && break
		kill -0 $spid 2>/dev/null || break
		sleep 0.05
	done
	# shellcheck disable=SC2086
	timeout $T "$RDMAFS" exec --mount "$M" -- $c >"$work/client.log" 2>&1 || rc=$?
	wait $spid || src=$?
	if ((rc != 0 || src != 0)); then
		echo "--- client: $c (exit $rc)"; cat "$work/client.log"
		echo "--- server: $s (exit $src)"; cat "$work/server.log"
		die "$c failed"
	fi
}
printf '\n$ %s\n' "$RDMAFS exec -- ibv_rc_pingpong -p 19401 & $RDMAFS exec -- ibv_rc_pingpong -p 19401 localhost"
pair "ibv_rc_pingpong -n 100 -p 19401" "ibv_rc_pingpong -n 100 -p 19401 localhost" \
	'ss -ltn "sport = :19401" | grep -q LISTEN'
grep -q "100 iters" "$work/client.log" || { cat "$work/client.log"; die "ibv_rc_pingpong printed no result"; }
grep "iters" "$work/client.log"
printf '\n$ %s\n' "$RDMAFS exec -- rping -s -a 127.0.0.1 -C 10 -p 19402 & $RDMAFS exec -- rping -c -a 127.0.0.1 -C 10 -v -p 19402"
pair "rping -s -a 127.0.0.1 -C 10 -p 19402" "rping -c -a 127.0.0.1 -C 10 -v -p 19402" \
	'grep -q " port=19402 " "$M/cm/listeners" 2>/dev/null'
grep -q "ping data: rdma-ping-9" "$work/client.log" || { cat "$work/client.log"; die "rping printed no 10th ping"; }
echo "rping -C 10: 10 pings"

echo
echo "== the manual pages"
for page in man8/rdmafs.8 man5/rdmafs.5; do
	out=$(MANWIDTH=80 timeout $T man --warnings -l "$dest$prefix/share/man/$page" 2>"$work/man.err") ||
		die "man -l $page failed"
	[[ ! -s "$work/man.err" ]] || { cat "$work/man.err"; die "man -l $page warns"; }
	grep -q "^NAME" <<<"$out" || die "man -l $page has no NAME"
	echo "man -l $page: $(wc -l <<<"$out") lines"
done
man8=$(MANWIDTH=80 timeout $T man -l "$dest$prefix/share/man/man8/rdmafs.8")
grep -q -- "--max-qp" <<<"$man8" ||
	die "rdmafs(8) lacks mount --max-qp"

echo
echo "== the bash completion, in an interactive bash"
# complete WORDS...: what the completion offers for the last word.
complete_words() {
	local words
	printf -v words '%q ' "$@"
	timeout $T bash --norc --noprofile -i -c "
		source '$dest$prefix/share/bash-completion/completions/rdmafs'
		[[ \$(complete -p rdmafs) == *'-F _rdmafs'* ]] || exit 9
		COMP_WORDS=($words); COMP_CWORD=\$((\${#COMP_WORDS[@]} - 1))
		COMPREPLY=(); _rdmafs; printf '%s\n' \"\${COMPREPLY[@]}\"" 2>/dev/null
}
expect_completion() { # WANT WORDS...: WANT must be among the offers
	local want=$1 got
	shift
	got=$(complete_words "$@") || die "completion of '$*' failed"
	grep -qxF -- "$want" <<<"$got" || die "completing '$*' offers $(echo $got), not $want"
	echo "rdmafs ${*:2} <TAB>: $want"
}
mkdir -p "$work/qp1"
expect_completion doctor rdmafs do
expect_completion --max-qp-wr rdmafs mount --max-qp-
expect_completion "$M" rdmafs umount "$work/m"
expect_completion qp rdmafs new "$M" q
expect_completion cm/channel rdmafs new "$M" cm/
expect_completion srq rdmafs show "$M" s
cq=$(timeout $T "$RDMAFS" new "$M" cq cqe=4)
qpn=$(timeout $T "$RDMAFS" new "$M" qp pd="$(timeout $T "$RDMAFS" new "$M" pd)" qp_type=rc \
	send_cq="$cq" recv_cq="$cq" max_send_wr=1 max_recv_wr=1)
expect_completion "$qpn" rdmafs trace "$M" ""
expect_completion ibv_rc_pingpong rdmafs exec -- ibv_rc_ping

echo
echo "== the systemd unit"
unit=$dest$prefix/lib/systemd/system/rdmafs@.service
if command -v systemd-analyze >/dev/null; then
	# verify looks for the unit's programs on the real root: the one
	# missing there is the installed rdmafs, which is in the staging tree.
	# Documentation= is checked with man, which finds the pages installed here.
	MANPATH=$dest$prefix/share/man: timeout $T systemd-analyze verify "$unit" >"$work/verify.log" 2>&1 || true
	if grep -v "$prefix/bin/rdmafs" "$work/verify.log" | grep -q .; then
		cat "$work/verify.log"
		die "systemd-analyze verify rdmafs@.service complains"
	fi
	echo "systemd-analyze verify: clean (but for $prefix/bin/rdmafs, which is in $dest)"
else
	echo "systemd-analyze is missing: unit not verified"
fi
# ExecStart by hand as systemd would run it for /tmp/...-unit with an
# environment file's flags: %f the path, $RDMAFS_FLAGS split on spaces.
um=$work/unit
mkdir -p "$um"
RDMAFS_FLAGS="--max-qp 64 --mtu 2048"
start=$(sed -n 's/^ExecStart=//p' "$unit")
start=${start//%f/$um}
start=${start//$prefix\/bin\/rdmafs/$bin}
read -ra argv <<<"${start//\$RDMAFS_FLAGS/$RDMAFS_FLAGS}"
echo "\$ ${argv[*]}"
"${argv[@]}" >"$work/unit.log" 2>&1 &
upid=$!
at_exit "kill $upid 2>/dev/null; timeout $T '$bin' umount '$um' 2>/dev/null"
for _ in $(seq 100); do [[ -e "$um/device" ]] && break; sleep 0.1; done
[[ -e "$um/device" ]] || { cat "$work/unit.log"; die "the unit's ExecStart did not mount"; }
grep -q "^max_qp=64$" "$um/device" || die "the unit's flags did not reach the mount"
kill -TERM $upid # systemd's KillSignal
rc=0
timeout $T tail --pid=$upid -f /dev/null || die "the daemon did not stop on SIGTERM"
wait $upid || rc=$?
((rc == 0)) || { cat "$work/unit.log"; die "the daemon exited $rc on SIGTERM"; }
! grep -q " $um fuse.rdmafs " /proc/self/mounts || die "SIGTERM left $um mounted"
echo "ExecStart by hand: mounted with max_qp=64; SIGTERM unmounted, exit 0"

echo
echo "== the container's entry point, on the installed tree"
em=$work/entry
pp env PATH="$dest$prefix/bin:$PATH" RDMAFS_MOUNT="$em" RDMAFS_FLAGS="--max-qp 32" \
	timeout $T "$repo/dist/container-entry.sh" rdmafs exec --mount "$em" -- ibv_devinfo -v >"$work/entry.log" 2>&1 ||
	{ cat "$work/entry.log"; die "dist/container-entry.sh failed"; }
grep -qE "^[[:space:]]*max_qp:[[:space:]]+32$" "$work/entry.log" || { cat "$work/entry.log"; die "the entry point's device has not --max-qp 32"; }
! grep -q " $em fuse.rdmafs " /proc/self/mounts || die "the entry point left $em mounted"
echo "container-entry.sh: mounted with RDMAFS_FLAGS, ran ibv_devinfo on it, unmounted"

pp timeout $T "$RDMAFS" umount "$M"
echo
echo "== make uninstall"
pp timeout 120 make -s -C "$repo" uninstall DESTDIR="$dest" PREFIX="$prefix"
left=$(find "$dest" -type f -o -type l)
[[ -z "$left" ]] || die "make uninstall left: $left"
echo "make uninstall: no file left in $dest"
