package cloudtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
)

// jobCases are the cases of the jobs' methods, run by [Run].
var jobCases = []struct {
	name string
	run  func(t *testing.T, h Harness)
}{
	{"JobRoundTrip", testJobRoundTrip},
	{"JobTimes", testJobTimes},
	{"JobAddTwice", testJobAddTwice},
	{"JobUUIDs", testJobUUIDs},
	{"JobNotFound", testJobNotFound},
	{"JobsSortedAndCopied", testJobLists},
	{"JobUpdate", testJobUpdate},
	{"JobCanceledContext", testJobCanceled},
	{"JobPeersSeeWrites", testJobPeers},
	{"JobAtomicUpdates", testJobAtomicUpdates},
	{"JobTransaction", testJobTransaction},
	{"JobTransactionRollsBack", testJobTransactionRollback},
}

// sampleJob is a job with every field set, as AddJob stores it: at
// version 1. Its times are whole microseconds, one of them not in UTC.
func sampleJob(id string) cloud.Job {
	return cloud.Job{
		UUID:      id,
		Kind:      "vm.migrate",
		Resource:  uuidB,
		Args:      `{"host_uuid":"` + uuidC + `","note":"it's \"quoted\" ☁"}`,
		State:     cloud.JobFailed,
		Step:      "prepared",
		Node:      "3694776ab31a45709259254a018913ca",
		Code:      "failed_precondition",
		Error:     `host cccc… is not connected: O'Brien's "rack" – ünïcode`,
		Result:    `{"partial":true}`,
		CreatedAt: time.UnixMicro(1764480000123456).UTC(),
		UpdatedAt: time.UnixMicro(1764480001654321).In(time.FixedZone("CET", 60*60)),
		Deadline:  time.UnixMicro(1764480300000001).UTC(),
		Version:   1,
	}
}

// sameJob asserts want == got, comparing times with Equal.
func sameJob(t *testing.T, want, got cloud.Job, msg string) {
	t.Helper()
	for _, at := range []struct {
		name      string
		want, got time.Time
	}{{"CreatedAt", want.CreatedAt, got.CreatedAt}, {"UpdatedAt", want.UpdatedAt, got.UpdatedAt}, {"Deadline", want.Deadline, got.Deadline}} {
		assert.True(t, at.want.Equal(at.got), "%s: %s %v, want %v (times keep microseconds; the zero time stays zero)", msg, at.name, at.got, at.want)
	}
	want.CreatedAt, want.UpdatedAt, want.Deadline = time.Time{}, time.Time{}, time.Time{}
	got.CreatedAt, got.UpdatedAt, got.Deadline = time.Time{}, time.Time{}, time.Time{}
	assert.Equal(t, want, got, msg)
}

func testJobRoundTrip(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	j := sampleJob(uuidA)
	j.Version = 42
	require.NoError(t, s.AddJob(ctx, j))
	got, err := s.Job(ctx, uuidA)
	require.NoError(t, err)
	sameJob(t, sampleJob(uuidA), got, "a job reads back as it was added, every field, at version 1 whatever it said")

	bare := cloud.Job{UUID: uuidB, Kind: "x", Resource: uuidA, State: cloud.JobPending}
	require.NoError(t, s.AddJob(ctx, bare))
	got, err = s.Job(ctx, uuidB)
	require.NoError(t, err)
	assert.True(t, got.CreatedAt.IsZero() && got.UpdatedAt.IsZero() && got.Deadline.IsZero(), "zero times stay zero: %+v", got)
	bare.Version = 1
	sameJob(t, bare, got, "empty fields read back empty")
}

