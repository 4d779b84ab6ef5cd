package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/cloudbus-go/cloudbus/message"
)

const benchUsage = `Usage: refnode bench [flags]

Creates and starts VMs through the REST API of a cluster, -concurrency at
a time, each request repeated with its Idempotency-Key while the answer
is 503, 504 or none (on the next node's API), and prints the throughput,
the latency percentiles of each operation, the errors by code, the
failed attempts (every one, also those a later attempt hid) and each
node's share of the work; then reads the VMs back from the database and
counts those lost.

  -embedded n     run n nodes in this process on an in-memory bus and
                  database and measure them (3; ignored with -api)
  -api urls       measure a running cluster instead: one or more nodes'
                  REST APIs, comma-separated                  REFNODE_API
  -token t        the API's bearer token, if it needs one     REFNODE_API_TOKEN
  -vms n          VMs to create and start (1000)
  -concurrency c  VMs in flight (100)
  -hosts n        hosts to add first, the VMs spread over them (3)
  -kill-after d   with -embedded: kill the last node after d, as a process
                  dies (its API stops answering); 0: none
  -heartbeat d, -evict-after d
                  with -embedded: the nodes' heartbeat interval and
                  eviction threshold (those of refnode serve: 500ms, 3s)
  -timeout d      give up on a request after this long, its attempts
                  included (30s)
  -o format       table or json (table)                       REFNODE_OUTPUT

A progress bar is drawn on stderr when it is a terminal; else a line per
10 %. Exit codes: 0 every VM created and started, none lost; 1 errors or
lost VMs; 2 usage.
`

// benchOptions are refnode bench's flags.
type benchOptions struct {
	embedded, vms, concurrency, hosts int
	api, token, output                string
	killAfter, timeout                time.Duration
	heartbeat, evictAfter             string // with -embedded: serve's flags, "" for its defaults
}

// benchOp is one operation's figures.
type benchOp struct {
	Name       string            `json:"operation"`
	OK         int               `json:"ok"`
	Errors     map[string]int    `json:"errors"`                // final failures by code
	ErrorTexts map[string]string `json:"error_texts,omitempty"` // the first final failure's message for each code
	Attempts   map[string]int    `json:"failed_attempts"`       // every failed attempt by code
	PerSecond  float64           `json:"per_second"`
	P50MS      float64           `json:"p50_ms"`
	P90MS      float64           `json:"p90_ms"`
	P99MS      float64           `json:"p99_ms"`
	MaxMS      float64           `json:"max_ms"`
	latencies  []time.Duration
}

// benchReport is what refnode bench prints.
type benchReport struct {
	Target      string         `json:"target"`
	VMs         int            `json:"vms"`
	Concurrency int            `json:"concurrency"`
	Seconds     float64        `json:"seconds"`
	VMsPerSec   float64        `json:"vms_per_second"`
	Operations  []*benchOp     `json:"operations"`
	ByNode      map[string]int `json:"requests_by_node"` // successful requests by the node that handled them
	Killed      string         `json:"killed,omitempty"` // the node -kill-after killed, and when
	Running     int            `json:"running_in_database"`
	Lost        int            `json:"lost"` // VMs whose start was answered done, not running in the database
}

