package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/cloudbus-go/cloudbus/message"
)

const ctlRESTUsage = `Usage: refnode ctl [-api url] [-token t] [-o table|json|yaml] [-timeout d] RESOURCE VERB [flags] [args]

Drives a cluster through a node's REST API (refnode serve -api-listen, or
serve -embedded): tables for people by default, -o json or -o yaml for
scripts.

  vm create [-name n] [-cpus n] [-memory-mb n] [-uuid u] IMAGE_UUID
  vm start|stop|reboot|destroy UUID
  vm migrate UUID HOST_UUID             move a VM to another host, as a job:
                                        waits for the job's end (until -timeout)
  vm get UUID
  vm list [-state s] [-host u] [-image u] [-limit n]
  host add [-name n] [-address a] [UUID]
  host get UUID | host reconnect UUID
  host list [-status connected|disconnected] [-limit n]
  image add [-name n] [-url u] [-size-mb n] [UUID]
  image get UUID | image list [-limit n]
  image rename [-if n] UUID NAME        -if n: only if it is named n now
  image delete UUID                     refused while a VM that is not
                                        destroyed uses it
  nodes                                 the members as the API's node sees
                                        them: state (UNHEALTHY when its beats
                                        are stale), epoch, when it registered,
                                        heartbeat age, share of the key
                                        space, resources owned
  owner UUID                            who owns a resource, and whether
                                        every node agrees
  jobs [list] [-state s] [-resource u] [-limit n]
  jobs get [-wait d] UUID               a job, from any node; -wait d waits up
                                        to d for it to end
  dead [list] [-limit n]                the dead-letter queue, oldest first,
                                        read in place (100 unless -limit)
  dead replay ID...                     send dead letters again, each to its
                                        resource's owner now, and remove
                                        them; exit 1 if an ID was not there

A command that changes something sends an Idempotency-Key (-key k, or a
new one) and repeats the request with it while the answer is "retry"
(503) or unknown (504, or no answer), until -timeout: it runs once.

Flags (before or after the command; each may also be set by the
REFNODE_* variable shown; a flag wins):
  -api url      a node's REST API (http://127.0.0.1:8080)   REFNODE_API
  -token t      its bearer token, if it requires one        REFNODE_API_TOKEN
  -o format     table, json or yaml (table)                 REFNODE_OUTPUT
  -timeout d    give up after this long (30s)               REFNODE_TIMEOUT

Exit codes: 0 done; 1 refused (the request or the resource's state:
nothing ran); 2 usage; 3 nothing ran but a retry may succeed (the
cluster, its broker or its database did not answer); 4 the outcome is
unknown; 5 the operation failed on the server's side.
`

// Exit codes of the REST commands.
const (
	exitRefused     = 1
	exitUsage       = 2
	exitUnavailable = 3
	exitUnknown     = 4
	exitFailed      = 5
)

// ctlResources are the resources of the REST commands, and the commands
// that take no verb.
var ctlResources = map[string]bool{"vm": true, "host": true, "image": true, "nodes": true, "owner": true, "jobs": true, "dead": true}

// restOptions are the flags of the REST commands.
type restOptions struct {
	api, token, output string
	timeout            time.Duration
}

// bind defines the flags on fs; -timeout only with timeout (ctl's own
// flags define it otherwise).
func (o *restOptions) bind(fs *flag.FlagSet, timeout bool) {
	fs.StringVar(&o.api, "api", o.api, "")
	fs.StringVar(&o.token, "token", o.token, "")
	fs.StringVar(&o.output, "o", o.output, "")
	if timeout {
		fs.DurationVar(&o.timeout, "timeout", o.timeout, "")
	}
}

// restEnv maps the REST commands' flags to their variables.
var restEnv = map[string]string{"api": "REFNODE_API", "token": "REFNODE_API_TOKEN", "o": "REFNODE_OUTPUT", "timeout": "REFNODE_TIMEOUT"}

// restRequest is what a REST command asks.
type restRequest struct {
	method, path string
	query        url.Values
	body         any  // nil: none
	change       bool // it changes something: sent with an Idempotency-Key
	list         bool // a list: every page is read, up to limit items
	limit        int
	kind         string // vm, host or image: the table's columns
	job          bool   // it answers a job: wait for its end, fail if it failed
}

