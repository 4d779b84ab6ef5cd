package volume

import (
	"context"
	"fmt"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
)

// ErrInUse is the volume service's own error code, registered with its
// retry class: the volume is attached to another VM; nothing ran; a
// retry fails the same way until it is detached. A client in any
// language sees "volume_in_use" and its class "never".
var ErrInUse = message.MustRegisterCode("volume_in_use", message.RetryNever, "the volume is attached to another VM")

// New returns a node's volume service on the repository of env. Every
// message is accepted through api.portal.
func New(env nodekit.Env) service.Service { return newService(env, nil) }

// newService is New with a hook that runs inside each attach's
// transaction just before it commits (tests: export_test.go).
func newService(env nodekit.Env, beforeCommit func(ctx context.Context)) service.Service {
	h := &handlers{repo: NewRepo(env), beforeCommit: beforeCommit}
	mux := bus.NewMux()
	bus.Handle(mux, h.create)
	bus.Handle(mux, h.attach)
	bus.Handle(mux, h.detach)
	bus.Handle(mux, h.get)
	return service.API("volume", mux)
}

// handlers are the volume service's handlers.
type handlers struct {
	repo *Repo
	// beforeCommit, if set (tests), runs inside each attach's
	// transaction just before it commits.
	beforeCommit func(ctx context.Context)
}

func (h *handlers) create(ctx context.Context, r *bus.Request, m CreateVolume) (Volume, error) {
	if m.Name == "" || m.SizeGB <= 0 {
		return Volume{}, message.ErrBadRequest.WithDetails("a volume needs a name and a positive size_gb")
	}
	v, err := h.repo.Create(ctx, fence.For(ctx, r), m)
	v.Node = r.Node()
	return v, err
}

func (h *handlers) attach(ctx context.Context, r *bus.Request, m AttachVolume) (Volume, error) {
	if !message.IsCanonicalUUID(m.VM) {
		return Volume{}, message.ErrInvalidUUID.WithDetails("vm " + m.VM)
	}
	v, err := h.repo.Update(ctx, fence.For(ctx, r), m.Volume, "attach", func(v *Volume) error {
		switch v.AttachedTo {
		case m.VM:
			return message.ErrConflict.WithDetails(fmt.Sprintf("volume %s is attached to vm %s already", v.UUID, m.VM))
		case "":
		default:
			return ErrInUse.WithDetails(fmt.Sprintf("volume %s is attached to vm %s", v.UUID, v.AttachedTo))
		}
		v.AttachedTo = m.VM
		if h.beforeCommit != nil {
			h.beforeCommit(ctx)
		}
		return nil
	})
	v.Node = r.Node()
	return v, err
}

func (h *handlers) detach(ctx context.Context, r *bus.Request, m DetachVolume) (Volume, error) {
	v, err := h.repo.Update(ctx, fence.For(ctx, r), m.Volume, "detach", func(v *Volume) error {
		if v.AttachedTo == "" {
			return message.ErrFailedPrecondition.WithDetails("volume " + v.UUID + " is not attached")
		}
		v.AttachedTo = ""
		return nil
	})
	v.Node = r.Node()
	return v, err
}

func (h *handlers) get(ctx context.Context, r *bus.Request, m GetVolume) (Volume, error) {
	v, err := h.repo.Get(ctx, m.Volume)
	v.Node = r.Node()
	return v, err
}
