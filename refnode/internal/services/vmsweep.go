package services

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service"
)

// VMStats counts what a node's VM service did besides handling messages.
type VMStats struct {
	// Sweeps counts the sweeps of the VMs this node owns.
	Sweeps uint64
	// Repairs counts VM records set to the stable state the hypervisor
	// reports: a VM left transitional, or recorded against its power
	// state or this node's journal of what the hypervisor did (a final
	// write that failed after the hypervisor acted).
	Repairs uint64
	// Journaled is the number of VMs whose hypervisor acted while their
	// record did not follow, waiting for a sweep.
	Journaled int
	// StaleJournal counts the journal entries dropped unapplied: the
	// VM's record changed (an acknowledged write) after the failed write
	// that made the entry read it.
	StaleJournal uint64
}

// Stats returns the service's counters.
func (s *VMService) Stats() VMStats {
	js := s.journal.Stats()
	return VMStats{Sweeps: s.sweeps.Load(), Repairs: s.repairs.Load(), Journaled: js.Pending, StaleJournal: js.Stale}
}

// Stop stops the sweeper and waits for it (or for ctx). It is idempotent
// and safe without Start.
func (s *VMService) Stop(ctx context.Context) error {
	return s.sweeper.stop(ctx, "vm sweeper", nil)
}

// RingChanged asks the sweeper to check the VMs this node now owns: a
// takeover repairs what the previous owner left. It does not block.
func (s *VMService) RingChanged(ctx context.Context, ch service.RingChange) {
	select {
	case s.kick <- struct{}{}:
	default: // a sweep is pending already
	}
}

// sweepLoop sweeps every Config.VMSweepInterval and at every ring
// change, until ctx ends.
func (s *VMService) sweepLoop(ctx context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
		s.sweep(ctx)
	}
}

// sweep drives every VM this node owns to the stable state its
// hypervisor reports, each in a transaction fenced by this node's claim
// on the VM: the power is read while the claim holds the VM, so no
// operation on it runs meanwhile. It also drops the journal entries
// that a later write overtook, on every VM it lists, and resumes the
// migrations of its VMs that are not over.
func (s *VMService) sweep(ctx context.Context) {
	if s.node.State() != service.StateServing {
		return
	}
	s.sweeps.Add(1)
	vms, err := s.store.VMs(ctx)
	if err != nil {
		s.log.Warn("vm sweep: list the VMs; next sweep retries", "err", err)
		return
	}
	for _, vm := range vms {
		if ctx.Err() != nil {
			return
		}
		// Whoever owns the VM: a write since the failed one read the
		// record makes this node's journal entry stale. Kept otherwise,
		// for when this node owns the VM again.
		if e, ok := s.journal.Overtaken(vm.UUID, vm.Version); ok {
			s.dropped(vm.UUID, e, vm)
		}
		if vm.State == cloud.VMDestroyed || !s.node.Owns(vm.UUID) {
			continue
		}
		err := s.repair(ctx, vm.UUID)
		switch {
		case err == nil, errors.Is(err, fence.ErrStale), ctx.Err() != nil:
		case errors.Is(err, errRecordMoved):
			s.log.Info("vm sweep: the record changed during the check; next sweep checks again", "vm", vm.UUID)
		default:
			s.log.Warn("vm sweep: could not check a VM; next sweep retries", "vm", vm.UUID, "err", err)
		}
	}
	s.resumeJobs(ctx)
}

// dropped logs that VM id's journal entry e was dropped unapplied: the
// record, vm, changed since.
func (s *VMService) dropped(id string, e fence.Entry[cloud.VMState], vm cloud.VM) {
	s.log.Warn("vm journal entry dropped: the record changed since it was taken",
		"vm", id, "base", e.Base, "current", vm.Version, "state", e.Outcome, "recorded", vm.State)
}

// errRecordMoved fails a repair whose VM record was written after the
// repair read it: its evidence may predate that write.
var errRecordMoved = errors.New("the record changed since the repair read it")

// repair sets VM id to the stable state its power state calls for, if it
// differs; where the hypervisor cannot tell the power, to the state this
// node's journal says the hypervisor put it in, if the record has not
// changed since the write that failed to record it. It is a write like
// any other: fenced by this node's claim, and a compare-and-set on the
// version it read, so it never moves a record that an acknowledged write
// changed after its evidence (the power, read here, in the transaction;
// or the journal entry) was taken.
func (s *VMService) repair(ctx context.Context, id string) error {
	w := fence.Guard{Claim: fence.Claim{Resource: id, Node: s.node.UUID(), Epoch: s.node.Epoch()}}
	var committed func() // what to do once the transaction committed
	_, err := s.store.Do(ctx, w, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
		vm, err := tx.VM(ctx, id)
		if err != nil {
			return nil, err
		}
		opCtx, cancel := context.WithTimeout(ctx, s.opTimeout)
		p, err := s.hv.VMPower(opCtx, vm.HostUUID, id)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("ask host %s for its power state: %w", vm.HostUUID, err)
		}
		want, fix := cloud.Repair(vm.State, p)
		source := "power"
		var entry fence.Entry[cloud.VMState]
		journaled := false
		if p != cloud.PowerUnknown {
			s.journal.Forget(id) // the hypervisor's truth wins over what this node saw
		} else {
			e, v := s.journal.Check(id, vm.Version)
			switch v {
			case fence.EntryCurrent: // nothing was written since the hypervisor acted
				want, fix, source, entry, journaled = e.Outcome, e.Outcome != vm.State, "journal", e, true
			case fence.EntryStale:
				s.dropped(id, e, vm)
			}
		}
		if !fix {
			if journaled {
				committed = func() { s.journal.Applied(id, entry) } // the record says it already
			}
			return nil, nil
		}
		rec, err := tx.UpdateVM(ctx, id, func(v *cloud.VM) error {
			if v.Version != vm.Version {
				return errRecordMoved
			}
			v.State = want
			return nil
		})
		if err != nil {
			return nil, err
		}
		committed = func() {
			if journaled {
				s.journal.Applied(id, entry)
			}
			s.repairs.Add(1)
			s.log.Warn("vm state repaired from the hypervisor", "vm", id, "from", vm.State, "to", want, "power", p, "source", source,
				"base", vm.Version, "version", rec.Version)
		}
		return nil, nil
	})
	if err == nil && committed != nil {
		committed()
	}
	return err
}
