package services

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service"
)

// Config configures the services of one management node. Store and
// Hypervisor are required; every other zero field takes a default.
type Config struct {
	// Store holds the records; required. Nodes of one cluster share it.
	Store cloud.Store
	// Hypervisor runs the VMs; required.
	Hypervisor cloud.Hypervisor
	// PingInterval is how often the host tracker pings the hosts this
	// node owns. Default 10 s; the first round is delayed by a random
	// fraction of it so nodes do not ping in lockstep.
	PingInterval time.Duration
	// OpTimeout bounds each hypervisor call of the tracker (ping,
	// reconnect). Default: PingInterval.
	OpTimeout time.Duration
	// ResyncEvery is how many ping rounds pass between two full
	// comparisons of the host list with the ring, besides the one made
	// at every ring change, to heal a failed one. Default 10.
	ResyncEvery int
	// MaxParallel bounds the tracker's concurrent hypervisor calls.
	// Default 8.
	MaxParallel int
	// Logger receives the services' logs; nil discards them.
	Logger *slog.Logger
	// StallVMWrite, if set, runs in every VM operation's transaction
	// after the fence's check and before the hypervisor call and the
	// write: fault tests stall a writer there (refnode serve
	// -test-stall-vm-write).
	StallVMWrite func(ctx context.Context, vm string)
	// StallVMFinalWrite, if set, runs in every VM operation's
	// transaction after the hypervisor call and before the write that
	// records its outcome: fault tests cut the database there (refnode
	// serve -test-stall-vm-final-write).
	StallVMFinalWrite func(ctx context.Context, vm string)
	// StallImageWrite, if set, runs in every SetImageName transaction
	// that is about to write name, after the fence's check and the read
	// of the image, before the write: fault tests stall a writer there,
	// so that its node loses the image meanwhile.
	StallImageWrite func(ctx context.Context, image, name string)
	// VMSweepInterval is how often each node checks the VMs it owns
	// against their hypervisor and repairs a record left transitional or
	// contradicting the VM's power state; it also checks at every ring
	// change (a takeover). Default 30 s.
	VMSweepInterval time.Duration
}

func (c *Config) setDefaults() {
	if c.PingInterval == 0 {
		c.PingInterval = 10 * time.Second
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = c.PingInterval
	}
	if c.ResyncEvery == 0 {
		c.ResyncEvery = 10
	}
	if c.MaxParallel == 0 {
		c.MaxParallel = 8
	}
	if c.VMSweepInterval == 0 {
		c.VMSweepInterval = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports every problem with c at once. Zero fields other than
// Store and Hypervisor are valid (they take defaults).
func (c Config) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("services: config: Store is required (memdb for one process)"))
	}
	if c.Hypervisor == nil {
		errs = append(errs, errors.New("services: config: Hypervisor is required (simhv simulates one)"))
	}
	if c.PingInterval < 0 || c.OpTimeout < 0 || c.VMSweepInterval < 0 {
		errs = append(errs, fmt.Errorf("services: config: PingInterval %s, OpTimeout %s and VMSweepInterval %s must not be negative", c.PingInterval, c.OpTimeout, c.VMSweepInterval))
	}
	if c.ResyncEvery < 0 || c.MaxParallel < 0 {
		errs = append(errs, fmt.Errorf("services: config: ResyncEvery %d and MaxParallel %d must not be negative", c.ResyncEvery, c.MaxParallel))
	}
	return errors.Join(errs...)
}

// Set is the services of one management node. Create one Set per node:
// a service belongs to the node that started it.
type Set struct {
	// Host is the host service.
	Host *HostService
	// Image is the image service.
	Image *ImageService
	// VM is the VM service.
	VM *VMService
}

// New validates cfg and returns the services of one node.
func New(cfg Config) (*Set, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Set{Host: newHostService(cfg), Image: newImageService(cfg), VM: newVMService(cfg)}, nil
}

// Services returns the set as service.Service values, for service.Config.
func (s *Set) Services() []service.Service {
	return []service.Service{s.Host, s.Image, s.VM}
}

// handling says which node handled r, and through which node's
// api.portal it came.
func handling(r *bus.Request) api.Handling {
	return api.Handling{Node: r.Node(), Portal: r.Header(service.HeaderPortal)}
}

// started returns an error if the service's Start has not run (n is
// nil): a message cannot arrive before, but a misuse should not panic.
func started(n *service.Node, name string) error {
	if n == nil {
		return fmt.Errorf("services: %s received a message before Start: %w", name, message.ErrClosed)
	}
	return nil
}

// answer is what a handler's error becomes on the wire. An error meant
// for the caller (one holding a *message.Error: bad request, not found,
// not owner, ...), a hypervisor's failure and [bus.ErrRelease] go as they
// are. A database error ([sqlconn.IsDatabaseError]) names the database
// (host, port, name, user) and quotes its driver: that is for this
// node's log, which gets it with the message's id, not for an API client.
// The caller gets the error's class (timeout or canceled if a deadline
// or a cancellation ended it, internal otherwise: outcome unknown in
// every case, as before) and where the cause was logged.
func answer(log *slog.Logger, r *bus.Request, err error) error {
	var coded *message.Error
	if err == nil || errors.As(err, &coded) || errors.Is(err, bus.ErrRelease) || !sqlconn.IsDatabaseError(err) {
		return err
	}
	class := message.ErrInternal
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		class = message.ErrTimeout
	case errors.Is(err, context.Canceled):
		class = message.ErrCanceled
	}
	log.Warn("database error; answered without its text", "type", r.Type(), "msg", r.ID(), "resource", r.Resource(), "code", class.Code, "err", err)
	return class.WithDetails(fmt.Sprintf("the database failed; node %s logged the cause with message id %s", r.Node(), r.ID()))
}

// stale logs err if it says this node's claim on a resource no longer
// holds (package fence): the node lost ownership, which its heartbeat will
// confirm, and wrote nothing. It returns err unchanged.
func stale(log *slog.Logger, err error) error {
	var se *fence.StaleError
	if errors.As(err, &se) {
		log.Warn("write refused: this node no longer owns the resource", "resource", se.Claim.Resource, "epoch", se.Claim.Epoch, "reason", se.Reason)
	}
	return err
}

// worker is a service's background goroutine (the host tracker, the VM
// sweeper): started once by the service's Start, canceled and waited for
// by its Stop.
type worker struct {
	cancel   context.CancelFunc
	done     chan struct{} // closed when run returns; nil before start
	stopOnce sync.Once
}

// start runs run on its own goroutine with a ctx that stop cancels.
func (w *worker) start(run func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel, w.done = cancel, make(chan struct{})
	go func() {
		defer close(w.done)
		run(ctx)
	}()
}

// stop runs also (if not nil) and cancels the worker, once, then waits
// for it to return or for ctx. It is idempotent and safe without start.
func (w *worker) stop(ctx context.Context, what string, also func()) error {
	w.stopOnce.Do(func() {
		if also != nil {
			also()
		}
		if w.cancel != nil {
			w.cancel()
		}
	})
	if w.done == nil {
		return nil
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("services: stop %s: %w", what, ctx.Err())
	}
}
