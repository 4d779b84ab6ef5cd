package volume

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/fence/sqlfence"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
)

// Schema is the volume service's tables, <tables>_volumes and
// <tables>_events (one row per attach or detach applied: the tests
// count them), created by the node kit and the test kit alike.
var Schema = nodekit.Schema{Migrations: func(d sqlstore.Dialect, tables string) [][]string {
	return [][]string{{
		`CREATE TABLE ` + tables + `_volumes (uuid VARCHAR(36) NOT NULL PRIMARY KEY, name VARCHAR(200) NOT NULL, ` +
			`size_gb INTEGER NOT NULL, attached_to VARCHAR(36) NOT NULL, version BIGINT NOT NULL)`,
		`CREATE TABLE ` + tables + `_events (msg_id VARCHAR(36) NOT NULL, volume VARCHAR(36) NOT NULL, ` +
			`op VARCHAR(16) NOT NULL, vm VARCHAR(36) NOT NULL)`,
	}}
}}

// Repo keeps volumes in SQL. Every write runs in a fenced transaction
// (env.Fence): it commits only while this node's claim on the volume
// holds, and a message delivered twice runs once.
type Repo struct {
	db      *sql.DB
	dialect sqlstore.Dialect
	tables  string
	fence   *sqlfence.Fence
}

// NewRepo returns the repository of a node's environment.
func NewRepo(env nodekit.Env) *Repo {
	return &Repo{db: env.DB, dialect: env.Dialect, tables: env.Tables, fence: env.Fence}
}

// Create inserts a new volume, once per message (g's key).
func (r *Repo) Create(ctx context.Context, g fence.Guard, m CreateVolume) (Volume, error) {
	return sqlfence.Run(ctx, r.fence, g, func(ctx context.Context, tx *sql.Tx, _ fence.Token) (Volume, error) {
		v := Volume{UUID: message.NewUUID(), Name: m.Name, SizeGB: m.SizeGB, Version: 1}
		_, err := tx.ExecContext(ctx, r.q(`INSERT INTO `+r.tables+`_volumes (uuid, name, size_gb, attached_to, version) VALUES (?, ?, ?, '', 1)`),
			v.UUID, v.Name, v.SizeGB)
		return v, err
	})
}

// Update applies change to the volume in one fenced transaction: read,
// change (which may refuse), write with the version one up, and record
// the event. A repeat of the message returns the first reply.
func (r *Repo) Update(ctx context.Context, g fence.Guard, id, op string, change func(v *Volume) error) (Volume, error) {
	return sqlfence.Run(ctx, r.fence, g, func(ctx context.Context, tx *sql.Tx, _ fence.Token) (Volume, error) {
		v, err := r.get(ctx, tx, id)
		if err != nil {
			return v, err
		}
		if err := change(&v); err != nil {
			return v, err
		}
		v.Version++
		if _, err := tx.ExecContext(ctx, r.q(`UPDATE `+r.tables+`_volumes SET attached_to = ?, version = ? WHERE uuid = ?`), v.AttachedTo, v.Version, id); err != nil {
			return v, err
		}
		_, err = tx.ExecContext(ctx, r.q(`INSERT INTO `+r.tables+`_events (msg_id, volume, op, vm) VALUES (?, ?, ?, ?)`), g.Key.ID, id, op, v.AttachedTo)
		return v, err
	})
}

// Get reads a volume.
func (r *Repo) Get(ctx context.Context, id string) (Volume, error) { return r.get(ctx, r.db, id) }

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (r *Repo) get(ctx context.Context, q querier, id string) (Volume, error) {
	v := Volume{UUID: id}
	err := q.QueryRowContext(ctx, r.q(`SELECT name, size_gb, attached_to, version FROM `+r.tables+`_volumes WHERE uuid = ?`), id).
		Scan(&v.Name, &v.SizeGB, &v.AttachedTo, &v.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return v, message.ErrNotFound.WithDetails("no volume " + id)
	}
	return v, err
}

// Events counts the events recorded for each message id, for tests and
// audits.
func (r *Repo) Events(ctx context.Context) (map[string]int, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT msg_id, COUNT(*) FROM `+r.tables+`_events GROUP BY msg_id`)
	if err != nil {
		return nil, fmt.Errorf("volume: count events: %w", err)
	}
	defer rows.Close()
	out := make(map[string]int)
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

// q writes a statement's ? placeholders as PostgreSQL's $1, $2, ….
func (r *Repo) q(stmt string) string {
	if r.dialect != sqlstore.Postgres {
		return stmt
	}
	var b strings.Builder
	n := 0
	for _, c := range stmt {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}
