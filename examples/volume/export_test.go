package volume

import (
	"context"

	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
)

// NewWithHook is New with a hook that runs inside each attach's
// transaction just before it commits.
func NewWithHook(env nodekit.Env, beforeCommit func(ctx context.Context)) service.Service {
	return newService(env, beforeCommit)
}