// ctlREST runs refnode ctl RESOURCE VERB ...: args start with the
// resource.
func ctlREST(ctx context.Context, o restOptions, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	usageErr := func(err error) int {
		fmt.Fprintf(stderr, "refnode ctl: %v\nRun \"refnode ctl -h\" for the commands and flags.\n", err)
		return exitUsage
	}
	verb, rest := "", args[1:] // nodes and owner take no verb
	if args[0] != "nodes" && args[0] != "owner" && len(args) >= 2 {
		verb, rest = args[1], args[2:]
	}
	if (args[0] == "jobs" || args[0] == "dead") && (verb == "" || strings.HasPrefix(verb, "-")) { // ctl jobs, ctl dead: the list
		verb, rest = "list", args[1:]
	}
	switch {
	case verb == "-h" || verb == "-help" || verb == "--help" || verb == "help":
		fmt.Fprint(stdout, ctlRESTUsage)
		return 0
	case verb == "" && args[0] != "nodes" && args[0] != "owner":
		return usageErr(fmt.Errorf("%s: give a verb", args[0]))
	}
	name := strings.TrimSpace(args[0] + " " + verb)
	fs := flag.NewFlagSet("refnode ctl "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.bind(fs, true)
	key := fs.String("key", "", "")
	build, ok := restCommand(args[0], verb, fs)
	if !ok {
		return usageErr(fmt.Errorf("unknown command %q", name))
	}
	if err := parseFlags(fs, rest, getenv, restEnv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, ctlRESTUsage)
			return 0
		}
		return usageErr(fmt.Errorf("%s: %w", name, err))
	}
	req, err := build(fs.Args())
	switch {
	case err != nil:
		return usageErr(fmt.Errorf("%s: %w", name, err))
	case o.api == "":
		return usageErr(errors.New("-api (or REFNODE_API) is required: a node's REST API, e.g. http://127.0.0.1:8080 (refnode serve -api-listen, or serve -embedded)"))
	case o.output != "table" && o.output != "json" && o.output != "yaml":
		return usageErr(fmt.Errorf("-o %q: use table, json or yaml", o.output))
	case o.timeout <= 0:
		return usageErr(errors.New("-timeout must be positive"))
	}
	base, err := url.Parse(strings.TrimSuffix(o.api, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return usageErr(fmt.Errorf("-api %q is not an http:// or https:// URL", o.api))
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	c := &restClient{base: base, token: o.token, key: *key}
	out, code, err := c.run(ctx, req)
	if err != nil {
		fmt.Fprintf(stderr, "refnode ctl %s: %v\n", name, err)
		return code
	}
	if err := render(stdout, o.output, req.kind, out); err != nil {
		fmt.Fprintf(stderr, "refnode ctl %s: %v\n", name, err)
		return exitFailed
	}
	if missing, _ := out.record["missing"].([]any); req.kind == "replay" && len(missing) > 0 {
		fmt.Fprintf(stderr, "refnode ctl %s: %d of the ids are not in the dead-letter queue (already replayed, or never dead-lettered)\n", name, len(missing))
		return exitRefused
	}
	return 0
}

// restCommand returns the builder of command resource verb, whose flags
// it defines on fs.
func restCommand(resource, verb string, fs *flag.FlagSet) (func(args []string) (restRequest, error), bool) {
	one := func(method, suffix string, change bool) func([]string) (restRequest, error) {
		return func(args []string) (restRequest, error) {
			id, err := oneUUID(args)
			return restRequest{method: method, path: "/v1/" + resource + "s/" + id + suffix, change: change, kind: resource}, err
		}
	}
	limit := func() *int { return fs.Int("limit", 0, "") }
	switch resource + " " + verb {
	case "nodes ":
		return func(args []string) (restRequest, error) {
			return restRequest{method: "GET", path: "/v1/nodes", kind: "nodes"}, noArgs(args)
		}, true
	case "owner ":
		return func(args []string) (restRequest, error) {
			id, err := oneUUID(args)
			return restRequest{method: "GET", path: "/v1/owner/" + id, kind: "owner"}, err
		}, true
	case "vm create":
		name, id := fs.String("name", "", ""), fs.String("uuid", "", "")
		cpus, mem := fs.Int("cpus", 0, ""), fs.Int("memory-mb", 0, "")
		return func(args []string) (restRequest, error) {
			if len(args) != 1 {
				return restRequest{}, errors.New("give the UUID of the image to create the VM from")
			}
			body := map[string]any{"image_uuid": args[0], "name": *name, "uuid": *id, "cpus": *cpus, "memory_mb": *mem}
			return restRequest{method: "POST", path: "/v1/vms", body: body, change: true, kind: "vm"}, nil
		}, true
	case "vm start", "vm stop", "vm reboot", "vm destroy":
		return one("POST", "/"+verb, true), true
	case "vm migrate":
		return func(args []string) (restRequest, error) {
			if len(args) != 2 {
				return restRequest{}, errors.New("give the VM's UUID and the target host's UUID")
			}
			id, err := message.NormalizeUUID(args[0])
			if err != nil {
				return restRequest{}, err
			}
			return restRequest{method: "POST", path: "/v1/vms/" + id + "/migrate", body: map[string]any{"host_uuid": args[1]}, change: true, kind: "job", job: true}, nil
		}, true
	case "jobs list":
		state, res, n := fs.String("state", "", ""), fs.String("resource", "", ""), limit()
		return func(args []string) (restRequest, error) {
			q := url.Values{}
			for k, v := range map[string]string{"state": *state, "resource": *res} {
				if v != "" {
					q.Set(k, v)
				}
			}
			return restRequest{method: "GET", path: "/v1/jobs", query: q, list: true, limit: *n, kind: "job"}, noArgs(args)
		}, true
	case "jobs get":
		wait := fs.Duration("wait", 0, "")
		return func(args []string) (restRequest, error) {
			id, err := oneUUID(args)
			q := url.Values{}
			if *wait > 0 {
				q.Set("wait", wait.String())
			}
			return restRequest{method: "GET", path: "/v1/jobs/" + id, query: q, kind: "job"}, err
		}, true
	case "dead list":
		n := limit()
		return func(args []string) (restRequest, error) {
			return restRequest{method: "GET", path: "/v1/dead-letters", query: url.Values{}, list: true, limit: *n, kind: "dead"}, noArgs(args)
		}, true
	case "dead replay":
		return func(args []string) (restRequest, error) {
			if len(args) == 0 {
				return restRequest{}, errors.New("give the ids of the messages to replay (refnode ctl dead list shows them)")
			}
			for _, id := range args {
				if _, err := message.NormalizeUUID(id); err != nil {
					return restRequest{}, err
				}
			}
			return restRequest{method: "POST", path: "/v1/dead-letters/replay", body: map[string]any{"ids": args}, change: true, kind: "replay"}, nil
		}, true
	case "vm get", "host get", "image get":
		return one("GET", "", false), true
	case "host reconnect":
		return one("POST", "/reconnect", true), true
	case "image delete":
		return one("DELETE", "", true), true
	case "vm list":
		state, host, image, n := fs.String("state", "", ""), fs.String("host", "", ""), fs.String("image", "", ""), limit()
		return func(args []string) (restRequest, error) {
			q := url.Values{}
			for k, v := range map[string]string{"state": *state, "host_uuid": *host, "image_uuid": *image} {
				if v != "" {
					q.Set(k, v)
				}
			}
			return restRequest{method: "GET", path: "/v1/vms", query: q, list: true, limit: *n, kind: "vm"}, noArgs(args)
		}, true
	case "host list":
		status, n := fs.String("status", "", ""), limit()
		return func(args []string) (restRequest, error) {
			q := url.Values{}
			if *status != "" {
				q.Set("status", *status)
			}
			return restRequest{method: "GET", path: "/v1/hosts", query: q, list: true, limit: *n, kind: "host"}, noArgs(args)
		}, true
	case "image list":
		n := limit()
		return func(args []string) (restRequest, error) {
			return restRequest{method: "GET", path: "/v1/images", query: url.Values{}, list: true, limit: *n, kind: "image"}, noArgs(args)
		}, true
	case "host add":
		name, addr := fs.String("name", "", ""), fs.String("address", "", "")
		return func(args []string) (restRequest, error) {
			id, err := optionalUUID(args)
			return restRequest{method: "POST", path: "/v1/hosts", body: map[string]any{"uuid": id, "name": *name, "address": *addr}, change: true, kind: "host"}, err
		}, true
	case "image add":
		name, u, size := fs.String("name", "", ""), fs.String("url", "", ""), fs.Int64("size-mb", 0, "")
		return func(args []string) (restRequest, error) {
			id, err := optionalUUID(args)
			return restRequest{method: "POST", path: "/v1/images", body: map[string]any{"uuid": id, "name": *name, "url": *u, "size_mb": *size}, change: true, kind: "image"}, err
		}, true
	case "image rename":
		ifName := fs.String("if", "", "")
		return func(args []string) (restRequest, error) {
			if len(args) != 2 {
				return restRequest{}, errors.New("give the image's UUID and its new name")
			}
			id, err := message.NormalizeUUID(args[0])
			if err != nil {
				return restRequest{}, err
			}
			body := map[string]any{"name": args[1]}
			fs.Visit(func(f *flag.Flag) { // -if "" compares with the empty name
				if f.Name == "if" {
					body["if_name"] = *ifName
				}
			})
			return restRequest{method: "PATCH", path: "/v1/images/" + id, body: body, change: true, kind: "image"}, nil
		}, true
	}
	return nil, false
}

func oneUUID(args []string) (string, error) {
	if len(args) != 1 {
		return "", errors.New("give one UUID")
	}
	return message.NormalizeUUID(args[0])
}

func noArgs(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q", args[0])
	}
	return nil
}