// testJobTimes: times keep microseconds (a store may drop what is below
// one), a time in another zone is the same instant, and a time set to
// zero by an update reads back zero.
func testJobTimes(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	p := h.Peer(t, s)
	created := time.Date(2025, 6, 1, 12, 34, 56, 789012345, time.FixedZone("EST", -5*60*60))
	deadline := time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC) // before 1970: negative microseconds
	j := cloud.Job{UUID: uuidA, Kind: "x", Resource: uuidB, State: cloud.JobPending, CreatedAt: created, UpdatedAt: time.Now(), Deadline: deadline}
	require.NoError(t, s.AddJob(ctx, j))
	got, err := p.Job(ctx, uuidA)
	require.NoError(t, err)
	for _, at := range []struct {
		name      string
		want, got time.Time
	}{{"CreatedAt", j.CreatedAt, got.CreatedAt}, {"UpdatedAt", j.UpdatedAt, got.UpdatedAt}, {"Deadline", j.Deadline, got.Deadline}} {
		assert.True(t, at.got.Equal(at.want) || at.got.Equal(at.want.Truncate(time.Microsecond)),
			"%s %v reads back as %v: the same instant, or that instant to the microsecond", at.name, at.want, at.got)
	}

	got, err = s.UpdateJob(ctx, uuidA, func(j *cloud.Job) error { j.Deadline, j.CreatedAt = time.Time{}, time.UnixMicro(0); return nil })
	require.NoError(t, err)
	assert.True(t, got.Deadline.IsZero(), "a deadline updated to zero is zero: %v", got.Deadline)
	got, err = p.Job(ctx, uuidA)
	require.NoError(t, err)
	assert.True(t, got.Deadline.IsZero(), "a deadline updated to zero reads back zero: %v", got.Deadline)
	assert.True(t, got.CreatedAt.Equal(time.UnixMicro(0)), "1970-01-01 is a time, not the zero time: %v", got.CreatedAt)
	assert.False(t, got.CreatedAt.IsZero(), "1970-01-01 is not the zero time")
}

func testJobAddTwice(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	require.NoError(t, s.AddJob(ctx, sampleJob(uuidA)))
	other := sampleJob(uuidA)
	other.Kind, other.State = "other", cloud.JobPending
	assert.ErrorIs(t, s.AddJob(ctx, other), message.ErrAlreadyExists, "a job UUID is added once")
	got, err := s.Job(ctx, uuidA)
	require.NoError(t, err)
	sameJob(t, sampleJob(uuidA), got, "a refused add changes nothing")
}

func testJobUUIDs(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	for _, bad := range []string{"nope", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa", ""} {
		what := fmt.Sprintf("UUID %q", bad)
		j := sampleJob(bad)
		assert.ErrorIs(t, s.AddJob(ctx, j), message.ErrInvalidUUID, "AddJob: %s is refused: UUIDs must be canonical", what)
		assert.ErrorIs(t, second(s.Job(ctx, bad)), message.ErrInvalidUUID, "Job: %s", what)
		assert.ErrorIs(t, second(s.UpdateJob(ctx, bad, func(*cloud.Job) error { return nil })), message.ErrInvalidUUID, "UpdateJob: %s", what)
		j = sampleJob(uuidC)
		j.Resource = bad
		assert.ErrorIs(t, s.AddJob(ctx, j), message.ErrInvalidUUID, "AddJob: a Resource %s is refused: it must be a canonical UUID", what)
	}
	jobs, err := s.Jobs(ctx)
	require.NoError(t, err)
	assert.Empty(t, jobs, "nothing was added with a bad UUID")

	require.NoError(t, s.AddJob(ctx, sampleJob(uuidA)))
	_, err = s.UpdateJob(ctx, uuidA, func(j *cloud.Job) error { j.Resource, j.Step = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "moved"; return nil })
	assert.ErrorIs(t, err, message.ErrInvalidUUID, "UpdateJob refuses to leave Resource not canonical")
	got, err := s.Job(ctx, uuidA)
	require.NoError(t, err)
	sameJob(t, sampleJob(uuidA), got, "a refused update changes nothing, the version included")
}

