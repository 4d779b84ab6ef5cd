// Package simhv is a simulated [cloud.Hypervisor]: no VMs run, but every
// operation takes a configurable time and can be made to fail, so demos
// and tests can show slow and failing operations.
//
// One [Hypervisor] stands for the hosts of a whole data centre and is
// shared by every management node of a process, as real hosts are shared
// by the nodes that manage them. It remembers which hosts were connected
// and each VM's power state. Processes cannot share one: with
// [Config.Adopt] each process runs its own, which adopts the hosts and
// VMs that other processes' simulators connected and created.
//
// Failures come from three knobs: [Config.FailRate] (each operation fails
// with that probability), [Hypervisor.FailNext] (the next n operations of
// one kind fail) and [Hypervisor.SetHostDown] (every operation on a host
// fails, as if it were powered off). Injected failures match
// [ErrInjected], operations on a downed host [ErrHostDown].
package simhv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
)

// Op names a hypervisor operation, for latency and failure injection.
type Op string

// The operations.
const (
	// OpConnect is [Hypervisor.Connect].
	OpConnect Op = "connect"
	// OpPing is [Hypervisor.Ping].
	OpPing Op = "ping"
	// OpCreateVM is [Hypervisor.CreateVM].
	OpCreateVM Op = "create-vm"
	// OpStartVM is [Hypervisor.StartVM].
	OpStartVM Op = "start-vm"
	// OpStopVM is [Hypervisor.StopVM].
	OpStopVM Op = "stop-vm"
	// OpRebootVM is [Hypervisor.RebootVM].
	OpRebootVM Op = "reboot-vm"
	// OpDestroyVM is [Hypervisor.DestroyVM].
	OpDestroyVM Op = "destroy-vm"
	// OpVMPower is [Hypervisor.VMPower].
	OpVMPower Op = "vm-power"
	// OpMigrateVM is [Hypervisor.MigrateVM].
	OpMigrateVM Op = "migrate-vm"
)

// Ops lists every operation. The caller owns the slice.
func Ops() []Op {
	return []Op{OpConnect, OpPing, OpCreateVM, OpStartVM, OpStopVM, OpRebootVM, OpDestroyVM, OpVMPower, OpMigrateVM}
}

// String returns the operation's name, or `unknown("x")`.
func (o Op) String() string {
	for _, k := range Ops() {
		if o == k {
			return string(o)
		}
	}
	return fmt.Sprintf("unknown(%q)", string(o))
}

// Power is the simulated power state of a VM on its host.
type Power string

// The power states.
const (
	// PowerOff: defined, not running.
	PowerOff Power = "off"
	// PowerOn: running.
	PowerOn Power = "on"
)

// ErrInjected is wrapped by an operation failed on purpose by FailRate or
// FailNext. The operation did not happen in the simulation.
var ErrInjected = errors.New("simhv: injected failure")

// ErrHostDown is wrapped by an operation on a host set down with
// [Hypervisor.SetHostDown]; it fails until the host is up again.
var ErrHostDown = errors.New("simhv: host is down")

// ErrUnknown is wrapped by an operation on a host never connected or a
// VM never created: a bug in the caller, or a host added elsewhere.
var ErrUnknown = errors.New("simhv: unknown host or VM")

// Config configures a [Hypervisor]. The zero value works: instant,
// never failing.
type Config struct {
	// Latency is how long every operation takes. Default 0.
	Latency time.Duration
	// OpLatency overrides Latency for some operations.
	OpLatency map[Op]time.Duration
	// FailRate is the probability, from 0 to 1, that an operation fails
	// with ErrInjected. Default 0.
	FailRate float64
	// Seed seeds the failure draws, for repeatable runs. Default: random.
	Seed uint64
	// Adopt makes the Hypervisor one of several simulators of one data
	// centre, one per process (refnode serve): an operation on a host or
	// VM it never saw adopts it instead of failing with ErrUnknown,
	// because another process's simulator connected the host or created
	// the VM. A host is adopted connected and up; a VM defined on the
	// host the caller names, powered as the operation expects (a reboot
	// finds it running). The records in the shared cloud.Store are then
	// the truth about VMs. Default false: one simulator per cluster,
	// which knows every host and VM.
	Adopt bool
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Latency < 0 {
		errs = append(errs, fmt.Errorf("simhv: config: Latency %s is negative", c.Latency))
	}
	for op, d := range c.OpLatency {
		if op.String() != string(op) {
			errs = append(errs, fmt.Errorf("simhv: config: OpLatency names %s; use one of %v", op, Ops()))
		}
		if d < 0 {
			errs = append(errs, fmt.Errorf("simhv: config: OpLatency[%s] %s is negative", op, d))
		}
	}
	if c.FailRate < 0 || c.FailRate > 1 {
		errs = append(errs, fmt.Errorf("simhv: config: FailRate %v is not between 0 and 1", c.FailRate))
	}
	return errors.Join(errs...)
}