// restClient calls a node's REST API.
type restClient struct {
	base  *url.URL
	token string
	key   string // -key: the Idempotency-Key of a change; "" picks one
}

// restResult is what a command got: one record, or a list.
type restResult struct {
	record       map[string]any
	items        []map[string]any
	node, portal string
}

// apiFailure is an error answer of the API.
type apiFailure struct {
	status               int
	code, message, field string
}

func (e *apiFailure) Error() string {
	s := e.code + ": " + e.message
	if e.field != "" {
		s += " [field " + e.field + "]"
	}
	return fmt.Sprintf("%s (HTTP %d)", s, e.status)
}

// exitCode maps an answer's status to the command's exit code.
func exitCode(status int) int {
	switch {
	case status == http.StatusServiceUnavailable:
		return exitUnavailable
	case status == http.StatusGatewayTimeout:
		return exitUnknown
	case status >= 500:
		return exitFailed
	default:
		return exitRefused
	}
}

// run sends req, reading every page of a list, and returns the result or
// an error with its exit code.
func (c *restClient) run(ctx context.Context, req restRequest) (restResult, int, error) {
	if !req.list {
		if req.change && c.key == "" {
			c.key = message.NewUUID()
		}
		var rec map[string]any
		h, code, err := c.do(ctx, req.method, req.path, req.query, req.body, req.change, &rec)
		if err == nil && req.job {
			rec, code, err = c.awaitJob(ctx, rec)
		}
		return restResult{record: rec, node: h.Get("Refnode-Node"), portal: h.Get("Refnode-Portal")}, code, err
	}
	var out restResult
	q := req.query
	for {
		if req.limit > 0 {
			q.Set("limit", strconv.Itoa(min(req.limit-len(out.items), 1000)))
		}
		var page struct {
			Items      []map[string]any `json:"items"`
			NextCursor string           `json:"next_cursor"`
		}
		if _, code, err := c.do(ctx, req.method, req.path, q, nil, false, &page); err != nil {
			return out, code, err
		}
		out.items = append(out.items, page.Items...)
		if page.NextCursor == "" || (req.limit > 0 && len(out.items) >= req.limit) {
			return out, 0, nil
		}
		q.Set("cursor", page.NextCursor)
	}
}

