package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/service"
)

// The chaos test's clients: separate processes (this test binary run
// again with -test.run=^TestClientProcessForChaos$ and its work in an
// environment variable), each running one client per image and one per
// VM, with a service.Client (its own broker connection) each, and one
// sender of one-way writes, straight to the broker, never through a
// node's proxy. An image client calls one operation at a time on its
// image (GetImage, SetImageName with a unique name, or SetImageName
// with if_name: a compare-and-set from the name it last saw), a VM
// client on its VM (StartVm, StopVm, GetVm: chaos_vm_test.go), each
// with a deadline; the sender sends one-way SetImageName messages with
// unique names to the images of its own (chaos_oneway_test.go). Each
// records every call or send, as it ends, in a JSON lines file of its
// kind. The parent stops the clients by closing their stdin.

// chaosClientEnv carries a client process's chaosClientConfig, as JSON.
const chaosClientEnv = "CLOUDBUS_CHAOS_CLIENT"

// chaosClientReady is the line a client process prints once each of its
// clients is connected.
const chaosClientReady = "chaos client ready"

// chaosClientConfig is the work of one client process.
type chaosClientConfig struct {
	Broker   string        `json:"broker"`
	Prefix   string        `json:"prefix"`
	Images   []string      `json:"images"`    // one client per image
	Client   int           `json:"client"`    // this process's index: client Client of every image
	Run      string        `json:"run"`       // random tag in the op ids
	Seed     uint64        `json:"seed"`      // the clients' choices and pauses
	Timeout  time.Duration `json:"timeout"`   // each call's deadline
	MaxPause time.Duration `json:"max_pause"` // between a client's calls, at random
	Retry    bool          `json:"retry"`     // bus.WithRetry(2): the portal resends after node_left or not_owner
	Fast     bool          `json:"fast"`      // the image and VM calls in the fast delivery mode (bus.Fast)
	Out      string        `json:"out"`       // the JSON lines file of the image calls' records
	VMs      []string      `json:"vms"`       // one client per VM
	VMOut    string        `json:"vm_out"`    // the file of the VM calls' records
	// OneWay are the images of the one-way writes: one sender each,
	// sending every OneWayEvery[0] to OneWayEvery[1], at random, a
	// message with the deadline OneWayTimeout.
	OneWay        []string         `json:"one_way"`
	OneWayEvery   [2]time.Duration `json:"one_way_every"`
	OneWayTimeout time.Duration    `json:"one_way_timeout"`
	OneWayOut     string           `json:"one_way_out"` // the file of the sends' records
}

// The kinds of a chaos call.
const (
	chaosRead  = "read"  // GetImage
	chaosWrite = "write" // SetImageName, a unique name
	chaosCAS   = "cas"   // SetImageName with if_name
)

// The classes of a call's outcome, by its error's retry class.
const (
	classOK      = "ok"      // a reply
	classUnknown = "unknown" // message.RetryUnknown: it may have happened
	classSafe    = "safe"    // message.RetrySafe: it did not happen
	classNever   = "never"   // message.RetryNever: it did not happen; no fault should cause it
	classRan     = "ran"     // message.RetryRan: it happened, its reply is lost
	classUntyped = "untyped" // an error without a code: a silent call
)

// chaosOp is one call of a chaos client, as its process recorded it.
// Times are Unix nanoseconds of the wall clock, which every process of
// the machine shares.
type chaosOp struct {
	Image    int    `json:"image"`  // the image's index
	Client   int    `json:"client"` // the client's index among the image's clients
	Seq      int    `json:"seq"`    // the client's n-th call on the image, from 0
	Kind     string `json:"kind"`   // read, write, cas
	Value    string `json:"value,omitempty"`
	Expect   string `json:"expect,omitempty"`
	Invoke   int64  `json:"invoke"` // just before the call
	Done     int64  `json:"done"`   // when it returned
	Deadline int64  `json:"deadline"`
	Outcome  string `json:"outcome"` // ok, the error's code, or "unknown" for an untyped error (outcomeOf)
	Class    string `json:"class"`
	Got      string `json:"got,omitempty"`     // the name the reply holds
	Swapped  bool   `json:"swapped,omitempty"` // a cas's Set
	Node     string `json:"node,omitempty"`    // the node that handled it
	OpID     string `json:"op"`                // its x-op header
	MsgID    string `json:"msg"`               // its message id (bus.WithID)
	Err      string `json:"err,omitempty"`
	// NoClock is set when the client had no cluster time at the call
	// (service.Client.ClusterTime not ok): its message carried only the
	// time left, which a receiver counts from the message's arrival.
	NoClock bool `json:"no_clock,omitempty"`
}

