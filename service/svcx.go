package service

import (
	"context"

	"github.com/cloudbus-go/cloudbus/internal/svcx"
)

func init() {
	svcx.SetGate = func(node any, gate func(ctx context.Context) error) {
		n := node.(*Node)
		if gate == nil {
			n.gate.Store(nil)
			return
		}
		n.gate.Store(&gate)
	}
	svcx.SaidGoodbye = func(node any, member string) bool {
		n := node.(*Node)
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.goodbye[member]
	}
}