// Hypervisor is the simulated [cloud.Hypervisor]. It is safe for
// concurrent use and needs no Close: it holds no goroutines.
type Hypervisor struct {
	mu       sync.Mutex
	latency  time.Duration
	opLat    map[Op]time.Duration
	failRate float64
	rnd      *rand.Rand
	failNext map[Op]int
	hosts    map[string]*host
	calls    map[Op]int
	adopt    bool
}

type host struct {
	down bool
	vms  map[string]Power
}

var _ cloud.Hypervisor = (*Hypervisor)(nil)

// New validates cfg and returns a hypervisor with no hosts.
func New(cfg Config) (*Hypervisor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	h := &Hypervisor{
		latency:  cfg.Latency,
		opLat:    make(map[Op]time.Duration),
		failRate: cfg.FailRate,
		rnd:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		failNext: make(map[Op]int),
		hosts:    make(map[string]*host),
		calls:    make(map[Op]int),
		adopt:    cfg.Adopt,
	}
	for op, d := range cfg.OpLatency {
		h.opLat[op] = d
	}
	return h, nil
}

// SetLatency sets how long op takes from now on (0: no delay).
func (h *Hypervisor) SetLatency(op Op, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opLat[op] = d
}

// FailNext makes the next n calls of op fail with ErrInjected (n ≤ 0
// clears it). They still take their latency.
func (h *Hypervisor) FailNext(op Op, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failNext[op] = max(n, 0)
}

// SetHostDown powers the host off (on) or back on (off): while down,
// every operation on it fails with ErrHostDown. A host never connected
// is remembered as down.
func (h *Hypervisor) SetHostDown(hostUUID string, down bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hostLocked(hostUUID).down = down
}

// Calls returns how many times op was called, failed calls included.
func (h *Hypervisor) Calls(op Op) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[op]
}

// PowerOf returns the simulated power state of a VM and whether it
// exists on any host.
func (h *Hypervisor) PowerOf(vmUUID string) (Power, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, hs := range h.hosts {
		if p, ok := hs.vms[vmUUID]; ok {
			return p, true
		}
	}
	return "", false
}

func (h *Hypervisor) hostLocked(id string) *host {
	hs := h.hosts[id]
	if hs == nil {
		hs = &host{vms: make(map[string]Power)}
		h.hosts[id] = hs
	}
	return hs
}

// begin waits the operation's latency, then decides whether it fails by
// injection. It returns with h.mu held if err is nil.
func (h *Hypervisor) begin(ctx context.Context, op Op, target string) error {
	h.mu.Lock()
	h.calls[op]++
	d, ok := h.opLat[op]
	if !ok {
		d = h.latency
	}
	h.mu.Unlock()
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return fmt.Errorf("simhv: %s %s: %w", op, target, ctx.Err())
		case <-t.C:
		}
	} else if err := ctx.Err(); err != nil {
		return fmt.Errorf("simhv: %s %s: %w", op, target, err)
	}
	h.mu.Lock()
	if h.failNext[op] > 0 {
		h.failNext[op]--
		h.mu.Unlock()
		return fmt.Errorf("simhv: %s %s: %w", op, target, ErrInjected)
	}
	if h.failRate > 0 && h.rnd.Float64() < h.failRate {
		h.mu.Unlock()
		return fmt.Errorf("simhv: %s %s: %w (fail rate %v)", op, target, ErrInjected, h.failRate)
	}
	return nil
}

// onHost runs f on a known, up host, with h.mu held by begin.
func (h *Hypervisor) onHost(ctx context.Context, op Op, hostUUID, target string, f func(hs *host) error) error {
	if err := h.begin(ctx, op, target); err != nil {
		return err
	}
	defer h.mu.Unlock()
	hs, err := h.upHostLocked(op, target, hostUUID)
	if err != nil {
		return err
	}
	return f(hs)
}

// upHostLocked returns a known (with Adopt: any) host that is up, with
// h.mu held.
func (h *Hypervisor) upHostLocked(op Op, target, hostUUID string) (*host, error) {
	hs, ok := h.hosts[hostUUID]
	if !ok && h.adopt {
		hs, ok = h.hostLocked(hostUUID), true
	}
	if !ok {
		return nil, fmt.Errorf("simhv: %s %s: host %s was never connected: %w", op, target, hostUUID, ErrUnknown)
	}
	if hs.down {
		return nil, fmt.Errorf("simhv: %s %s: host %s: %w", op, target, hostUUID, ErrHostDown)
	}
	return hs, nil
}

// Connect implements [cloud.Hypervisor.Connect].
func (h *Hypervisor) Connect(ctx context.Context, hst cloud.Host) error {
	if err := h.begin(ctx, OpConnect, "host "+hst.UUID); err != nil {
		return err
	}
	defer h.mu.Unlock()
	if hs := h.hostLocked(hst.UUID); hs.down {
		return fmt.Errorf("simhv: connect host %s (%s): %w", hst.UUID, hst.Address, ErrHostDown)
	}
	return nil
}

