package service_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/service/servicetest"
)

// keyCheck is a slog.Handler that records every log line in which one
// key appears twice (from the logger's With attributes and the record's
// own): a text log shows both, a JSON log has a duplicate member.
type keyCheck struct {
	mu     *sync.Mutex
	dups   *[]string
	lines  *int
	keys   []string
	prefix string
}

func (h keyCheck) Enabled(context.Context, slog.Level) bool { return true }

func (h keyCheck) WithAttrs(as []slog.Attr) slog.Handler {
	h.keys = slices.Clone(h.keys)
	for _, a := range as {
		h.keys = append(h.keys, h.prefix+a.Key)
	}
	return h
}

func (h keyCheck) WithGroup(name string) slog.Handler {
	h.prefix += name + "."
	return h
}

func (h keyCheck) Handle(_ context.Context, r slog.Record) error {
	keys := slices.Clone(h.keys)
	r.Attrs(func(a slog.Attr) bool {
		keys = append(keys, h.prefix+a.Key)
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.lines++
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			*h.dups = append(*h.dups, r.Message+": "+k)
		}
		seen[k] = true
	}
	return nil
}

// TestLogAttributesOnce: nodes joining, serving and leaving log every
// attribute once (the heartbeat monitor's lines named the node twice).
func TestLogAttributesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var dups []string
		var lines int
		log := slog.New(keyCheck{mu: &mu, dups: &dups, lines: &lines})
		c, _ := startCluster(t, 2, newJournal(), servicetest.Options{Logger: log})
		c.WaitConverged(t, time.Second)
		require.NoError(t, c.Node(1).Close())
		c.WaitConverged(t, time.Second)
		mu.Lock()
		defer mu.Unlock()
		assert.Positive(t, lines)
		assert.Empty(t, dups, "log lines with a key twice")
	})
}
