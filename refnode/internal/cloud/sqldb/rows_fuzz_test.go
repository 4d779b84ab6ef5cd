package sqldb_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/internal/rawrows"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/sqldb"
)

// fuzzPrefix is the table prefix of the fuzz targets' store.
const fuzzPrefix = "fz"

// openFuzz opens a store on SQLite in a temporary directory, once per
// fuzz target (and fuzz worker), and returns it with its pool's *sql.DB
// for raw statements.
func openFuzz(f *testing.F) (*sqldb.Store, *sql.DB) {
	url := "sqlite:" + filepath.Join(f.TempDir(), "refnode.db")
	p, err := sqlconn.Open(sqlconn.Config{URL: url})
	if err != nil {
		f.Fatal(err)
	}
	s, err := sqldb.Open(context.Background(), p, sqldb.Config{Prefix: fuzzPrefix})
	if err != nil {
		_ = p.Close()
		f.Fatal(err)
	}
	f.Cleanup(func() {
		_ = s.Close()
		_ = p.Close()
	})
	return s, p.DB
}

// checkStoreError fails unless err is a coded *message.Error or says what
// failed ("sqldb: OP on URL: ERR").
func checkStoreError(t *testing.T, err error) {
	t.Helper()
	var me *message.Error
	if errors.As(err, &me) && slices.Contains(message.Codes(), me.Code) {
		return
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "sqldb: ") || !strings.Contains(msg, " on sqlite:") {
		t.Fatalf("error %q is neither coded nor says what failed", err)
	}
}

// kindOps reads and writes one kind of record through the store's API.
type kindOps struct {
	table   string
	columns []string
	list    func(ctx context.Context, s *sqldb.Store) ([]any, error)
	get     func(ctx context.Context, s *sqldb.Store, uuid string) (any, error)
	update  func(ctx context.Context, s *sqldb.Store, uuid string) (any, error) // a no-op update; nil if the kind has none
	updated func(rec any) (any, error)                                          // rec after a no-op update, or the error the update must fail with; nil: rec
	values  func(rec any) []any                                                 // the record's column values, as the store writes them
	check   func(t *testing.T, rec any)
}

func listOf[T any](list func(*sqldb.Store, context.Context) ([]T, error)) func(context.Context, *sqldb.Store) ([]any, error) {
	return func(ctx context.Context, s *sqldb.Store) ([]any, error) {
		recs, err := list(s, ctx)
		out := make([]any, len(recs))
		for i, r := range recs {
			out[i] = r
		}
		return out, err
	}
}

