package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	hbmem "github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/memdb"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/cloudbus-go/cloudbus/refnode/internal/services"
	"github.com/cloudbus-go/cloudbus/service"
)

// The drift tests of docs/wire.md, the wire protocol written for
// clients in other languages. TestWireDoc compares the document's
// marked tables with the code; TestWireDocExamples runs its example
// requests against an in-memory refnode cluster as a foreign client
// would. Each failure says what to add to or remove from the document.
//
// The document marks what these tests read with an HTML comment on the
// line before: "<!-- wire:NAME -->" before a Markdown table,
// "<!-- wire:fields TYPE -->" before the field table of a message type
// (or before a line of prose for a type without fields), and
// "<!-- wire:example ROLE NAME -->" before a ```json block, where ROLE is
// request, reply or event.

const wireDocPath = "../docs/wire.md"

// docTable is a Markdown table of the document: its rows without the
// header and separator, each cell trimmed.
type docTable struct {
	line int // of the marker
	rows [][]string
}

// docExample is a ```json block marked as an example.
type docExample struct {
	line       int
	role, name string
	data       []byte
}

type wireDoc struct {
	text     string
	tables   map[string]docTable // by marker: "codes", "fields refnode.v1.StartVm", ...
	examples []docExample
}

var markerRE = regexp.MustCompile(`^<!-- wire:([a-z]+)(?: ([^ ]+))?(?: ([^ ]+))? -->$`)

// readWireDoc parses the marked tables and examples of docs/wire.md.
func readWireDoc(t *testing.T) *wireDoc {
	t.Helper()
	data, err := os.ReadFile(wireDocPath)
	require.NoError(t, err, "read the wire protocol document")
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	require.NoError(t, sc.Err())
	doc := &wireDoc{text: string(data), tables: map[string]docTable{}}
	for i := 0; i < len(lines); i++ {
		m := markerRE.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		at := i + 1
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if m[1] == "example" {
			require.True(t, m[2] != "" && m[3] != "", "%s:%d: an example marker reads <!-- wire:example ROLE NAME -->", wireDocPath, at)
			require.True(t, j < len(lines) && strings.TrimSpace(lines[j]) == "```json", "%s:%d: put a ```json block right after the example marker", wireDocPath, at)
			var b strings.Builder
			for j++; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
				b.WriteString(lines[j])
				b.WriteByte('\n')
			}
			doc.examples = append(doc.examples, docExample{line: at, role: m[2], name: m[3], data: []byte(b.String())})
			i = j
			continue
		}
		key := m[1]
		if m[2] != "" {
			key += " " + m[2]
		}
		_, dup := doc.tables[key]
		require.False(t, dup, "%s:%d: marker wire:%s appears twice; keep one", wireDocPath, at, key)
		tab := docTable{line: at}
		if j < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[j]), "|") {
			for n := 0; j < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[j]), "|"); j, n = j+1, n+1 {
				if n < 2 { // header and separator
					continue
				}
				cells := strings.Split(strings.Trim(strings.TrimSpace(lines[j]), "|"), "|")
				for k := range cells {
					cells[k] = strings.TrimSpace(cells[k])
				}
				tab.rows = append(tab.rows, cells)
			}
			i = j - 1
		}
		doc.tables[key] = tab
	}
	return doc
}

// table returns the table marked name, failing if there is none.
func (d *wireDoc) table(t *testing.T, name string, minCols int) docTable {
	t.Helper()
	tab, ok := d.tables[name]
	require.True(t, ok, "%s: add the table marked <!-- wire:%s -->", wireDocPath, name)
	for _, r := range tab.rows {
		require.GreaterOrEqual(t, len(r), minCols, "%s:%d: table wire:%s: row %q has fewer than %d cells", wireDocPath, tab.line, name, r, minCols)
	}
	return tab
}

// unquote strips the backticks around a cell.
func unquote(cell string) string { return strings.Trim(cell, "`") }

