// Package verbs is the Go client library of rdmafs: libibverbs for a
// mounted rdmafs device, speaking to it only through its files.
//
// The control path (creating, modifying, querying and destroying objects)
// goes through the tree's transaction files (KIND/new), control files
// (qp/N/ctl, cq/H/ctl, srq/H/ctl), attr files and rmdir. The data path
// never enters FUSE: PostSend, PostRecv and PostSRQRecv encode WQEs
// straight into the send and receive rings mapped from qp/N/sq, qp/N/rq
// and srq/H/ring, and PollCQ decodes CQEs from the ring mapped from
// cq/H/ring, using package ring for the ABI so that the library and the
// daemon cannot drift. MR memory is MR.Buf, mapped from mr/H/mem.
//
// Doorbells only when needed: after publishing a batch of send WQEs,
// PostSend writes one byte to qp/N/sq (a FUSE request that kicks the
// engine) only when the engine has set the ring's NEED_WAKEUP flag, or
// when Options.AlwaysDoorbell (or RDMAFS_ALWAYS_DOORBELL=1) asks for a
// doorbell after every batch. CQ notification writes the ring header's
// armed word (ReqNotifyCQ) and sleeps on its futex word (GetCQEvent): no
// FUSE request either. Event loops that need a file descriptor use
// CQ.Channel.
//
// Names follow libibverbs: ibv_post_send is QP.PostSend, ibv_poll_cq is
// CQ.PollCQ, IBV_WC_SUCCESS is WCSuccess, IBV_QPS_RTS is StateRTS,
// IBV_QPT_RC is QPTypeRC, IBV_QP_STATE is QPAttrState. The types are
// package qp's, aliased, so a WC here is the WC the daemon writes.
//
// Errors are *Error (or *PostError for a refused work request, with the
// index of the first WR not posted, like bad_wr); both wrap the errno, so
// errors.Is(err, syscall.EBUSY) works, and carry the daemon's reason.
//
// Concurrency is libibverbs': every object is safe for concurrent use.
// Posts to one queue are serialised by a lock per queue (send side,
// receive side, SRQ); polls of one CQ by a lock per CQ; different QPs and
// CQs do not contend. Modify, Query and Destroy may run concurrently with
// posts; a destroyed object's posts fail with EBADF.
package verbs
