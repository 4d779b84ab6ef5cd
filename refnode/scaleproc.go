package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
)

// scaleProc is one refnode serve process of refnode scale -processes.
type scaleProc struct {
	cmd   *exec.Cmd
	node  string // its UUID
	admin string // its admin URL
	done  chan struct{}
	mu    sync.Mutex
	lines []string // its stdout so far, for errors
}

// procStatus is the part of GET /status that scale reads.
type procStatus struct {
	Epoch int64  `json:"epoch"`
	State string `json:"state"`
	Ring  struct {
		Fingerprint string `json:"fingerprint"`
	} `json:"ring"`
}

var (
	scaleNodeRe  = regexp.MustCompile(`^node: +([0-9a-f]{32})`)
	scaleAdminRe = regexp.MustCompile(`^admin: +(http://\S+)`)
)

// scaleCluster is refnode serve processes sharing a broker, a database
// and a prefix of their own.
type scaleCluster struct {
	exe      string
	settings nodekit.Settings
	client   *http.Client
	mu       sync.Mutex
	procs    []*scaleProc
}

// start starts one more process and waits until its admin listener
// answers.
func (c *scaleCluster) start(ctx context.Context) (*scaleProc, error) {
	s := c.settings
	cmd := exec.Command(c.exe, "serve", "-bus", s.Bus, "-db", s.DB, "-prefix", s.Prefix, "-listen", "127.0.0.1:0",
		"-heartbeat", s.Heartbeat.Interval.String(), "-evict-after", s.Heartbeat.EvictAfter.String(), "-log-level", "error")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = io.Discard
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s serve: %w", c.exe, err)
	}
	p := &scaleProc{cmd: cmd, done: make(chan struct{})}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	known := make(chan struct{})
	go func() { // ends when the process exits and its stdout closes
		defer close(p.done)
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.lines = append(p.lines, line)
			if m := scaleNodeRe.FindStringSubmatch(line); m != nil {
				p.node = m[1]
			}
			if m := scaleAdminRe.FindStringSubmatch(line); m != nil {
				p.admin = m[1]
			}
			ready := p.node != "" && p.admin != ""
			p.mu.Unlock()
			if ready && !signalled {
				signalled = true
				close(known)
			}
		}
		_ = cmd.Wait()
	}()
	select {
	case <-known:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("a refnode serve process exited before it served: %s", strings.Join(p.output(), " | "))
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// output returns what p printed so far.
func (p *scaleProc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

// status reads p's GET /status.
func (c *scaleCluster) status(ctx context.Context, p *scaleProc) (procStatus, error) {
	var st procStatus
	req, err := http.NewRequestWithContext(ctx, "GET", p.admin+"/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// live returns the processes that have not exited.
func (c *scaleCluster) live() []*scaleProc {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*scaleProc
	for _, p := range c.procs {
		select {
		case <-p.done:
		default:
			out = append(out, p)
		}
	}
	return out
}

// agreed reports whether every process in live serves with a ring of
// exactly live's nodes.
func (c *scaleCluster) agreed(ctx context.Context, live []*scaleProc) bool {
	ids := make([]string, len(live))
	for i, p := range live {
		ids[i] = p.node
	}
	want := ring.FingerprintOf(ids).String()
	for _, p := range live {
		st, err := c.status(ctx, p)
		if err != nil || st.State != "serving" || st.Ring.Fingerprint != want {
			return false
		}
	}
	return true
}

// awaitAgreed polls every 2 ms until the processes of live agree.
func (c *scaleCluster) awaitAgreed(ctx context.Context, live []*scaleProc, what string) (time.Time, error) {
	for !c.agreed(ctx, live) {
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting until every ring agrees %s: %w", what, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
	return time.Now(), nil
}

// stopAll ends every process: SIGTERM, then SIGKILL after 15 s.
func (c *scaleCluster) stopAll() {
	c.mu.Lock()
	procs := slices.Clone(c.procs)
	c.mu.Unlock()
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// rssKiB returns the resident set of process pid, from /proc.
func rssKiB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, errors.New("no VmRSS")
}

// runScaleProcesses starts n refnode serve processes on the broker at
// busURL and the database at dbURL, under a prefix of their own, and
// times a join, an orderly leave (SIGTERM) and a kill (SIGKILL): when
// the heartbeat store knew (a direct read of its table every 2 ms) and
// when every process's ring agreed (each one's GET /status every 2 ms).
// It measures the resident memory per process, and deletes the
// cluster's queues and tables at the end.
func runScaleProcesses(ctx context.Context, n int, busURL, dbURL string, hb heartbeat.Config, progress io.Writer) (r *scaleReport, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var salt [4]byte
	_, _ = rand.Read(salt[:])
	prefix := "scale" + hex.EncodeToString(salt[:])
	s := nodekit.Settings{Bus: busURL, DB: dbURL, Prefix: prefix, Heartbeat: hb}
	db, err := nodekit.OpenDatabase(ctx, nodekit.DatabaseConfig{URL: dbURL, HeartbeatTable: nodekit.TableBase(prefix) + "_heartbeat",
		EvictAfter: hb.EvictAfter, AllowNoIdleTimeout: true})
	if err != nil {
		return nil, fmt.Errorf("open the database: %w; check -db", err)
	}
	c := &scaleCluster{exe: exe, settings: s, client: &http.Client{Timeout: 2 * time.Second}}
	defer func() {
		c.stopAll()
		_ = db.Close()
		pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, perr := nodekit.Purge(pctx, s, "refnode"); perr != nil {
			err = errors.Join(err, fmt.Errorf("delete the cluster's queues and tables (prefix %s): %w", prefix, perr))
		}
	}()
	start := time.Now()
	for range n {
		if _, err := c.start(ctx); err != nil {
			return nil, err
		}
	}
	if _, err := c.awaitAgreed(ctx, c.live(), "at the start"); err != nil {
		return nil, err
	}
	r = &scaleReport{Nodes: n, Where: "processes", Store: sqlconn.MaskURL(dbURL), HeartbeatMS: hb.Interval.Milliseconds(), EvictAfterMS: hb.EvictAfter.Milliseconds(), StartSeconds: time.Since(start).Seconds()}
	fmt.Fprintf(progress, "scale: %d processes agree after %.1fs\n", n, r.StartSeconds)
	var rss int64
	for _, p := range c.live() {
		k, err := rssKiB(p.cmd.Process.Pid)
		if err != nil {
			return nil, err
		}
		rss += k
	}
	r.RSSPerNodeKB = float64(rss) / float64(n)

	storeKnows := func(node string, present bool) (time.Time, error) {
		for {
			recs, err := db.Heartbeat.List(ctx)
			if err != nil {
				return time.Time{}, err
			}
			if slices.ContainsFunc(recs, func(r heartbeat.Record) bool { return r.Node == node }) == present {
				return time.Now(), nil
			}
			select {
			case <-time.After(2 * time.Millisecond):
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			}
		}
	}
	event := func(name string, began, knew, agreed time.Time) {
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		r.Events = append(r.Events, scaleEvent{Event: name, StoreMS: ms(knew.Sub(began)), AgreedMS: ms(agreed.Sub(began)), AfterStoreMS: ms(agreed.Sub(knew))})
		fmt.Fprintf(progress, "scale: %s: the store knew after %s, every ring agreed after %s\n", name, knew.Sub(began).Round(time.Millisecond), agreed.Sub(began).Round(time.Millisecond))
	}

	// A join: the store knows at the registration (the epoch is its time).
	began := time.Now()
	joiner, err := c.start(ctx)
	if err != nil {
		return nil, err
	}
	agreed, err := c.awaitAgreed(ctx, c.live(), "after the join")
	if err != nil {
		return nil, err
	}
	st, err := c.status(ctx, joiner)
	if err != nil {
		return nil, err
	}
	event("join", began, heartbeat.Record{Epoch: st.Epoch}.RegisteredAt(), agreed)

	// An orderly leave (SIGTERM), then a kill (SIGKILL), of other nodes.
	for _, name := range []string{"leave", "kill"} {
		live := c.live()
		victim := live[len(live)/2]
		rest := slices.DeleteFunc(slices.Clone(live), func(p *scaleProc) bool { return p == victim })
		began := time.Now()
		sig := syscall.SIGTERM
		if name == "kill" {
			sig = syscall.SIGKILL
		}
		if err := victim.cmd.Process.Signal(sig); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		knew, err := storeKnows(victim.node, false)
		if err != nil {
			return nil, err
		}
		agreed, err := c.awaitAgreed(ctx, rest, "after the "+name)
		if err != nil {
			return nil, err
		}
		event(name, began, knew, agreed)
		<-victim.done
	}
	return r, nil
}