// keyed returns the rows of tab by their first cell, unquoted, failing on
// a repeated key.
func keyed(t *testing.T, name string, tab docTable) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range tab.rows {
		k := unquote(r[0])
		_, dup := out[k]
		require.False(t, dup, "%s:%d: table wire:%s lists %q twice; remove one row", wireDocPath, tab.line, name, k)
		out[k] = r
	}
	return out
}

// diffKeys reports every key of want missing from got ("add") and every
// key of got missing from want ("remove"), with addHint saying what the
// row to add holds.
func diffKeys[V any](t *testing.T, where string, got map[string][]string, want map[string]V, addHint func(string, V) string) {
	t.Helper()
	for _, k := range sortedKeys(want) {
		if _, ok := got[k]; !ok {
			t.Errorf("%s: add a row for `%s`%s", where, k, addHint(k, want[k]))
		}
	}
	for _, k := range sortedKeys(got) {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: remove the row for `%s`: the code has no such entry", where, k)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// docField is a JSON field of a type as the document lists it: its path
// (nested objects' fields joined with dots), its JSON type, and whether
// Go leaves it out when empty (omitempty, omitzero).
type docField struct {
	path, typ string
	optional  bool
}

var (
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	timeType       = reflect.TypeFor[time.Time]()
	errorType      = reflect.TypeFor[message.Error]()
	textMarshaler  = reflect.TypeFor[interface{ MarshalText() ([]byte, error) }]()
)

// jsonType names the JSON type encoding/json writes for a Go type.
func jsonType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == rawMessageType:
		return "any JSON value"
	case t == timeType:
		return "string"
	case t == errorType:
		return "object"
	case t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler):
		return "string"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Slice, reflect.Array:
		return "array of " + jsonType(t.Elem())
	}
	return t.Kind().String()
}

// jsonFields lists the JSON fields of struct type t as encoding/json
// writes them: by their json tags (or Go names), embedded structs'
// fields flattened, nested structs' fields under "<name>.".
func jsonFields(t reflect.Type, prefix string) []docField {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []docField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			out = append(out, jsonFields(ft, prefix)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		typ := jsonType(f.Type)
		optional := slices.ContainsFunc(strings.Split(opts, ","), func(o string) bool { return o == "omitempty" || o == "omitzero" })
		out = append(out, docField{path: prefix + name, typ: typ, optional: optional})
		if ft.Kind() == reflect.Struct && typ == "object" && ft != errorType {
			out = append(out, jsonFields(ft, prefix+name+".")...)
		}
	}
	return out
}

// checkFields compares a field table of the document (field, JSON type,
// ...) with fields. With notes, the third cell of a row (its notes)
// starts with "optional" exactly when Go leaves the field out when empty.
func checkFields(t *testing.T, where string, tab docTable, fields []docField, notes bool) {
	t.Helper()
	got := keyed(t, where, tab)
	want := map[string]docField{}
	for _, f := range fields {
		want[f.path] = f
	}
	diffKeys(t, where, got, want, func(_ string, f docField) string { return fmt.Sprintf(" of JSON type %s", f.typ) })
	for path, f := range want {
		row, ok := got[path]
		if !ok || len(row) < 2 {
			continue
		}
		if cell := unquote(row[1]); !strings.HasPrefix(cell, f.typ) {
			t.Errorf("%s: the JSON type of `%s` is %s: make its type cell start with %q (it reads %q)", where, path, f.typ, f.typ, cell)
		}
		if !notes {
			continue
		}
		switch said := len(row) > 2 && strings.HasPrefix(row[2], "optional"); {
		case f.optional && !said:
			t.Errorf("%s: `%s` is optional (left out when empty): start its notes with \"optional\"", where, path)
		case !f.optional && said:
			t.Errorf("%s: `%s` is always written: its notes must not start with \"optional\"", where, path)
		}
	}
}

