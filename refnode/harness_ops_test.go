package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
)

// execution is one op log line about a call's message: the message was
// handled, refused or given back by a node.
type execution struct {
	Node      string // the node's UUID
	Label     string // its label in the harness (A1, B2, …), or the UUID
	Op        string // handle, reject or release
	ServiceID string
	Type      string
	Start     time.Time     // when the handler started, or the refusal
	Deadline  time.Time     // the message's deadline as the node saw it; zero if none
	Resource  string        // the resource the message is about, if any
	Duration  time.Duration // how long the handler ran (handle, release)
	Err       string        // error code
	Detail    string        // error text
	Where     string        // file:line of the op log
}

// Ran reports whether a handler started: handle and release (a handler
// that returned bus.ErrRelease) do, reject does not. The handler may
// still have refused at once: see Did.
func (e execution) Ran() bool { return e.Op == bus.OpHandle.String() || e.Op == bus.OpRelease.String() }

// Did reports whether the operation itself may have run: a handler
// started and the node's guard did not refuse it as not the owner
// (fenced, evicted, or its ring disagreed), which it does before the
// service's code.
func (e execution) Did() bool { return e.Ran() && e.Err != string(message.ErrNotOwner.Code) }

// collected is what collectOps read from the op logs.
type collected struct {
	// Owner maps an op id to its executions on the services that own
	// resources (every service but api.portal), in log order.
	Owner map[string][]execution
	// Portal maps an op id to its lines on api.portal.
	Portal map[string][]execution
	// Lines counts the lines read; Partial the files whose last line was
	// cut short (a process killed while writing).
	Lines, Partial int
}

// collectOps reads op logs (refnode serve -op-log) and maps each op id
// (the x-op header) to what the nodes did with its messages. labels maps
// node UUIDs to the harness's labels. A last line without its newline
// (a node killed while writing) is skipped; any other line that is not
// an op log entry is an error.
func collectOps(paths []string, labels map[string]string) (*collected, error) {
	c := &collected{Owner: map[string][]execution{}, Portal: map[string][]execution{}}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read op log: %w", err)
		}
		if len(data) > 0 && data[len(data)-1] != '\n' {
			data = data[:bytes.LastIndexByte(data, '\n')+1]
			c.Partial++
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for line := 1; sc.Scan(); line++ {
			c.Lines++
			var e opEntry
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, line, err)
			}
			if e.OpID == "" {
				continue
			}
			x := execution{Node: e.Node, Label: e.Node, Op: e.Op, ServiceID: e.ServiceID, Type: e.Type, Err: e.Err, Detail: e.Detail,
				Resource: e.Resource, Duration: time.Duration(e.DurationNS),
				Where: fmt.Sprintf("%s:%d", filepath.Base(path), line)}
			if l, ok := labels[e.Node]; ok {
				x.Label = l
			}
			if x.Start, err = time.Parse(time.RFC3339Nano, e.At); err != nil {
				return nil, fmt.Errorf("%s:%d: at: %w", path, line, err)
			}
			if e.Deadline != "" {
				if x.Deadline, err = time.Parse(time.RFC3339Nano, e.Deadline); err != nil {
					return nil, fmt.Errorf("%s:%d: deadline: %w", path, line, err)
				}
			}
			if e.ServiceID == bus.APIPortal {
				c.Portal[e.OpID] = append(c.Portal[e.OpID], x)
			} else {
				c.Owner[e.OpID] = append(c.Owner[e.OpID], x)
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
	}
	return c, nil
}

// String is one line for a report: "handle on B1 vmInstance at
// 12:00:01.234 (deadline 12:00:03.100) [timeout: …] (B1.ops.jsonl:17)".
func (e execution) String() string {
	svc, _, ok := bus.SplitServiceID(e.ServiceID)
	if !ok {
		svc = e.ServiceID
	}
	s := fmt.Sprintf("%s on %s %s at %s", e.Op, e.Label, svc, e.Start.Local().Format(clockFormat))
	if !e.Deadline.IsZero() {
		s += " (its deadline there " + e.Deadline.Local().Format(clockFormat) + ")"
	}
	if e.Err != "" {
		s += " [" + e.Err + ": " + strings.TrimSpace(tail(e.Detail, 160)) + "]"
	}
	return s + " (" + e.Where + ")"
}

// clockFormat shows a time of day to the millisecond.
const clockFormat = "15:04:05.000"
