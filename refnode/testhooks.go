package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// The test hooks of refnode serve -test-hooks: admin endpoints through
// which a fault test arms a fault inside a running node, at the moment
// it chooses. For fault tests only.

// stallVMFinalWrite is where a VM operation stalls, in the log line.
const stallVMFinalWrite = "after its hypervisor call, before its final write"

// stallArm is the one-shot stall that POST
// /test/stall-vm-final-write?for=d arms: the next VM operation that
// reaches its final write (its hypervisor acted; the write of the
// outcome comes next) holds its transaction for d, or until the
// operation's context ends, then goes on. One operation takes it; a
// later one runs unstalled until the stall is armed again. Safe for
// concurrent use.
type stallArm struct {
	log *slog.Logger

	mu    sync.Mutex
	armed time.Duration // the stall's length; 0: disarmed
}

// arm arms the stall for d, or disarms it for d = 0, replacing what was
// armed.
func (a *stallArm) arm(d time.Duration) {
	a.mu.Lock()
	a.armed = d
	a.mu.Unlock()
}

// hold is the hook services.Config.StallVMFinalWrite calls: it takes
// the armed stall, if any, and holds the operation on VM vm for it,
// logging "test stall: holding ..." and "test stall: over" at WARN.
func (a *stallArm) hold(ctx context.Context, vm string) {
	a.mu.Lock()
	d := a.armed
	a.armed = 0
	a.mu.Unlock()
	if d <= 0 {
		return
	}
	a.log.Warn("test stall: holding a VM write "+stallVMFinalWrite, "vm", vm, "for", d, "armed", "POST /test/stall-vm-final-write")
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	a.log.Warn("test stall: over", "vm", vm)
}

// withTestHooks serves h, and POST /test/stall-vm-final-write?for=d,
// which arms a's stall for d (a Go duration; 0 disarms) and answers 200
// with a line saying so; a missing or bad d is answered 400, another
// method 405.
func withTestHooks(h http.Handler, a *stallArm) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("POST /test/stall-vm-final-write", func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("for"))
		if err != nil || d < 0 {
			http.Error(w, "give ?for=d, a duration such as 5s (0 disarms)", http.StatusBadRequest)
			return
		}
		a.arm(d)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if d == 0 {
			fmt.Fprintln(w, "disarmed: VM operations write their outcome unstalled")
			return
		}
		fmt.Fprintf(w, "armed: the next VM operation to reach its final write stalls there for %s\n", d)
	})
	mux.HandleFunc("/test/stall-vm-final-write", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
	})
	return mux
}

// chainStalls returns a hook that runs each non-nil hook in turn; nil if
// every hook is nil.
func chainStalls(hooks ...func(ctx context.Context, vm string)) func(ctx context.Context, vm string) {
	var set []func(ctx context.Context, vm string)
	for _, h := range hooks {
		if h != nil {
			set = append(set, h)
		}
	}
	switch len(set) {
	case 0:
		return nil
	case 1:
		return set[0]
	}
	return func(ctx context.Context, vm string) {
		for _, h := range set {
			h(ctx, vm)
		}
	}
}