func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("refnode bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o benchOptions
	fs.IntVar(&o.embedded, "embedded", 3, "")
	fs.StringVar(&o.api, "api", "", "")
	fs.StringVar(&o.token, "token", "", "")
	fs.IntVar(&o.vms, "vms", 1000, "")
	fs.IntVar(&o.concurrency, "concurrency", 100, "")
	fs.IntVar(&o.hosts, "hosts", 3, "")
	fs.DurationVar(&o.killAfter, "kill-after", 0, "")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "")
	fs.StringVar(&o.output, "o", "table", "")
	fs.StringVar(&o.heartbeat, "heartbeat", "", "")
	fs.StringVar(&o.evictAfter, "evict-after", "", "")
	usageErr := func(err error) int {
		fmt.Fprintf(stderr, "refnode bench: %v\nRun \"refnode bench -h\" for the flags.\n", err)
		return exitUsage
	}
	err := parseFlags(fs, args, getenv, map[string]string{"api": "REFNODE_API", "token": "REFNODE_API_TOKEN", "o": "REFNODE_OUTPUT"})
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, benchUsage)
		return 0
	case err != nil:
		return usageErr(err)
	case fs.NArg() > 0:
		return usageErr(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	case o.vms < 1 || o.concurrency < 1 || o.hosts < 1:
		return usageErr(errors.New("-vms, -concurrency and -hosts must be at least 1"))
	case o.output != "table" && o.output != "json":
		return usageErr(fmt.Errorf("-o %q: use table or json", o.output))
	case o.timeout <= 0:
		return usageErr(errors.New("-timeout must be positive"))
	case o.killAfter < 0 || (o.killAfter > 0 && o.api != ""):
		return usageErr(errors.New("-kill-after needs -embedded (it kills a node of this process) and a positive time"))
	case o.killAfter > 0 && o.embedded < 2:
		return usageErr(errors.New("-kill-after needs -embedded 2 or more: a node must survive"))
	}

	var (
		apis   []string
		target string
		e      *embeddedCluster
	)
	if o.api != "" {
		for _, a := range strings.Split(o.api, ",") {
			u, err := url.Parse(strings.TrimSuffix(strings.TrimSpace(a), "/"))
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usageErr(fmt.Errorf("-api %q is not an http:// or https:// URL", a))
			}
			apis = append(apis, u.String())
		}
		target = fmt.Sprintf("%d node API(s) of a running cluster", len(apis))
	} else {
		args := []string{"-embedded", strconv.Itoa(o.embedded), "-api-listen", "127.0.0.1:0"}
		if o.heartbeat != "" {
			args = append(args, "-heartbeat", o.heartbeat)
		}
		if o.evictAfter != "" {
			args = append(args, "-evict-after", o.evictAfter)
		}
		so, err := parseServe(args, func(string) string { return "" })
		if err == nil {
			err = validateEmbedded(&so, func(string) bool { return false })
		}
		if err != nil {
			return usageErr(err)
		}
		if e, err = newEmbeddedCluster(ctx, so, slog.New(slog.DiscardHandler)); err != nil {
			fmt.Fprintf(stderr, "refnode bench: %v\n", err)
			return 1
		}
		defer e.close()
		apis = e.urls()
		target = fmt.Sprintf("%d embedded nodes (in-memory bus and database)", o.embedded)
	}
	r, err := runBench(ctx, o, apis, e, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "refnode bench: %v\n", err)
		return 1
	}
	r.Target = target
	if o.output == "json" {
		data, _ := json.MarshalIndent(r, "", "  ")
		fmt.Fprintf(stdout, "%s\n", data)
	} else {
		printBench(stdout, r)
	}
	for _, op := range r.Operations {
		if len(op.Errors) > 0 {
			return 1
		}
	}
	if r.Lost > 0 {
		return 1
	}
	return 0
}

// benchClient sends the bench's requests, each with its Idempotency-Key,
// again on the next API while the answer is 503, 504 or none.
type benchClient struct {
	apis    []string
	token   string
	timeout time.Duration
	next    atomic.Uint64
	mu      sync.Mutex
	byNode  map[string]int
}

// benchFailure is a request's final error answer.
type benchFailure struct {
	code string
	text string
}

func (f *benchFailure) Error() string { return f.code + ": " + f.text }