// wireRegistry builds refnode's registry as `refnode serve` does, node
// types included (service.NewNode registers them; it does no I/O), and
// returns it with the API types: registered name -> the service that
// takes it through api.portal.
func wireRegistry(t *testing.T) (*message.Registry, map[string]string) {
	t.Helper()
	hv, err := simhv.New(simhv.Config{})
	require.NoError(t, err)
	id := message.NewUUID()
	set, err := services.New(services.Config{Store: memdb.New().For(id), Hypervisor: hv})
	require.NoError(t, err)
	reg := message.NewRegistry()
	require.NoError(t, api.Register(reg))
	tr := membus.New().Transport(id)
	t.Cleanup(func() { _ = tr.Close() })
	_, err = service.NewNode(service.Config{Node: id, Transport: tr, Store: hbmem.New(hbmem.Config{}).For(id), Registry: reg, Services: set.Services()})
	require.NoError(t, err)
	apiTypes := map[string]string{wire.TypeClusterTimeQuery: bus.APIPortal} // answered by the portal itself
	for _, s := range set.Services() {
		a, ok := s.(service.APIService)
		if !ok {
			continue
		}
		for _, proto := range a.APIMessages() {
			name, err := reg.NameOf(proto)
			require.NoError(t, err)
			apiTypes[name] = s.Name()
		}
	}
	return reg, apiTypes
}

// goType returns the Go type registered as name.
func goType(t *testing.T, reg *message.Registry, name string) reflect.Type {
	t.Helper()
	v, err := reg.Decode(name, nil)
	require.NoError(t, err)
	return reflect.TypeOf(v).Elem()
}

// routedField returns the JSON name of the field by which messages of the
// type registered as name are routed (message.Routed), or "none".
func routedField(t *testing.T, reg *message.Registry, name string) string {
	t.Helper()
	typ := goType(t, reg, name)
	if typ.Kind() != reflect.Struct {
		return "none"
	}
	p := reflect.New(typ)
	marks := map[string]string{} // a UUID per top-level string field -> its JSON name
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || f.Anonymous || f.Type.Kind() != reflect.String || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		u := message.NewUUID()
		p.Elem().Field(i).SetString(u)
		marks[u] = name
	}
	res, routed, err := message.ResourceOf(p.Interface())
	if !routed {
		return "none"
	}
	require.NoError(t, err, "%s names its resource", name)
	field, ok := marks[res]
	require.True(t, ok, "%s is routed by a resource that none of its top-level string fields holds; teach routedField about it", name)
	return field
}

// retryNames are the words the document uses for the retry classes.
var retryNames = map[message.Retry]string{
	message.RetrySafe:    "safe",
	message.RetryNever:   "never",
	message.RetryUnknown: "unknown",
	message.RetryRan:     "ran",
}