// awaitJob reads job until it ended or ctx ends; a failed job is an
// error with the exit code of its code's retry class.
func (c *restClient) awaitJob(ctx context.Context, job map[string]any) (map[string]any, int, error) {
	id, _ := job["uuid"].(string)
	for {
		switch job["state"] {
		case "succeeded":
			return job, 0, nil
		case "failed":
			code, _ := job["code"].(string)
			text, _ := job["error"].(string)
			exit := map[message.Retry]int{message.RetryNever: exitRefused, message.RetrySafe: exitUnavailable, message.RetryRan: exitFailed}[message.Code(code).Retry()]
			if exit == 0 {
				exit = exitUnknown
			}
			return job, exit, fmt.Errorf("job %s failed: %s: %s", id, code, text)
		}
		wait := 30 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl)-500*time.Millisecond)
		}
		if wait <= 0 {
			return job, exitUnknown, fmt.Errorf("job %s is still %s at step %q (-timeout ended); follow it with refnode ctl jobs get -wait 30s %s", id, job["state"], job["step"], id)
		}
		var next map[string]any
		if _, code, err := c.do(ctx, "GET", "/v1/jobs/"+id, url.Values{"wait": {wait.Round(time.Millisecond).String()}}, nil, false, &next); err != nil {
			return job, code, fmt.Errorf("job %s: %w", id, err)
		}
		job = next
	}
}

