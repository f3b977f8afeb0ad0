package cm

import (
	"fmt"
	"slices"
	"strings"

	"rdmafs/qp"
)

// The keys of the CM's text: the commands of cm/I/ctl, the cm/new request,
// the event records of a channel and cm/I/attr. Each is spelled once, here
// or, for a key qp's lines share, in qp (qp/textkeys.go); go generate
// writes every one as an RDMAFS_KEY_ macro of libibverbs/rdmafs-text.h for
// librdmacm (qp/internal/ctext).
const (
	KeyAckTimeout         = "ack_timeout"
	KeyAfonly             = "afonly"
	KeyBacklog            = "backlog"
	KeyChannel            = "channel"
	KeyDst                = "dst"
	KeyDstAddr            = "dst_addr"
	KeyDstPort            = "dst_port"
	KeyEventsQueued       = "events_queued"
	KeyFlowControl        = "flow_control"
	KeyID                 = "id"
	KeyInitiatorDepth     = "initiator_depth"
	KeyListenID           = "listen_id"
	KeyLocalAckTimeout    = "local_ack_timeout"
	KeyLocalCommID        = "local_comm_id"
	KeyMigratedAfter      = "migrated_after"
	KeyPacketLifeTime     = "packet_life_time"
	KeyPKey               = "pkey"
	KeyPrivateData        = "private_data"
	KeyPs                 = "ps"
	KeyPSN                = "psn"
	KeyRemoteCommID       = "remote_comm_id"
	KeyRemotePSN          = "remote_psn"
	KeyRemoteQKey         = "remote_qkey"
	KeyRemoteQPNum        = "remote_qp_num"
	KeyResponderResources = "responder_resources"
	KeyRetryCount         = "retry_count"
	KeyReuseaddr          = "reuseaddr"
	KeyRNRRetryCount      = "rnr_retry_count"
	KeyServiceID          = "service_id"
	KeySGID               = "sgid"
	KeySLID               = "slid"
	KeySrc                = "src"
	KeySrcAddr            = "src_addr"
	KeySrcPort            = "src_port"
	KeyStatus             = "status"
	KeyTimeoutMS          = "timeout_ms"
	KeyTOS                = "tos"
)

// textKeyList is every key of the CM's text, its own and those it shares
// with qp: what TextKeys returns. TestTextKeysListed checks none of the
// constants above is left out.
var textKeyList = []string{
	KeyAckTimeout,
	KeyAfonly,
	KeyBacklog,
	KeyChannel,
	KeyDst,
	KeyDstAddr,
	KeyDstPort,
	KeyEventsQueued,
	KeyFlowControl,
	KeyID,
	KeyInitiatorDepth,
	KeyListenID,
	KeyLocalAckTimeout,
	KeyLocalCommID,
	KeyMigratedAfter,
	KeyPacketLifeTime,
	KeyPKey,
	KeyPrivateData,
	KeyPs,
	KeyPSN,
	KeyRemoteCommID,
	KeyRemotePSN,
	KeyRemoteQKey,
	KeyRemoteQPNum,
	KeyResponderResources,
	KeyRetryCount,
	KeyReuseaddr,
	KeyRNRRetryCount,
	KeyServiceID,
	KeySGID,
	KeySLID,
	KeySrc,
	KeySrcAddr,
	KeySrcPort,
	KeyStatus,
	KeyTimeoutMS,
	KeyTOS,
	qp.KeyAddr,
	qp.KeyDGID,
	qp.KeyDLID,
	qp.KeyEvent,
	qp.KeyFlowLabel,
	qp.KeyHopLimit,
	qp.KeyPathMTU,
	qp.KeyPending,
	qp.KeyPort,
	qp.KeyQKey,
	qp.KeyQPNum,
	qp.KeyQPType,
	qp.KeySL,
	qp.KeySRQ,
	qp.KeyState,
	qp.KeyTrafficClass,
}

// TextKeys lists every key of the CM's text (a copy).
func TextKeys() []string { return append([]string(nil), textKeyList...) }

// AttrKeys are the keys of cm/I/attr (ID.Attr), as librdmacm reads them.
var AttrKeys = []string{qp.KeyState, KeyPs, qp.KeyQPType, KeyChannel, KeyEventsQueued, KeyMigratedAfter,
	KeySrcAddr, KeySrcPort, KeyDstAddr, KeyDstPort, KeyListenID, KeyBacklog, qp.KeyPending, KeySGID,
	qp.KeyDGID, KeySLID, qp.KeyDLID, qp.KeyHopLimit, qp.KeyTrafficClass, qp.KeyFlowLabel, qp.KeyPathMTU,
	KeyPacketLifeTime, KeyPKey, qp.KeySL, KeyTOS, KeyAckTimeout, KeyLocalCommID, KeyRemoteCommID,
	KeyServiceID, qp.KeyQPNum, KeyPSN, KeyRemoteQPNum, KeyRemotePSN, KeyRemoteQKey, KeyResponderResources,
	KeyInitiatorDepth, KeyFlowControl, KeyRetryCount, KeyRNRRetryCount, qp.KeySRQ, KeyLocalAckTimeout}

// ParseAttr reads cm/I/attr back into its keys (for tests and tools); a
// key not of AttrKeys is an error.
func ParseAttr(text string) (map[string]string, error) {
	return keyValues(strings.Fields(text), AttrKeys, "attr")
}

// keyValues reads key=value tokens of a record or attr (what), each key
// one of known.
func keyValues(toks, known []string, what string) (map[string]string, error) {
	m := map[string]string{}
	for _, f := range toks {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("cm: %s token %q is not key=value", what, f)
		}
		if !slices.Contains(known, k) {
			return nil, fmt.Errorf("cm: unknown key %q in %s", k, what)
		}
		m[k] = v
	}
	return m, nil
}