// do sends method path with body, repeating it; it returns the answer's
// body and counts each failed attempt in attempts by code.
func (c *benchClient) do(ctx context.Context, method, path, key string, body any, attempts func(code string)) (map[string]any, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	wait := 50 * time.Millisecond
	for {
		api := c.apis[int(c.next.Add(1))%len(c.apis)]
		out, code, again, err := c.once(ctx, method, api+path, key, data)
		if err == nil {
			return out, nil
		}
		attempts(code)
		if !again {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, &benchFailure{code: code, text: fmt.Sprintf("%v (-timeout %s ended)", err, c.timeout)}
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// once sends one request; again reports whether repeating it may help.
func (c *benchClient) once(ctx context.Context, method, u, key string, data []byte) (out map[string]any, code string, again bool, err error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(data))
	if err != nil {
		return nil, "bad_request", false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "no_answer", true, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, "no_answer", true, err
	}
	_ = json.Unmarshal(raw, &out)
	if resp.StatusCode < 300 {
		if n := resp.Header.Get("Refnode-Node"); n != "" {
			c.mu.Lock()
			c.byNode[n]++
			c.mu.Unlock()
		}
		return out, "", false, nil
	}
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.Unmarshal(raw, &e)
	if e.Error.Code == "" {
		e.Error.Code, e.Error.Message = "http_"+strconv.Itoa(resp.StatusCode), strings.TrimSpace(string(raw))
	}
	again = resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout
	return nil, e.Error.Code, again, &benchFailure{code: e.Error.Code, text: fmt.Sprintf("%s (HTTP %d)", e.Error.Message, resp.StatusCode)}
}

// runBench adds the hosts and an image, then creates and starts o.vms
// VMs, o.concurrency at a time, and reads them back.
func runBench(ctx context.Context, o benchOptions, apis []string, e *embeddedCluster, stderr io.Writer) (*benchReport, error) {
	c := &benchClient{apis: apis, token: o.token, timeout: o.timeout, byNode: map[string]int{}}
	run := message.NewUUID()[:8]
	ignore := func(string) {}
	for i := range o.hosts {
		if _, err := c.do(ctx, "POST", "/v1/hosts", fmt.Sprintf("bench-%s-host-%d", run, i), map[string]any{"name": fmt.Sprintf("bench-%s-%d", run, i)}, ignore); err != nil {
			return nil, fmt.Errorf("add host %d: %w", i, err)
		}
	}
	img, err := c.do(ctx, "POST", "/v1/images", "bench-"+run+"-image", map[string]any{"name": "bench-" + run}, ignore)
	if err != nil {
		return nil, fmt.Errorf("add the image: %w", err)
	}
	image, _ := img["uuid"].(string)
	c.mu.Lock()
	clear(c.byNode) // the work is the VMs'
	c.mu.Unlock()

	ops := []*benchOp{{Name: "create"}, {Name: "start"}}
	var mu sync.Mutex
	record := func(op *benchOp, d time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			code := "error"
			var f *benchFailure
			if errors.As(err, &f) {
				code = f.code
			}
			if op.Errors == nil {
				op.Errors, op.ErrorTexts = map[string]int{}, map[string]string{}
			}
			op.Errors[code]++
			if _, ok := op.ErrorTexts[code]; !ok {
				op.ErrorTexts[code] = err.Error()
			}
			return
		}
		op.OK++
		op.latencies = append(op.latencies, d)
	}
	attempt := func(op *benchOp) func(string) {
		return func(code string) {
			mu.Lock()
			defer mu.Unlock()
			if op.Attempts == nil {
				op.Attempts = map[string]int{}
			}
			op.Attempts[code]++
		}
	}
	progress := newBenchProgress(o.vms, stderr)
	r := &benchReport{VMs: o.vms, Concurrency: o.concurrency}
	if e != nil && o.killAfter > 0 {
		victim := len(e.apis) - 1
		t := time.AfterFunc(o.killAfter, func() {
			e.kill(victim)
			mu.Lock()
			r.Killed = fmt.Sprintf("node %s (%s) after %s", e.apis[victim].m.label, e.apis[victim].m.node.UUID(), o.killAfter)
			mu.Unlock()
		})
		defer t.Stop()
	}
	work := make(chan int)
	var (
		wg      sync.WaitGroup
		started sync.Map // UUID -> true: the VMs whose start was answered done
	)
	start := time.Now()
	for range min(o.concurrency, o.vms) {
		wg.Go(func() {
			for i := range work {
				key := fmt.Sprintf("bench-%s-vm-%d", run, i)
				t0 := time.Now()
				vm, err := c.do(ctx, "POST", "/v1/vms", key+"-create", map[string]any{"name": fmt.Sprintf("bench-%d", i), "image_uuid": image}, attempt(ops[0]))
				record(ops[0], time.Since(t0), err)
				if err == nil {
					id, _ := vm["uuid"].(string)
					t1 := time.Now()
					_, err = c.do(ctx, "POST", "/v1/vms/"+id+"/start", key+"-start", nil, attempt(ops[1]))
					record(ops[1], time.Since(t1), err)
					if err == nil {
						started.Store(id, true)
					}
				}
				progress.add()
			}
		})
	}
	for i := range o.vms {
		select {
		case work <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	progress.finish()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.Seconds = elapsed.Seconds()
	r.VMsPerSec = float64(o.vms) / elapsed.Seconds()
	for _, op := range ops {
		op.summarize(elapsed)
	}
	r.Operations = ops
	r.ByNode = c.byNode
	running, err := readRunning(ctx, c, image)
	if err != nil {
		return nil, fmt.Errorf("read the VMs back: %w", err)
	}
	r.Running = len(running)
	started.Range(func(id, _ any) bool {
		if !running[id.(string)] {
			r.Lost++
		}
		return true
	})
	return r, nil
}

// readRunning pages through the image's VMs in the database and returns
// the UUIDs of the running ones.
func readRunning(ctx context.Context, c *benchClient, image string) (map[string]bool, error) {
	running, cursor := map[string]bool{}, ""
	for {
		q := url.Values{"image_uuid": {image}, "limit": {"1000"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Items []struct {
				UUID  string `json:"uuid"`
				State string `json:"state"`
			} `json:"items"`
			NextCursor string `json:"next_cursor"`
		}
		var err error
		for attempt := 0; ; attempt++ {
			api := c.apis[int(c.next.Add(1))%len(c.apis)]
			var req *http.Request
			req, err = http.NewRequestWithContext(ctx, "GET", api+"/v1/vms?"+q.Encode(), nil)
			if err != nil {
				return nil, err
			}
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			var resp *http.Response
			if resp, err = http.DefaultClient.Do(req); err == nil {
				if resp.StatusCode == http.StatusOK {
					err = json.NewDecoder(resp.Body).Decode(&page)
				} else {
					err = fmt.Errorf("GET /v1/vms: HTTP %d", resp.StatusCode)
				}
				resp.Body.Close()
			}
			if err == nil || attempt == 2*len(c.apis) {
				break
			}
		}
		if err != nil {
			return nil, err
		}
		for _, v := range page.Items {
			if v.State == "running" {
				running[v.UUID] = true
			}
		}
		if page.NextCursor == "" {
			return running, nil
		}
		cursor = page.NextCursor
	}
}

// summarize computes op's rate and percentiles over the run's elapsed
// time.
func (op *benchOp) summarize(elapsed time.Duration) {
	sort.Slice(op.latencies, func(i, j int) bool { return op.latencies[i] < op.latencies[j] })
	op.PerSecond = float64(op.OK) / elapsed.Seconds()
	pct := func(p float64) float64 {
		if len(op.latencies) == 0 {
			return 0
		}
		i := min(len(op.latencies)-1, int(p*float64(len(op.latencies))))
		return float64(op.latencies[i].Microseconds()) / 1000
	}
	op.P50MS, op.P90MS, op.P99MS = pct(0.50), pct(0.90), pct(0.99)
	if n := len(op.latencies); n > 0 {
		op.MaxMS = float64(op.latencies[n-1].Microseconds()) / 1000
	}
}

// printBench prints r as tables.
func printBench(w io.Writer, r *benchReport) {
	fmt.Fprintf(w, "refnode bench: %d VMs created and started, %d in flight, on %s\n\n", r.VMs, r.Concurrency, r.Target)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATION\tOK\tERRORS\tFAILED_ATTEMPTS\tPER_SEC\tP50\tP90\tP99\tMAX")
	for _, op := range r.Operations {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.0f\t%.1fms\t%.1fms\t%.1fms\t%.1fms\n", op.Name, op.OK, byCode(op.Errors), byCode(op.Attempts), op.PerSecond, op.P50MS, op.P90MS, op.P99MS, op.MaxMS)
	}
	_ = tw.Flush()
	for _, op := range r.Operations {
		for _, code := range slices.Sorted(maps.Keys(op.ErrorTexts)) {
			fmt.Fprintf(w, "%s failed, %s: %s\n", op.Name, code, op.ErrorTexts[code])
		}
	}
	fmt.Fprintf(w, "\n%d VMs in %.2fs: %.0f VMs/s created and started; %d running in the database, %d lost\n", r.VMs, r.Seconds, r.VMsPerSec, r.Running, r.Lost)
	if r.Killed != "" {
		fmt.Fprintf(w, "killed: %s\n", r.Killed)
	}
	nodes := make([]string, 0, len(r.ByNode))
	total := 0
	for n, k := range r.ByNode {
		nodes = append(nodes, n)
		total += k
	}
	slices.Sort(nodes)
	fmt.Fprintln(w, "requests handled by node:")
	for _, n := range nodes {
		fmt.Fprintf(w, "  %s  %6d  %5.1f%%\n", n, r.ByNode[n], 100*float64(r.ByNode[n])/float64(max(total, 1)))
	}
}

// byCode prints counts by code, "-" if none.
func byCode(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	codes := make([]string, 0, len(m))
	for c := range m {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%s:%d", c, m[c])
	}
	return strings.Join(parts, ",")
}

// benchProgress shows the VMs done: a bar on a terminal, else a line per
// 10 %.
type benchProgress struct {
	bar   *progressbar.ProgressBar
	w     io.Writer
	total int
	mu    sync.Mutex
	done  int
	start time.Time
}

func newBenchProgress(total int, w io.Writer) *benchProgress {
	p := &benchProgress{w: w, total: total, start: time.Now()}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("VMs"),
			progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("VMs"), progressbar.OptionThrottle(100*time.Millisecond))
	}
	return p
}

func (p *benchProgress) add() {
	if p.bar != nil {
		_ = p.bar.Add(1)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if step := max(p.total/10, 1); p.done%step == 0 || p.done == p.total {
		fmt.Fprintf(p.w, "bench: %d/%d VMs (%d%%) in %s\n", p.done, p.total, 100*p.done/p.total, time.Since(p.start).Round(time.Millisecond))
	}
}

func (p *benchProgress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(p.w)
	}
}