func testJobNotFound(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	assert.ErrorIs(t, second(s.Job(ctx, uuidC)), message.ErrNotFound, "Job of an unknown UUID")
	called := false
	_, err := s.UpdateJob(ctx, uuidC, func(*cloud.Job) error { called = true; return nil })
	assert.ErrorIs(t, err, message.ErrNotFound, "UpdateJob of an unknown UUID")
	assert.False(t, called, "an update of an unknown job does not call update")
	jobs, err := s.Jobs(ctx)
	require.NoError(t, err)
	assert.Empty(t, jobs, "Jobs of an empty store")
	require.NoError(t, s.AddVM(ctx, sampleVM(uuidC)))
	assert.ErrorIs(t, second(s.Job(ctx, uuidC)), message.ErrNotFound, "a VM is not a job: each kind has its own UUIDs")
}

func testJobLists(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	for _, id := range []string{uuidC, uuidA, uuidB} {
		require.NoError(t, s.AddJob(ctx, sampleJob(id)))
	}
	jobs, err := s.Jobs(ctx)
	require.NoError(t, err)
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.UUID)
		sameJob(t, sampleJob(j.UUID), j, "a listed job is the whole record")
	}
	assert.Equal(t, []string{uuidA, uuidB, uuidC}, ids, "Jobs is sorted by UUID")

	jobs[0].State = cloud.JobSucceeded
	got, err := s.Job(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, cloud.JobFailed, got.State, "returned records are the caller's copies")
}

