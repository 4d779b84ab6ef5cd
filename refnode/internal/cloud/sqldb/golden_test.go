package sqldb_test

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/internal/sqlgolden"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/sqldb"
)

// The golden state: the records of a small cloud, as refnode keeps them.
// The golden files (testdata/golden/v<N>.sql) hold it in every schema
// version's form; see package internal/sqlgolden for the format and
// TestGolden for what is checked. The fence's tables, which the store
// opens beside the records, have golden files of their own, in
// fence/sqlfence.
const (
	// goldenPrefix is the placeholder table prefix of the golden files.
	goldenPrefix = "golden"

	goldenNode1 = "9a8b7c6d5e4f40312213a4b5c6d7e801" // management nodes
	goldenNode2 = "9a8b7c6d5e4f40312213a4b5c6d7e802"

	goldenImgUbuntu = "0a1b2c3d4e5f40718293a4b5c6d7e801" // every field set
	goldenImgBlank  = "0a1b2c3d4e5f40718293a4b5c6d7e802" // only the UUID
	goldenImgOdd    = "0a1b2c3d4e5f40718293a4b5c6d7e803" // quotes, non-ASCII, a size past 32 bits

	goldenHostUp    = "1b2c3d4e5f6041828394a5b6c7d8e901" // connected, taken over twice
	goldenHostDown  = "1b2c3d4e5f6041828394a5b6c7d8e902" // disconnected after a connection
	goldenHostNever = "1b2c3d4e5f6041828394a5b6c7d8e903" // never connected: no time (NULL)
	goldenHostEpoch = "1b2c3d4e5f6041828394a5b6c7d8e904" // connected at 1970-01-01 exactly: 0, not NULL

	goldenVMCreated   = "2c3d4e5f6a7041928394a5b6c7d8e901" // one VM in each state
	goldenVMStarting  = "2c3d4e5f6a7041928394a5b6c7d8e902"
	goldenVMRunning   = "2c3d4e5f6a7041928394a5b6c7d8e903"
	goldenVMStopping  = "2c3d4e5f6a7041928394a5b6c7d8e904"
	goldenVMStopped   = "2c3d4e5f6a7041928394a5b6c7d8e905"
	goldenVMRebooting = "2c3d4e5f6a7041928394a5b6c7d8e906"
	goldenVMDestroyed = "2c3d4e5f6a7041928394a5b6c7d8e907"

	goldenJobPending   = "3d4e5f6a7b8041a28394a5b6c7d8e901" // from schema version 3: one job in each state
	goldenJobRunning   = "3d4e5f6a7b8041a28394a5b6c7d8e902"
	goldenJobSucceeded = "3d4e5f6a7b8041a28394a5b6c7d8e903"
	goldenJobFailed    = "3d4e5f6a7b8041a28394a5b6c7d8e904"
	goldenJobBare      = "3d4e5f6a7b8041a28394a5b6c7d8e905" // no times (NULL), no optional text
)

// goldenTables are the record tables and their meta table.
var goldenTables = []string{goldenPrefix + "_hosts", goldenPrefix + "_images", goldenPrefix + "_vms", goldenPrefix + "_jobs", goldenPrefix + "_meta"}

// The golden jobs' times: a job recorded at goldenCreated, written last
// at goldenUpdated, with a deadline of goldenDeadline.
var (
	goldenCreated  = time.Date(2025, 6, 2, 8, 0, 0, 123456000, time.UTC)
	goldenUpdated  = time.Date(2025, 6, 2, 8, 0, 1, 999999000, time.UTC)
	goldenDeadline = time.Date(2025, 6, 2, 8, 5, 0, 0, time.UTC)
)

// goldenArgs are the golden migrations' arguments.
const goldenArgs = `{"host_uuid":"` + goldenHostDown + `","source":"` + goldenHostUp + `"}`