var recordKinds = []kindOps{
	{
		table:   fuzzPrefix + "_hosts",
		columns: []string{"uuid", "name", "address", "status", "managed_by", "takeovers", "connected_us"},
		list:    listOf((*sqldb.Store).Hosts),
		get: func(ctx context.Context, s *sqldb.Store, uuid string) (any, error) {
			return s.Host(ctx, uuid)
		},
		update: func(ctx context.Context, s *sqldb.Store, uuid string) (any, error) {
			return s.UpdateHost(ctx, uuid, func(*cloud.Host) error { return nil })
		},
		values: func(rec any) []any {
			h := rec.(cloud.Host)
			var at any
			if !h.ConnectedAt.IsZero() {
				at = h.ConnectedAt.UnixMicro()
			}
			return []any{h.UUID, h.Name, h.Address, string(h.Status), h.ManagedBy, int64(h.Takeovers), at}
		},
		check: func(t *testing.T, rec any) {
			h := rec.(cloud.Host)
			if !h.ConnectedAt.IsZero() && h.ConnectedAt.Location() != time.UTC {
				t.Fatalf("ConnectedAt %v is not in UTC", h.ConnectedAt)
			}
			if h.Status != cloud.HostConnected && h.Status != cloud.HostDisconnected && !strings.HasPrefix(h.Status.String(), "unknown(") {
				t.Fatalf("unknown host status %q reads as %q", string(h.Status), h.Status.String())
			}
		},
	},
	{
		table:   fuzzPrefix + "_images",
		columns: []string{"uuid", "name", "url", "size_mb"},
		list:    listOf((*sqldb.Store).Images),
		get: func(ctx context.Context, s *sqldb.Store, uuid string) (any, error) {
			return s.Image(ctx, uuid)
		},
		update: func(ctx context.Context, s *sqldb.Store, uuid string) (any, error) {
			return s.UpdateImage(ctx, uuid, func(*cloud.Image) error { return nil })
		},
		values: func(rec any) []any {
			img := rec.(cloud.Image)
			return []any{img.UUID, img.Name, img.URL, img.SizeMB}
		},
		check: func(*testing.T, any) {},
	},
	{
		table:   fuzzPrefix + "_vms",
		columns: []string{"uuid", "name", "image_uuid", "host_uuid", "cpus", "memory_mb", "state", "version"},
		list:    listOf((*sqldb.Store).VMs),
		get: func(ctx context.Context, s *sqldb.Store, uuid string) (any, error) {
			return s.VM(ctx, uuid)
		},
		update: func(ctx context.Context, s *sqldb.Store, uuid string) (any, error) {
			return s.UpdateVM(ctx, uuid, func(*cloud.VM) error { return nil })
		},
		updated: func(rec any) (any, error) { // one version up, unless there is none above
			vm := rec.(cloud.VM)
			if vm.Version == math.MaxInt64 {
				return nil, message.ErrInternal
			}
			vm.Version++
			return vm, nil
		},
		values: func(rec any) []any {
			vm := rec.(cloud.VM)
			return []any{vm.UUID, vm.Name, vm.ImageUUID, vm.HostUUID, int64(vm.CPUs), int64(vm.MemoryMB), string(vm.State), vm.Version}
		},
		check: func(t *testing.T, rec any) {
			// A state this version does not define is read as is; it
			// names itself unknown and allows no operation.
			st := rec.(cloud.VM).State
			if st.String() == string(st) {
				return
			}
			if !strings.HasPrefix(st.String(), "unknown(") {
				t.Fatalf("VM state %q reads as %q", string(st), st.String())
			}
			for _, op := range []cloud.VMOp{cloud.VMOpStart, cloud.VMOpStop, cloud.VMOpReboot, cloud.VMOpDestroy} {
				if _, _, err := cloud.Transition(st, op); !errors.Is(err, message.ErrConflict) {
					t.Fatalf("Transition(%q, %s) = %v, want bad_request", string(st), op, err)
				}
			}
		},
	},
	{
		table: fuzzPrefix + "_jobs",
		columns: []string{"uuid", "kind", "resource", "args", "state", "step", "node", "code", "error", "result",
			"created_us", "updated_us", "deadline_us", "version"},
		list: listOf((*sqldb.Store).Jobs),
		get: func(ctx context.Context, s *sqldb.Store, uuid string) (any, error) {
			return s.Job(ctx, uuid)
		},
		update: func(ctx context.Context, s *sqldb.Store, uuid string) (any, error) {
			return s.UpdateJob(ctx, uuid, func(*cloud.Job) error { return nil })
		},
		updated: func(rec any) (any, error) { // one version up, unless there is none above or the resource is refused
			j := rec.(cloud.Job)
			switch {
			case j.Version == math.MaxInt64:
				return nil, message.ErrInternal
			case !message.IsCanonicalUUID(j.Resource):
				return nil, message.ErrInvalidUUID
			}
			j.Version++
			return j, nil
		},
		values: func(rec any) []any {
			j := rec.(cloud.Job)
			at := func(t time.Time) any {
				if t.IsZero() {
					return nil
				}
				return t.UnixMicro()
			}
			return []any{j.UUID, j.Kind, j.Resource, j.Args, string(j.State), j.Step, j.Node, j.Code, j.Error, j.Result,
				at(j.CreatedAt), at(j.UpdatedAt), at(j.Deadline), j.Version}
		},
		check: func(t *testing.T, rec any) {
			j := rec.(cloud.Job)
			for _, at := range []time.Time{j.CreatedAt, j.UpdatedAt, j.Deadline} {
				if !at.IsZero() && at.Location() != time.UTC {
					t.Fatalf("job time %v is not in UTC", at)
				}
			}
			// A state this version does not define is read as is, names
			// itself unknown and is not terminal.
			if st := j.State; st.String() != string(st) {
				if !strings.HasPrefix(st.String(), "unknown(") || st.Terminal() {
					t.Fatalf("job state %q reads as %q, terminal %v", string(st), st.String(), st.Terminal())
				}
			}
		},
	},
}