// TestWireDoc checks that docs/wire.md says what the code does: the
// envelope's fields and their JSON types, the kinds, every error code
// with its retry class, the error object, the reserved headers, the
// limits, and every message type refnode registers, with the service
// that takes it, whether api.portal accepts it, the field that routes it
// and every JSON field of its body; and that every example decodes as
// its type, with no field the type lacks.
func TestWireDoc(t *testing.T) {
	doc := readWireDoc(t)
	reg, apiTypes := wireRegistry(t)

	t.Run("envelope", func(t *testing.T) {
		checkFields(t, wireDocPath+", table wire:envelope", doc.table(t, "envelope", 2), jsonFields(reflect.TypeFor[wire.Envelope](), ""), false)
	})

	t.Run("kinds", func(t *testing.T) {
		want := map[string]bool{}
		for k := wire.Kind(1); k != 0; k++ {
			b, err := k.MarshalText()
			if err != nil {
				break
			}
			want[string(b)] = true
		}
		require.NotEmpty(t, want)
		diffKeys(t, wireDocPath+", table wire:kinds", keyed(t, "kinds", doc.table(t, "kinds", 2)), want, func(string, bool) string { return "" })
	})

	t.Run("codes", func(t *testing.T) {
		tab := doc.table(t, "codes", 3)
		got := keyed(t, "codes", tab)
		want := map[string]string{}
		for _, c := range message.Codes() {
			name, ok := retryNames[c.Retry()]
			require.True(t, ok, "code %s has retry class %d, which the document does not name: describe it in section 6 and add it to retryNames", c, int(c.Retry()))
			want[string(c)] = name
		}
		where := wireDocPath + ", table wire:codes"
		diffKeys(t, where, got, want, func(_ string, retry string) string { return fmt.Sprintf(" with retry class %s", retry) })
		for code, retry := range want {
			if row, ok := got[code]; ok && unquote(row[1]) != retry {
				t.Errorf("%s: the retry class of `%s` is %s, not %q: fix its row", where, code, retry, row[1])
			}
			// The error object carries the class, by the document's name.
			b, err := json.Marshal(message.NewError(message.Code(code), "d"))
			require.NoError(t, err)
			var obj struct {
				Retry string `json:"retry"`
			}
			require.NoError(t, json.Unmarshal(b, &obj))
			if obj.Retry != retry {
				t.Errorf("%s: an error with code `%s` carries \"retry\": %q on the wire, the document's class is %s: the names of section 6 and of the code differ", where, code, obj.Retry, retry)
			}
		}
	})

	t.Run("error object", func(t *testing.T) {
		full := &message.Error{Code: message.ErrBadRequest.Code, Description: "d", Details: "x", Cause: &message.Error{Code: message.ErrInternal.Code, Description: "c"}}
		b, err := json.Marshal(full)
		require.NoError(t, err)
		var obj map[string]any
		require.NoError(t, json.Unmarshal(b, &obj))
		var fields []docField
		for k, v := range obj {
			typ := "string"
			if _, ok := v.(map[string]any); ok {
				typ = "object"
			}
			fields = append(fields, docField{path: k, typ: typ})
		}
		tab := doc.table(t, "error", 2)
		checkFields(t, wireDocPath+", table wire:error", tab, fields, false)
		// The retry field's row names every class the field may carry.
		if row, ok := keyed(t, "error", tab)["retry"]; ok {
			for _, name := range retryNames {
				if !strings.Contains(row[len(row)-1], "`"+name+"`") {
					t.Errorf("%s, table wire:error: the row of `retry` must name the class `%s`", wireDocPath, name)
				}
			}
		}
	})

	t.Run("headers", func(t *testing.T) {
		want := map[string]bool{
			bus.HeaderRetry:      true,
			bus.HeaderDelivery:   true,
			wire.HeaderOwner:     true,
			service.HeaderPortal: true,
			wire.HeaderHops:      true,
			"cloudbus-drain":     true, // bus's unexported headerDrain (bus/drain.go)
		}
		diffKeys(t, wireDocPath+", table wire:headers", keyed(t, "headers", doc.table(t, "headers", 2)), want, func(string, bool) string { return "" })
		for _, h := range []string{driver.HeaderDeadReason, driver.HeaderDeadQueue, "x-cloudbus-deliveries"} {
			if !strings.Contains(doc.text, "`"+h+"`") {
				t.Errorf("%s: name the AMQP header `%s` in section 2", wireDocPath, h)
			}
		}
	})

	t.Run("limits", func(t *testing.T) {
		want := map[string]int{
			"protocol_version":  protocolWritten(t),
			"envelope_bytes":    message.DefaultMaxSize,
			"id_bytes":          envelopeIDLimit(t),
			"type_name_bytes":   typeNameLimit(),
			"name_bytes":        api.MaxNameBytes,
			"url_bytes":         api.MaxURLBytes,
			"max_cpus":          api.MaxCPUs,
			"max_memory_mb":     api.MaxMemoryMB,
			"max_image_size_mb": api.MaxImageSizeMB,
		}
		where := wireDocPath + ", table wire:limits"
		got := keyed(t, "limits", doc.table(t, "limits", 2))
		diffKeys(t, where, got, want, func(_ string, v int) string { return fmt.Sprintf(" with value %d", v) })
		for k, v := range want {
			row, ok := got[k]
			if !ok {
				continue
			}
			if n, err := strconv.Atoi(unquote(row[1])); err != nil || n != v {
				t.Errorf("%s: `%s` is %d in the code: write %d, not %q", where, k, v, v, row[1])
			}
		}
		if !strings.Contains(doc.text, strconv.Itoa(message.DefaultMaxSize)) {
			t.Errorf("%s: quote the envelope limit %d", wireDocPath, message.DefaultMaxSize)
		}
	})

	t.Run("messages", func(t *testing.T) {
		where := wireDocPath + ", table wire:messages"
		got := keyed(t, "messages", doc.table(t, "messages", 5))
		want := map[string]bool{}
		for _, n := range reg.Names() {
			want[n] = true
		}
		diffKeys(t, where, got, want, func(n string, _ bool) string {
			return fmt.Sprintf(" (the type is registered), and a section with <!-- wire:fields %s -->", n)
		})
		for _, name := range reg.Names() {
			row, ok := got[name]
			if !ok {
				continue
			}
			sentTo, viaPortal, routedBy, reply := unquote(row[1]), row[2], unquote(row[3]), unquote(row[4])
			svc, isAPI := apiTypes[name]
			if wantPortal := map[bool]string{true: "yes", false: "no"}[isAPI]; viaPortal != wantPortal {
				t.Errorf("%s: `%s`: write %q in the api.portal column, not %q", where, name, wantPortal, viaPortal)
			}
			if isAPI && sentTo != svc {
				t.Errorf("%s: `%s` is taken by the service %s: write `%s` in the sent-to column, not %q", where, name, svc, svc, row[1])
			}
			if sentTo == "" {
				t.Errorf("%s: `%s`: say where it is sent (a service, event or reply)", where, name)
			}
			if want := routedField(t, reg, name); routedBy != want {
				t.Errorf("%s: `%s` is routed by %s: write %q in the routed-by column, not %q", where, name, want, want, row[3])
			}
			if reply != "none" && !reg.Known(reply) {
				t.Errorf("%s: `%s`: its reply %q is not a registered type; write a registered name or none", where, name, reply)
			}
			if isAPI && reply == "none" {
				t.Errorf("%s: `%s` is an API request: name its reply type", where, name)
			}
		}
	})

	t.Run("fields", func(t *testing.T) {
		for _, name := range reg.Names() {
			key := "fields " + name
			tab, ok := doc.tables[key]
			if !ok {
				t.Errorf("%s: add a section for `%s` with <!-- wire:%s --> before its field table", wireDocPath, name, key)
				continue
			}
			typ := goType(t, reg, name)
			var fields []docField
			if typ.Kind() == reflect.Struct {
				fields = jsonFields(typ, "")
			}
			checkFields(t, fmt.Sprintf("%s:%d, fields of %s", wireDocPath, tab.line, name), tab, fields, true)
		}
		for key, tab := range doc.tables {
			if name, ok := strings.CutPrefix(key, "fields "); ok && !reg.Known(name) {
				t.Errorf("%s:%d: remove the section of `%s`: no such type is registered", wireDocPath, tab.line, name)
			}
		}
	})

	t.Run("examples", func(t *testing.T) {
		index := keyed(t, "messages", doc.table(t, "messages", 5))
		require.NotEmpty(t, doc.examples, "%s: add the worked example", wireDocPath)
		for i, ex := range doc.examples {
			where := fmt.Sprintf("%s:%d, example %s %s", wireDocPath, ex.line, ex.role, ex.name)
			env, err := wire.DecodeEnvelope(ex.data, 0)
			if !expect(t, err == nil, "%s: not a valid envelope: %v", where, err) {
				continue
			}
			wantKind := map[string]wire.Kind{"request": wire.KindRequest, "reply": wire.KindReply, "event": wire.KindEvent}[ex.role]
			expect(t, wantKind != 0 && env.Kind == wantKind, "%s: the role %s and the kind %s disagree", where, ex.role, env.Kind)
			if env.Type != "" {
				body := reflect.New(goType(t, reg, env.Type)).Interface()
				dec := json.NewDecoder(bytes.NewReader(env.Body))
				dec.DisallowUnknownFields()
				err := dec.Decode(body)
				expect(t, err == nil, "%s: the body is not a %s: %v", where, env.Type, err)
			}
			if ex.role != "request" {
				continue
			}
			expect(t, i+1 < len(doc.examples) && doc.examples[i+1].role == "reply" && doc.examples[i+1].name == ex.name,
				"%s: follow it with its reply, marked <!-- wire:example reply %s -->", where, ex.name)
			if i+1 >= len(doc.examples) {
				continue
			}
			reply, err := wire.DecodeEnvelope(doc.examples[i+1].data, 0)
			if err != nil || reply.Error != nil {
				continue
			}
			if row, ok := index[env.Type]; ok {
				expect(t, unquote(row[4]) == reply.Type, "%s: the index says %s replies %s, the example's reply is a %s", where, env.Type, unquote(row[4]), reply.Type)
			}
		}
	})
}

