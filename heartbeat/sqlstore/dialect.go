package sqlstore

import (
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// schemaVersion is the version of the tables this code reads and
// writes. Open migrates older tables up to it and refuses newer ones.
//
//	1  the heartbeat table
//	2  its column bus_down_us (BeatBus) and the queues table (AddQueues)
const schemaVersion = 2

// clockResolution is the resolution of each dialect's {now}.
var clockResolution = map[Dialect]time.Duration{Postgres: time.Microsecond, SQLite: time.Millisecond, MySQL: time.Microsecond}

// statements are one dialect's SQL for one table. Placeholders are $n
// for PostgreSQL and ? for the others.
type statements struct {
	// migrations[v] takes version v to v+1, run by migrate. Every step
	// must be able to run again on tables it already migrated: MySQL
	// cannot roll a failed step back, and if the meta row is lost every
	// step runs again from version 0.
	migrations [][]string
	drop       []string // every table, for tests

	// reserve, if set, takes the next epoch in its own statement and
	// returns it (a row, or MySQL's LAST_INSERT_ID); register then
	// upserts with it. If empty, register does both in one statement.
	reserve     string
	register    string // (node[, epoch[, epoch]]) upsert, returns the epoch if reserve is empty
	beat        string // (node, epoch)
	beatBusUp   string // (node, epoch)
	beatBusDown string // (node, epoch)
	list        string // node, epoch, seq, age and bus-down time in microseconds
	evict       string // (node, epoch, seq)
	dereg       string // (node, epoch)
	now         string // the database's clock, microseconds since 1970

	// The queue book's statements take a variable number of names:
	// addQueues is addQueues[0], then "(?, ?)" (node, queue) per name
	// separated by commas, then addQueues[1]; removeQueues is
	// removeQueues[0] (with the node's ?), "?" per name separated by
	// commas, then removeQueues[1]. Placeholders are ?, rebound per call.
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
			// The rows are locked in one order, the queue's, before they
			// are deleted: a plain DELETE locks them in its plan's order
			// (the index's for a short list, the heap's for a long one),
			// and two removals with different plans deadlock.
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
				// SQLite has no ADD COLUMN IF NOT EXISTS, and the step
				// runs again if the meta row is lost: the table is
				// rebuilt instead, in the migration's transaction, from
				// the columns of version 1 (a rebuilt version 2 table
				// forgets its bus status: outages restart at the next
				// down beat).
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
				// utf8mb4_bin: node names compare byte for byte, as in
				// the other dialects (the default collation ignores case).
				"CREATE TABLE IF NOT EXISTS {t} (node VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, " +
					"epoch BIGINT NOT NULL, seq BIGINT NOT NULL, beat_us BIGINT NOT NULL) ENGINE=InnoDB",
			}, {
				// VARBINARY: names compare byte for byte, trailing spaces
				// included (utf8mb4_bin pads: 'q' = 'q '), and are at
				// most 255 bytes, RabbitMQ's limit.
				"CREATE TABLE IF NOT EXISTS {q} (node VARBINARY(255) NOT NULL, queue VARBINARY(255) NOT NULL, PRIMARY KEY (node, queue)) ENGINE=InnoDB",
				// MySQL has no ADD COLUMN IF NOT EXISTS (MariaDB has)
				// and cannot roll DDL back, and the step runs again
				// after a failure or if the meta row is lost: the ALTER
				// runs only if the column is missing, prepared on the
				// migration's connection.
				"SET @cloudbus_ddl = (SELECT IF(COUNT(*) = 0, 'ALTER TABLE {t} ADD COLUMN bus_down_us BIGINT NOT NULL DEFAULT 0', 'DO 0') " +
					"FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = {schema} AND TABLE_NAME = '{name}' AND COLUMN_NAME = 'bus_down_us')",
				"PREPARE cloudbus_ddl FROM @cloudbus_ddl",
				"EXECUTE cloudbus_ddl",
				"DEALLOCATE PREPARE cloudbus_ddl",
			}},
			drop: []string{`DROP TABLE IF EXISTS {q}`, `DROP TABLE IF EXISTS {t}`, `DROP TABLE IF EXISTS {m}`},
			// LAST_INSERT_ID(x) hands x back in the statement's result
			// (the driver's LastInsertId), for this connection only.
			reserve: `UPDATE {m} SET last_epoch = LAST_INSERT_ID(GREATEST(last_epoch + 1, {now})) WHERE id = 1`,
			register: `INSERT INTO {t} (node, epoch, seq, beat_us, bus_down_us) VALUES (?, ?, 0, {now}, 0) ` +
				`ON DUPLICATE KEY UPDATE epoch = ?, seq = 0, beat_us = {now}, bus_down_us = 0`,
			beat:      `UPDATE {t} SET beat_us = {now}, seq = seq + 1 WHERE node = ? AND epoch = ?`,
			beatBusUp: `UPDATE {t} SET beat_us = {now}, seq = seq + 1, bus_down_us = 0 WHERE node = ? AND epoch = ?`,
			// MySQL assigns left to right, each expression seeing the
			// columns assigned before it: bus_down_us reads only itself.
			beatBusDown: `UPDATE {t} SET beat_us = {now}, seq = seq + 1, bus_down_us = CASE WHEN bus_down_us = 0 THEN {now} ELSE bus_down_us END ` +
				`WHERE node = ? AND epoch = ?`,
			list:  `SELECT node, epoch, seq, GREATEST({now} - beat_us, 0), CASE WHEN bus_down_us = 0 THEN 0 ELSE GREATEST({now} - bus_down_us, 1) END FROM {t} ORDER BY node`,
			evict: `DELETE FROM {t} WHERE node = ? AND epoch = ? AND seq = ?`,
			dereg: `DELETE FROM {t} WHERE node = ? AND epoch = ?`,
			// Not INSERT IGNORE, which would turn every error into a
			// warning; the no-op update makes a recorded name a no-op.
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