func (o chaosOp) invoked() time.Time  { return time.Unix(0, o.Invoke) }
func (o chaosOp) done() time.Time     { return time.Unix(0, o.Done) }
func (o chaosOp) deadline() time.Time { return time.Unix(0, o.Deadline) }

// writes reports whether the call writes a name: a write, or a cas.
func (o chaosOp) writes() bool { return o.Kind == chaosWrite || o.Kind == chaosCAS }

// String describes the call for a report.
func (o chaosOp) String() string {
	what := o.Kind + "()"
	switch o.Kind {
	case chaosWrite:
		what = fmt.Sprintf("write(%q)", o.Value)
	case chaosCAS:
		what = fmt.Sprintf("cas(%q→%q)", o.Expect, o.Value)
	}
	res := o.Outcome
	switch {
	case o.Outcome == "ok" && o.Kind == chaosRead:
		res = fmt.Sprintf("%q", o.Got)
	case o.Outcome == "ok" && o.Kind == chaosCAS:
		res = fmt.Sprintf("set=%v, name %q", o.Swapped, o.Got)
	}
	s := fmt.Sprintf("image %d client %d #%d %s -> %s, %s-%s (deadline %s)", o.Image, o.Client, o.Seq, what, res,
		o.invoked().Format(clockFormat), o.done().Format(clockFormat), o.deadline().Format(clockFormat))
	if o.Node != "" {
		s += " on " + shortID(o.Node)
	}
	if o.Err != "" {
		s += " [" + tail(o.Err, 160) + "]"
	}
	if o.NoClock {
		s += " (the client had no cluster time)"
	}
	return s + " op " + o.OpID
}

// shortID is the first 8 characters of a UUID.
func shortID(id string) string { return id[:min(8, len(id))] }

// classOf is the class of a call's error.
func classOf(err error) string {
	if err == nil {
		return classOK
	}
	var me *message.Error
	if !errors.As(err, &me) {
		return classUntyped
	}
	switch message.CodeOf(err).Retry() {
	case message.RetrySafe:
		return classSafe
	case message.RetryNever:
		return classNever
	case message.RetryRan:
		return classRan
	}
	return classUnknown
}