// TestGolden keeps refnode's record tables of every schema version
// readable: each golden file testdata/golden/v<N>.sql is loaded into a
// new SQLite database, the store opens it with today's code (migrating
// it), and every host, image and VM is read back through the store and
// compared with the values written below; then the store must go on
// working on those rows. Subtest "current" checks that today's code
// creates the tables of the newest file and writes the golden state as
// it says. After a schema change (a new migration), run
//
//	go test ./refnode/internal/cloud/sqldb -run TestGolden -update-golden
//
// which writes the new version's file; keep the old ones.
func TestGolden(t *testing.T) {
	t.Parallel()
	sqlgolden.Run(t, sqlgolden.Store{
		Pkg:    "./refnode/internal/cloud/sqldb",
		Tables: goldenTables,
		Meta:   goldenPrefix + "_meta",
		Open: func(t *testing.T, p *sqlconn.Pool, _ string) io.Closer {
			s, err := sqldb.Open(t.Context(), p, sqldb.Config{Prefix: goldenPrefix})
			require.NoError(t, err, "today's store must open (and migrate) the tables")
			return s
		},
		Write: writeRecordsGolden,
		Check: checkRecordsGolden,
	})
}

// writeRecordsGolden writes the golden state with a real store of
// today's code and returns the golden file's header. Images, hosts, VMs
// and jobs are added and then changed by UpdateImage, UpdateHost,
// UpdateVM and UpdateJob, so both ways of writing a row are in the file.
func writeRecordsGolden(t *testing.T, p *sqlconn.Pool, _ string) []string {
	ctx := t.Context()
	s, err := sqldb.Open(ctx, p, sqldb.Config{Prefix: goldenPrefix})
	require.NoError(t, err)
	defer s.Close()

	for _, img := range []cloud.Image{
		{UUID: goldenImgUbuntu, Name: "ubuntu", URL: "https://images.example.com/ubuntu-24.04-server-cloudimg-amd64.img", SizeMB: 2252},
		{UUID: goldenImgBlank},
		{UUID: goldenImgOdd, Name: "Ünïcode 镜像 'quoted' \"double\"", URL: "file:///var/lib/images/with space.qcow2?x=1&y=2", SizeMB: 5 << 40},
	} {
		require.NoError(t, s.AddImage(ctx, img))
	}
	_, err = s.UpdateImage(ctx, goldenImgUbuntu, func(img *cloud.Image) error { img.Name = "ubuntu-24.04"; return nil })
	require.NoError(t, err)

	require.NoError(t, s.AddHost(ctx, cloud.Host{UUID: goldenHostUp, Name: "kvm-01", Address: "10.0.0.11", Status: cloud.HostDisconnected, ManagedBy: goldenNode2, Takeovers: 1}))
	_, err = s.UpdateHost(ctx, goldenHostUp, func(h *cloud.Host) error {
		h.Status, h.ManagedBy, h.Takeovers = cloud.HostConnected, goldenNode1, h.Takeovers+1
		h.ConnectedAt = time.Date(2025, 6, 1, 12, 34, 56, 789012000, time.UTC)
		return nil
	})
	require.NoError(t, err)
	for _, h := range []cloud.Host{
		{UUID: goldenHostDown, Name: "kvm-02", Address: "10.0.0.12", Status: cloud.HostDisconnected, ManagedBy: goldenNode2,
			ConnectedAt: time.Date(2025, 5, 31, 23, 59, 59, 1000, time.FixedZone("CEST", 2*60*60))},
		{UUID: goldenHostNever, Address: "kvm-03.example.com", Status: cloud.HostDisconnected},
		{UUID: goldenHostEpoch, Name: "kvm-04 «ünïcode»", Address: "[fd00::4]:16509", Status: cloud.HostConnected, ManagedBy: goldenNode1, Takeovers: 7,
			ConnectedAt: time.Unix(0, 0)},
	} {
		require.NoError(t, s.AddHost(ctx, h))
	}

	for _, vm := range []struct {
		cloud.VM
		then cloud.VMState // set by UpdateVM, if not ""
	}{
		{VM: cloud.VM{UUID: goldenVMCreated, Name: "web-1", ImageUUID: goldenImgUbuntu, HostUUID: goldenHostUp, CPUs: 2, MemoryMB: 2048, State: cloud.VMCreated}},
		{VM: cloud.VM{UUID: goldenVMStarting, Name: "web-2", ImageUUID: goldenImgUbuntu, HostUUID: goldenHostUp, CPUs: 1, MemoryMB: 512, State: cloud.VMStopped}, then: cloud.VMStarting},
		{VM: cloud.VM{UUID: goldenVMRunning, Name: "db-1", ImageUUID: goldenImgOdd, HostUUID: goldenHostDown, CPUs: 64, MemoryMB: 262144, State: cloud.VMStarting}, then: cloud.VMRunning},
		{VM: cloud.VM{UUID: goldenVMStopping, ImageUUID: goldenImgBlank, HostUUID: goldenHostDown, State: cloud.VMStopping}},
		{VM: cloud.VM{UUID: goldenVMStopped, Name: "it's stopped", ImageUUID: goldenImgUbuntu, HostUUID: goldenHostEpoch, CPUs: 4, MemoryMB: 8192, State: cloud.VMStopping}, then: cloud.VMStopped},
		{VM: cloud.VM{UUID: goldenVMRebooting, Name: "cache-1", ImageUUID: goldenImgUbuntu, HostUUID: goldenHostUp, CPUs: 8, MemoryMB: 16384, State: cloud.VMRunning}, then: cloud.VMRebooting},
		{VM: cloud.VM{UUID: goldenVMDestroyed, Name: "old", ImageUUID: goldenImgBlank, HostUUID: goldenHostNever, CPUs: 1, MemoryMB: 256, State: cloud.VMRunning}, then: cloud.VMDestroyed},
	} {
		require.NoError(t, s.AddVM(ctx, vm.VM))
		if vm.then != "" {
			_, err := s.UpdateVM(ctx, vm.UUID, func(v *cloud.VM) error { v.State = vm.then; return nil })
			require.NoError(t, err)
		}
	}

	for _, j := range []struct {
		cloud.Job
		then []func(*cloud.Job) // each an UpdateJob
	}{
		{Job: cloud.Job{UUID: goldenJobPending, Kind: "vm.migrate", Resource: goldenVMRunning, Args: goldenArgs, State: cloud.JobPending,
			CreatedAt: goldenCreated, UpdatedAt: goldenCreated, Deadline: goldenDeadline, Version: 9}},
		{Job: cloud.Job{UUID: goldenJobRunning, Kind: "vm.migrate", Resource: goldenVMStopped, Args: goldenArgs, State: cloud.JobPending,
			CreatedAt: goldenCreated, UpdatedAt: goldenCreated, Deadline: goldenDeadline},
			then: []func(*cloud.Job){func(j *cloud.Job) {
				j.State, j.Step, j.Node, j.UpdatedAt = cloud.JobRunning, "checked", goldenNode1, goldenUpdated
			}}},
		{Job: cloud.Job{UUID: goldenJobSucceeded, Kind: "vm.migrate", Resource: goldenVMCreated, Args: goldenArgs, State: cloud.JobPending,
			CreatedAt: goldenCreated, UpdatedAt: goldenCreated, Deadline: goldenDeadline},
			then: []func(*cloud.Job){
				func(j *cloud.Job) { j.State, j.Step, j.Node = cloud.JobRunning, "checked", goldenNode2 },
				func(j *cloud.Job) {
					j.State, j.Step, j.Node, j.UpdatedAt = cloud.JobSucceeded, "moved", goldenNode1, goldenUpdated
					j.Result = `{"host_uuid":"` + goldenHostDown + `"}`
				},
			}},
		{Job: cloud.Job{UUID: goldenJobFailed, Kind: "vm.migrate", Resource: goldenVMStopping, Args: `{"host_uuid":"` + goldenHostNever + `"}`, State: cloud.JobPending,
			CreatedAt: goldenCreated.In(time.FixedZone("CEST", 2*60*60)), UpdatedAt: goldenCreated},
			then: []func(*cloud.Job){func(j *cloud.Job) {
				j.State, j.Node, j.UpdatedAt = cloud.JobFailed, goldenNode2, goldenUpdated
				j.Code, j.Error = "failed_precondition", "host kvm-03 «ünïcode» isn't connected: 'quoted' \"double\""
			}}},
		{Job: cloud.Job{UUID: goldenJobBare, Kind: "x", Resource: goldenImgBlank, State: cloud.JobState("paused")}},
	} {
		require.NoError(t, s.AddJob(ctx, j.Job))
		for _, then := range j.then {
			_, err := s.UpdateJob(ctx, j.UUID, func(job *cloud.Job) error { then(job); return nil })
			require.NoError(t, err)
		}
	}

	var version int
	require.NoError(t, p.DB.QueryRowContext(ctx, `SELECT version FROM "golden_meta" WHERE id = 1`).Scan(&version))
	return []string{
		fmt.Sprintf("Golden file of refnode/internal/cloud/sqldb: schema version %d, as today's code stores it in SQLite.", version),
		"Written by a real store (writeRecordsGolden in golden_test.go) with",
		"\tgo test ./refnode/internal/cloud/sqldb -run TestGolden -update-golden",
		"Do not edit, and keep it forever: TestGolden loads it, opens the store on it and reads every row back.",
		"The fence's tables beside these have golden files of their own, in fence/sqlfence.",
	}
}

