package rest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service"
)

// DefaultJobDeadline is how long a job may stay pending (no step run)
// before the resource's owner fails it with code timeout.
const DefaultJobDeadline = 5 * time.Minute

// jobPoll is how often a wait reads a job again.
const jobPoll = 50 * time.Millisecond

// migrateBody is the body of POST /v1/vms/{uuid}/migrate.
type migrateBody struct {
	// HostUUID is the host to move the VM to. Required.
	HostUUID string `json:"host_uuid"`
}

// migrateVM records a migration's job, sends MigrateVm one-way through
// api.portal to the VM's owner, and answers the job: 202 while it runs,
// 200 once it ended (within ?wait=). The job's outcome is in the job.
func (a *API) migrateVM(w http.ResponseWriter, r *http.Request) {
	id, ok := pathUUID(w, r)
	var b migrateBody
	if !ok || !a.decode(w, r, &b, false) {
		return
	}
	if b.HostUUID == "" {
		badRequest(w, "host_uuid", "host_uuid is required: the host to move the VM to")
		return
	}
	host, err := message.NormalizeUUID(b.HostUUID)
	if err != nil {
		writeError(w, http.StatusBadRequest, apiError{Code: string(message.ErrInvalidUUID.Code), Message: err.Error(), Field: "host_uuid", Retry: "never"})
		return
	}
	wait, ok := waitParam(w, r, a.cfg.Timeout)
	if !ok {
		return
	}
	key, err := idempotencyKey(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, apiError{Code: "bad_request", Message: err.Error(), Field: HeaderIdempotencyKey, Retry: "never"})
		return
	}
	jobID := message.NewUUID()
	if key != "" {
		jobID = message.KeyUUID("refnode.rest.job", key)
	}
	node := ""
	if a.cfg.Node != nil {
		node = a.cfg.Node.UUID()
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.Timeout)
	defer cancel()
	job := api.NewMigrateJob(jobID, id, host, node, time.Now(), a.cfg.JobDeadline)
	switch err := a.cfg.Store.AddJob(ctx, job); {
	case errors.Is(err, message.ErrAlreadyExists): // a repeated request
		got, gerr := a.cfg.Store.Job(ctx, jobID)
		if gerr != nil {
			a.fail(w, r, fmt.Errorf("read job %s: %w", jobID, gerr), false)
			return
		}
		if got.Kind != job.Kind || got.Resource != job.Resource || !sameTarget(got, host) {
			writeError(w, http.StatusUnprocessableEntity, apiError{Code: "idempotency_key_reused", Retry: "never",
				Message: fmt.Sprintf("this Idempotency-Key was used for another request (job %s: %s of %s); give every request its own key", jobID, got.Kind, got.Resource)})
			return
		}
	case err != nil:
		if r.Context().Err() == nil {
			a.fail(w, r, fmt.Errorf("record job %s in the database: %w", jobID, err), false)
		}
		return
	}
	// One-way: once sent it is kept until the VM's owner ran it. If the
	// send fails, the job is recorded all the same: the owner's sweep
	// starts a pending job (api.MigrateVm).
	msgID := message.KeyUUID("refnode.rest.migrate", jobID)
	if err := service.Send(ctx, a.cfg.Caller, api.MigrateVm{UUID: id, HostUUID: host, Job: jobID}, bus.WithID(msgID), bus.WithTimeout(a.cfg.JobDeadline)); err != nil {
		a.cfg.Logger.Warn("rest: send MigrateVm; the VM owner's sweep starts the job", "vm", id, "job", jobID, "err", err)
	}
	a.answerJob(w, r, jobID, wait, http.StatusAccepted)
}

// sameTarget reports whether migration job j moves its VM to host.
func sameTarget(j cloud.Job, host string) bool {
	args, err := api.ParseMigrateArgs(j.Args)
	return err == nil && args.HostUUID == host
}

// waitParam returns ?wait= (a Go duration, at most max), 0 without one;
// it writes a 400 for a malformed one.
func waitParam(w http.ResponseWriter, r *http.Request, max time.Duration) (time.Duration, bool) {
	s := r.URL.Query().Get("wait")
	if s == "" {
		return 0, true
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > max {
		badRequest(w, "wait", "wait must be a duration from 0s to %s, like 30s", max)
		return 0, false
	}
	return d, true
}

// answerJob writes job id as the database has it once it ended or wait
// passed: 200 if it ended, else running (202 after a POST, 200 after a
// GET: the job exists either way).
func (a *API) answerJob(w http.ResponseWriter, r *http.Request, id string, wait time.Duration, running int) {
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(r.Context(), a.cfg.Timeout)
		j, err := a.cfg.Store.Job(ctx, id)
		cancel()
		if err != nil {
			if r.Context().Err() == nil {
				a.fail(w, r, fmt.Errorf("read job %s from the database: %w", id, err), false)
			}
			return
		}
		left := time.Until(deadline)
		if j.State.Terminal() || left <= 0 {
			status := running
			if j.State.Terminal() {
				status = http.StatusOK
			}
			w.Header().Set("Location", "/v1/jobs/"+id)
			w.Header().Set(HeaderSource, "database")
			writeJSON(w, status, j)
			return
		}
		t := time.NewTimer(min(jobPoll, left))
		select {
		case <-r.Context().Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (a *API) getJob(w http.ResponseWriter, r *http.Request) {
	id, ok := pathUUID(w, r)
	if !ok {
		return
	}
	wait, ok := waitParam(w, r, a.cfg.Timeout)
	if ok {
		a.answerJob(w, r, id, wait, http.StatusOK)
	}
}

// jobStates are the states ?state= may select.
var jobStates = []cloud.JobState{cloud.JobPending, cloud.JobRunning, cloud.JobSucceeded, cloud.JobFailed}

func (a *API) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	state, res := q.Get("state"), q.Get("resource")
	if state != "" && !slices.Contains(jobStates, cloud.JobState(state)) {
		badRequest(w, "state", "state %q is not a job state: %v", state, jobStates)
		return
	}
	if res != "" {
		c, err := message.NormalizeUUID(res)
		if err != nil {
			writeError(w, http.StatusBadRequest, apiError{Code: string(message.ErrInvalidUUID.Code), Message: err.Error(), Field: "resource", Retry: "never"})
			return
		}
		res = c
	}
	list(a, w, r, a.cfg.Store.Jobs, func(j cloud.Job) string { return j.UUID }, func(j cloud.Job) bool {
		return (state == "" || string(j.State) == state) && (res == "" || j.Resource == res)
	})
}
