package volume_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/examples/volume"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
)

// The process tests run the volumed binary, built once by TestMain when
// they will run (CLOUDBUS_AMQP_URL set, or CI=true), as an operator
// runs it: flags from VOLUME_* variables, on RabbitMQ and a database.
var (
	volumedBin string
	buildErr   error
)

// buildFirst builds volumed before the tests run and removes it after.
type buildFirst struct{ m *testing.M }

func (b buildFirst) Run() int {
	if testenv.WillRun(testenv.AMQPVar) {
		dir, err := os.MkdirTemp("", "volumed-bin-")
		if err != nil {
			buildErr = err
		} else {
			defer os.RemoveAll(dir)
			volumedBin = filepath.Join(dir, "volumed")
			cmd := exec.Command("go", "build", "-o", volumedBin, "./cmd/volumed")
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build ./cmd/volumed: %v\n%s", err, out)
			}
		}
	}
	return b.m.Run()
}

// processTest skips under -short and -race (the bounds assume full
// speed: CI runs these tests in its serial step), and returns the broker.
func processTest(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("a process test: skipped under -short")
	}
	if raceEnabled {
		t.Skipf("skipped under -race: its timing assumes full speed; CI runs it without -race: go test -count=1 -run '^%s$' ./examples/volume", t.Name())
	}
	broker := testenv.AMQPURL(t)
	require.NoError(t, buildErr)
	return broker
}

// proc is one volumed process.
type proc struct {
	cmd     *exec.Cmd
	mu      sync.Mutex
	out     strings.Builder
	started time.Time
	exited  chan struct{}
	err     error
}

var adminLine = regexp.MustCompile(`(?m)^admin:\s+(http://\S+)`)