// expect reports a failure and returns ok.
func expect(t *testing.T, ok bool, format string, args ...any) bool {
	t.Helper()
	if !ok {
		t.Errorf(format, args...)
	}
	return ok
}

// protocolWritten returns the protocol version EncodeEnvelope writes: its
// "protocol" field, or 1 if it writes none (absent means 1).
func protocolWritten(t *testing.T) int {
	t.Helper()
	b, err := wire.EncodeEnvelope(&wire.Envelope{ID: message.NewUUID(), Kind: wire.KindEvent, Type: message.TypeEmpty}, 0)
	require.NoError(t, err)
	var v struct {
		Protocol *int `json:"protocol"`
	}
	require.NoError(t, json.Unmarshal(b, &v))
	if v.Protocol == nil {
		return 1
	}
	return *v.Protocol
}

// envelopeIDLimit returns the longest id, service id, correlation id,
// reply-to and source an envelope may carry, failing unless the five
// share one limit.
func envelopeIDLimit(t *testing.T) int {
	t.Helper()
	set := map[string]func(e *wire.Envelope, s string){
		"id":             func(e *wire.Envelope, s string) { e.ID = s },
		"service_id":     func(e *wire.Envelope, s string) { e.ServiceID = s },
		"correlation_id": func(e *wire.Envelope, s string) { e.CorrelationID = s },
		"reply_to":       func(e *wire.Envelope, s string) { e.ReplyTo = s },
		"source":         func(e *wire.Envelope, s string) { e.Source = s },
	}
	limit := -1
	for _, field := range sortedKeys(set) {
		ok := func(n int) bool {
			e := &wire.Envelope{ID: "i", Kind: wire.KindRequest, Type: message.TypeEmpty, ServiceID: "s", CorrelationID: "c", ReplyTo: "r"}
			set[field](e, strings.Repeat("a", n))
			_, err := wire.EncodeEnvelope(e, 0)
			return err == nil
		}
		n := largest(ok, 1<<16)
		if limit >= 0 {
			require.Equal(t, limit, n, "the envelope's %s has another length limit than the other ids: give it its own row in the limits table", field)
		}
		limit = n
	}
	return limit
}