// FuzzRecordRows writes arbitrary values into a row of the host, image,
// VM or job table with a raw INSERT (every column of any SQL type, the UUID
// included) and reads it back through the store's API: the list, the
// get by UUID and a no-op update. The store never panics and returns
// either an error (coded, or saying what failed) or records true to the
// stored values that a reply can carry: the list and the get agree, a
// no-op update changes nothing but a VM's or job's version (one up;
// refused at the largest int64, and for a job whose resource is not a
// canonical UUID), a time reads back to the microsecond in UTC, the
// record encodes to JSON and back, and a VM state, job state or host
// status this version does not define names itself unknown (and allows
// no VM operation, or is not terminal).
func FuzzRecordRows(f *testing.F) {
	s, db := openFuzz(f)
	const id = "932763162d054c04adaab6ab498c9139"
	const other = "3694776ab31a45709259254a018913ca"
	at := time.Date(2025, 11, 30, 5, 20, 0, 123456000, time.UTC).UnixMicro()
	// which picks the table; kinds holds 3 bits per column (0: its
	// natural type); the text columns take t1..t4, the integers n1, n2,
	// connected_us at (a job's times: connected, n1, n2).
	for which := range byte(3) {
		f.Add(which, uint64(0), id, "web-1", other, "connected", other, int64(2), int64(1024), at, int64(0), 0.0, "", []byte(nil))
	}
	f.Add(byte(2), uint64(0), id, "web-1", other, other, "exploded", int64(-4), int64(math.MaxInt64), at, int64(0), 0.0, "", []byte(nil))
	f.Add(byte(0), uint64(0), id, "h\xff", "", "rebooting", "", int64(0), int64(0), int64(253402300799999999), int64(0), 0.0, "", []byte(nil)) // the last microsecond of 9999
	f.Add(byte(0), uint64(0), id, "h", "", "connected", "", int64(0), int64(0), int64(-62135596800000001), int64(0), 0.0, "", []byte(nil))
	f.Add(byte(0), uint64(0), id, "h", "", "connected", "", int64(0), int64(0), int64(0), int64(0), 0.0, "", []byte(nil))
	f.Add(byte(0), uint64(0o4000000), id, "h", "", "connected", "", int64(0), int64(0), int64(0), int64(0), 0.0, "", []byte(nil))
	f.Add(byte(1), uint64(0o1000), id, "img", "http://x", "", "", int64(1), int64(0), int64(0), int64(0), 1.5, "", []byte(nil))
	f.Add(byte(2), uint64(0o22222222), id, "", "", "", "", int64(0), int64(0), int64(0), int64(0), 0.0, "12", []byte(nil))
	f.Add(byte(2), uint64(0o33333333), id, "", "", "", "", int64(0), int64(0), int64(0), int64(0), 0.0, "", []byte("932763162d054c04adaab6ab498c9139"))
	f.Add(byte(1), uint64(0o0006), "93276316-2d05-4c04-adaa-b6ab498c9139", "", "", "", "", int64(7), int64(0), int64(0), int64(0), 0.0, "", []byte(nil))
	f.Add(byte(2), uint64(0), id, "vm", other, other, "running", int64(1), int64(512), int64(math.MaxInt64), int64(0), 0.0, "", []byte(nil)) // no version above
	f.Add(byte(2), uint64(0o40000000), id, "vm", other, other, "running", int64(1), int64(512), int64(1), int64(0), 0.0, "", []byte(nil))    // a NULL version
	f.Add(byte(3), uint64(0), id, "vm.migrate", other, "running", "{}", int64(at), int64(at+1), at, int64(0), 0.0, "", []byte(nil))
	f.Add(byte(3), uint64(0), id, "vm.migrate", "not a uuid", "succeeded", "{}", int64(0), int64(253402300799999999), at, int64(0), 0.0, "", []byte(nil))
	f.Add(byte(3), uint64(0), id, "", other, "failed", "", int64(-62135596800000001), int64(0), int64(math.MaxInt64), int64(0), 0.0, "", []byte(nil))
	f.Add(byte(3), uint64(0o4440000000000), id, "k", other, "pending", "", int64(1), int64(2), int64(3), int64(0), 0.0, "", []byte(nil)) // NULL times
	f.Fuzz(func(t *testing.T, which byte, kindBits uint64, uuid, t1, t2, t3, t4 string, n1, n2, connected, alt int64, fl float64, str string, blob []byte) {
		ctx := context.Background()
		k := recordKinds[int(which)%len(recordKinds)] // the corpus's which is below 3 for the older kinds, so that a new kind keeps their table
		natural := map[string]any{
			"uuid": uuid, "name": t1, "address": t2, "status": t3, "managed_by": t4, "takeovers": n1, "connected_us": connected,
			"url": t2, "size_mb": n1,
			"image_uuid": t2, "host_uuid": t3, "cpus": n1, "memory_mb": n2, "state": t4, "version": connected,
			"kind": t1, "resource": t2, "args": t3, "step": t1, "node": t2, "code": t3, "error": t4, "result": t3,
			"created_us": connected, "updated_us": n1, "deadline_us": n2,
		}
		if _, err := db.ExecContext(ctx, `DELETE FROM "`+k.table+`"`); err != nil {
			t.Fatal(err)
		}
		args := make([]any, len(k.columns))
		for i, c := range k.columns {
			args[i] = rawrows.Value(kindBits>>(3*i), natural[c], alt, fl, str, blob)
		}
		marks := strings.TrimSuffix(strings.Repeat("?, ", len(args)), ", ")
		if _, err := db.ExecContext(ctx, `INSERT INTO "`+k.table+`" (`+strings.Join(k.columns, ", ")+`) VALUES (`+marks+`)`, args...); err != nil {
			return // a NOT NULL column given NULL
		}
		stored := rawrows.Row(t, db, `SELECT `+strings.Join(k.columns, ", ")+` FROM "`+k.table+`"`, len(k.columns))

		recs, err := k.list(ctx, s)
		if err != nil {
			checkStoreError(t, err)
			recs = nil
		} else {
			if len(recs) != 1 {
				t.Fatalf("listed %d records from one row %v", len(recs), stored)
			}
			checkRecord(t, k, recs[0], stored)
		}
		key, ok := stored[0].(string)
		if !ok || !message.IsCanonicalUUID(key) {
			return // unreachable by UUID: the store refuses a non-canonical one
		}
		got, err := k.get(ctx, s, key)
		if err != nil {
			checkStoreError(t, err)
			if recs != nil {
				t.Fatalf("the list read the row, the get by UUID fails: %v", err)
			}
			return
		}
		checkRecord(t, k, got, stored)
		if recs != nil && !reflect.DeepEqual(recs[0], got) {
			t.Fatalf("the list and the get disagree:\n%#v\n%#v", recs[0], got)
		}
		if k.update == nil {
			return
		}
		want, wantErr := got, error(nil)
		if k.updated != nil {
			want, wantErr = k.updated(got)
		}
		updated, err := k.update(ctx, s, key)
		switch {
		case wantErr != nil && !errors.Is(err, wantErr):
			t.Fatalf("a no-op update of %#v gives %v, want %v", got, err, wantErr)
		case wantErr != nil:
			return
		case err != nil:
			t.Fatalf("a no-op update of a record the store reads fails: %v", err)
		}
		again, err := k.get(ctx, s, key)
		if err != nil {
			t.Fatalf("a record read, updated with no change, then fails to read: %v", err)
		}
		if !reflect.DeepEqual(want, updated) || !reflect.DeepEqual(want, again) {
			t.Fatalf("a no-op update changed the record:\nread    %#v\nwant    %#v\nupdate  %#v\nreread  %#v", got, want, updated, again)
		}
	})
}