func testJobUpdate(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	p := h.Peer(t, s)
	pending := sampleJob(uuidA)
	pending.State, pending.Step, pending.Code, pending.Error, pending.Result = cloud.JobPending, "", "", "", ""
	require.NoError(t, s.AddJob(ctx, pending))

	at := time.UnixMicro(1764480002999999).UTC()
	var seen int64
	got, err := s.UpdateJob(ctx, uuidA, func(j *cloud.Job) error {
		seen = j.Version
		j.State, j.Step, j.Node, j.UpdatedAt, j.Version = cloud.JobRunning, "checked", uuidC, at, 100
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, int64(1), seen, "the update function sees the stored version")
	want := pending
	want.State, want.Step, want.Node, want.UpdatedAt, want.Version = cloud.JobRunning, "checked", uuidC, at, 2
	sameJob(t, want, got, "UpdateJob returns the record after the update, one version up whatever update set")
	read, err := p.Job(ctx, uuidA)
	require.NoError(t, err)
	sameJob(t, want, read, "UpdateJob stores the record it returns; every handle reads it")

	boom := errors.New("boom")
	_, err = s.UpdateJob(ctx, uuidA, func(j *cloud.Job) error { j.State, j.Result = cloud.JobSucceeded, "{}"; return boom })
	assert.Same(t, boom, err, "the update's error is returned as is")
	read, err = s.Job(ctx, uuidA)
	require.NoError(t, err)
	sameJob(t, want, read, "a failed update changes nothing, the version included")

	_, err = s.UpdateJob(ctx, uuidA, func(j *cloud.Job) error { j.UUID = uuidB; return nil })
	assert.ErrorIs(t, err, message.ErrBadRequest, "UUIDs never change")
	assert.ErrorIs(t, second(s.Job(ctx, uuidB)), message.ErrNotFound, "a refused update creates nothing")

	moved := errors.New("the job moved on")
	finish := func(base int64) error {
		_, err := p.UpdateJob(ctx, uuidA, func(j *cloud.Job) error {
			if j.Version != base || j.State.Terminal() {
				return moved
			}
			j.State, j.Step, j.Result = cloud.JobSucceeded, "moved", `{"ok":true}`
			return nil
		})
		return err
	}
	assert.ErrorIs(t, finish(1), moved, "a compare-and-set on an older version is refused")
	assert.NoError(t, finish(2), "a compare-and-set on the stored version succeeds")
	assert.ErrorIs(t, finish(3), moved, "a terminal job is not finished twice")
	read, err = s.Job(ctx, uuidA)
	require.NoError(t, err)
	want.State, want.Step, want.Result, want.Version = cloud.JobSucceeded, "moved", `{"ok":true}`, 3
	sameJob(t, want, read, "the compare-and-set's write")
}

func testJobCanceled(t *testing.T, h Harness) {
	s := h.New(t)
	require.NoError(t, s.AddJob(t.Context(), sampleJob(uuidA)))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	called := false
	for name, err := range map[string]error{
		"AddJob": s.AddJob(ctx, sampleJob(uuidB)),
		"Job":    second(s.Job(ctx, uuidA)),
		"Jobs":   second(s.Jobs(ctx)),
		"UpdateJob": second(s.UpdateJob(ctx, uuidA, func(*cloud.Job) error {
			called = true
			return nil
		})),
	} {
		assert.ErrorIs(t, err, context.Canceled, "%s with a canceled ctx fails with ctx's error", name)
	}
	assert.False(t, called, "no update runs with a canceled ctx")
	jobs, err := s.Jobs(t.Context())
	require.NoError(t, err)
	require.Len(t, jobs, 1, "nothing was added with a canceled ctx")
	assert.Equal(t, int64(1), jobs[0].Version, "nothing was updated with a canceled ctx")
}

func testJobPeers(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	p := h.Peer(t, s)
	require.NoError(t, s.AddJob(ctx, sampleJob(uuidA)))
	got, err := p.Job(ctx, uuidA)
	require.NoError(t, err, "a job added through one handle is seen through another")
	sameJob(t, sampleJob(uuidA), got, "the peer reads the same record")
	assert.ErrorIs(t, p.AddJob(ctx, sampleJob(uuidA)), message.ErrAlreadyExists, "a UUID is added once across handles")
	_, err = p.UpdateJob(ctx, uuidA, func(j *cloud.Job) error { j.Node = uuidC; return nil })
	require.NoError(t, err)
	got, err = s.Job(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, uuidC, got.Node, "an update through one handle is seen through another")
	assert.Equal(t, int64(2), got.Version)
}

// testJobAtomicUpdates runs read-modify-write updates of one job from
// many goroutines through two handles: none may be lost.
func testJobAtomicUpdates(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	p := h.Peer(t, s)
	j := sampleJob(uuidA)
	j.Step = ""
	require.NoError(t, s.AddJob(ctx, j))

	const writers, each = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		st := s
		if w%2 == 1 {
			st = p
		}
		wg.Go(func() {
			for range each {
				if _, err := st.UpdateJob(ctx, uuidA, func(j *cloud.Job) error { j.Step += "x"; return nil }); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err, "concurrent updates must not fail (a SQL store waits for the row lock)")
	}
	got, err := s.Job(ctx, uuidA)
	require.NoError(t, err)
	assert.Len(t, got.Step, writers*each, "UpdateJob is atomic: no write is lost")
	assert.Equal(t, int64(1+writers*each), got.Version, "every committed UpdateJob adds one to the version, none is lost")
}

// testJobTransaction: in Do, jobs are added and updated like VMs: fn
// reads its own writes, each UpdateJob adds one to the staged version,
// nobody else sees them before the commit, and everybody after.
func testJobTransaction(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	p := h.Peer(t, s)
	require.NoError(t, s.AddJob(ctx, sampleJob(uuidA)))
	_, err := s.Do(ctx, fence.Guard{}, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
		for want := int64(2); want <= 3; want++ {
			j, err := tx.UpdateJob(ctx, uuidA, func(j *cloud.Job) error { j.Step += "+"; return nil })
			if err != nil {
				return nil, err
			}
			assert.Equal(t, want, j.Version, "each UpdateJob in a transaction adds one")
			got, err := tx.Job(ctx, uuidA)
			require.NoError(t, err)
			assert.Equal(t, want, got.Version, "a transaction reads its own version")
		}
		added := sampleJob(uuidB)
		added.Version = 7
		if err := tx.AddJob(ctx, added); err != nil {
			return nil, err
		}
		got, err := tx.Job(ctx, uuidB)
		require.NoError(t, err)
		assert.Equal(t, int64(1), got.Version, "AddJob in a transaction stores version 1")
		jobs, err := tx.Jobs(ctx)
		require.NoError(t, err)
		assert.Len(t, jobs, 2, "a transaction lists what it added")
		assert.ErrorIs(t, tx.AddJob(ctx, sampleJob(uuidB)), message.ErrAlreadyExists, "a job added in the transaction is there for it")

		got, err = p.Job(ctx, uuidA)
		require.NoError(t, err)
		sameJob(t, sampleJob(uuidA), got, "nobody sees a transaction's update before it commits")
		assert.ErrorIs(t, second(p.Job(ctx, uuidB)), message.ErrNotFound, "nobody sees a transaction's add before it commits")
		return nil, nil
	})
	require.NoError(t, err)
	got, err := p.Job(ctx, uuidA)
	require.NoError(t, err)
	want := sampleJob(uuidA)
	want.Step, want.Version = want.Step+"++", 3
	sameJob(t, want, got, "a committed transaction's updates are seen by everybody, each counted")
	got, err = p.Job(ctx, uuidB)
	require.NoError(t, err, "a committed add is seen by everybody")
	assert.Equal(t, int64(1), got.Version, "a job added in a transaction is at version 1")
}

// testJobTransactionRollback: a transaction whose fn fails, or whose ctx
// ends before the commit, writes no job and moves no version.
func testJobTransactionRollback(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	require.NoError(t, s.AddJob(ctx, sampleJob(uuidA)))
	boom := errors.New("boom")
	write := func(ctx context.Context, tx cloud.Store) error {
		if _, err := tx.UpdateJob(ctx, uuidA, func(j *cloud.Job) error { j.State, j.Result = cloud.JobSucceeded, "{}"; return nil }); err != nil {
			return err
		}
		return tx.AddJob(ctx, sampleJob(uuidB))
	}
	_, err := s.Do(ctx, fence.Guard{}, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
		if err := write(ctx, tx); err != nil {
			return nil, err
		}
		return nil, boom
	})
	assert.ErrorIs(t, err, boom, "Do returns fn's error")
	got, err := s.Job(ctx, uuidA)
	require.NoError(t, err)
	sameJob(t, sampleJob(uuidA), got, "a transaction whose fn failed changed no job, nor its version")
	assert.ErrorIs(t, second(s.Job(ctx, uuidB)), message.ErrNotFound, "a transaction whose fn failed added no job")

	cctx, cancel := context.WithCancel(ctx)
	_, err = s.Do(cctx, fence.Guard{}, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
		if err := write(ctx, tx); err != nil {
			return nil, err
		}
		cancel() // after the writes, before the commit
		return nil, nil
	})
	assert.ErrorIs(t, err, context.Canceled, "a transaction whose ctx ended before the commit fails with ctx's error")
	got, err = s.Job(ctx, uuidA)
	require.NoError(t, err)
	sameJob(t, sampleJob(uuidA), got, "a transaction whose ctx ended before the commit changed no job, nor its version")
	assert.ErrorIs(t, second(s.Job(ctx, uuidB)), message.ErrNotFound, "a transaction whose ctx ended before the commit added no job")

	got, err = s.UpdateJob(ctx, uuidA, func(j *cloud.Job) error { j.Step = "after"; return nil })
	require.NoError(t, err, "the job is not left locked")
	assert.Equal(t, int64(2), got.Version, "the next update after the rollbacks is the next version")
	require.NoError(t, s.AddJob(ctx, sampleJob(uuidB)), "the UUID of an add rolled back is free")
}
