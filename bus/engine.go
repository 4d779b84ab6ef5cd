package bus

import (
	"context"
	"time"

	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

func init() {
	busx.Set(busx.Hooks{
		Engine:     func(b any) busx.Engine { return engine{b.(interface{ self() *CloudBus }).self()} },
		Envelope:   func(r any) *wire.Envelope { return r.(*Request).env },
		NewRequest: func(env *wire.Envelope) any { return &Request{env: env} },
		Receiver:   func(r any) busx.Engine { return engine{r.(*Request).bus} },
		Options:    func(opts any) busx.CallOptions { return applyOptions(opts.([]Option)) },
		MuxTypes: func(h any) (reqs, replies []busx.TypeDecl) {
			if m, ok := h.(interface{ muxSelf() *Mux }); ok {
				return m.muxSelf().types()
			}
			return nil, nil
		},
	})
}

// self returns b; a type embedding *CloudBus has it too, so busx.Of
// accepts it.
func (b *CloudBus) self() *CloudBus { return b }

// engine gives the SDK's own packages the bus's plumbing (busx.Engine).
type engine struct{ b *CloudBus }

func (e engine) Forward(ctx context.Context, req any, target string, headers map[string]string) error {
	return e.b.forward(ctx, req.(*Request), target, headers)
}

func (e engine) Reroute(ctx context.Context, queue string, route func(env *wire.Envelope) error, keep bool) (busx.RerouteStats, error) {
	return e.b.reroute(ctx, queue, route, keep)
}

func (e engine) ReplayDead(ctx context.Context, ids []string, route func(env *wire.Envelope) error) ([]string, []string, error) {
	r, err := e.b.replayDead(ctx, ids, route)
	return r.Replayed, r.Missing, err
}

func (e engine) DeleteQueueIfIdle(ctx context.Context, queue string) error {
	return e.b.tr.DeleteQueueIfIdle(ctx, queue)
}

func (e engine) Drain(ctx context.Context) error { return e.b.drain(ctx) }

func (e engine) CloseWithin(ctx context.Context) error { return e.b.closeWithin(ctx) }

func (e engine) AbandonCalls(node string, before time.Time, cause error) int {
	return e.b.abandonCalls(node, before, cause)
}

func (e engine) RegisterShared(ctx context.Context, serviceID string, h any) error {
	return e.b.registerShared(ctx, serviceID, h.(Handler))
}

func (e engine) RegisterRaw(ctx context.Context, serviceID string, h any) error {
	var raw Handler // nil stays nil, for serve to refuse
	if h, _ := h.(Handler); h != nil {
		raw = rawHandler{h}
	}
	return e.b.registerShared(ctx, serviceID, raw)
}

// rawHandler marks a handler registered with RegisterRaw: the bus hands
// it its messages undecoded (see handle).
type rawHandler struct{ Handler }

func (e engine) CallRaw(ctx context.Context, target, typ string, body []byte, o busx.CallOptions) (busx.Raw, error) {
	return e.b.callRaw(ctx, target, typ, body, o)
}

func (e engine) Unregister(ctx context.Context, serviceID string, deleteQueue bool) error {
	return e.b.unregister(ctx, serviceID, deleteQueue)
}

func (e engine) Services() []string { return e.b.serviceIDs() }

func (e engine) QueueName(serviceID string) string { return e.b.queueName(serviceID) }

func (e engine) APIEntry() string { return e.b.apiEntry() }

func (e engine) Registry() *message.Registry { return e.b.registry() }