// checkRecord checks one record read from a row holding stored.
func checkRecord(t *testing.T, k kindOps, rec any, stored []any) {
	t.Helper()
	for i, v := range k.values(rec) {
		want := stored[i]
		if b, ok := want.([]byte); ok {
			want = string(b)
		}
		switch want.(type) {
		case string, int64, nil:
			if reflect.TypeOf(v) == reflect.TypeOf(want) && !reflect.DeepEqual(v, want) {
				t.Fatalf("column %s: the store read %#v (%T) from the stored %#v (%T)", k.columns[i], v, v, stored[i], stored[i])
			}
		}
	}
	k.check(t, rec)
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatalf("a record the store returns cannot be put in a reply: %v\n%#v", err, rec)
	}
	back := reflect.New(reflect.TypeOf(rec))
	if err := json.Unmarshal(data, back.Interface()); err != nil {
		t.Fatalf("a record's JSON %s does not decode: %v", data, err)
	}
	if validUTF8(rec) && !reflect.DeepEqual(normalTime(back.Elem().Interface()), normalTime(rec)) {
		t.Fatalf("a record changes through JSON:\n%#v\n%#v", rec, back.Elem().Interface())
	}
}

// normalTime returns rec with its times (a host's ConnectedAt, a job's
// CreatedAt, UpdatedAt and Deadline) as Unix microsecond counts, so that
// records compare by instant.
func normalTime(rec any) any {
	switch r := rec.(type) {
	case cloud.Host:
		return struct {
			cloud.Host
			At int64
		}{Host: cloud.Host{UUID: r.UUID, Name: r.Name, Address: r.Address, Status: r.Status, ManagedBy: r.ManagedBy, Takeovers: r.Takeovers}, At: r.ConnectedAt.UnixMicro()}
	case cloud.Job:
		at := [3]int64{r.CreatedAt.UnixMicro(), r.UpdatedAt.UnixMicro(), r.Deadline.UnixMicro()}
		r.CreatedAt, r.UpdatedAt, r.Deadline = time.Time{}, time.Time{}, time.Time{}
		return struct {
			cloud.Job
			At [3]int64
		}{Job: r, At: at}
	}
	return rec
}

