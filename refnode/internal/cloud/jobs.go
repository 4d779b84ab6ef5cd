package cloud

import (
	"fmt"
	"time"
)

// JobState is the state of a [Job]. A job starts pending, is running
// once a step of it ran, and ends succeeded or failed; it never leaves an
// end state ([JobState.Terminal]).
type JobState string

// The job states.
const (
	// JobPending: recorded, no step ran yet.
	JobPending JobState = "pending"
	// JobRunning: a step ran; more are to come.
	JobRunning JobState = "running"
	// JobSucceeded: done; Result holds the outcome.
	JobSucceeded JobState = "succeeded"
	// JobFailed: ended without its effect; Code and Error say why.
	JobFailed JobState = "failed"
)

// String returns the state, or `unknown("x")` for a value this package
// does not define.
func (s JobState) String() string {
	switch s {
	case JobPending, JobRunning, JobSucceeded, JobFailed:
		return string(s)
	default:
		return fmt.Sprintf("unknown(%q)", string(s))
	}
}

// Terminal reports whether s is an end state, succeeded or failed: a job
// in one has its outcome and no step runs any more. An unknown state is
// not terminal.
func (s JobState) Terminal() bool { return s == JobSucceeded || s == JobFailed }

// Job is the record of a long operation on one resource (a VM
// migration): the operation's caller gets the job's UUID at once, and any
// management node reads the job from the [Store] to learn how far it got
// and how it ended. The resource's ring owner runs the steps and records
// each in the job, so that a new owner resumes the job where a dead one
// left it.
//
// Like every record, a Job is a value; its fields are plain data that
// encode to JSON as the API returns them.
type Job struct {
	// UUID identifies the job, in canonical form.
	UUID string `json:"uuid"`
	// Kind names the operation, e.g. "vm.migrate".
	Kind string `json:"kind"`
	// Resource is the UUID of the resource the job is about (the VM of a
	// migration), in canonical form.
	Resource string `json:"resource"`
	// Args is the operation's arguments, as JSON text.
	Args string `json:"args,omitempty"`
	// State is how far the job got; see [JobState].
	State JobState `json:"state"`
	// Step names the last step recorded.
	Step string `json:"step,omitempty"`
	// Node is the UUID of the management node that recorded the last
	// step.
	Node string `json:"node,omitempty"`
	// Code is the error code (a message.Code's string) of a failed job.
	Code string `json:"code,omitempty"`
	// Error is the failure's text, for people.
	Error string `json:"error,omitempty"`
	// Result is the outcome of a succeeded job, as JSON text.
	Result string `json:"result,omitempty"`
	// CreatedAt is when the job was recorded.
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is when the job was last written.
	UpdatedAt time.Time `json:"updated_at"`
	// Deadline, if not zero, is when a job that is not terminal by then
	// is given a known outcome by the resource's owner rather than left
	// to run.
	Deadline time.Time `json:"deadline,omitzero"`
	// Version counts the record's committed writes, like VM.Version: a
	// Store sets it to 1 when it adds the job and adds 1 at every update
	// that commits, and ignores the value it is given.
	Version int64 `json:"version"`
}