// TestClientProcessForChaos is a client process of TestChaos; run alone
// it skips. Its name does not match -run TestChaos.
func TestClientProcessForChaos(t *testing.T) {
	raw := os.Getenv(chaosClientEnv)
	if raw == "" {
		t.Skip("a client process of TestChaos, which runs it with " + chaosClientEnv + " set")
	}
	var cfg chaosClientConfig
	require.NoError(t, json.Unmarshal([]byte(raw), &cfg), chaosClientEnv)
	out, err := os.OpenFile(cfg.Out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	defer func() { require.NoError(t, out.Close()) }()
	w := &recordWriter{f: out}

	vmOut, err := os.OpenFile(cfg.VMOut, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	defer func() { require.NoError(t, vmOut.Close()) }()
	vw := &recordWriter{f: vmOut}
	owOut, err := os.OpenFile(cfg.OneWayOut, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	defer func() { require.NoError(t, owOut.Close()) }()
	ow := &recordWriter{f: owOut}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	mode := bus.Confirmed
	if cfg.Fast {
		mode = bus.Fast
	}
	clients := make([]*service.Client, len(cfg.Images))
	for k := range cfg.Images {
		clients[k] = newClientMode(t, ctx, cfg.Broker, cfg.Prefix, mode)
	}
	vmClients := make([]*service.Client, len(cfg.VMs))
	for k := range cfg.VMs {
		vmClients[k] = newClientMode(t, ctx, cfg.Broker, cfg.Prefix, mode)
	}
	sender := newClient(t, ctx, cfg.Broker, cfg.Prefix)
	// Stop when the parent closes our stdin (or dies).
	stop, stopClients := context.WithCancel(context.Background())
	defer stopClients()
	stdinDone := make(chan struct{})
	go func() {
		defer close(stdinDone)
		_, _ = io.Copy(io.Discard, os.Stdin)
		stopClients()
	}()
	fmt.Println(chaosClientReady)

	var wg sync.WaitGroup
	for k, img := range cfg.Images {
		wg.Go(func() { runChaosClient(stop, clients[k], cfg, k, img, w) })
	}
	for k, vm := range cfg.VMs {
		wg.Go(func() { runChaosVMClient(stop, vmClients[k], cfg, k, vm, vw) })
	}
	for k, img := range cfg.OneWay {
		wg.Go(func() { runOneWaySender(stop, sender, cfg, k, img, ow) })
	}
	wg.Wait()
	<-stdinDone
	require.NoError(t, w.err(), "write the records to %s", cfg.Out)
	require.NoError(t, vw.err(), "write the records to %s", cfg.VMOut)
	require.NoError(t, ow.err(), "write the records to %s", cfg.OneWayOut)
	t.Logf("client %d: %d image calls, %d VM calls and %d one-way sends recorded", cfg.Client, w.count(), vw.count(), ow.count())
	// Close the clients now, at once (their cleanups find them closed):
	// a client process must exit soon after its stop, and each close
	// waits for its broker's close-ok, which a loaded broker node may
	// take a second or more to send. Say how long it took.
	closeStart := time.Now()
	var closing sync.WaitGroup
	for k, cl := range append(append(clients, vmClients...), sender) {
		closing.Go(func() { assert.NoError(t, cl.Close(), "close client %d", k) })
	}
	closing.Wait()
	t.Logf("client %d: its clients closed in %s", cfg.Client, time.Since(closeStart).Round(time.Millisecond))
}

// recordWriter appends records to a file, one JSON line each. Safe for
// concurrent use.
type recordWriter struct {
	mu    sync.Mutex
	f     *os.File
	n     int
	first error
}

// write appends record r (a chaosOp, chaosVMOp or chaosSend).
func (w *recordWriter) write(r any) {
	b, err := json.Marshal(r)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		_, err = w.f.Write(append(b, '\n'))
	}
	if err != nil && w.first == nil {
		w.first = err
	}
	w.n++
}

func (w *recordWriter) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

func (w *recordWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// runChaosClient calls image k until stop ends. After a write (or cas)
// whose outcome is not known (it may still take effect until its
// deadline) the client waits until that deadline plus fdBound before its
// next call, so that it has one operation at a time on its image in the
// sense of the check too: its writes take effect in the order it issued
// them, or the history is not linearizable. A read has no effect: after
// one of unknown outcome the client goes on at once.
func runChaosClient(stop context.Context, cl *service.Client, cfg chaosClientConfig, k int, img string, w *recordWriter) {
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(1000*cfg.Client+k)))
	last := chaosInitName
	var opts []bus.Option
	if cfg.Retry {
		opts = append(opts, bus.WithRetry(2))
	}
	for seq := 0; ; seq++ {
		select {
		case <-stop.Done():
			return
		case <-time.After(time.Duration(rng.Int64N(int64(cfg.MaxPause) + 1))):
		}
		o := chaosOp{Image: k, Client: cfg.Client, Seq: seq, Kind: chaosRead,
			OpID: fmt.Sprintf("chaos-%s-i%d-c%d-%d", cfg.Run, k, cfg.Client, seq), MsgID: message.NewUUID()}
		switch p := rng.IntN(10); {
		case p < 4 || last == "": // after an unknown outcome, read first
		case p < 7:
			o.Kind, o.Value = chaosWrite, fmt.Sprintf("c%d.%d", cfg.Client, seq)
		default:
			o.Kind, o.Value, o.Expect = chaosCAS, fmt.Sprintf("c%d.%d", cfg.Client, seq), last
		}
		callOpts := append(opts[:len(opts):len(opts)], bus.WithTimeout(cfg.Timeout), bus.WithHeader(HeaderOp, o.OpID), bus.WithID(o.MsgID))
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
		deadline, _ := ctx.Deadline()
		_, _, clockOK := cl.ClusterTime()
		o.Invoke, o.Deadline, o.NoClock = time.Now().UnixNano(), deadline.UnixNano(), !clockOK
		var err error
		if o.Kind == chaosRead {
			var rep api.ImageReply
			rep, err = service.Call[api.ImageReply](ctx, cl, api.GetImage{UUID: img}, callOpts...)
			o.Got, o.Node = rep.Image.Name, rep.Node
		} else {
			m := api.SetImageName{UUID: img, Name: o.Value}
			if o.Kind == chaosCAS {
				m.IfName = &o.Expect
			}
			var rep api.ImageNameSet
			rep, err = service.Call[api.ImageNameSet](ctx, cl, m, callOpts...)
			o.Got, o.Swapped, o.Node = rep.Image.Name, rep.Set, rep.Node
		}
		o.Done = time.Now().UnixNano()
		cancel()
		o.Outcome, o.Class = outcomeOf(err), classOf(err)
		if err != nil {
			o.Err = err.Error()
		}
		w.write(o)
		switch {
		case o.Class == classOK:
			last = o.Got
		case failed(o), !o.writes(): // a read has no effect to wait for
		default:
			last = ""
			select { // one operation at a time: this write may take effect until its deadline
			case <-stop.Done():
				return
			case <-time.After(time.Until(deadline.Add(fdBound))):
			}
		}
	}
}

// clientProc is a running client process.
type clientProc struct {
	index          int
	cmd            *exec.Cmd
	stdin          io.WriteCloser
	out            string // its records: image calls
	vmOut          string // VM calls
	oneWayOut      string // one-way sends
	stdout, stderr string // files
	exited         chan struct{}
	waitErr        error
}

// startClientProc starts client process i with cfg.
func startClientProc(t *testing.T, dir string, cfg chaosClientConfig) *clientProc {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	p := &clientProc{index: cfg.Client, out: cfg.Out, vmOut: cfg.VMOut, oneWayOut: cfg.OneWayOut, exited: make(chan struct{}),
		stdout: filepath.Join(dir, fmt.Sprintf("client-%d.out", cfg.Client)), stderr: filepath.Join(dir, fmt.Sprintf("client-%d.err", cfg.Client))}
	so, err := os.Create(p.stdout)
	require.NoError(t, err)
	defer so.Close()
	se, err := os.Create(p.stderr)
	require.NoError(t, err)
	defer se.Close()
	p.cmd = exec.Command(exe, "-test.run=^TestClientProcessForChaos$", "-test.count=1", "-test.v", "-test.timeout=0")
	var env []string
	for _, kv := range childEnv() { // no CLOUDBUS_*: its TestMain builds no refnode
		if !strings.HasPrefix(kv, "CI=") {
			env = append(env, kv)
		}
	}
	p.cmd.Env = append(env, chaosClientEnv+"="+string(raw))
	p.cmd.Stdout, p.cmd.Stderr = so, se
	p.cmd.SysProcAttr = childProcAttr() // ends with the test binary, even one killed
	p.stdin, err = p.cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(cfg.Timeout + 10*time.Second):
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.exited
		}
		if t.Failed() {
			o, _ := os.ReadFile(p.stdout)
			e, _ := os.ReadFile(p.stderr)
			t.Logf("client process %d stdout (last 3000 bytes):\n%s\nstderr:\n%s", p.index, tail(string(o), 3000), tail(string(e), 3000))
		}
	})
	return p
}