// validUTF8 reports whether every string field of rec is valid UTF-8:
// JSON carries no other.
func validUTF8(rec any) bool {
	v := reflect.ValueOf(rec)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.String && !utf8.ValidString(f.String()) {
			return false
		}
	}
	return true
}

// FuzzRecordedReply stores an arbitrary recorded reply for a message (as
// a BLOB or another SQL type) and delivers the message again through
// cloud.Run, the way a refnode service replays a message it handled: the
// handler never runs again, and the replay returns what encoding/json
// decodes from the stored bytes, or an error, never a panic.
func FuzzRecordedReply(f *testing.F) {
	s, db := openFuzz(f)
	once := `"` + fuzzPrefix + `_fence_once"`
	key := fence.NewKey("932763162d054c04adaab6ab498c9139", "refnode.v1.GetVm", []byte(`{"uuid":"3694776ab31a45709259254a018913ca"}`))
	good, err := json.Marshal(api.VmReply{VM: cloud.VM{UUID: "3694776ab31a45709259254a018913ca", State: cloud.VMRunning}, Handling: api.Handling{Node: "n"}})
	if err != nil {
		f.Fatal(err)
	}
	for _, r := range []string{string(good), `{}`, `null`, ``, `{"vm":{"cpus":1.5}}`, `{"vm":{"state":7}}`, `[1]`, `{"vm":`, "\xff", `{"node":"a"} {"node":"b"}`} {
		f.Add(byte(0), []byte(r), int64(1))
	}
	f.Add(byte(2), good, int64(1))
	f.Add(byte(4), []byte(nil), int64(1))
	f.Add(byte(0), good, int64(0))
	f.Add(byte(0), good, int64(-1))
	f.Fuzz(func(t *testing.T, kind byte, reply []byte, done int64) {
		ctx := context.Background()
		if _, err := db.ExecContext(ctx, `DELETE FROM `+once); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO `+once+` (id, type, hash, done, reply, at_us) VALUES (?, ?, ?, ?, ?, ?)`,
			key.ID, key.Type, key.Hash, done, rawrows.Value(uint64(kind), reply, int64(len(reply)), float64(len(reply)), string(reply), reply), time.Now().UnixMicro()); err != nil {
			t.Fatal(err)
		}
		stored := rawrows.Row(t, db, `SELECT reply FROM `+once, 1)[0]
		ran := false
		got, err := cloud.Run(ctx, s, fence.Guard{Key: key}, func(context.Context, cloud.Store) (api.VmReply, error) {
			ran = true
			return api.VmReply{}, nil
		})
		if ran {
			t.Fatalf("the handler ran again for a message recorded as handled (done %d, reply %#v)", done, stored)
		}
		if done == 0 {
			if !errors.Is(err, message.ErrInternal) {
				t.Fatalf("a record without its reply (done 0) gives %v, want internal", err)
			}
			return
		}
		var raw []byte
		switch v := stored.(type) {
		case []byte:
			raw = v
		case string:
			raw = []byte(v)
		case nil:
		default:
			if err == nil {
				t.Fatalf("a recorded reply of type %T replayed without error", v)
			}
			return
		}
		var want api.VmReply
		wantErr := json.Unmarshal(raw, &want)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("replaying %q: %v; encoding/json says %v", raw, err, wantErr)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "cloud: decode the recorded reply: ") {
				t.Fatalf("replaying %q fails without saying so: %v", raw, err)
			}
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("replaying %q gives %#v, want %#v", raw, got, want)
		}
	})
}
