package memfence_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/fence/fencetest"
	"github.com/cloudbus-go/cloudbus/fence/memfence"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// subject keeps each resource's log in a map, written by the commit
// function memfence applies.
type subject struct {
	members *memstore.Store
	f       *memfence.Fence
	mu      sync.Mutex
	logs    map[string][]fencetest.Entry
}

func (s *subject) Members() heartbeat.Store { return s.members }

func (s *subject) Append(ctx context.Context, resource string, w fence.Guard, value string, hook func() error) ([]byte, error) {
	return s.f.Do(ctx, w, func(ctx context.Context, tok fence.Token) ([]byte, func(), error) {
		if hook != nil {
			if err := hook(); err != nil {
				return nil, nil, err
			}
		}
		if !w.Claim.IsZero() {
			if err := s.f.Verify(ctx, w.Claim); err != nil {
				return nil, nil, err
			}
		}
		return []byte(value), func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.logs[resource] = append(s.logs[resource], fencetest.Entry{Value: value, Token: tok})
		}, nil
	})
}

func (s *subject) Log(ctx context.Context, resource string) ([]fencetest.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]fencetest.Entry(nil), s.logs[resource]...), nil
}

func TestConformance(t *testing.T) {
	fencetest.Run(t, func(t *testing.T, maxAge time.Duration) fencetest.Subject {
		members := memstore.New(memstore.Config{})
		return &subject{members: members, f: memfence.New(members, memfence.Config{MaxAge: maxAge}), logs: map[string][]fencetest.Entry{}}
	})
}

func (s *subject) Stats() fence.Stats { return s.f.Stats() }
