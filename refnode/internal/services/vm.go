package services

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service"
)

// VMService is the "vmInstance" service: CreateVm on the local node, and
// every operation on an existing VM on the VM's ring owner, where the
// bus runs them one at a time; and a sweeper that keeps the records of
// the VMs its node owns in step with their hypervisor. It implements
// service.Starter, service.Stopper, service.RingListener and
// service.APIService. Safe for concurrent use once started.
type VMService struct {
	store cloud.Store
	hv    cloud.Hypervisor
	log   *slog.Logger
	node  *service.Node
	*bus.Mux
	stall      func(ctx context.Context, vm string) // Config.StallVMWrite
	stallFinal func(ctx context.Context, vm string) // Config.StallVMFinalWrite

	every, opTimeout time.Duration
	kick             chan struct{} // cap 1: a ring change asks for a sweep
	sweeper          worker
	sweeps, repairs  atomic.Uint64

	// journal holds the VMs whose hypervisor acted but whose record did
	// not follow, each with the state it put the VM in and the version
	// of the record the failed write read.
	journal fence.Journal[cloud.VMState]

	migrating sync.Map // job UUID -> true: the migrations this node runs now
}

func newVMService(cfg Config) *VMService {
	s := &VMService{store: cfg.Store, hv: cfg.Hypervisor, log: cfg.Logger.With("service", api.VMService), Mux: bus.NewMux(), stall: cfg.StallVMWrite,
		stallFinal: cfg.StallVMFinalWrite, every: cfg.VMSweepInterval, opTimeout: cfg.OpTimeout, kick: make(chan struct{}, 1)}
	bus.Handle(s.Mux, s.create)
	bus.Handle(s.Mux, func(ctx context.Context, r *bus.Request, _ api.StartVm) (api.VmReply, error) {
		return s.operate(ctx, r, cloud.VMOpStart)
	})
	bus.Handle(s.Mux, func(ctx context.Context, r *bus.Request, _ api.StopVm) (api.VmReply, error) {
		return s.operate(ctx, r, cloud.VMOpStop)
	})
	bus.Handle(s.Mux, func(ctx context.Context, r *bus.Request, _ api.RebootVm) (api.VmReply, error) {
		return s.operate(ctx, r, cloud.VMOpReboot)
	})
	bus.Handle(s.Mux, func(ctx context.Context, r *bus.Request, _ api.DestroyVm) (api.VmReply, error) {
		return s.operate(ctx, r, cloud.VMOpDestroy)
	})
	bus.Handle(s.Mux, s.get)
	bus.Handle(s.Mux, s.migrate)
	return s
}

// Name returns "vmInstance".
func (s *VMService) Name() string { return api.VMService }

// APIMessages returns CreateVm, StartVm, StopVm, RebootVm, DestroyVm,
// GetVm and MigrateVm.
func (s *VMService) APIMessages() []any {
	return []any{api.CreateVm{}, api.StartVm{}, api.StopVm{}, api.RebootVm{}, api.DestroyVm{}, api.GetVm{}, api.MigrateVm{}}
}

// Start binds the service to its node and starts its sweeper, which
// drives the VMs the node owns to the stable state their hypervisor
// reports, every Config.VMSweepInterval and at every ring change.
func (s *VMService) Start(ctx context.Context, n *service.Node) error {
	if s.node != nil {
		return fmt.Errorf("services: vm service already started on node %s; create a Set per node", s.node.UUID())
	}
	s.node = n
	s.log = s.log.With("node", n.UUID())
	s.sweeper.start(s.sweepLoop)
	return nil
}

// Handle handles one message; see [bus.Handler].
func (s *VMService) Handle(ctx context.Context, r *bus.Request) (any, error) {
	if err := started(s.node, api.VMService); err != nil {
		return nil, err
	}
	resp, err := s.Mux.Handle(ctx, r)
	return resp, answer(s.log, r, err)
}

