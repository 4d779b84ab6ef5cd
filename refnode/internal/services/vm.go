package services

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service"
)

// VMService is the "vmInstance" service: CreateVm on the local node, and
// every operation on an existing VM on the VM's ring owner, where the
// bus runs them one at a time. It implements service.Starter and
// service.APIService. Safe for concurrent use once started.
type VMService struct {
	store cloud.Store
	hv    cloud.Hypervisor
	log   *slog.Logger
	node  *service.Node
	mux   *bus.Mux
}

func newVMService(cfg Config) *VMService {
	s := &VMService{store: cfg.Store, hv: cfg.Hypervisor, log: cfg.Logger.With("service", api.VMService), mux: bus.NewMux()}
	bus.HandleRequest(s.mux, s.create)
	bus.HandleRequest(s.mux, func(ctx context.Context, r *bus.Request, _ api.StartVm) (api.VmReply, error) {
		return s.operate(ctx, r, cloud.VMOpStart)
	})
	bus.HandleRequest(s.mux, func(ctx context.Context, r *bus.Request, _ api.StopVm) (api.VmReply, error) {
		return s.operate(ctx, r, cloud.VMOpStop)
	})
	bus.HandleRequest(s.mux, func(ctx context.Context, r *bus.Request, _ api.RebootVm) (api.VmReply, error) {
		return s.operate(ctx, r, cloud.VMOpReboot)
	})
	bus.HandleRequest(s.mux, func(ctx context.Context, r *bus.Request, _ api.DestroyVm) (api.VmReply, error) {
		return s.operate(ctx, r, cloud.VMOpDestroy)
	})
	bus.HandleRequest(s.mux, s.get)
	return s
}

// Name returns "vmInstance".
func (s *VMService) Name() string { return api.VMService }

// APIMessages returns CreateVm, StartVm, StopVm, RebootVm, DestroyVm and
// GetVm.
func (s *VMService) APIMessages() []any {
	return []any{api.CreateVm{}, api.StartVm{}, api.StopVm{}, api.RebootVm{}, api.DestroyVm{}, api.GetVm{}}
}

// Start binds the service to its node.
func (s *VMService) Start(ctx context.Context, n *service.Node) error {
	s.node = n
	s.log = s.log.With("node", n.UUID())
	return nil
}

// Handle handles one message; see [bus.Handler].
func (s *VMService) Handle(ctx context.Context, r *bus.Request) (any, error) {
	if err := started(s.node, api.VMService); err != nil {
		return nil, err
	}
	return s.mux.Handle(ctx, r)
}

// create handles CreateVm on the local node: check the image, have the
// local host service allocate a host, define the VM there, record it.
func (s *VMService) create(ctx context.Context, r *bus.Request, m api.CreateVm) (api.VmCreated, error) {
	id := m.UUID
	if id == "" {
		id = message.NewUUID()
	}
	id, err := message.NormalizeUUID(id)
	if err != nil {
		return api.VmCreated{}, fmt.Errorf("vmInstance: create vm: %w", err)
	}
	imageID, err := message.NormalizeUUID(m.ImageUUID)
	if err != nil {
		return api.VmCreated{}, fmt.Errorf("vmInstance: create vm %s: image UUID: %w", id, err)
	}
	if _, err := s.store.Image(ctx, imageID); err != nil {
		return api.VmCreated{}, fmt.Errorf("vmInstance: create vm %s: %w", id, err)
	}
	switch _, err := s.store.VM(ctx, id); {
	case err == nil:
		return api.VmCreated{}, cloud.Exists("vm", id)
	case !errors.Is(err, message.ErrNotFound):
		return api.VmCreated{}, err
	}
	vm := cloud.VM{UUID: id, Name: m.Name, ImageUUID: imageID, CPUs: m.CPUs, MemoryMB: m.MemoryMB, State: cloud.VMCreated}
	if vm.CPUs == 0 {
		vm.CPUs = 1
	}
	if vm.MemoryMB == 0 {
		vm.MemoryMB = 512
	}
	// A message about no resource: the local node's host service.
	alloc, err := service.Call[api.HostAllocated](ctx, s.node, api.HostService, api.AllocateHost{CPUs: vm.CPUs, MemoryMB: vm.MemoryMB})
	if err != nil {
		return api.VmCreated{}, fmt.Errorf("vmInstance: create vm %s: allocate a host: %w", id, err)
	}
	vm.HostUUID = alloc.HostUUID
	if err := s.hv.CreateVM(ctx, vm.HostUUID, vm); err != nil {
		return api.VmCreated{}, fmt.Errorf("vmInstance: create vm %s on host %s: %w; nothing was recorded, create it again", id, vm.HostUUID, err)
	}
	if err := s.store.AddVM(ctx, vm); err != nil {
		if !errors.Is(err, message.ErrBadRequest) { // not a concurrent create of the same UUID: undo ours
			if derr := s.hv.DestroyVM(context.WithoutCancel(ctx), vm.HostUUID, id); derr != nil {
				s.log.Warn("create vm: could not undo the definition on the host", "vm", id, "host", vm.HostUUID, "err", derr)
			}
		}
		return api.VmCreated{}, fmt.Errorf("vmInstance: create vm %s: record it: %w", id, err)
	}
	s.log.Info("vm created", "vm", id, "host", vm.HostUUID, "allocated_by", alloc.Node)
	return api.VmCreated{VM: vm, AllocatedBy: alloc.Node, Handling: handling(r)}, nil
}

// operate runs op on a VM: check the transition, record the transitional
// state, call the hypervisor, record the outcome. No lock: the bus runs
// the messages about one VM one at a time on its owner.
func (s *VMService) operate(ctx context.Context, r *bus.Request, op cloud.VMOp) (api.VmReply, error) {
	id := r.Resource() // the VM's UUID, canonical: the bus checked
	vm, err := s.store.VM(ctx, id)
	if err != nil {
		return api.VmReply{}, err
	}
	from := vm.State
	during, after, err := cloud.Transition(from, op)
	if err != nil {
		return api.VmReply{}, fmt.Errorf("vmInstance: vm %s: %w", id, err)
	}
	if during != "" {
		if _, err := s.setState(ctx, id, during); err != nil {
			return api.VmReply{}, err
		}
	}
	start := time.Now()
	if err := s.callHypervisor(ctx, op, vm.HostUUID, id); err != nil {
		// The state goes back to what it was, even if ctx has ended.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, rerr := s.setState(rctx, id, from); rerr != nil {
			s.log.Error("vm: could not restore the state after a failed operation", "vm", id, "op", op, "state", from, "err", rerr)
		}
		s.log.Warn("vm operation failed", "vm", id, "op", op, "err", err)
		return api.VmReply{}, fmt.Errorf("vmInstance: %s vm %s on host %s: %w; the VM stays %s", op, id, vm.HostUUID, err, from)
	}
	vm, err = s.setState(ctx, id, after)
	if err != nil {
		return api.VmReply{}, err
	}
	s.log.Info("vm "+string(op), "vm", id, "state", after, "took", time.Since(start).Round(time.Millisecond))
	return api.VmReply{VM: vm, Handling: handling(r)}, nil
}

func (s *VMService) setState(ctx context.Context, id string, st cloud.VMState) (cloud.VM, error) {
	vm, err := s.store.UpdateVM(ctx, id, func(v *cloud.VM) error {
		v.State = st
		return nil
	})
	if err != nil {
		return cloud.VM{}, fmt.Errorf("vmInstance: vm %s: record state %s: %w", id, st, err)
	}
	return vm, nil
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
