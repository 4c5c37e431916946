package tui

import "time"

// Messages the dashboard's commands send back to Update. Each carries what it needs to be
// matched to the request that caused it, because the model may have moved on meanwhile.

// tickMsg is the heartbeat of the dashboard, every tickEvery: it redraws the ages and
// starts a refresh when one is due.
type tickMsg time.Time

// snapshotMsg is the result of one Source.Snapshot call.
type snapshotMsg struct {
	snap Snapshot
	err  error
	slow bool // err is a timeout, and Redis answers a PING
}

// headMsg is the result of one Source.Head call for ref.
type headMsg struct {
	ref    PartitionRef
	detail HeadDetail
	err    error
}

// actionMsg is the result of one compare-and-act on ref's head expectID.
type actionMsg struct {
	act      action
	ref      PartitionRef
	expectID string
	err      error
}

// listMsg is the result of one fetch of a list view (see fetchRows).
type listMsg[T any] struct {
	rows []T
	err  error
}

// dlqMsg is the result of one DLQSource.DLQs call.
type dlqMsg = listMsg[DLQInfo]

// auditMsg is the result of one AuditSource.Audit call.
type auditMsg = listMsg[AuditRecord]