// Ping implements [cloud.Hypervisor.Ping].
func (h *Hypervisor) Ping(ctx context.Context, hostUUID string) error {
	return h.onHost(ctx, OpPing, hostUUID, "host "+hostUUID, func(*host) error { return nil })
}

// CreateVM implements [cloud.Hypervisor.CreateVM].
func (h *Hypervisor) CreateVM(ctx context.Context, hostUUID string, vm cloud.VM) error {
	return h.onHost(ctx, OpCreateVM, hostUUID, "vm "+vm.UUID, func(hs *host) error {
		hs.vms[vm.UUID] = PowerOff
		return nil
	})
}

// vmOp runs a power change on a VM that must exist on the host.
func (h *Hypervisor) vmOp(ctx context.Context, op Op, hostUUID, vmUUID string, f func(hs *host) error) error {
	return h.onHost(ctx, op, hostUUID, "vm "+vmUUID, func(hs *host) error {
		if _, ok := hs.vms[vmUUID]; !ok && h.adopt {
			hs.vms[vmUUID] = PowerOff
			if op == OpRebootVM {
				hs.vms[vmUUID] = PowerOn
			}
		}
		if _, ok := hs.vms[vmUUID]; !ok {
			return fmt.Errorf("simhv: %s vm %s: not on host %s: %w", op, vmUUID, hostUUID, ErrUnknown)
		}
		return f(hs)
	})
}

// StartVM implements [cloud.Hypervisor.StartVM].
func (h *Hypervisor) StartVM(ctx context.Context, hostUUID, vmUUID string) error {
	return h.vmOp(ctx, OpStartVM, hostUUID, vmUUID, func(hs *host) error { hs.vms[vmUUID] = PowerOn; return nil })
}

// StopVM implements [cloud.Hypervisor.StopVM].
func (h *Hypervisor) StopVM(ctx context.Context, hostUUID, vmUUID string) error {
	return h.vmOp(ctx, OpStopVM, hostUUID, vmUUID, func(hs *host) error { hs.vms[vmUUID] = PowerOff; return nil })
}

// RebootVM implements [cloud.Hypervisor.RebootVM].
func (h *Hypervisor) RebootVM(ctx context.Context, hostUUID, vmUUID string) error {
	return h.vmOp(ctx, OpRebootVM, hostUUID, vmUUID, func(hs *host) error {
		if hs.vms[vmUUID] != PowerOn {
			return fmt.Errorf("simhv: reboot vm %s: it is not running", vmUUID)
		}
		return nil
	})
}

// DestroyVM implements [cloud.Hypervisor.DestroyVM]: the host must be
// up; a VM it does not have is destroyed already.
func (h *Hypervisor) DestroyVM(ctx context.Context, hostUUID, vmUUID string) error {
	return h.onHost(ctx, OpDestroyVM, hostUUID, "vm "+vmUUID, func(hs *host) error { delete(hs.vms, vmUUID); return nil })
}

// MigrateVM implements [cloud.Hypervisor.MigrateVM]: both hosts must be
// up; the VM keeps its power state. A VM already on to and not on from
// stays; with Adopt, a VM on neither is adopted on to, powered off.
func (h *Hypervisor) MigrateVM(ctx context.Context, from, to, vmUUID string) error {
	target := "vm " + vmUUID
	if err := h.begin(ctx, OpMigrateVM, target); err != nil {
		return err
	}
	defer h.mu.Unlock()
	src, err := h.upHostLocked(OpMigrateVM, target, from)
	if err != nil {
		return err
	}
	dst, err := h.upHostLocked(OpMigrateVM, target, to)
	if err != nil {
		return err
	}
	p, onSrc := src.vms[vmUUID]
	_, onDst := dst.vms[vmUUID]
	switch {
	case onSrc:
		delete(src.vms, vmUUID)
		dst.vms[vmUUID] = p
	case onDst: // moved already
	case h.adopt:
		dst.vms[vmUUID] = PowerOff
	default:
		return fmt.Errorf("simhv: %s %s: not on host %s nor on host %s: %w", OpMigrateVM, target, from, to, ErrUnknown)
	}
	return nil
}

// VMPower implements [cloud.Hypervisor.VMPower]. A VM this simulator
// never saw is PowerUnknown. With Adopt every VM is PowerUnknown: another
// process's simulator may have changed it since, so this one's memory is
// no truth about the data centre. A repair then has no evidence of its
// own: it may record what its node saw this simulator do only while the
// VM's record is at the version that node's failed write read, and it
// cannot order two such calls on different nodes (see "Repairs" in
// refnode's services package).
func (h *Hypervisor) VMPower(ctx context.Context, hostUUID, vmUUID string) (cloud.Power, error) {
	p := cloud.PowerUnknown
	err := h.onHost(ctx, OpVMPower, hostUUID, "vm "+vmUUID, func(hs *host) error {
		if h.adopt {
			return nil
		}
		switch hs.vms[vmUUID] {
		case PowerOn:
			p = cloud.PowerOn
		case PowerOff:
			p = cloud.PowerOff
		}
		return nil
	})
	return p, err
}
