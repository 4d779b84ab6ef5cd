package sqlstore

import (
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// schemaVersion is the version of the tables this code reads and writes.
const schemaVersion = 2

// clockResolution is the resolution of each dialect's {now}.
var clockResolution = map[Dialect]time.Duration{Postgres: time.Microsecond, SQLite: time.Millisecond, MySQL: time.Microsecond}

// statements are one dialect's SQL for one table, explained in
// docs/design.md, "Heartbeats and eviction", "The SQL store".
type statements struct {
	// migrations[v] takes version v to v+1; every step must be able to
	// run again on tables it already migrated.
	migrations [][]string
	drop       []string // every table, for tests

	// reserve, if set, takes the next epoch for register to upsert with.
	reserve     string
	register    string // (node[, epoch[, epoch]]) upsert, returns the epoch if reserve is empty
	beat        string // (node, epoch)
	beatBusUp   string // (node, epoch)
	beatBusDown string // (node, epoch)
	list        string // node, epoch, seq, age and bus-down time in microseconds
	evict       string // (node, epoch, seq)
	dereg       string // (node, epoch)
	now         string // the database's clock, microseconds since 1970

	// A queue statement is [0], a list of "(?, ?)" (add) or "?"
	// (remove) per name, then [1]; placeholders are rebound per call.
	addQueues    [2]string
	queues       string // node, queue
	removeQueues [2]string
}

// newStatements returns d's statements for table (validated by Config).
func newStatements(d Dialect, table string) statements {
	now := sqlconn.NowMicros(d)
	schema, name, qualified := strings.Cut(table, ".")
	schemaLit := "'" + schema + "'" // names are validated: no quotes
	if !qualified {
		name, schemaLit = schema, "DATABASE()"
	}
	r := strings.NewReplacer(
		"{t}", sqlconn.QuoteIdent(d, table),
		"{m}", sqlconn.QuoteIdent(d, table+"_meta"),
		"{q}", sqlconn.QuoteIdent(d, table+queuesSuffix),
		"{t2}", sqlconn.QuoteIdent(d, table+"_v2"), // SQLite's rebuild
		"{tn}", sqlconn.QuoteIdent(d, name), // unqualified
		"{schema}", schemaLit, // MySQL's, as a string
		"{name}", name,
		"{now}", now,
	)
	var s statements
	switch d {
	case Postgres:
		s = statements{
			migrations: [][]string{{
				`CREATE TABLE IF NOT EXISTS {t} (node TEXT PRIMARY KEY, epoch BIGINT NOT NULL, seq BIGINT NOT NULL, beat_us BIGINT NOT NULL)`,
			}, {
				`ALTER TABLE {t} ADD COLUMN IF NOT EXISTS bus_down_us BIGINT NOT NULL DEFAULT 0`,
				`CREATE TABLE IF NOT EXISTS {q} (node TEXT NOT NULL, queue TEXT NOT NULL, PRIMARY KEY (node, queue))`,
			}},
			drop: []string{`DROP TABLE IF EXISTS {q}`, `DROP TABLE IF EXISTS {t}`, `DROP TABLE IF EXISTS {m}`},
			register: `WITH e AS (UPDATE {m} SET last_epoch = GREATEST(last_epoch + 1, {now}) WHERE id = 1 RETURNING last_epoch) ` +
				`INSERT INTO {t} (node, epoch, seq, beat_us, bus_down_us) SELECT $1, e.last_epoch, 0, {now}, 0 FROM e ` +
				`ON CONFLICT (node) DO UPDATE SET epoch = EXCLUDED.epoch, seq = 0, beat_us = EXCLUDED.beat_us, bus_down_us = 0 RETURNING epoch`,
			beat:      `UPDATE {t} SET beat_us = {now}, seq = seq + 1 WHERE node = $1 AND epoch = $2`,
			beatBusUp: `UPDATE {t} SET beat_us = {now}, seq = seq + 1, bus_down_us = 0 WHERE node = $1 AND epoch = $2`,
			beatBusDown: `UPDATE {t} SET beat_us = c.now, seq = seq + 1, bus_down_us = CASE WHEN bus_down_us = 0 THEN c.now ELSE bus_down_us END ` +
				`FROM (SELECT {now} AS now) AS c WHERE node = $1 AND epoch = $2`,
			list: `SELECT node, epoch, seq, GREATEST(c.now - beat_us, 0), CASE WHEN bus_down_us = 0 THEN 0 ELSE GREATEST(c.now - bus_down_us, 1) END ` +
				`FROM {t} CROSS JOIN (SELECT {now} AS now) AS c ORDER BY node`,
			evict:     `DELETE FROM {t} WHERE node = $1 AND epoch = $2 AND seq = $3`,
			dereg:     `DELETE FROM {t} WHERE node = $1 AND epoch = $2`,
			addQueues: [2]string{`INSERT INTO {q} (node, queue) VALUES `, ` ON CONFLICT (node, queue) DO NOTHING`},
			queues:    `SELECT node, queue FROM {q} ORDER BY node, queue`,
			// Locks the rows in queue order before deleting them.
			removeQueues: [2]string{
				`WITH doomed AS (SELECT node, queue FROM {q} WHERE node = ? AND queue IN (`,
				`) ORDER BY queue FOR UPDATE) DELETE FROM {q} AS q USING doomed WHERE q.node = doomed.node AND q.queue = doomed.queue`,
			},
		}
	case SQLite:
		s = statements{
			migrations: [][]string{{
				`CREATE TABLE IF NOT EXISTS {t} (node TEXT PRIMARY KEY NOT NULL, epoch INTEGER NOT NULL, seq INTEGER NOT NULL, beat_us INTEGER NOT NULL)`,
			}, {
				`CREATE TABLE IF NOT EXISTS {q} (node TEXT NOT NULL, queue TEXT NOT NULL, PRIMARY KEY (node, queue)) WITHOUT ROWID`,
				// Rebuilds the table with the new column.
				`DROP TABLE IF EXISTS {t2}`,
				`CREATE TABLE {t2} (node TEXT PRIMARY KEY NOT NULL, epoch INTEGER NOT NULL, seq INTEGER NOT NULL, beat_us INTEGER NOT NULL, bus_down_us INTEGER NOT NULL DEFAULT 0)`,
				`INSERT INTO {t2} (node, epoch, seq, beat_us) SELECT node, epoch, seq, beat_us FROM {t}`,
				`DROP TABLE {t}`,
				`ALTER TABLE {t2} RENAME TO {tn}`,
			}},
			drop:    []string{`DROP TABLE IF EXISTS {q}`, `DROP TABLE IF EXISTS {t}`, `DROP TABLE IF EXISTS {m}`},
			reserve: `UPDATE {m} SET last_epoch = max(last_epoch + 1, {now}) WHERE id = 1 RETURNING last_epoch`,
			register: `INSERT INTO {t} (node, epoch, seq, beat_us, bus_down_us) VALUES (?, ?, 0, {now}, 0) ` +
				`ON CONFLICT (node) DO UPDATE SET epoch = excluded.epoch, seq = 0, beat_us = excluded.beat_us, bus_down_us = 0`,
			beat:      `UPDATE {t} SET beat_us = {now}, seq = seq + 1 WHERE node = ? AND epoch = ?`,
			beatBusUp: `UPDATE {t} SET beat_us = {now}, seq = seq + 1, bus_down_us = 0 WHERE node = ? AND epoch = ?`,
			beatBusDown: `UPDATE {t} SET beat_us = {now}, seq = seq + 1, bus_down_us = CASE WHEN bus_down_us = 0 THEN {now} ELSE bus_down_us END ` +
				`WHERE node = ? AND epoch = ?`,
			list:         `SELECT node, epoch, seq, max({now} - beat_us, 0), CASE WHEN bus_down_us = 0 THEN 0 ELSE max({now} - bus_down_us, 1) END FROM {t} ORDER BY node`,
			evict:        `DELETE FROM {t} WHERE node = ? AND epoch = ? AND seq = ?`,
			dereg:        `DELETE FROM {t} WHERE node = ? AND epoch = ?`,
			addQueues:    [2]string{`INSERT INTO {q} (node, queue) VALUES `, ` ON CONFLICT (node, queue) DO NOTHING`},
			queues:       `SELECT node, queue FROM {q} ORDER BY node, queue`,
			removeQueues: [2]string{`DELETE FROM {q} WHERE node = ? AND queue IN (`, `)`},
		}
	case MySQL:
		s = statements{
			migrations: [][]string{{
				"CREATE TABLE IF NOT EXISTS {t} (node VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, " +
					"epoch BIGINT NOT NULL, seq BIGINT NOT NULL, beat_us BIGINT NOT NULL) ENGINE=InnoDB",
			}, {
				"CREATE TABLE IF NOT EXISTS {q} (node VARBINARY(255) NOT NULL, queue VARBINARY(255) NOT NULL, PRIMARY KEY (node, queue)) ENGINE=InnoDB",
				// Adds the column only if it is missing.
				"SET @cloudbus_ddl = (SELECT IF(COUNT(*) = 0, 'ALTER TABLE {t} ADD COLUMN bus_down_us BIGINT NOT NULL DEFAULT 0', 'DO 0') " +
					"FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = {schema} AND TABLE_NAME = '{name}' AND COLUMN_NAME = 'bus_down_us')",
				"PREPARE cloudbus_ddl FROM @cloudbus_ddl",
				"EXECUTE cloudbus_ddl",
				"DEALLOCATE PREPARE cloudbus_ddl",
			}},
			drop: []string{`DROP TABLE IF EXISTS {q}`, `DROP TABLE IF EXISTS {t}`, `DROP TABLE IF EXISTS {m}`},
			// The driver's LastInsertId returns the new epoch.
			reserve: `UPDATE {m} SET last_epoch = LAST_INSERT_ID(GREATEST(last_epoch + 1, {now})) WHERE id = 1`,
			register: `INSERT INTO {t} (node, epoch, seq, beat_us, bus_down_us) VALUES (?, ?, 0, {now}, 0) ` +
				`ON DUPLICATE KEY UPDATE epoch = ?, seq = 0, beat_us = {now}, bus_down_us = 0`,
			beat:      `UPDATE {t} SET beat_us = {now}, seq = seq + 1 WHERE node = ? AND epoch = ?`,
			beatBusUp: `UPDATE {t} SET beat_us = {now}, seq = seq + 1, bus_down_us = 0 WHERE node = ? AND epoch = ?`,
			beatBusDown: `UPDATE {t} SET beat_us = {now}, seq = seq + 1, bus_down_us = CASE WHEN bus_down_us = 0 THEN {now} ELSE bus_down_us END ` +
				`WHERE node = ? AND epoch = ?`,
			list:         `SELECT node, epoch, seq, GREATEST({now} - beat_us, 0), CASE WHEN bus_down_us = 0 THEN 0 ELSE GREATEST({now} - bus_down_us, 1) END FROM {t} ORDER BY node`,
			evict:        `DELETE FROM {t} WHERE node = ? AND epoch = ? AND seq = ?`,
			dereg:        `DELETE FROM {t} WHERE node = ? AND epoch = ?`,
			addQueues:    [2]string{`INSERT INTO {q} (node, queue) VALUES `, ` ON DUPLICATE KEY UPDATE queue = queue`},
			queues:       `SELECT node, queue FROM {q} ORDER BY node, queue`,
			removeQueues: [2]string{`DELETE FROM {q} WHERE node = ? AND queue IN (`, `)`},
		}
	}
	for _, step := range s.migrations {
		for i := range step {
			step[i] = r.Replace(step[i])
		}
	}
	for i := range s.drop {
		s.drop[i] = r.Replace(s.drop[i])
	}
	for _, p := range []*string{
		&s.reserve, &s.register, &s.beat, &s.beatBusUp, &s.beatBusDown, &s.list, &s.evict, &s.dereg,
		&s.addQueues[0], &s.addQueues[1], &s.queues, &s.removeQueues[0], &s.removeQueues[1],
	} {
		*p = r.Replace(*p)
	}
	s.now = "SELECT " + now
	return s
}
