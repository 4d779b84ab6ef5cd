package servicetest_test

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// hb is the timing every cluster test runs with: the default.
var hb = heartbeat.TestConfig()

// start starts a cluster of n nodes of whereService (see example_test.go)
// with opts, closed when the test ends. Call it inside synctest.Test.
func start(t *testing.T, n int, opts servicetest.Options) *servicetest.Cluster {
	t.Helper()
	w := whereOptions()
	opts.Nodes, opts.Registry, opts.Services = n, w.Registry, w.Services
	return servicetest.Start(t, opts)
}

// inEveryLiveRing reports whether every live node other than id holds id.
func inEveryLiveRing(c *servicetest.Cluster, id string) bool {
	for _, n := range c.Live() {
		if !slices.Contains(n.Members(), id) {
			return false
		}
	}
	return true
}

// fatalTB records Fatalf and ends the calling goroutine, as testing.T
// does, so a test can check that a Wait fails, and how.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fails runs wait with a fatalTB and returns what it failed with, or ""
// if it did not fail.
func fails(t *testing.T, wait func(tb testing.TB)) string {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait(f)
	}()
	<-done
	return f.msg
}