// create handles CreateVm on the local node: check the image, have the
// local host service allocate a host, define the VM there, record it.
//
// A creation runs on the node that received it, which need not be the new
// VM's owner, so it is not fenced: its insert cannot overwrite another
// owner's VM (a taken UUID fails). It runs once per message: the message
// is recorded with its reply in the transaction that records the VM, a
// redelivery (on this node or another) gets the first reply, and a VM
// without a UUID in the message gets one derived from the message id, so
// a run cut short by a crash and run again creates the same VM.
func (s *VMService) create(ctx context.Context, r *bus.Request, m api.CreateVm) (api.VmCreated, error) {
	if err := m.Validate(); err != nil {
		return api.VmCreated{}, err
	}
	id := m.UUID
	if id == "" {
		id = uuid.NewSHA1(vmNamespace, []byte(r.ID())).String()
	}
	id, err := message.NormalizeUUID(id)
	if err != nil {
		return api.VmCreated{}, fmt.Errorf("vmInstance: create vm: %w", err)
	}
	imageID, err := message.NormalizeUUID(m.ImageUUID)
	if err != nil {
		return api.VmCreated{}, fmt.Errorf("vmInstance: create vm %s: image UUID: %w", id, err)
	}
	cpus, mem := m.CPUs, m.MemoryMB
	if cpus == 0 {
		cpus = 1
	}
	if mem == 0 {
		mem = 512
	}
	// A message about no resource: the local node's host service. It only
	// reads, and it runs before the transaction: a transaction waiting for
	// a call that needs a connection of the same pool could exhaust it.
	alloc, err := service.Call[api.HostAllocated](ctx, s.node, api.AllocateHost{CPUs: cpus, MemoryMB: mem})
	if err != nil {
		return api.VmCreated{}, fmt.Errorf("vmInstance: create vm %s: allocate a host: %w", id, err)
	}
	reply, err := cloud.Run(ctx, s.store, fence.For(ctx, r), func(ctx context.Context, tx cloud.Store) (api.VmCreated, error) {
		if _, err := tx.Image(ctx, imageID); err != nil {
			return api.VmCreated{}, fmt.Errorf("vmInstance: create vm %s: %w", id, err)
		}
		switch _, err := tx.VM(ctx, id); {
		case err == nil:
			return api.VmCreated{}, cloud.Exists("vm", id)
		case !errors.Is(err, message.ErrNotFound):
			return api.VmCreated{}, err
		}
		vm := cloud.VM{UUID: id, Name: m.Name, ImageUUID: imageID, CPUs: cpus, MemoryMB: mem, State: cloud.VMCreated, Version: 1} // as AddVM stores it
		vm.HostUUID = alloc.HostUUID
		if err := s.hv.CreateVM(ctx, vm.HostUUID, vm); err != nil {
			return api.VmCreated{}, fmt.Errorf("vmInstance: create vm %s on host %s: %w; nothing was recorded, create it again", id, vm.HostUUID, err)
		}
		undo := func() {
			if derr := s.hv.DestroyVM(context.WithoutCancel(ctx), vm.HostUUID, id); derr != nil {
				s.log.Warn("create vm: could not undo the definition on the host", "vm", id, "host", vm.HostUUID, "err", derr)
			}
		}
		if err := tx.AddVM(ctx, vm); err != nil {
			if !errors.Is(err, message.ErrAlreadyExists) { // not a concurrent create of the same UUID: undo ours
				undo()
			}
			return api.VmCreated{}, fmt.Errorf("vmInstance: create vm %s: record it: %w", id, err)
		}
		// Lock the image, last, until the commit (writing nothing): a
		// DeleteImage holding it first has deleted it by then (not
		// found: nothing is recorded), and one coming after finds this
		// VM. Locked only now, concurrent creates from one image wait
		// for each other's commit, not for each other's hypervisor call.
		if _, err := tx.LockImage(ctx, imageID); err != nil {
			undo()
			return api.VmCreated{}, fmt.Errorf("vmInstance: create vm %s: image %s: %w", id, imageID, err)
		}
		return api.VmCreated{VM: vm, AllocatedBy: alloc.Node, Handling: handling(r)}, nil
	})
	if err != nil {
		return api.VmCreated{}, err
	}
	s.log.Info("vm created", "vm", id, "host", reply.VM.HostUUID, "allocated_by", reply.AllocatedBy, "msg", r.ID())
	return reply, nil
}

// vmNamespace derives the UUID of a VM created without one from the
// message id (a name-based UUID, RFC 9562 version 5).
var vmNamespace = uuid.MustParse("6f1d7a8e-3c52-4b0e-9a61-2f4c8d5e9b17")

// vmOutcome is what a VM operation's transaction records under its
// message's key: the reply, or the refusal of an operation the VM's
// state does not allow. Its JSON is the reply's, with "refused" added
// for a refusal.
type vmOutcome struct {
	api.VmReply
	Refused *message.Error `json:"refused,omitempty"`
}