// typeNameLimit returns the longest type name message.ValidTypeName
// accepts.
func typeNameLimit() int {
	return largest(func(n int) bool {
		return n >= 7 && message.ValidTypeName("a.v1.T"+strings.Repeat("x", n-6))
	}, 1<<16)
}

// largest returns the largest n in [1, max] with ok(n), where ok holds up
// to some n and not beyond.
func largest(ok func(int) bool, max int) int {
	lo, hi := 0, max
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if ok(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// wireDocHeartbeat beats fast, so the one-node cluster starts and stops
// at once, with a lease long enough that a loaded machine never fences
// the node mid-test (a fenced portal would give the examples back).
var wireDocHeartbeat = heartbeat.Config{Interval: 50 * time.Millisecond, Lease: 2 * time.Second, EvictAfter: 3 * time.Second}

// volatileKeys are the fields whose values differ from run to run (node
// UUIDs, times, reply ids, texts naming them): TestWireDocExamples
// compares only their presence and JSON type.
var volatileKeys = map[string]bool{
	"id": true, "source": true, // of the envelope
	"node": true, "portal": true, "managed_by": true, "allocated_by": true, "connected_at": true, "now_ns": true, "error_ns": true,
	"description": true, "details": true, "cause": true, // of the error object
}

// compareJSON reports where got differs from the document's want: a key
// missing or extra, a JSON type, or a value (volatile keys aside).
func compareJSON(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: the document shows an object, the reply has %v", path, got)}
		}
		var out []string
		for _, k := range sortedKeys(w) {
			gv, ok := g[k]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("%s: remove %q: the reply has no such field", path, k))
			case volatileKeys[k]:
				if fmt.Sprintf("%T", w[k]) != fmt.Sprintf("%T", gv) {
					out = append(out, fmt.Sprintf("%s.%s: the document shows %v, the reply has %v", path, k, w[k], gv))
				}
			default:
				out = append(out, compareJSON(path+"."+k, w[k], gv)...)
			}
		}
		for _, k := range sortedKeys(g) {
			if _, ok := w[k]; !ok {
				out = append(out, fmt.Sprintf("%s: add %q (the reply has %v)", path, k, g[k]))
			}
		}
		return out
	default:
		if !reflect.DeepEqual(want, got) {
			return []string{fmt.Sprintf("%s: the document shows %v, the reply has %v", path, want, got)}
		}
		return nil
	}
}

