package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
)

// HeaderOp is the header a caller may set on an API message to name the
// operation (bus.WithHeader(HeaderOp, id)); the portal forwards it to the
// owner, and the op log writes it as op_id, so that an audit or a fault
// test can tell when each call actually ran, and where.
const HeaderOp = "x-op"

// opLogFlush is how often the op log's buffer is written out: a node
// killed with SIGKILL loses at most this much of its log (plus the time
// one write takes).
const opLogFlush = 50 * time.Millisecond

// opLogDetail bounds the error text an op log line carries.
const opLogDetail = 300

// opEntry is one line of the op log (refnode serve -op-log), as JSON.
type opEntry struct {
	// At is when the handler started (handle, release), when the message
	// was refused (reject), or when the node started or stopped, on the
	// process's real clock, RFC 3339 with nanoseconds.
	At string `json:"at"`
	// Op is handle, reject or release (bus.Op), or start and stop for
	// the node's own first and last lines.
	Op string `json:"op"`
	// Node is the UUID of the node that wrote the line.
	Node string `json:"node"`
	// ServiceID is the service the message was sent to.
	ServiceID string `json:"service_id"`
	// Type is the message type name.
	Type string `json:"type"`
	// ID is the envelope id.
	ID string `json:"id"`
	// Resource is the resource the message is about, if any.
	Resource string `json:"resource"`
	// OpID is the message's HeaderOp header, if any.
	OpID string `json:"op_id"`
	// Deadline is the message's deadline on the node's real clock, RFC
	// 3339 with nanoseconds, or empty if it has none.
	Deadline string `json:"deadline"`
	// Err is the code of the error (message.Code), or empty.
	Err string `json:"err"`
	// QueuedNS is, for handle, how long the message waited on the node
	// before its handler started; DurationNS how long the handler ran.
	QueuedNS   int64 `json:"queued_ns,omitempty"`
	DurationNS int64 `json:"duration_ns,omitempty"`
	// Detail is the error's text (shortened), or what a start line says.
	Detail string `json:"detail,omitempty"`
}

// opLog appends one JSON line per bus observation of kind handle, reject
// and release to a file, for audits and fault tests (refnode serve
// -op-log). Lines go through a buffer written out every flush period, so
// Observe costs a JSON encoding and a copy under a short lock; a node
// killed with SIGKILL loses at most the last period's lines. It is a
// bus.Observer: safe for concurrent use, and it never blocks longer than
// one write to the file. Close writes a stop line, flushes and closes.
type opLog struct {
	node string
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer // nil: unbuffered, each line written at once
	closed bool
	err    error // the first write error; later lines are dropped
}

var _ bus.Observer = (*opLog)(nil)

// openOpLog opens path for appending (creating it) and writes the start
// line of node. With flush > 0 lines are buffered and written out every
// flush; with 0 each line is written at once.
func openOpLog(path, node string, flush time.Duration, detail string) (*opLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	l := &opLog{node: node, f: f, stop: make(chan struct{}), done: make(chan struct{})}
	if flush > 0 {
		l.w = bufio.NewWriterSize(f, 64<<10)
		go l.flushEvery(flush)
	} else {
		close(l.done)
	}
	l.write(opEntry{At: stamp(time.Now()), Op: "start", Node: node, Detail: detail})
	if err := l.flush(); err != nil {
		_ = l.Close()
		return nil, err
	}
	return l, nil
}

// Observe writes o if it is a handle, reject, release, retry (a one-way
// message given back after its handler failed) or dead-letter.
func (l *opLog) Observe(o bus.Observation) {
	switch o.Op {
	case bus.OpHandle, bus.OpReject, bus.OpRelease, bus.OpRetry, bus.OpDeadLetter:
	default:
		return
	}
	e := opEntry{
		At: stamp(o.Start), Op: o.Op.String(), Node: l.node, ServiceID: o.ServiceID, Type: o.Type, ID: o.ID,
		Resource: o.Resource, OpID: o.Headers[HeaderOp], Deadline: stamp(o.Deadline),
	}
	if o.Op == bus.OpHandle {
		e.QueuedNS, e.DurationNS = int64(o.Queued), int64(o.Duration)
	}
	if o.Err != nil {
		e.Err = string(message.CodeOf(o.Err))
		e.Detail = o.Err.Error()
		if len(e.Detail) > opLogDetail {
			e.Detail = e.Detail[:opLogDetail] + "…"
		}
	}
	l.write(e)
}

// stamp formats t in UTC as RFC 3339 with nanoseconds, or "" if zero.
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// write appends e as one line; after Close or a write error it does
// nothing.
func (l *opLog) write(e opEntry) {
	line, err := json.Marshal(e)
	if err != nil {
		return // cannot happen: strings and integers only
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.err != nil {
		return
	}
	if l.w != nil {
		_, l.err = l.w.Write(line)
	} else {
		_, l.err = l.f.Write(line)
	}
}

// flush writes the buffered lines out.
func (l *opLog) flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w != nil && l.err == nil && !l.closed {
		l.err = l.w.Flush()
	}
	return l.err
}

// flushEvery writes the buffer out every d until Close.
func (l *opLog) flushEvery(d time.Duration) {
	defer close(l.done)
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			_ = l.flush()
		}
	}
}

// Close writes the stop line, flushes and closes the file, and returns
// the first write error. Lines observed later are dropped. Idempotent.
func (l *opLog) Close() error {
	l.write(opEntry{At: stamp(time.Now()), Op: "stop", Node: l.node})
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	if l.w != nil && l.err == nil {
		l.err = l.w.Flush()
	}
	l.closed = true
	err := l.err
	l.mu.Unlock()
	if l.w != nil {
		close(l.stop)
	}
	<-l.done
	if cerr := l.f.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err != nil {
		return fmt.Errorf("op log: %w", err)
	}
	return nil
}