// checkRecordsGolden opens a store of today's code on p's database, a
// golden file of schema version v, and reads it back.
func checkRecordsGolden(t *testing.T, v int, p *sqlconn.Pool, _ string) {
	ctx := t.Context()
	s, err := sqldb.Open(ctx, p, sqldb.Config{Prefix: goldenPrefix})
	require.NoError(t, err, "today's store must open (and migrate) tables of schema version %d", v)
	defer func() { assert.NoError(t, s.Close()) }()

	// Written by hand, not derived from the generator: what the rows
	// mean. Times come back in UTC, to the microsecond.
	wantImages := []cloud.Image{
		{UUID: goldenImgUbuntu, Name: "ubuntu-24.04", URL: "https://images.example.com/ubuntu-24.04-server-cloudimg-amd64.img", SizeMB: 2252},
		{UUID: goldenImgBlank},
		{UUID: goldenImgOdd, Name: "Ünïcode 镜像 'quoted' \"double\"", URL: "file:///var/lib/images/with space.qcow2?x=1&y=2", SizeMB: 5497558138880},
	}
	wantHosts := []cloud.Host{
		{UUID: goldenHostUp, Name: "kvm-01", Address: "10.0.0.11", Status: cloud.HostConnected, ManagedBy: goldenNode1, Takeovers: 2,
			ConnectedAt: time.Date(2025, 6, 1, 12, 34, 56, 789012000, time.UTC)},
		{UUID: goldenHostDown, Name: "kvm-02", Address: "10.0.0.12", Status: cloud.HostDisconnected, ManagedBy: goldenNode2,
			ConnectedAt: time.Date(2025, 5, 31, 21, 59, 59, 1000, time.UTC)},
		{UUID: goldenHostNever, Address: "kvm-03.example.com", Status: cloud.HostDisconnected},
		{UUID: goldenHostEpoch, Name: "kvm-04 «ünïcode»", Address: "[fd00::4]:16509", Status: cloud.HostConnected, ManagedBy: goldenNode1, Takeovers: 7,
			ConnectedAt: time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	// The VMs' versions: schema version 1 had none, and its rows are
	// migrated to version 1, as if just inserted; from schema version 2
	// a VM added and then updated once is at version 2.
	updated := int64(2)
	if v < 2 {
		updated = 1
	}
	wantVMs := []cloud.VM{
		{UUID: goldenVMCreated, Name: "web-1", ImageUUID: goldenImgUbuntu, HostUUID: goldenHostUp, CPUs: 2, MemoryMB: 2048, State: cloud.VMCreated, Version: 1},
		{UUID: goldenVMStarting, Name: "web-2", ImageUUID: goldenImgUbuntu, HostUUID: goldenHostUp, CPUs: 1, MemoryMB: 512, State: cloud.VMStarting, Version: updated},
		{UUID: goldenVMRunning, Name: "db-1", ImageUUID: goldenImgOdd, HostUUID: goldenHostDown, CPUs: 64, MemoryMB: 262144, State: cloud.VMRunning, Version: updated},
		{UUID: goldenVMStopping, ImageUUID: goldenImgBlank, HostUUID: goldenHostDown, State: cloud.VMStopping, Version: 1},
		{UUID: goldenVMStopped, Name: "it's stopped", ImageUUID: goldenImgUbuntu, HostUUID: goldenHostEpoch, CPUs: 4, MemoryMB: 8192, State: cloud.VMStopped, Version: updated},
		{UUID: goldenVMRebooting, Name: "cache-1", ImageUUID: goldenImgUbuntu, HostUUID: goldenHostUp, CPUs: 8, MemoryMB: 16384, State: cloud.VMRebooting, Version: updated},
		{UUID: goldenVMDestroyed, Name: "old", ImageUUID: goldenImgBlank, HostUUID: goldenHostNever, CPUs: 1, MemoryMB: 256, State: cloud.VMDestroyed, Version: updated},
	}
	// What the state and status strings mean to today's code.
	transitional := map[string]bool{goldenVMStarting: true, goldenVMStopping: true, goldenVMRebooting: true}
	stored := map[string]string{ // the stored strings, as SQL reads them
		goldenVMCreated: "created", goldenVMStarting: "starting", goldenVMRunning: "running", goldenVMStopping: "stopping",
		goldenVMStopped: "stopped", goldenVMRebooting: "rebooting", goldenVMDestroyed: "destroyed",
		goldenHostUp: "connected", goldenHostDown: "disconnected", goldenHostNever: "disconnected", goldenHostEpoch: "connected",
	}

	images, err := s.Images(ctx)
	require.NoError(t, err)
	assert.Equal(t, wantImages, images, "Images must read every golden image")
	for _, want := range wantImages {
		got, err := s.Image(ctx, want.UUID)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	hosts, err := s.Hosts(ctx)
	require.NoError(t, err)
	assert.Equal(t, wantHosts, hosts, "Hosts must read every golden host (connected_us: microseconds since 1970, NULL for none)")
	for _, want := range wantHosts {
		got, err := s.Host(ctx, want.UUID)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		assert.Equal(t, stored[want.UUID], got.Status.String(), "host %s: the stored status must be one today's code knows", want.UUID)
	}
	// The jobs came with schema version 3: older tables have none.
	var wantJobs []cloud.Job
	if v >= 3 {
		wantJobs = []cloud.Job{
			{UUID: goldenJobPending, Kind: "vm.migrate", Resource: goldenVMRunning, Args: goldenArgs, State: cloud.JobPending,
				CreatedAt: goldenCreated, UpdatedAt: goldenCreated, Deadline: goldenDeadline, Version: 1},
			{UUID: goldenJobRunning, Kind: "vm.migrate", Resource: goldenVMStopped, Args: goldenArgs, State: cloud.JobRunning, Step: "checked", Node: goldenNode1,
				CreatedAt: goldenCreated, UpdatedAt: goldenUpdated, Deadline: goldenDeadline, Version: 2},
			{UUID: goldenJobSucceeded, Kind: "vm.migrate", Resource: goldenVMCreated, Args: goldenArgs, State: cloud.JobSucceeded, Step: "moved", Node: goldenNode1,
				Result: `{"host_uuid":"` + goldenHostDown + `"}`, CreatedAt: goldenCreated, UpdatedAt: goldenUpdated, Deadline: goldenDeadline, Version: 3},
			{UUID: goldenJobFailed, Kind: "vm.migrate", Resource: goldenVMStopping, Args: `{"host_uuid":"` + goldenHostNever + `"}`, State: cloud.JobFailed, Node: goldenNode2,
				Code: "failed_precondition", Error: "host kvm-03 «ünïcode» isn't connected: 'quoted' \"double\"",
				CreatedAt: goldenCreated, UpdatedAt: goldenUpdated, Version: 2},
			{UUID: goldenJobBare, Kind: "x", Resource: goldenImgBlank, State: cloud.JobState("paused"), Version: 1},
		}
	}
	storedJobs := map[string]string{
		goldenJobPending: "pending", goldenJobRunning: "running", goldenJobSucceeded: "succeeded", goldenJobFailed: "failed", goldenJobBare: `unknown("paused")`,
	}

	vms, err := s.VMs(ctx)
	require.NoError(t, err)
	assert.Equal(t, wantVMs, vms, "VMs must read every golden VM, the destroyed one included")
	for _, want := range wantVMs {
		got, err := s.VM(ctx, want.UUID)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		assert.Equal(t, stored[want.UUID], got.State.String(), "VM %s: the stored state must be one today's code knows", want.UUID)
		assert.Equal(t, transitional[want.UUID], got.State.Transitional(), "VM %s in state %s: transitional or not", want.UUID, got.State)
	}

	jobs, err := s.Jobs(ctx)
	require.NoError(t, err)
	assert.Equal(t, append([]cloud.Job{}, wantJobs...), jobs, "Jobs must read every golden job (times: microseconds since 1970, NULL for none)")
	for _, want := range wantJobs {
		got, err := s.Job(ctx, want.UUID)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		assert.Equal(t, storedJobs[want.UUID], got.State.String(), "job %s: the stored state reads as today's code names it", want.UUID)
		assert.Equal(t, want.State == cloud.JobSucceeded || want.State == cloud.JobFailed, got.State.Terminal(), "job %s in state %s: terminal or not", want.UUID, got.State)
	}

	// The rows go on working with today's code.
	during, after, err := cloud.Transition(wantVMs[3].State, cloud.VMOpStop)
	require.NoError(t, err, "a VM left stopping (by a dead owner) can be stopped again")
	got, err := s.UpdateVM(ctx, goldenVMStopping, func(vm *cloud.VM) error { vm.State = during; return nil })
	require.NoError(t, err)
	assert.Equal(t, cloud.VMStopping, got.State)
	got, err = s.UpdateVM(ctx, goldenVMStopping, func(vm *cloud.VM) error { vm.State = after; return nil })
	require.NoError(t, err)
	want := wantVMs[3]
	want.State, want.Version = cloud.VMStopped, wantVMs[3].Version+2
	assert.Equal(t, want, got, "each update of a golden row moves its version one up")
	got, err = s.VM(ctx, goldenVMStopping)
	require.NoError(t, err)
	assert.Equal(t, want, got, "an update of a golden row keeps its other columns")

	connected := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	h, err := s.UpdateHost(ctx, goldenHostNever, func(h *cloud.Host) error {
		h.Status, h.ManagedBy, h.ConnectedAt = cloud.HostConnected, goldenNode2, connected
		return nil
	})
	require.NoError(t, err)
	wantHost := cloud.Host{UUID: goldenHostNever, Address: "kvm-03.example.com", Status: cloud.HostConnected, ManagedBy: goldenNode2, ConnectedAt: connected}
	assert.Equal(t, wantHost, h)
	h, err = s.Host(ctx, goldenHostNever)
	require.NoError(t, err)
	assert.Equal(t, wantHost, h, "an update of a golden row keeps its other columns")

	img, err := s.UpdateImage(ctx, goldenImgOdd, func(img *cloud.Image) error { img.Name = "renamed"; return nil })
	require.NoError(t, err)
	wantImg := wantImages[2]
	wantImg.Name = "renamed"
	assert.Equal(t, wantImg, img)
	img, err = s.Image(ctx, goldenImgOdd)
	require.NoError(t, err)
	assert.Equal(t, wantImg, img, "an update of a golden row keeps its other columns")

	err = s.AddVM(ctx, cloud.VM{UUID: goldenVMCreated, ImageUUID: goldenImgUbuntu, HostUUID: goldenHostUp, State: cloud.VMCreated})
	assert.ErrorIs(t, err, message.ErrAlreadyExists, "a golden VM's UUID is taken")
	assert.True(t, strings.Contains(err.Error(), "already exists"), "got %v", err)

	// Jobs work on the tables, migrated (a new job) or golden (a
	// pending job taken a step on).
	if v < 3 {
		job := cloud.Job{UUID: goldenJobPending, Kind: "vm.migrate", Resource: goldenVMRunning, Args: goldenArgs, State: cloud.JobPending,
			CreatedAt: goldenCreated, UpdatedAt: goldenCreated, Deadline: goldenDeadline}
		require.NoError(t, s.AddJob(ctx, job), "a job is added to the jobs' table migration 3 created")
		job.Version = 1 // as AddJob stores it
		wantJobs = []cloud.Job{job}
	}
	ran, err := s.UpdateJob(ctx, goldenJobPending, func(j *cloud.Job) error {
		j.State, j.Step, j.Node, j.UpdatedAt = cloud.JobRunning, "checked", goldenNode2, goldenUpdated
		return nil
	})
	require.NoError(t, err)
	wantJob := wantJobs[0]
	wantJob.State, wantJob.Step, wantJob.Node, wantJob.UpdatedAt, wantJob.Version = cloud.JobRunning, "checked", goldenNode2, goldenUpdated, 2
	assert.Equal(t, wantJob, ran, "an update of a job moves its version one up")
	got2, err := s.Job(ctx, goldenJobPending)
	require.NoError(t, err)
	assert.Equal(t, wantJob, got2, "an update of a job keeps its other columns")
	assert.ErrorIs(t, s.AddJob(ctx, cloud.Job{UUID: goldenJobPending, Kind: "x", Resource: goldenVMRunning}), message.ErrAlreadyExists, "a job's UUID is taken")
}