// awaitReady waits until the process printed that its clients are
// connected.
func (p *clientProc) awaitReady(ctx context.Context) error {
	return poll(ctx, func() error {
		select {
		case <-p.exited:
			return fmt.Errorf("client process %d exited before it was ready: %v", p.index, p.waitErr)
		default:
		}
		if o, _ := os.ReadFile(p.stdout); strings.Contains(string(o), chaosClientReady) {
			return nil
		}
		return fmt.Errorf("client process %d is not ready", p.index)
	})
}

// stop closes the process's stdin and waits for its exit, bounded.
func (p *clientProc) stop(bound time.Duration) error {
	_ = p.stdin.Close()
	select {
	case <-p.exited:
		return p.waitErr
	case <-time.After(bound):
		return fmt.Errorf("client process %d did not exit within %s of its stop", p.index, bound)
	}
}

// readChaosOps reads a client process's image calls.
func readChaosOps(path string) ([]chaosOp, error) { return readRecords[chaosOp](path) }

// readRecords reads a client process's records of one kind.
func readRecords[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var r T
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// TestChaosClientRecords checks the client's bookkeeping without a
// cluster: error classes, and a record's round trip and description.
func TestChaosClientRecords(t *testing.T) {
	assert.Equal(t, classOK, classOf(nil))
	assert.Equal(t, classUntyped, classOf(errors.New("no code")))
	assert.Equal(t, classUnknown, classOf(fmt.Errorf("call: %w", message.ErrNodeLeft)))
	assert.Equal(t, classUnknown, classOf(message.ErrTimeout))
	assert.Equal(t, classSafe, classOf(message.ErrNotOwner))
	assert.Equal(t, classNever, classOf(message.ErrNotFound))

	assert.True(t, namesDatabase("internal: sqldb: read image x on postgres://postgres@127.0.0.1:5432/test: timeout"))
	assert.True(t, namesDatabase("internal: sqlfence: begin: dial tcp 127.0.0.1:41234: connect: connection refused"))
	assert.True(t, namesDatabase("internal: sqlfence: record message x: ERROR: canceling statement due to user request (SQLSTATE 57014)"))
	assert.False(t, namesDatabase("bus: call refnode.v1.GetImage on api.portal: internal: the database failed; node ab logged the cause with message id cd"))
	assert.False(t, namesDatabase("bus: call refnode.v1.GetImage on api.portal: amqpbus: publish to amqp://guest:xxxxx@127.0.0.1:35871/,amqps://b.example/: unavailable: transport unavailable (nothing was sent: safe to retry)"),
		"the caller's own broker URLs, masked")
	assert.True(t, namesDatabase("amqpbus: connect to amqp://guest:guest@127.0.0.1:35871/: refused"), "a broker password in clear")
	assert.True(t, namesDatabase("amqpbus: connect to amqp://guest:xxxxx@127.0.0.1:35871/: sqldb: postgres://db/x"), "a database URL beside a broker URL")

	path := filepath.Join(t.TempDir(), "ops.jsonl")
	f, err := os.Create(path)
	require.NoError(t, err)
	w := &recordWriter{f: f}
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	o := chaosOp{Image: 1, Client: 2, Seq: 3, Kind: chaosCAS, Value: "c2.3", Expect: "init", Invoke: at.UnixNano(),
		Done: at.Add(5 * time.Millisecond).UnixNano(), Deadline: at.Add(5 * time.Second).UnixNano(), Outcome: "ok", Class: classOK,
		Got: "c2.3", Swapped: true, Node: strings.Repeat("ab", 16), OpID: "chaos-x-i1-c2-3", MsgID: message.NewUUID()}
	w.write(o)
	require.NoError(t, w.err())
	require.NoError(t, f.Close())
	got, err := readChaosOps(path)
	require.NoError(t, err)
	assert.Equal(t, []chaosOp{o}, got)
	assert.True(t, o.writes())
	assert.Contains(t, o.String(), `image 1 client 2 #3 cas("init"→"c2.3") -> set=true, name "c2.3"`)
	assert.Contains(t, o.String(), "on abababab")
	assert.Equal(t, 1, w.count())
}
