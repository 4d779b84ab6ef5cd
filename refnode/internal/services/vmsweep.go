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
	// state (a final write that failed after the hypervisor acted).
	Repairs uint64
}

// Stats returns the service's counters.
func (s *VMService) Stats() VMStats {
	return VMStats{Sweeps: s.sweeps.Load(), Repairs: s.repairs.Load()}
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

// unrecorded journals that the hypervisor put VM id in state st but the
// record did not follow (its write failed): the next sweep records it.
func (s *VMService) unrecorded(id string, st cloud.VMState) {
	s.jmu.Lock()
	defer s.jmu.Unlock()
	if s.journal == nil {
		s.journal = make(map[string]cloud.VMState)
	}
	s.journal[id] = st
	s.log.Warn("vm: the hypervisor acted but the record did not follow; the next sweep records it", "vm", id, "state", st)
}

// recorded forgets VM id's journal entry: an operation recorded its
// outcome since.
func (s *VMService) recorded(id string) {
	s.jmu.Lock()
	defer s.jmu.Unlock()
	delete(s.journal, id)
}

// journaled returns VM id's journal entry.
func (s *VMService) journaled(id string) (cloud.VMState, bool) {
	s.jmu.Lock()
	defer s.jmu.Unlock()
	st, ok := s.journal[id]
	return st, ok
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
// operation on it runs meanwhile.
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
		if vm.State == cloud.VMDestroyed || !s.node.Owns(vm.UUID) {
			s.recorded(vm.UUID) // another node owns it: its journal entry is no truth there
			continue
		}
		if err := s.repair(ctx, vm.UUID); err != nil && !errors.Is(err, fence.ErrStale) && ctx.Err() == nil {
			s.log.Warn("vm sweep: could not check a VM; next sweep retries", "vm", vm.UUID, "err", err)
		}
	}
}

// repair sets VM id to the stable state its power state calls for, if
// it differs.
func (s *VMService) repair(ctx context.Context, id string) error {
	w := fence.Write{Claim: fence.Claim{Resource: id, Node: s.node.UUID(), Epoch: s.node.Epoch()}}
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
		if st, ok := s.journaled(id); ok && p == cloud.PowerUnknown {
			// The hypervisor cannot tell; this node saw it act.
			want, fix, source = st, st != vm.State, "journal"
		}
		if !fix {
			s.recorded(id)
			return nil, nil
		}
		if _, err := tx.UpdateVM(ctx, id, func(v *cloud.VM) error { v.State = want; return nil }); err != nil {
			return nil, err
		}
		s.repairs.Add(1)
		s.recorded(id)
		s.log.Warn("vm state repaired from the hypervisor", "vm", id, "from", vm.State, "to", want, "power", p, "source", source)
		return nil, nil
	})
	return err
}
