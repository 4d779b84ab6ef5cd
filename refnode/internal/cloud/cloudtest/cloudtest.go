// Package cloudtest is the conformance suite of [cloud.Store]: the
// behaviour every record store of refnode shares, run unchanged by the
// in-memory store (memdb) and the SQL store (sqldb) on each database.
//
//	func TestConformance(t *testing.T) {
//		cloudtest.Run(t, cloudtest.Harness{
//			New: func(t *testing.T) cloud.Store { return memdb.New() },
//		})
//	}
//
// Each case is a subtest on a store of its own, and its failure messages
// name the rule of the Store contract that was broken.
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

// Harness tells [Run] how to make the stores under test.
type Harness struct {
	// New returns an empty store for one case, and releases it (and
	// whatever it created, such as tables) at the test's cleanup. It is
	// called once per case; required.
	New func(t *testing.T) cloud.Store
	// Peer, optional, returns another handle on the records of s, as
	// another management node or process opens it (its own connection
	// pool, say); it is released at the test's cleanup. The cases that
	// check that handles see each other's writes and update atomically
	// across them use it. Default: s itself.
	Peer func(t *testing.T, s cloud.Store) cloud.Store
}

// Run runs every case of the suite, each as a subtest on a new store.
func Run(t *testing.T, h Harness) {
	t.Helper()
	require.NotNil(t, h.New, "cloudtest: Harness.New is required")
	if h.Peer == nil {
		h.Peer = func(_ *testing.T, s cloud.Store) cloud.Store { return s }
	}
	for _, c := range []struct {
		name string
		run  func(t *testing.T, h Harness)
	}{
		{"RoundTrip", testRoundTrip},
		{"AddTwice", testAddTwice},
		{"UUIDs", testUUIDs},
		{"NotFound", testNotFound},
		{"ListsSortedAndCopied", testLists},
		{"Update", testUpdate},
		{"UpdateRefusesUUIDChange", testUpdateUUID},
		{"CanceledContext", testCanceled},
		{"PeersSeeWrites", testPeers},
		{"AtomicUpdates", testAtomicUpdates},
		{"ConcurrentAdds", testConcurrentAdds},
		{"Transaction", testTransaction},
		{"TransactionRollsBack", testTransactionRollback},
		{"TransactionsSerialize", testTransactionsSerialize},
		{"VMVersions", testVersions},
		{"VMVersionsInTransactions", testVersionsInTransactions},
		{"DeleteImage", testDeleteImage},
		{"DeleteImageInTransactions", testDeleteImageInTransactions},
		{"LockImage", testLockImage},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
	for _, c := range jobCases {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
}

// Fixed UUIDs, so that sorting can be checked: a < b < c.
const (
	uuidA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	uuidB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	uuidC = "cccccccccccccccccccccccccccccccc"
)

func sampleHost(id string) cloud.Host {
	return cloud.Host{
		UUID:        id,
		Name:        `rack 7 "north" – O'Brien's`, // quotes and non-ASCII survive
		Address:     "10.0.0.11",
		Status:      cloud.HostConnected,
		ManagedBy:   "3694776ab31a45709259254a018913ca",
		Takeovers:   2,
		ConnectedAt: time.UnixMicro(1764480000123456).UTC(),
	}
}

func sampleImage(id string) cloud.Image {
	return cloud.Image{UUID: id, Name: "ubuntu-24.04 ☁", URL: "http://images.example/ubuntu.qcow2?v=1&x=%20", SizeMB: 1 << 40}
}

// sampleVM is a VM as AddVM stores it: at version 1.
func sampleVM(id string) cloud.VM {
	return cloud.VM{UUID: id, Name: "web-1", ImageUUID: uuidB, HostUUID: uuidC, CPUs: 4, MemoryMB: 8192, State: cloud.VMRunning, Version: 1}
}

// sameHost asserts a == b, comparing times with Equal.
func sameHost(t *testing.T, want, got cloud.Host, msg string) {
	t.Helper()
	assert.True(t, want.ConnectedAt.Equal(got.ConnectedAt), "%s: ConnectedAt %v, want %v (times keep microseconds)", msg, got.ConnectedAt, want.ConnectedAt)
	want.ConnectedAt, got.ConnectedAt = time.Time{}, time.Time{}
	assert.Equal(t, want, got, msg)
}

func testRoundTrip(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	host := sampleHost(uuidA)
	require.NoError(t, s.AddHost(ctx, host))
	got, err := s.Host(ctx, uuidA)
	require.NoError(t, err)
	sameHost(t, host, got, "a host reads back as it was added, every field")

	bare := cloud.Host{UUID: uuidB, Status: cloud.HostDisconnected}
	require.NoError(t, s.AddHost(ctx, bare))
	got, err = s.Host(ctx, uuidB)
	require.NoError(t, err)
	assert.True(t, got.ConnectedAt.IsZero(), "a zero time stays zero")
	sameHost(t, bare, got, "empty fields read back empty")

	img := sampleImage(uuidA)
	require.NoError(t, s.AddImage(ctx, img))
	gotImg, err := s.Image(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, img, gotImg, "an image reads back as it was added")

	vm := sampleVM(uuidA)
	require.NoError(t, s.AddVM(ctx, vm))
	gotVM, err := s.VM(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, vm, gotVM, "a VM reads back as it was added")
}

func testAddTwice(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	require.NoError(t, s.AddHost(ctx, sampleHost(uuidA)))
	require.NoError(t, s.AddImage(ctx, sampleImage(uuidA)))
	require.NoError(t, s.AddVM(ctx, sampleVM(uuidA)))
	assert.ErrorIs(t, s.AddHost(ctx, cloud.Host{UUID: uuidA, Name: "other"}), message.ErrAlreadyExists, "a host UUID is added once")
	assert.ErrorIs(t, s.AddImage(ctx, cloud.Image{UUID: uuidA}), message.ErrAlreadyExists, "an image UUID is added once")
	assert.ErrorIs(t, s.AddVM(ctx, cloud.VM{UUID: uuidA}), message.ErrAlreadyExists, "a VM UUID is added once")
	got, err := s.Host(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, sampleHost(uuidA).Name, got.Name, "a refused add changes nothing")
}

func testUUIDs(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	for _, bad := range []string{"nope", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa", ""} {
		what := fmt.Sprintf("UUID %q", bad)
		assert.ErrorIs(t, s.AddHost(ctx, cloud.Host{UUID: bad}), message.ErrInvalidUUID, "AddHost: %s is refused: UUIDs must be canonical", what)
		assert.ErrorIs(t, s.AddImage(ctx, cloud.Image{UUID: bad}), message.ErrInvalidUUID, "AddImage: %s", what)
		assert.ErrorIs(t, s.AddVM(ctx, cloud.VM{UUID: bad}), message.ErrInvalidUUID, "AddVM: %s", what)
		assert.ErrorIs(t, second(s.Host(ctx, bad)), message.ErrInvalidUUID, "Host: %s", what)
		assert.ErrorIs(t, second(s.Image(ctx, bad)), message.ErrInvalidUUID, "Image: %s", what)
		assert.ErrorIs(t, second(s.VM(ctx, bad)), message.ErrInvalidUUID, "VM: %s", what)
		assert.ErrorIs(t, second(s.UpdateHost(ctx, bad, func(*cloud.Host) error { return nil })), message.ErrInvalidUUID, "UpdateHost: %s", what)
		assert.ErrorIs(t, second(s.UpdateImage(ctx, bad, func(*cloud.Image) error { return nil })), message.ErrInvalidUUID, "UpdateImage: %s", what)
		assert.ErrorIs(t, second(s.UpdateVM(ctx, bad, func(*cloud.VM) error { return nil })), message.ErrInvalidUUID, "UpdateVM: %s", what)
	}
	hosts, err := s.Hosts(ctx)
	require.NoError(t, err)
	assert.Empty(t, hosts, "nothing was added with a bad UUID")
}

func testNotFound(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	called := false
	for name, err := range map[string]error{
		"Host":  second(s.Host(ctx, uuidC)),
		"Image": second(s.Image(ctx, uuidC)),
		"VM":    second(s.VM(ctx, uuidC)),
		"UpdateHost": second(s.UpdateHost(ctx, uuidC, func(*cloud.Host) error {
			called = true
			return nil
		})),
		"UpdateImage": second(s.UpdateImage(ctx, uuidC, func(*cloud.Image) error {
			called = true
			return nil
		})),
		"UpdateVM": second(s.UpdateVM(ctx, uuidC, func(*cloud.VM) error {
			called = true
			return nil
		})),
	} {
		assert.ErrorIs(t, err, message.ErrNotFound, "%s of an unknown UUID", name)
	}
	assert.False(t, called, "an update of an unknown record does not call update")
	for name, n := range map[string]int{
		"Hosts":  len(first(s.Hosts(ctx))),
		"Images": len(first(s.Images(ctx))),
		"VMs":    len(first(s.VMs(ctx))),
	} {
		assert.Zero(t, n, "%s of an empty store", name)
	}
}

func testLists(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	for _, id := range []string{uuidC, uuidA, uuidB} {
		require.NoError(t, s.AddHost(ctx, sampleHost(id)))
		require.NoError(t, s.AddImage(ctx, sampleImage(id)))
		require.NoError(t, s.AddVM(ctx, sampleVM(id)))
	}
	sorted := []string{uuidA, uuidB, uuidC}
	hosts, err := s.Hosts(ctx)
	require.NoError(t, err)
	images, err := s.Images(ctx)
	require.NoError(t, err)
	vms, err := s.VMs(ctx)
	require.NoError(t, err)
	var hostIDs, imageIDs, vmIDs []string
	for i := range hosts {
		hostIDs = append(hostIDs, hosts[i].UUID)
		sameHost(t, sampleHost(hosts[i].UUID), hosts[i], "a listed host is the whole record")
	}
	for _, img := range images {
		imageIDs = append(imageIDs, img.UUID)
		assert.Equal(t, sampleImage(img.UUID), img, "a listed image is the whole record")
	}
	for _, vm := range vms {
		vmIDs = append(vmIDs, vm.UUID)
		assert.Equal(t, sampleVM(vm.UUID), vm, "a listed VM is the whole record")
	}
	assert.Equal(t, sorted, hostIDs, "Hosts is sorted by UUID")
	assert.Equal(t, sorted, imageIDs, "Images is sorted by UUID")
	assert.Equal(t, sorted, vmIDs, "VMs is sorted by UUID")

	hosts[0].Name = "changed by the caller"
	vms[0].State = cloud.VMDestroyed
	got, err := s.Host(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, sampleHost(uuidA).Name, got.Name, "returned records are the caller's copies")
	gotVM, err := s.VM(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, cloud.VMRunning, gotVM.State, "returned records are the caller's copies")
}

func testUpdate(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	require.NoError(t, s.AddHost(ctx, sampleHost(uuidA)))
	require.NoError(t, s.AddImage(ctx, sampleImage(uuidA)))
	require.NoError(t, s.AddVM(ctx, sampleVM(uuidA)))

	at := time.UnixMicro(1764480000999999).UTC()
	got, err := s.UpdateHost(ctx, uuidA, func(h *cloud.Host) error {
		h.Takeovers++
		h.Status, h.ManagedBy, h.ConnectedAt = cloud.HostDisconnected, uuidB, at
		return nil
	})
	require.NoError(t, err)
	want := sampleHost(uuidA)
	want.Takeovers, want.Status, want.ManagedBy, want.ConnectedAt = 3, cloud.HostDisconnected, uuidB, at
	sameHost(t, want, got, "UpdateHost returns the record after the update")
	read, err := s.Host(ctx, uuidA)
	require.NoError(t, err)
	sameHost(t, want, read, "UpdateHost stores the record it returns")

	boom := errors.New("boom")
	_, err = s.UpdateHost(ctx, uuidA, func(h *cloud.Host) error { h.Takeovers = 99; h.Name = "x"; return boom })
	assert.Same(t, boom, err, "the update's error is returned as is")
	read, err = s.Host(ctx, uuidA)
	require.NoError(t, err)
	sameHost(t, want, read, "a failed update changes nothing")

	img, err := s.UpdateImage(ctx, uuidA, func(img *cloud.Image) error { img.Name = "renamed"; img.SizeMB = 7; return nil })
	require.NoError(t, err)
	wantImg := sampleImage(uuidA)
	wantImg.Name, wantImg.SizeMB = "renamed", 7
	assert.Equal(t, wantImg, img, "UpdateImage returns the record after the update")
	readImg, err := s.Image(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, wantImg, readImg, "UpdateImage stores the record it returns")
	_, err = s.UpdateImage(ctx, uuidA, func(img *cloud.Image) error { img.Name = "lost"; return boom })
	assert.Same(t, boom, err, "the update's error is returned as is")
	readImg, err = s.Image(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, wantImg, readImg, "a failed update changes nothing")

	vm, err := s.UpdateVM(ctx, uuidA, func(v *cloud.VM) error { v.State = cloud.VMStopped; v.CPUs = 2; return nil })
	require.NoError(t, err)
	wantVM := sampleVM(uuidA)
	wantVM.State, wantVM.CPUs, wantVM.Version = cloud.VMStopped, 2, 2
	assert.Equal(t, wantVM, vm, "UpdateVM returns the record after the update, one version up")
	_, err = s.UpdateVM(ctx, uuidA, func(v *cloud.VM) error { v.State = cloud.VMDestroyed; return boom })
	assert.Same(t, boom, err, "the update's error is returned as is")
	readVM, err := s.VM(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, wantVM, readVM, "a failed update changes nothing")
}

func testUpdateUUID(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	require.NoError(t, s.AddHost(ctx, sampleHost(uuidA)))
	require.NoError(t, s.AddVM(ctx, sampleVM(uuidA)))
	_, err := s.UpdateHost(ctx, uuidA, func(h *cloud.Host) error { h.UUID = uuidB; h.Name = "moved"; return nil })
	assert.ErrorIs(t, err, message.ErrBadRequest, "UUIDs never change")
	_, err = s.UpdateVM(ctx, uuidA, func(v *cloud.VM) error { v.UUID = uuidB; return nil })
	assert.ErrorIs(t, err, message.ErrBadRequest, "UUIDs never change")
	require.NoError(t, s.AddImage(ctx, sampleImage(uuidA)))
	_, err = s.UpdateImage(ctx, uuidA, func(img *cloud.Image) error { img.UUID = uuidB; img.Name = "moved"; return nil })
	assert.ErrorIs(t, err, message.ErrBadRequest, "UUIDs never change")
	gotImg, err := s.Image(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, sampleImage(uuidA), gotImg, "a refused update changes nothing")
	assert.ErrorIs(t, second(s.Image(ctx, uuidB)), message.ErrNotFound, "a refused update creates nothing")
	got, err := s.Host(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, sampleHost(uuidA).Name, got.Name, "a refused update changes nothing")
	assert.ErrorIs(t, second(s.Host(ctx, uuidB)), message.ErrNotFound, "a refused update creates nothing")
	assert.ErrorIs(t, second(s.VM(ctx, uuidB)), message.ErrNotFound, "a refused update creates nothing")
}

func testCanceled(t *testing.T, h Harness) {
	s := h.New(t)
	require.NoError(t, s.AddHost(t.Context(), sampleHost(uuidA)))
	require.NoError(t, s.AddImage(t.Context(), sampleImage(uuidA)))
	require.NoError(t, s.AddVM(t.Context(), sampleVM(uuidA)))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	called := false
	for name, err := range map[string]error{
		"AddHost":  s.AddHost(ctx, sampleHost(uuidB)),
		"AddImage": s.AddImage(ctx, sampleImage(uuidB)),
		"AddVM":    s.AddVM(ctx, sampleVM(uuidB)),
		"Host":     second(s.Host(ctx, uuidA)),
		"Hosts":    second(s.Hosts(ctx)),
		"Image":    second(s.Image(ctx, uuidA)),
		"Images":   second(s.Images(ctx)),
		"VM":       second(s.VM(ctx, uuidA)),
		"VMs":      second(s.VMs(ctx)),
		"UpdateHost": second(s.UpdateHost(ctx, uuidA, func(*cloud.Host) error {
			called = true
			return nil
		})),
		"UpdateImage": second(s.UpdateImage(ctx, uuidA, func(*cloud.Image) error {
			called = true
			return nil
		})),
		"UpdateVM": second(s.UpdateVM(ctx, uuidA, func(*cloud.VM) error {
			called = true
			return nil
		})),
	} {
		assert.ErrorIs(t, err, context.Canceled, "%s with a canceled ctx fails with ctx's error", name)
	}
	assert.False(t, called, "no update runs with a canceled ctx")
	hosts, err := s.Hosts(t.Context())
	require.NoError(t, err)
	assert.Len(t, hosts, 1, "nothing was added with a canceled ctx")
}

func testPeers(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	p := h.Peer(t, s)
	require.NoError(t, s.AddHost(ctx, sampleHost(uuidA)))
	require.NoError(t, p.AddImage(ctx, sampleImage(uuidA)))
	got, err := p.Host(ctx, uuidA)
	require.NoError(t, err, "a host added through one handle is seen through another")
	sameHost(t, sampleHost(uuidA), got, "the peer reads the same record")
	_, err = s.Image(ctx, uuidA)
	require.NoError(t, err, "an image added through one handle is seen through another")
	assert.ErrorIs(t, p.AddHost(ctx, sampleHost(uuidA)), message.ErrAlreadyExists, "a UUID is added once across handles")
	_, err = p.UpdateHost(ctx, uuidA, func(h *cloud.Host) error { h.ManagedBy = uuidC; return nil })
	require.NoError(t, err)
	got, err = s.Host(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, uuidC, got.ManagedBy, "an update through one handle is seen through another")
	_, err = s.UpdateImage(ctx, uuidA, func(img *cloud.Image) error { img.Name = "renamed"; return nil })
	require.NoError(t, err)
	img, err := p.Image(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, "renamed", img.Name, "an update through one handle is seen through another")
}

// testAtomicUpdates runs read-modify-write increments on one host, one
// image and one VM from many goroutines through two handles: none may be
// lost.
func testAtomicUpdates(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	p := h.Peer(t, s)
	host := sampleHost(uuidA)
	host.Takeovers = 0
	require.NoError(t, s.AddHost(ctx, host))
	vm := sampleVM(uuidA)
	vm.CPUs = 0
	require.NoError(t, s.AddVM(ctx, vm))
	img := sampleImage(uuidA)
	img.SizeMB = 0
	require.NoError(t, s.AddImage(ctx, img))

	const writers, each = 6, 15
	var wg sync.WaitGroup
	errs := make(chan error, 3*writers*each)
	for w := range writers {
		st := s
		if w%2 == 1 {
			st = p
		}
		wg.Go(func() {
			for range each {
				if _, err := st.UpdateHost(ctx, uuidA, func(h *cloud.Host) error { h.Takeovers++; return nil }); err != nil {
					errs <- fmt.Errorf("UpdateHost: %w", err)
				}
				if _, err := st.UpdateVM(ctx, uuidA, func(v *cloud.VM) error { v.CPUs++; return nil }); err != nil {
					errs <- fmt.Errorf("UpdateVM: %w", err)
				}
				if _, err := st.UpdateImage(ctx, uuidA, func(img *cloud.Image) error { img.SizeMB++; return nil }); err != nil {
					errs <- fmt.Errorf("UpdateImage: %w", err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err, "concurrent updates must not fail (a SQL store waits for the row lock)")
	}
	gotHost, err := s.Host(ctx, uuidA)
	require.NoError(t, err)
	gotVM, err := s.VM(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, writers*each, gotHost.Takeovers, "UpdateHost is atomic: no increment is lost")
	assert.Equal(t, writers*each, gotVM.CPUs, "UpdateVM is atomic: no increment is lost")
	assert.Equal(t, int64(1+writers*each), gotVM.Version, "every committed UpdateVM adds one to the version, none is lost")
	gotImg, err := s.Image(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, int64(writers*each), gotImg.SizeMB, "UpdateImage is atomic: no increment is lost")
}

// testConcurrentAdds adds one UUID from many goroutines: exactly one wins.
func testConcurrentAdds(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	p := h.Peer(t, s)
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		st := s
		if i%2 == 1 {
			st = p
		}
		wg.Go(func() { errs[i] = st.AddVM(ctx, cloud.VM{UUID: uuidB, Name: fmt.Sprint(i), State: cloud.VMCreated}) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
			continue
		}
		assert.ErrorIs(t, err, message.ErrAlreadyExists, "a losing concurrent add fails as a duplicate")
	}
	assert.Equal(t, 1, won, "exactly one of %d concurrent adds of one UUID succeeds", n)
}

// testTransaction: in Do, fn reads its own writes, nobody else sees them
// before the commit, and everybody after.
func testTransaction(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	p := h.Peer(t, s)
	require.NoError(t, s.AddImage(ctx, sampleImage(uuidA)))
	reply, err := s.Do(ctx, fence.Guard{}, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
		img, err := tx.UpdateImage(ctx, uuidA, func(img *cloud.Image) error { img.Name = "in tx"; return nil })
		if err != nil {
			return nil, err
		}
		assert.Equal(t, "in tx", img.Name, "UpdateImage in a transaction returns the record after the update")
		got, err := tx.Image(ctx, uuidA)
		require.NoError(t, err)
		assert.Equal(t, "in tx", got.Name, "a transaction reads its own writes")
		if err := tx.AddVM(ctx, sampleVM(uuidB)); err != nil {
			return nil, err
		}
		vms, err := tx.VMs(ctx)
		require.NoError(t, err)
		assert.Len(t, vms, 1, "a transaction lists what it added")
		got, err = p.Image(ctx, uuidA)
		require.NoError(t, err)
		assert.Equal(t, sampleImage(uuidA).Name, got.Name, "nobody sees a transaction's update before it commits")
		assert.ErrorIs(t, second(p.VM(ctx, uuidB)), message.ErrNotFound, "nobody sees a transaction's add before it commits")
		_, err = tx.Do(ctx, fence.Guard{}, func(context.Context, cloud.Store) ([]byte, error) { return nil, nil })
		assert.Error(t, err, "transactions do not nest")
		return []byte("done"), nil
	})
	require.NoError(t, err)
	assert.Equal(t, "done", string(reply), "Do returns fn's reply")
	got, err := p.Image(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, "in tx", got.Name, "a committed update is seen by everybody")
	_, err = p.VM(ctx, uuidB)
	assert.NoError(t, err, "a committed add is seen by everybody")
}

// testTransactionRollback: a transaction whose fn fails, or whose ctx
// ends before the commit, writes nothing.
func testTransactionRollback(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	require.NoError(t, s.AddImage(ctx, sampleImage(uuidA)))
	boom := errors.New("boom")
	write := func(ctx context.Context, tx cloud.Store) error {
		if _, err := tx.UpdateImage(ctx, uuidA, func(img *cloud.Image) error { img.Name = "rolled back"; return nil }); err != nil {
			return err
		}
		return tx.AddHost(ctx, sampleHost(uuidB))
	}
	_, err := s.Do(ctx, fence.Guard{}, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
		if err := write(ctx, tx); err != nil {
			return nil, err
		}
		return nil, boom
	})
	assert.ErrorIs(t, err, boom, "Do returns fn's error")
	img, err := s.Image(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, sampleImage(uuidA), img, "a transaction whose fn failed changed nothing")
	assert.ErrorIs(t, second(s.Host(ctx, uuidB)), message.ErrNotFound, "a transaction whose fn failed added nothing")

	cctx, cancel := context.WithCancel(ctx)
	_, err = s.Do(cctx, fence.Guard{}, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
		if err := write(ctx, tx); err != nil {
			return nil, err
		}
		cancel() // after the writes, before the commit
		return nil, nil
	})
	assert.ErrorIs(t, err, context.Canceled, "a transaction whose ctx ended before the commit fails with ctx's error")
	img, err = s.Image(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, sampleImage(uuidA), img, "a transaction whose ctx ended before the commit changed nothing")
	assert.ErrorIs(t, second(s.Host(ctx, uuidB)), message.ErrNotFound, "a transaction whose ctx ended before the commit added nothing")

	_, err = s.UpdateImage(ctx, uuidA, func(img *cloud.Image) error { img.Name = "after"; return nil })
	assert.NoError(t, err, "the record is not left locked")
}

// testTransactionsSerialize runs compare-and-set increments on one image
// from many goroutines through two handles, half in transactions that
// read the image first and update it last, half as plain updates: an
// update in a transaction holds the record until the commit, so none is
// lost and every compare in a transaction sees the last committed value.
func testTransactionsSerialize(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	p := h.Peer(t, s)
	img := sampleImage(uuidA)
	img.SizeMB = 0
	require.NoError(t, s.AddImage(ctx, img))

	const writers, each = 6, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		st := s
		if w%2 == 1 {
			st = p
		}
		wg.Go(func() {
			for range each {
				var err error
				if w%3 == 2 {
					_, err = st.UpdateImage(ctx, uuidA, func(img *cloud.Image) error { img.SizeMB++; return nil })
				} else {
					_, err = st.Do(ctx, fence.Guard{}, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
						seen, err := tx.Image(ctx, uuidA)
						if err != nil {
							return nil, err
						}
						_, err = tx.UpdateImage(ctx, uuidA, func(img *cloud.Image) error {
							if img.SizeMB < seen.SizeMB {
								return fmt.Errorf("the locked record went back from %d to %d", seen.SizeMB, img.SizeMB)
							}
							img.SizeMB++
							return nil
						})
						return nil, err
					})
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err, "concurrent transactions must not fail (they wait for the record's lock)")
	}
	got, err := s.Image(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, int64(writers*each), got.SizeMB, "an update in a transaction holds the record until the commit: no increment is lost")
}

// testVersions: a VM's Version is 1 when added and one more at each
// update, whatever the caller or the update function set; the update
// function sees the stored version, so it can compare-and-set on it; a
// failed update leaves it; every handle reads the same.
func testVersions(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	p := h.Peer(t, s)
	version := func(st cloud.Store) int64 {
		t.Helper()
		vm, err := st.VM(ctx, uuidA)
		require.NoError(t, err)
		return vm.Version
	}
	vm := sampleVM(uuidA)
	vm.Version = 42
	require.NoError(t, s.AddVM(ctx, vm))
	assert.Equal(t, int64(1), version(s), "AddVM stores version 1, whatever the VM says")
	vms, err := p.VMs(ctx)
	require.NoError(t, err)
	require.Len(t, vms, 1)
	assert.Equal(t, int64(1), vms[0].Version, "VMs lists the version")

	var seen int64
	got, err := s.UpdateVM(ctx, uuidA, func(v *cloud.VM) error {
		seen, v.Version, v.State = v.Version, 100, cloud.VMStopped
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, int64(1), seen, "the update function sees the stored version")
	assert.Equal(t, int64(2), got.Version, "UpdateVM returns the next version, whatever update set")
	assert.Equal(t, int64(2), version(p), "UpdateVM stores the version it returns; every handle reads it")
	_, err = p.UpdateVM(ctx, uuidA, func(*cloud.VM) error { return nil })
	require.NoError(t, err)
	assert.Equal(t, int64(3), version(s), "an update that changes nothing else counts too")

	boom := errors.New("boom")
	_, err = s.UpdateVM(ctx, uuidA, func(v *cloud.VM) error { v.State = cloud.VMRunning; return boom })
	assert.Same(t, boom, err)
	assert.Equal(t, int64(3), version(s), "a failed update leaves the version")

	moved := errors.New("the record moved on")
	cas := func(base int64) error {
		_, err := p.UpdateVM(ctx, uuidA, func(v *cloud.VM) error {
			if v.Version != base {
				return moved
			}
			v.State = cloud.VMRunning
			return nil
		})
		return err
	}
	assert.ErrorIs(t, cas(2), moved, "a compare-and-set on an older version is refused")
	assert.NoError(t, cas(3), "a compare-and-set on the stored version succeeds")
	got, err = s.VM(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, cloud.VMRunning, got.State)
	assert.Equal(t, int64(4), got.Version)
}

// testVersionsInTransactions: in Do, each UpdateVM adds one to the
// staged version, which the transaction reads and nobody else sees before
// the commit; an added VM is at version 1; a transaction that does not
// commit leaves the version as it was.
func testVersionsInTransactions(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	p := h.Peer(t, s)
	require.NoError(t, s.AddVM(ctx, sampleVM(uuidA)))
	version := func(st cloud.Store, id string) int64 {
		t.Helper()
		vm, err := st.VM(ctx, id)
		require.NoError(t, err)
		return vm.Version
	}
	_, err := s.Do(ctx, fence.Guard{}, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
		for want := int64(2); want <= 3; want++ {
			vm, err := tx.UpdateVM(ctx, uuidA, func(v *cloud.VM) error { v.CPUs++; return nil })
			if err != nil {
				return nil, err
			}
			assert.Equal(t, want, vm.Version, "each UpdateVM in a transaction adds one")
			assert.Equal(t, want, version(tx, uuidA), "a transaction reads its own version")
		}
		assert.Equal(t, int64(1), version(p, uuidA), "nobody sees a transaction's version before it commits")
		vm := sampleVM(uuidB)
		vm.Version = 7
		if err := tx.AddVM(ctx, vm); err != nil {
			return nil, err
		}
		assert.Equal(t, int64(1), version(tx, uuidB), "AddVM in a transaction stores version 1")
		return nil, nil
	})
	require.NoError(t, err)
	assert.Equal(t, int64(3), version(p, uuidA), "a committed transaction's updates count, each")
	assert.Equal(t, int64(1), version(p, uuidB), "a VM added in a transaction is at version 1")

	boom := errors.New("boom")
	update := func(ctx context.Context, tx cloud.Store) error {
		_, err := tx.UpdateVM(ctx, uuidA, func(v *cloud.VM) error { v.State = cloud.VMStopped; return nil })
		return err
	}
	_, err = s.Do(ctx, fence.Guard{}, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
		if err := update(ctx, tx); err != nil {
			return nil, err
		}
		return nil, boom
	})
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, int64(3), version(p, uuidA), "a transaction whose fn failed leaves the version")
	cctx, cancel := context.WithCancel(ctx)
	_, err = s.Do(cctx, fence.Guard{}, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
		if err := update(ctx, tx); err != nil {
			return nil, err
		}
		cancel() // after the update, before the commit
		return nil, nil
	})
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, int64(3), version(p, uuidA), "a transaction whose ctx ended before the commit leaves the version")
	got, err := s.UpdateVM(ctx, uuidA, func(*cloud.VM) error { return nil })
	require.NoError(t, err)
	assert.Equal(t, int64(4), got.Version, "the next update after the rollbacks is the next version")
}

