package service

import (
	"context"

	"github.com/cloudbus-go/cloudbus/bus"
)

type handlerFunc func(ctx context.Context, r *bus.Request) (any, error)

func (f handlerFunc) Handle(ctx context.Context, r *bus.Request) (any, error) { return f(ctx, r) }