// do sends one request, again while the answer is 503, or for a request
// sent with an Idempotency-Key also 504 or none, until ctx ends.
func (c *restClient) do(ctx context.Context, method, path string, q url.Values, body any, keyed bool, into any) (http.Header, int, error) {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return nil, exitUsage, err
		}
	}
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		h, code, err, again := c.once(ctx, method, u.String(), data, keyed, into)
		if !again || ctx.Err() != nil {
			if err != nil && attempt > 1 {
				err = fmt.Errorf("%w (after %d attempts)", err, attempt)
			}
			return h, code, err
		}
		select {
		case <-ctx.Done():
			return h, code, fmt.Errorf("%w (after %d attempts; -timeout ended)", err, attempt)
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// once sends one request; again reports whether repeating it may help.
func (c *restClient) once(ctx context.Context, method, u string, data []byte, keyed bool, into any) (h http.Header, code int, err error, again bool) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(data))
	if err != nil {
		return nil, exitUsage, err, false
	}
	if data != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if keyed {
		req.Header.Set("Idempotency-Key", c.key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		err = fmt.Errorf("no answer from %s: %w", c.base.Host, err)
		if method == http.MethodGet {
			return nil, exitUnavailable, err, true // a read changes nothing
		}
		return nil, exitUnknown, err, keyed // the request may have arrived
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.Header, exitUnknown, fmt.Errorf("read the answer: %w", err), keyed || method == http.MethodGet
	}
	if resp.StatusCode >= 400 {
		var e struct {
			Error struct{ Code, Message, Field string } `json:"error"`
		}
		if json.Unmarshal(raw, &e) != nil || e.Error.Code == "" {
			e.Error.Code, e.Error.Message = "http", strings.TrimSpace(string(raw))
		}
		f := &apiFailure{status: resp.StatusCode, code: e.Error.Code, message: e.Error.Message, field: e.Error.Field}
		again := resp.StatusCode == http.StatusServiceUnavailable || (keyed && resp.StatusCode == http.StatusGatewayTimeout)
		return resp.Header, exitCode(resp.StatusCode), f, again
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // epochs and versions in full
	if err := dec.Decode(into); err != nil {
		return resp.Header, exitFailed, fmt.Errorf("the answer is not the API's JSON: %w", err), false
	}
	return resp.Header, 0, nil, false
}

// columns are the table's columns for each kind: JSON field, header.
var columns = map[string][][2]string{
	"vm":     {{"uuid", "UUID"}, {"name", "NAME"}, {"state", "STATE"}, {"host_uuid", "HOST"}, {"cpus", "CPUS"}, {"memory_mb", "MEMORY_MB"}, {"version", "VERSION"}},
	"host":   {{"uuid", "UUID"}, {"name", "NAME"}, {"address", "ADDRESS"}, {"status", "STATUS"}, {"managed_by", "MANAGED_BY"}},
	"image":  {{"uuid", "UUID"}, {"name", "NAME"}, {"size_mb", "SIZE_MB"}, {"url", "URL"}},
	"nodes":  {{"uuid", "NODE"}, {"state", "STATE"}, {"epoch", "EPOCH"}, {"registered_at", "REGISTERED"}, {"age", "HEARTBEAT_AGE"}, {"share", "SHARE"}, {"hosts", "HOSTS"}, {"images", "IMAGES"}, {"vms", "VMS"}},
	"owner":  {{"node", "NODE"}, {"owner", "OWNER"}, {"fingerprint", "FINGERPRINT"}, {"error", "ERROR"}},
	"dead":   {{"id", "ID"}, {"type", "TYPE"}, {"service_id", "SERVICE"}, {"resource", "RESOURCE"}, {"reason", "REASON"}},
	"replay": {{"id", "ID"}, {"outcome", "OUTCOME"}},
	"job":    {{"uuid", "UUID"}, {"kind", "KIND"}, {"resource", "RESOURCE"}, {"state", "STATE"}, {"step", "STEP"}, {"code", "CODE"}, {"node", "NODE"}, {"updated_at", "UPDATED"}},
}

// nodeRows flattens GET /v1/nodes for its table.
func nodeRows(v map[string]any) ([]map[string]any, string) {
	members, _ := v["members"].([]any)
	rows := make([]map[string]any, 0, len(members))
	for _, x := range members {
		m, _ := x.(map[string]any)
		row := map[string]any{"uuid": m["uuid"], "state": m["state"], "epoch": m["epoch"]}
		if s, _ := m["registered_at"].(string); s != "" {
			if at, err := time.Parse(time.RFC3339Nano, s); err == nil {
				row["registered_at"] = at.Format(time.RFC3339)
			}
		}
		if age, err := num(m["heartbeat_age_ms"]); err == nil {
			row["age"] = (time.Duration(age) * time.Millisecond).String()
		}
		if s, err := num(m["share"]); err == nil {
			row["share"] = strconv.FormatFloat(100*s, 'f', 1, 64) + "%"
		}
		if o, ok := m["owned"].(map[string]any); ok {
			row["hosts"], row["images"], row["vms"] = o["hosts"], o["images"], o["vms"]
		}
		if m["uuid"] == v["node"] {
			row["uuid"] = fmt.Sprint(m["uuid"]) + " *"
		}
		rows = append(rows, row)
	}
	footer := fmt.Sprintf("* the node that answered; ring fingerprint %v; heartbeat every %vms, evicted after %vms of silence",
		v["fingerprint"], v["heartbeat_interval_ms"], v["evict_after_ms"])
	if v["owned_from_database"] == false {
		footer += fmt.Sprintf("; resources owned not counted: %v", v["owned_unavailable"])
	}
	return rows, footer
}

// num reads a JSON number decoded with UseNumber.
func num(v any) (float64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("%v is not a number", v)
	}
	return n.Float64()
}