// startVolumed starts volumed with the cluster's settings in VOLUME_*
// variables; it is killed when the test ends.
func startVolumed(t *testing.T, broker, db, prefix string) *proc {
	t.Helper()
	p := &proc{exited: make(chan struct{})}
	p.cmd = exec.Command(volumedBin)
	p.cmd.SysProcAttr = childProcAttr() // it ends with the test binary
	p.cmd.Env = append(os.Environ(), "VOLUME_BUS="+broker, "VOLUME_DB="+db, "VOLUME_PREFIX="+prefix, "VOLUME_LISTEN=127.0.0.1:0", "VOLUME_LOG_LEVEL=warn")
	r, w, err := os.Pipe()
	require.NoError(t, err)
	p.cmd.Stdout, p.cmd.Stderr = w, w
	p.started = time.Now()
	require.NoError(t, p.cmd.Start())
	w.Close()
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("volumed %d printed:\n%s", p.cmd.Process.Pid, p.output())
		}
	})
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// status waits until the node serves with members nodes in its ring, and
// returns its GET /status.
func (p *proc) status(ctx context.Context, members int) (nodekit.Status, error) {
	for {
		var st nodekit.Status
		if m := adminLine.FindStringSubmatch(p.output()); m != nil {
			if resp, err := http.Get(m[1] + "/status"); err == nil {
				err = json.NewDecoder(resp.Body).Decode(&st)
				resp.Body.Close()
				if err == nil && st.State == "serving" && len(st.Ring.Members) == members {
					return st, nil
				}
			}
		}
		select {
		case <-p.exited:
			return st, fmt.Errorf("volumed exited before it served: %v", p.err)
		case <-ctx.Done():
			return st, fmt.Errorf("volumed not serving with %d members: %w", members, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM and waits for the exit.
func (p *proc) stop(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.err
	case <-time.After(timeout):
		return fmt.Errorf("volumed did not exit within %s of SIGTERM", timeout)
	}
}

// during waits d, or until ctx ends: a phase of load.
func during(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// purge deletes what the cluster of prefix left, and checks that no
// table of it is left.
func purge(t *testing.T, broker, db, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := nodekit.Purge(ctx, nodekit.Settings{Bus: broker, DB: db, Prefix: prefix}, "volume")
	require.NoError(t, err)
	assert.NotEmpty(t, p.Tables)
}

// TestKillUnderLoad: two volumed nodes on RabbitMQ and PostgreSQL serve
// 16 clients through api.portal, each attaching and detaching its own
// volume with retries; one node is killed with SIGKILL. No call fails,
// every acknowledged operation is applied exactly once (read from the
// database), and the killed node's volumes are served by the survivor
// within the eviction threshold plus a second.
func TestKillUnderLoad(t *testing.T) {
	broker := processTest(t)
	db := testenv.PostgresDSN(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	prefix := "volume-test-kill-" + randomHex(4)
	a, b := startVolumed(t, broker, db, prefix), startVolumed(t, broker, db, prefix)
	var ids []string
	for _, p := range []*proc{a, b} {
		st, err := p.status(ctx, 2)
		require.NoError(t, err)
		assert.Equal(t, "3s", st.Database.IdleTimeout, "the node's sessions run with idle_in_transaction_session_timeout (SHOW) though the URL does not set it")
		ids = append(ids, st.Node)
	}
	t.Logf("SHOW idle_in_transaction_session_timeout on each node's session: %s (the URL sets none)", "3s")
	defer func() {
		assert.NoError(t, a.stop(30*time.Second), "the survivor leaves in order")
		purge(t, broker, db, prefix)
	}()

	tr, err := amqpbus.Dial(ctx, amqpbus.Config{URL: broker, ConnectionName: "volume load"})
	require.NoError(t, err)
	reg := message.NewRegistry()
	require.NoError(t, volume.Register(reg))
	cl, err := service.NewClient(ctx, service.ClientConfig{Transport: tr, OwnTransport: true, Prefix: prefix, Registry: reg})
	require.NoError(t, err)
	defer cl.Close()

	const clients = 16
	vols := make([]volume.Volume, clients)
	for i := range vols {
		vols[i], err = service.Call[volume.Volume](ctx, cl, volume.CreateVolume{Name: fmt.Sprintf("v%d", i), SizeGB: 1})
		require.NoError(t, err)
	}

	type outcome struct {
		vol        int
		start, end time.Time
		node       string
		err        error
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		acked    = make([]int, clients)
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			vm := message.NewUUID()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				var msg any = volume.AttachVolume{Volume: vols[i].UUID, VM: vm}
				if n%2 == 1 {
					msg = volume.DetachVolume{Volume: vols[i].UUID}
				}
				cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
				start := time.Now()
				v, err := service.Call[volume.Volume](cctx, cl, msg, bus.WithRetry(5))
				ccancel()
				mu.Lock()
				outcomes = append(outcomes, outcome{vol: i, start: start, end: time.Now(), node: v.Node, err: err})
				if err == nil {
					acked[i]++
				}
				mu.Unlock()
				if err != nil {
					return // the volume's state is unknown: this client stops
				}
			}
		})
	}
	during(ctx, 3*time.Second) // load before the kill
	killed := time.Now()
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGKILL))
	during(ctx, 8*time.Second) // load after the kill
	close(stop)
	wg.Wait()

	var failed []string
	var slowest time.Duration
	ownedByKilled := map[int]bool{}
	for _, o := range outcomes {
		if o.err == nil && o.node == ids[1] && o.end.Before(killed) {
			ownedByKilled[o.vol] = true
		}
	}
	takeover := map[int]time.Duration{} // a volume of the killed node: from the kill to its first call the survivor answered
	for _, o := range outcomes {
		if o.err != nil {
			failed = append(failed, fmt.Sprintf("volume %d: %v", o.vol, o.err))
		}
		slowest = max(slowest, o.end.Sub(o.start))
		if _, ok := takeover[o.vol]; !ok && ownedByKilled[o.vol] && o.err == nil && o.node == ids[0] {
			takeover[o.vol] = o.end.Sub(killed)
		}
	}
	assert.Len(t, takeover, len(ownedByKilled), "every volume of the killed node was served by the survivor")
	assert.Empty(t, failed, "no call fails")

	u, err := sqlconn.ParseURL(db, sqlconn.Auto)
	require.NoError(t, err)
	pool, err := sqlconn.Open(sqlconn.Config{URL: db})
	require.NoError(t, err)
	defer pool.Close()
	repo := volume.NewRepo(nodekit.Env{DB: pool.DB, Dialect: u.Dialect, Tables: nodekit.TableBase(prefix) + "_volume"})
	events, err := repo.Events(ctx)
	require.NoError(t, err)
	var twice []string
	for id, n := range events {
		if n != 1 {
			twice = append(twice, fmt.Sprintf("%s: %d", id, n))
		}
	}
	assert.Empty(t, twice, "every operation applied once")
	total := 0
	for i, v := range vols {
		got, err := repo.Get(ctx, v.UUID)
		require.NoError(t, err)
		assert.Equal(t, int64(1+acked[i]), got.Version, "volume %d: created, then each acknowledged attach or detach applied once", i)
		total += acked[i]
	}
	assert.Len(t, events, total, "one event per acknowledged operation")
	var worst time.Duration
	for _, d := range takeover {
		worst = max(worst, d)
	}
	t.Logf("%d calls by %d clients, %d failed; killed a node 3 s into the load; the %d volumes it owned were answered by the survivor at most %s after the kill (takeover); slowest call %s; %d events, each applied once",
		len(outcomes), clients, len(failed), len(takeover), worst.Round(time.Millisecond), slowest.Round(time.Millisecond), len(events))
	assert.Less(t, worst, 3*time.Second+time.Second+3*time.Second, "takeover within the eviction threshold and the re-route")
}

// TestNodesStartTogether: two volumed nodes started at the same instant
// on an empty database both come up (their tables created once, under
// the kit's lock), 10 times each on PostgreSQL and MariaDB.
func TestNodesStartTogether(t *testing.T) {
	broker := processTest(t)
	for _, tc := range []struct {
		name string
		db   func(t testing.TB) string
	}{{"postgres", testenv.PostgresDSN}, {"mariadb", testenv.MySQLDSN}} {
		t.Run(tc.name, func(t *testing.T) {
			db := tc.db(t)
			failures := 0
			var took []time.Duration
			for try := range 10 {
				ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
				prefix := fmt.Sprintf("volume-test-start-%d-%s", try, randomHex(4))
				start := time.Now()
				a, b := startVolumed(t, broker, db, prefix), startVolumed(t, broker, db, prefix)
				var errs []error
				for _, p := range []*proc{a, b} {
					if _, err := p.status(ctx, 2); err != nil {
						errs = append(errs, err)
					}
				}
				took = append(took, time.Since(start))
				for _, p := range []*proc{a, b} {
					if err := p.stop(30 * time.Second); err != nil {
						errs = append(errs, fmt.Errorf("exit: %w", err))
					}
				}
				cancel()
				if len(errs) > 0 {
					failures++
					t.Errorf("try %d: %v\nnode A:\n%s\nnode B:\n%s", try, errs, a.output(), b.output())
				}
				purge(t, broker, db, prefix)
			}
			slices.Sort(took)
			t.Logf("%s: 10 tries of two nodes started together on an empty database: %d failed; both serving in %s (median) to %s (max)",
				tc.name, failures, took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
		})
	}
}
