package fsnode

import "strings"

// readme is the text of MOUNT/README.
func readme(runtimeDir string) string {
	return strings.ReplaceAll(readmeText, "RUNTIME", runtimeDir)
}

const readmeText = `rdmafs: a virtual RDMA device as a file system
==============================================

One mount is one device with one port. Every name is libibverbs' name,
lower-case, without the IBV_ prefix.

  README            this text
  device            ibv_query_device: key=value lines (max_qp, max_sge, ...)
  port              ibv_query_port(1): state, max_mtu, active_mtu (bytes), gid, ...
  counters          device counters: key=value lines
  clock             the device clock now (ibv_query_rt_values_ex), read at
                    open: raw_clock (ticks at device's hca_core_clock kHz,
                    never going back) and wallclock_ns (ns since the epoch)
  events            async events (ibv_get_async_event), one line each:
                    "event=comm_est qp=17". Every open has its own copy of the
                    events of its user's objects (root: of all), starting with
                    those raised while none of its user's opens was there
                    (at most 4096 for all of a user's opens; the oldest are
                    dropped, counted as event_drops). A user other than
                    root holds at most 256 opens (EMFILE beyond). The first read blocks until there are events
                    and takes them; after they are read one read is at end of
                    file, so "cat events" prints one batch; the read after
                    that waits for the next batch.
  capture           a live pcap of the packets the device sends and receives
                    (loopback too): "cat capture | tshark -r -". Each open is
                    one capture; a slow reader loses packets (capture_drops).
                    A user other than root holds at most 256 opens (EMFILE
                    beyond) and 16 MiB of unread packets across them.
                    A user sees the packets of the QPs it owns (sent by or
                    delivered to one of them); root sees every packet.
  lease             ties objects to a program's life: write "KIND NAME" lines
                    into an open descriptor; when its last copy is closed
                    (the program ends) they are destroyed. An object is held
                    once however often it is named, a destroyed one drops
                    out, and one open holds at most the mount's --max-lease
                    objects (ENOSPC beyond; the reason is the listing's last
                    line, "error: ..."). A read lists what it holds.
                    Only the writer's own objects may be named (root: any),
                    whoever opened the descriptor it writes.
  KIND/new          create an object (KIND: pd mr mw cq srq ah qp); see below
  KIND/H/           one directory per object (H: handle; for qp, the QPN)

Creating objects (transaction files)
------------------------------------
Open KIND/new read-write, write one line of key=value tokens, read back one
line: the new directory's name. From a shell:

  { echo "pd=1 qp_type=rc send_cq=1 recv_cq=1" >&0; read -r qpn; } <>qp/new

A bad request fails the write with an errno (bash: "write error: Invalid
argument") and the read returns "error: REASON". Every write is one
transaction; answers are read back in order. At most 16 KiB of answers wait
unread in one open: a write beyond is ENOBUFS and creates nothing. A reason
is at most 256 bytes, in answers and error files alike.

  pd/new   (empty line)
  mr/new   pd=H length=N [iova=N] [access=local_write,remote_write,remote_read,remote_atomic,mw_bind]
           [share=H offset=N]  (use MR H's memory from offset N: one buffer, many MRs)
           [addr=A]  (the writer's own memory at address A: mapped, or reached
           through its address space; access on_demand: on demand; attr's
           memory= says which)
  mr/new   pd=H implicit=1 access=...,on_demand  (all of the writer's memory)
  mw/new   pd=H [type=1|2]
  cq/new   cqe=N [comp_vector=0]
           [wc_flags=completion_timestamp,completion_timestamp_wallclock]
           (each completion then carries the device clock and/or the wall
           clock of its making: completion_ts, completion_wallclock_ns)
  srq/new  pd=H max_wr=N max_sge=N [srq_limit=N]
  ah/new   pd=H dgid=GID [sl=N hop_limit=N traffic_class=N flow_label=N sgid_index=0 port_num=1 ...]
  qp/new   pd=H qp_type=rc|uc|ud send_cq=H recv_cq=H [srq=H] max_send_wr=N
           max_recv_wr=N max_send_sge=N max_recv_sge=N [max_inline_data=N] [sq_sig_all=1]

Numbers are decimal or 0x hex. rmdir KIND/H destroys the object with the
verbs rules: EBUSY while other objects depend on it (a PD with MRs or QPs, a
CQ a QP completes into, an MR with bound windows).

Every object directory
----------------------
  attr     its attributes, key=value a line, read fresh at every open
  error    the reason of the last command that failed on it (empty if none)
Text files stat as the length of their content now ([ -s error ] is true
when there is a reason); a read returns the content rendered at open, whole.

qp/N/
  ctl        write one command a write:
               modify key=value ...   ibv_modify_qp; the mask is the set of keys
               reset                  modify to RESET
               error                  modify to ERR
               probe                  RC in RTS: a zero-length RDMA WRITE from one of the
                                      device's reserved WQEs (no slot of sq, no CQE);
                                      its outcome and round trip show in counters
               attach_mcast gid=G lid=N   UD: ibv_attach_mcast; the QP receives what is
                                      sent to the group G (ah=H with dgid=G and
                                      remote_qpn=16777215), whoever sent it; G is
                                      ff.. or ::ffff:224.x.y.z (an IP group on the
                                      wire); N a multicast LID (0xc000-0xfffe) on a
                                      local mount, ignored on the wire
               detach_mcast gid=G lid=N   ibv_detach_mcast
             keys are ibv_qp_attr's fields: qp_state path_mtu (bytes) dest_qp_num
             rq_psn sq_psn qp_access_flags pkey_index port_num timeout retry_cnt
             rnr_retry min_rnr_timer max_rd_atomic max_dest_rd_atomic qkey dgid
             sl ...; a line of attr can be pasted back into a modify. A failed
             modify changes nothing (EINVAL, reason in error).
  state      RESET INIT RTR RTS SQD SQE or ERR
  attr       as ibv_query_qp, then qp_num qp_type pd send_cq recv_cq srq sq_sig_all
             (and mcast_groups, the groups attach_mcast joined, when there are any)
  post_send  one work request a line; a write of several lines posts them in
             order and stops at the first bad one (the earlier ones stay posted):
               opcode=send|send_with_imm|send_with_inv|rdma_write|rdma_write_with_imm|
                      rdma_read|atomic_cmp_and_swp|atomic_fetch_and_add|local_inv|bind_mw|
                      atomic_write (RC; compare_add=N is the 8 bytes, little-endian, no sge)
               wr_id=N sge=LKEY:ADDR:LENGTH (repeatable; ADDR in the MR's iova space)
               send_flags=signaled,fence,solicited,inline imm_data=N invalidate_rkey=N
               remote_addr=N rkey=N compare_add=N swap=N ah=H remote_qpn=N
               remote_qkey=N inline_data=HEX
  post_recv  one receive a line: wr_id=N sge=LKEY:ADDR:LENGTH ...
  counters   per-QP counters (packets, bytes, retransmits, NAKs by kind, probes,
             probes_ok, probes_failed, probe_rtt_us of the last probe, ...),
             then gauges: sq_posted sq_in_flight rq_posted rnr_wait send_psn
             expected_psn (WRs in the queues, WRs started and not completed, an
             RNR wait in progress, the live PSNs)
  sq, rq     the send and receive rings (binary; the layout is in the Go package
             rdmafs/ring). mmap them MAP_SHARED: the device reads the very pages.
             A write() of anything to sq or rq is the doorbell.

cq/H/
  attr     cqe wc_flags overflowed pending (completions not polled) armed
           (none|next|solicited) overflows (times it overflowed)
  ring     the completion ring (binary, mmap it); it is replaced by a new file
           after a resize, which clients must map again
  poll     each read returns the completions available now, one a line, and
           consumes them (an empty read when there are none):
           wr_id=7 status=success opcode=rdma_write qp_num=17 byte_len=64 ...
  notify   write "next" or "solicited" to arm (ibv_req_notify_cq); the first
           read of an open blocks until an armed event fires and returns
           "event cq=H"; then the open is at end of file, so "cat notify" is
           ibv_get_cq_event. Ctrl-C interrupts it.
  ctl      resize cqe=N
  channel  a symlink to a FIFO in RUNTIME that receives one line
           per completion event: a pollable fd for event loops

srq/H/     ring, post_recv (as qp), ctl: modify [max_wr=N] [srq_limit=N]
           (ibv_modify_srq; max_wr resizes the queue as a CQ resize does:
           the waiting WRs move to a new ring file, which clients must map
           again, and EINVAL if they would not fit or the limit would not)
mr/H/mem   the registered memory: mmap it, or read and write it at offsets
           (dd conv=notrunc, cat). Truncation is ignored, so "> mem" writes
           from offset 0.
mw/H/, ah/H/, pd/H/: attr and error only.

RDMA CM (cm/)
-------------
The connection manager librdmacm needs: IB CM MADs on QP1 (REQ, REP, RTU,
REJ, MRA, DREQ, DREP, SIDR_REQ, SIDR_REP), on loopback and over RoCEv2.
  addrs          the addresses this device answers for, one a line
  counters       MADs sent and received per type, retries, timeouts, drops
  listeners      id=I uid=U ps=tcp addr=A port=P service_id=0x... backlog=N pending=M
  channel/new    (empty line) -> C; channel/C/fifo is a FIFO in RUNTIME (0600,
                 yours): each event is one 1024-byte record, a line
                 "event=NAME id=I status=N key=value ..." padded with spaces;
                 channel/C/attr: ids pending dropped. rmdir: EBUSY while ids use it
  new            ps=tcp|udp|ib|ipoib [qp_type=rc|ud] channel=C -> I
  I/ctl          one command a write:
                   bind addr=A [port=P]          (port 0: 32768-60999)
                   resolve_addr dst=A port=P [src=A]  -> addr_resolved | addr_error
                   resolve_route                 -> route_resolved
                   listen [backlog=N]            (at most 1024)
                   connect qp_num=N psn=N [private_data=HEX] [responder_resources=N]
                     [initiator_depth=N] [flow_control=0|1] [retry_count=N]
                     [rnr_retry_count=N] [srq=0|1]
                     -> connect_response | rejected | unreachable (UD: established)
                   establish                     (after connect_response: RTU)
                   accept qp_num=N psn=N [private_data=HEX] ... [qkey=N]
                   reject [private_data=HEX]
                   disconnect                    -> disconnected, later timewait_exit
                   notify                        (in rep_sent: as if the RTU came)
                   set_option tos=N | ack_timeout=N | reuseaddr=0|1 | afonly=0|1
                   migrate channel=C
  I/attr         state, addresses, the route (sgid dgid hop_limit path_mtu ...),
                 comm IDs, this side's and the peer's QPN and PSN: what the QP's
                 RTR and RTS need
  I/state        idle addr_bound addr_resolved route_resolved listen req_sent
                 req_rcvd rep_sent rep_rcvd established dreq_sent dreq_rcvd
                 timewait closed
A connect request makes a new id (cm/I, the listener's owner's) before its
connect_request event names it. rmdir cm/I rejects a pending request or
disconnects a connection. "cm I" and "cm_channel C" can be leased.

Ownership and errors
--------------------
An object's files belong to the user who created it. ring, mem, ctl, post_*,
poll, notify, attr and counters are 0600 (attr holds keys and PSNs, and
counters follow the PSNs: whoever reads them can aim a QP at the object);
state and error are 0644, and device, port and README are readable by all.
Another user gets EACCES opening them and removing the object; root may do
everything. Opening a read-only file for writing, or a write-only file for
reading, is EACCES. mkdir, unlink, rename, create, link, symlink, chmod,
chown and truncation to a non-zero size are EPERM anywhere. A write of more
than 64 KiB, or of bytes that are not text, is EINVAL.

Errnos follow libibverbs: EINVAL for a malformed request or an illegal
transition, ENOMEM for a full queue, a device limit or a user's share of
it (device shows max_*_per_user; root has no share), EBUSY for a destroy
of an object in use, EACCES for someone else's object, EOPNOTSUPP for a
feature rdmafs lacks, ENOENT for an object destroyed meanwhile.
`