// TestWireDocExamples is a client in another language, in miniature: on
// a one-node in-memory refnode cluster it declares the examples' reply
// queue, publishes each example request of docs/wire.md through the API
// entry exactly as printed (but for deadline_ns, rewritten in the
// cluster's time), and checks that the reply matches the example printed
// after it, field by field (values that differ from run to run, such as
// node UUIDs and times, by type only). Then it calls every other API
// type the index lists and checks the reply type the index names.
func TestWireDocExamples(t *testing.T) {
	doc := readWireDoc(t)
	reg, apiTypes := wireRegistry(t)
	c, err := startCluster(t.Context(), clusterConfig{nodes: 1, heartbeat: wireDocHeartbeat, pingInterval: time.Second})
	require.NoError(t, err)
	defer c.close()
	node := c.all()[0].node

	var requests []docExample
	for _, ex := range doc.examples {
		if ex.role == "request" {
			requests = append(requests, ex)
		}
	}
	require.NotEmpty(t, requests, "%s: add example requests", wireDocPath)
	first, err := wire.DecodeEnvelope(requests[0].data, 0)
	require.NoError(t, err)

	ctx := t.Context()
	tr := c.net.Transport("wire-doc-client")
	defer tr.Close()
	require.NoError(t, tr.DeclareQueue(ctx, first.ReplyTo, driver.QueueOptions{Kind: driver.QueueTemporary}))
	replies := make(chan []byte, 16)
	_, err = tr.Consume(ctx, first.ReplyTo, driver.ConsumeOptions{Prefetch: 16}, func(d driver.Delivery) {
		replies <- bytes.Clone(d.Body())
		_ = d.Ack()
	})
	require.NoError(t, err)
	entry, portal := bus.DefaultPrefix+".api", bus.DefaultPrefix+".message."+bus.APIPortal

	deadlineRE := regexp.MustCompile(`"deadline_ns":\s*[0-9]+`)
	call := func(where string, data []byte) map[string]any {
		t.Helper()
		req, err := wire.DecodeEnvelope(data, 0)
		require.NoError(t, err, where)
		require.Equal(t, first.ReplyTo, req.ReplyTo, "%s: give every example request the same reply_to", where)
		now, bound, ok := node.ClusterTime()
		require.True(t, ok, "the node knows the cluster time")
		fresh := now.Add(req.Timeout - bound).UnixNano()
		data = deadlineRE.ReplaceAll(data, []byte(`"deadline_ns": `+strconv.FormatInt(fresh, 10)))
		require.NoError(t, tr.PublishVia(ctx, entry, portal, data), where)
		timeout := time.After(10 * time.Second)
		for {
			select {
			case b := <-replies:
				var got map[string]any
				require.NoError(t, json.Unmarshal(b, &got), "%s: the reply is JSON", where)
				if got["correlation_id"] == req.CorrelationID {
					return got
				}
				t.Logf("%s: a reply for another call: %s", where, b)
			case <-timeout:
				t.Fatalf("%s: no reply within 10 s", where)
			}
		}
	}

	covered := map[string]bool{}
	resources := map[string]string{} // service -> a resource it owns, from the replies
	for i, ex := range doc.examples {
		if ex.role != "request" {
			continue
		}
		where := fmt.Sprintf("%s:%d, example %s", wireDocPath, ex.line, ex.name)
		require.True(t, i+1 < len(doc.examples) && doc.examples[i+1].role == "reply", "%s: follow it with its reply", where)
		got := call(where, ex.data)
		var want map[string]any
		require.NoError(t, json.Unmarshal(doc.examples[i+1].data, &want), "%s: the reply example is JSON", where)
		for _, d := range compareJSON("reply", want, got) {
			t.Errorf("%s: %s", where, d)
		}
		req, _ := wire.DecodeEnvelope(ex.data, 0)
		covered[req.Type] = true
		if r, ok := got["resource_uuid"].(string); ok && got["error"] == nil {
			resources[apiTypes[req.Type]] = r
		}
	}

	// Every other API type, with a body naming a resource of its service,
	// in an order in which each succeeds: a deletion last, once the VMs
	// that used the image are destroyed and nothing else needs it.
	index := keyed(t, "messages", doc.table(t, "messages", 5))
	order := []string{"Get", "Reconnect", "Reboot", "Stop", "Destroy"}
	rank := func(name string) int {
		short := name[strings.LastIndexByte(name, '.')+1:]
		if strings.HasPrefix(short, "Delete") {
			return len(order) + 1
		}
		for i, p := range order {
			if strings.HasPrefix(short, p) {
				return i
			}
		}
		return len(order)
	}
	var rest []string
	for _, name := range sortedKeys(apiTypes) {
		if !covered[name] {
			rest = append(rest, name)
		}
	}
	slices.SortStableFunc(rest, func(a, b string) int { return rank(a) - rank(b) })
	for n, name := range rest {
		where := fmt.Sprintf("%s, API type %s", wireDocPath, name)
		field := routedField(t, reg, name)
		res := resources[apiTypes[name]]
		if field == "none" || res == "" {
			t.Errorf("%s: no example covers it and the test cannot build its body: add an example request and reply for it", where)
			continue
		}
		fields := map[string]string{field: res}
		// MigrateVm names a job recorded before it is sent; with a job
		// nobody recorded, the VM's owner answers not_found: it was
		// routed, decoded and validated.
		wantErr := ""
		if name == "refnode.v1.MigrateVm" {
			fields["host_uuid"], fields["job"], wantErr = res, message.NewUUID(), "not_found"
		}
		body, err := json.Marshal(fields)
		require.NoError(t, err)
		env := &wire.Envelope{
			ID: message.NewUUID(), Kind: wire.KindRequest, Type: name, ServiceID: bus.APIPortal, ResourceUUID: res,
			CorrelationID: fmt.Sprintf("rest-%d", n), ReplyTo: first.ReplyTo, Timeout: 10 * time.Second, Body: body,
		}
		data, err := wire.EncodeEnvelope(env, 0)
		require.NoError(t, err)
		got := call(where, data)
		if wantErr != "" {
			e, _ := got["error"].(map[string]any)
			expect(t, e != nil && e["code"] == wantErr, "%s: want the error %s, got %v", where, wantErr, got["error"])
			continue
		}
		if !expect(t, got["error"] == nil, "%s: %v", where, got["error"]) {
			continue
		}
		t.Logf("%s: replied %v", name, got["type"])
		if row, ok := index[name]; ok {
			expect(t, got["type"] == unquote(row[4]), "%s: the reply is a %v; write it in the reply column, not %q", where, got["type"], row[4])
		}
	}
}