// testDeleteImage: a deleted image is gone, from every handle; deleting
// a missing one is not found.
func testDeleteImage(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	p := h.Peer(t, s)
	require.NoError(t, s.AddImage(ctx, sampleImage(uuidA)))
	require.NoError(t, s.AddImage(ctx, sampleImage(uuidB)))
	require.NoError(t, s.DeleteImage(ctx, uuidA))
	assert.ErrorIs(t, second(s.Image(ctx, uuidA)), message.ErrNotFound)
	assert.ErrorIs(t, second(p.Image(ctx, uuidA)), message.ErrNotFound, "gone for a peer too")
	imgs, err := p.Images(ctx)
	require.NoError(t, err)
	assert.Equal(t, []cloud.Image{sampleImage(uuidB)}, imgs)
	assert.ErrorIs(t, s.DeleteImage(ctx, uuidA), message.ErrNotFound, "deleted already")
	assert.ErrorIs(t, s.DeleteImage(ctx, uuidC), message.ErrNotFound, "never added")
	assert.ErrorIs(t, s.DeleteImage(ctx, "nope"), message.ErrInvalidUUID)
	require.NoError(t, s.AddImage(ctx, sampleImage(uuidA)), "the UUID may be used again")
}

// testDeleteImageInTransactions: a deletion in a transaction reads as
// gone inside it and takes effect only if it commits; it holds the
// record, so a concurrent update waits and then finds it gone.
func testDeleteImageInTransactions(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	require.NoError(t, s.AddImage(ctx, sampleImage(uuidA)))
	boom := errors.New("boom")
	_, err := s.Do(ctx, fence.Guard{}, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
		if err := tx.DeleteImage(ctx, uuidA); err != nil {
			return nil, err
		}
		if _, err := tx.Image(ctx, uuidA); !errors.Is(err, message.ErrNotFound) {
			return nil, fmt.Errorf("the transaction reads its own deletion: got %v", err)
		}
		imgs, err := tx.Images(ctx)
		if err != nil || len(imgs) != 0 {
			return nil, fmt.Errorf("the transaction lists without its deletion: %v, %v", imgs, err)
		}
		return nil, boom
	})
	require.ErrorIs(t, err, boom)
	_, err = s.Image(ctx, uuidA)
	require.NoError(t, err, "a deletion that did not commit deleted nothing")

	p := h.Peer(t, s)
	deleting, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Do(ctx, fence.Guard{}, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
			if err := tx.DeleteImage(ctx, uuidA); err != nil {
				return nil, err
			}
			close(deleting)
			<-release
			return nil, nil
		})
		done <- err
	}()
	select {
	case <-deleting:
	case err := <-done:
		t.Fatalf("the deleting transaction ended early: %v", err)
	}
	updated := make(chan error, 1)
	go func() {
		_, err := p.UpdateImage(ctx, uuidA, func(img *cloud.Image) error { img.Name = "late"; return nil })
		updated <- err
	}()
	select {
	case err := <-updated:
		t.Fatalf("an update of an image a transaction is deleting did not wait: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-done)
	select {
	case err := <-updated:
		assert.ErrorIs(t, err, message.ErrNotFound, "the waiting update finds the image deleted")
	case <-time.After(10 * time.Second):
		t.Fatal("the update still waits after the deletion committed")
	}
	assert.ErrorIs(t, second(s.Image(ctx, uuidA)), message.ErrNotFound)
}

// testLockImage: LockImage reads the image; in a transaction it holds
// the record until the commit, so a concurrent update waits, and it
// writes nothing.
func testLockImage(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.New(t)
	require.NoError(t, s.AddImage(ctx, sampleImage(uuidA)))
	img, err := s.LockImage(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, sampleImage(uuidA), img)
	assert.ErrorIs(t, second(s.LockImage(ctx, uuidB)), message.ErrNotFound)
	p := h.Peer(t, s)
	locked, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Do(ctx, fence.Guard{}, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
			if _, err := tx.LockImage(ctx, uuidA); err != nil {
				return nil, err
			}
			close(locked)
			<-release
			return nil, nil
		})
		done <- err
	}()
	select {
	case <-locked:
	case err := <-done:
		t.Fatalf("the locking transaction ended early: %v", err)
	}
	updated := make(chan error, 1)
	go func() {
		_, err := p.UpdateImage(ctx, uuidA, func(img *cloud.Image) error { img.Name = "after"; return nil })
		updated <- err
	}()
	select {
	case err := <-updated:
		t.Fatalf("an update of an image a transaction locked did not wait: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-done)
	require.NoError(t, <-updated, "the update runs once the lock is released")
	got, err := s.Image(ctx, uuidA)
	require.NoError(t, err)
	assert.Equal(t, "after", got.Name)
}

func first[T any](v T, _ error) T { return v }

func second[T any](_ T, err error) error { return err }