// operate runs op on a VM, in one transaction fenced by this node's claim
// on the VM and recorded under the message's key: read the VM, check the
// transition, call the hypervisor, record the outcome. The transitional
// state (starting, stopping) is not written: inside one transaction
// nobody would see it, and a failure leaves the VM in its stable state.
// No lock beyond the fence: the bus runs the messages about one VM one at
// a time on its owner.
//
// An operation the VM's state does not allow is refused (conflict),
// and the refusal is recorded like a reply: a later copy of the message
// (redelivered after a lost acknowledgement, resent by a portal after
// node_left, moved from a dead node's queue) gets the same refusal, and
// does not run where the state has changed since, after its caller was
// told it did not happen.
//
// A start of a running VM (a stop of a stopped one) is allowed and runs
// like any other: the hypervisor makes sure of the state, the record is
// written. So a copy of a start sent to a new owner after the old one
// died between its hypervisor call and its commit succeeds, whether or
// not the new owner's takeover sweep recorded the power state first:
// refusing it would tell its caller the start did not happen.
func (s *VMService) operate(ctx context.Context, r *bus.Request, op cloud.VMOp) (api.VmReply, error) {
	id := r.Resource() // the VM's UUID, canonical: the bus checked
	start := time.Now()
	var acted cloud.VMState // the state the hypervisor's success calls for
	var base int64          // the version of the record the operation read
	outcome, err := cloud.Run(ctx, s.store, fence.For(ctx, r), func(ctx context.Context, tx cloud.Store) (vmOutcome, error) {
		vm, err := tx.VM(ctx, id)
		if err != nil {
			return vmOutcome{}, err
		}
		base = vm.Version
		_, after, err := cloud.Transition(vm.State, op)
		if err != nil {
			return vmOutcome{Refused: message.AsError(fmt.Errorf("vmInstance: vm %s: %w", id, err))}, nil
		}
		if s.stall != nil {
			s.stall(ctx, id)
		}
		if err := tx.Verify(ctx); err != nil { // still the owner, just before acting
			return vmOutcome{}, err
		}
		if err := s.callHypervisor(ctx, op, vm.HostUUID, id); err != nil {
			s.log.Warn("vm operation failed", "vm", id, "op", op, "err", err)
			return vmOutcome{}, fmt.Errorf("vmInstance: %s vm %s on host %s: %w; the VM stays %s", op, id, vm.HostUUID, err, vm.State)
		}
		// If the write below fails, the hypervisor acted and the record
		// did not follow: the sweeper repairs the record, from the
		// hypervisor's power state or, where the hypervisor cannot tell,
		// from the journal of what it did, while the record is still at
		// the version read above (see "Repairs" in the package doc).
		acted = after
		if s.stallFinal != nil {
			s.stallFinal(ctx, id)
		}
		vm, err = tx.UpdateVM(ctx, id, func(v *cloud.VM) error {
			v.State = after
			return nil
		})
		if err != nil {
			return vmOutcome{}, fmt.Errorf("vmInstance: vm %s: record state %s: %w", id, after, err)
		}
		return vmOutcome{VmReply: api.VmReply{VM: vm, Handling: handling(r)}}, nil
	})
	if err == nil && outcome.Refused != nil {
		return api.VmReply{}, outcome.Refused // recorded: this message's outcome, now or at its first run
	}
	reply := outcome.VmReply
	switch {
	case err != nil && acted != "":
		s.journal.Record(id, base, acted)
		s.log.Warn("vm: the hypervisor acted but the record did not follow; a sweep records it unless the record changes first",
			"vm", id, "state", acted, "base", base)
	case err == nil:
		s.journal.Forget(id) // the record follows a later operation
	}
	if err != nil {
		return api.VmReply{}, stale(s.log, err)
	}
	s.log.Info("vm "+string(op), "vm", id, "state", reply.VM.State, "took", time.Since(start).Round(time.Millisecond), "msg", r.ID())
	return reply, nil
}

func (s *VMService) callHypervisor(ctx context.Context, op cloud.VMOp, host, vm string) error {
	switch op {
	case cloud.VMOpStart:
		return s.hv.StartVM(ctx, host, vm)
	case cloud.VMOpStop:
		return s.hv.StopVM(ctx, host, vm)
	case cloud.VMOpReboot:
		return s.hv.RebootVM(ctx, host, vm)
	case cloud.VMOpDestroy:
		return s.hv.DestroyVM(ctx, host, vm)
	}
	return message.ErrBadRequest.WithDetails(fmt.Sprintf("unknown VM operation %s", op))
}

func (s *VMService) get(ctx context.Context, r *bus.Request, _ api.GetVm) (api.VmReply, error) {
	vm, err := s.store.VM(ctx, r.Resource())
	if err != nil {
		return api.VmReply{}, err
	}
	return api.VmReply{VM: vm, Handling: handling(r)}, nil
}