// numbers replaces the json.Numbers in v by int64 or float64, for YAML,
// which would quote them as strings.
func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = numbers(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = numbers(e)
		}
		return out
	case []map[string]any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = numbers(e)
		}
		return out
	}
	return v
}

// ownerRows flattens GET /v1/owner/{uuid} for its table.
func ownerRows(v map[string]any) ([]map[string]any, string) {
	views, _ := v["views"].([]any)
	rows := make([]map[string]any, 0, len(views))
	for _, x := range views {
		m, _ := x.(map[string]any)
		rows = append(rows, m)
	}
	agree := "every node agrees"
	if v["agree"] != true {
		agree = "THE NODES DISAGREE (their rings are converging, or a node did not answer)"
	}
	return rows, fmt.Sprintf("%v is owned by %v on the ring of node %v; %s", v["uuid"], v["owner"], v["node"], agree)
}

// replayRows flattens POST /v1/dead-letters/replay for its table.
func replayRows(v map[string]any) ([]map[string]any, string) {
	var rows []map[string]any
	for _, outcome := range []string{"replayed", "missing"} {
		ids, _ := v[outcome].([]any)
		for _, id := range ids {
			rows = append(rows, map[string]any{"id": id, "outcome": outcome})
		}
	}
	if e, _ := v["error"].(string); e != "" {
		return rows, "the replay stopped before the end; the other ids are still in the dead-letter queue: " + e
	}
	return rows, ""
}

// render prints r as format.
func render(w io.Writer, format, kind string, r restResult) error {
	var v any = r.record
	if r.record == nil {
		if r.items == nil {
			r.items = []map[string]any{}
		}
		v = r.items
	}
	switch format {
	case "json":
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	case "yaml":
		data, err := yaml.Marshal(numbers(v))
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	rows := r.items
	if r.record != nil {
		rows = []map[string]any{r.record}
	}
	footer := ""
	switch kind {
	case "nodes":
		rows, footer = nodeRows(r.record)
	case "owner":
		rows, footer = ownerRows(r.record)
	case "replay":
		rows, footer = replayRows(r.record)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	cols := columns[kind]
	for i, c := range cols {
		fmt.Fprint(tw, c[1])
		if i < len(cols)-1 {
			fmt.Fprint(tw, "\t")
		}
	}
	fmt.Fprintln(tw)
	for _, row := range rows {
		for i, c := range cols {
			s := "-"
			switch x := row[c[0]].(type) {
			case nil:
			case json.Number:
				s = x.String()
			case string:
				if x != "" {
					s = x
				}
			default:
				s = fmt.Sprint(x)
			}
			fmt.Fprint(tw, s)
			if i < len(cols)-1 {
				fmt.Fprint(tw, "\t")
			}
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if footer != "" {
		_, err := fmt.Fprintln(w, footer)
		return err
	}
	if r.node != "" {
		via := ""
		if r.portal != "" {
			via = " through the portal of " + r.portal
		}
		_, err := fmt.Fprintf(w, "handled by node %s%s\n", r.node, via)
		return err
	}
	return nil
}
