package sqlfence

import (
	"strings"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// statements are one dialect's SQL for one set of tables.
type statements struct {
	migrations [][]string // schema version 1: the tokens and once tables
	drop       []string

	check  string // moves the token to (node, epoch) if live; yields it
	first  string // inserts the resource's row, token 1, if live
	lock   string // locks the token row before check (PostgreSQL, MySQL)
	record string // a node's epoch and age, for the error message
	verify string // whether the claimant's record is live now
	holder string // node, epoch, token

	onceInsert string // (id, type, hash): inserts a pending record, or nothing
	onceGet    string // (id): type, hash, done, reply; a locking read on MySQL
	onceFinish string // (reply, id)
	sweep      string // (age_us): deletes records older than that
}

func newStatements(d sqlconn.Dialect, prefix, heartbeat string) statements {
	r := strings.NewReplacer(
		"{tok}", sqlconn.QuoteIdent(d, prefix+"_tokens"),
		"{once}", sqlconn.QuoteIdent(d, prefix+"_once"),
		"{once_at}", sqlconn.QuoteIdent(d, strings.ReplaceAll(prefix, ".", "_")+"_once_at"), // an index: unqualified
		"{hb}", sqlconn.QuoteIdent(d, heartbeat),
		"{now}", sqlconn.NowMicros(d),
	)
	// The claimant's record exists at this epoch and beat within MaxAge.
	live := `EXISTS (SELECT 1 FROM {hb} WHERE node = ? AND epoch = ? AND beat_us > {now} - ?)`
	var s statements
	switch d {
	case Postgres:
		s = statements{
			migrations: [][]string{{
				`CREATE TABLE IF NOT EXISTS {tok} (resource TEXT PRIMARY KEY, token BIGINT NOT NULL, node TEXT NOT NULL, epoch BIGINT NOT NULL, uses BIGINT NOT NULL)`,
				`CREATE TABLE IF NOT EXISTS {once} (id TEXT PRIMARY KEY, type TEXT NOT NULL, hash TEXT NOT NULL, done SMALLINT NOT NULL, reply BYTEA, at_us BIGINT NOT NULL)`,
				`CREATE INDEX IF NOT EXISTS {once_at} ON {once} (at_us)`,
			}},
			check: `UPDATE {tok} SET token = token + CASE WHEN node = ? AND epoch = ? THEN 0 ELSE 1 END, node = ?, epoch = ?, uses = uses + 1 ` +
				`WHERE resource = ? AND ` + live + ` RETURNING token`,
			lock: `SELECT 1 FROM {tok} WHERE resource = ? FOR UPDATE`,
			// Parameters in a SELECT list have no type: cast them.
			first: `INSERT INTO {tok} (resource, token, node, epoch, uses) SELECT CAST(? AS TEXT), 1, CAST(? AS TEXT), CAST(? AS BIGINT), 1 WHERE ` + live +
				` ON CONFLICT (resource) DO NOTHING RETURNING token`,
			onceInsert: `INSERT INTO {once} (id, type, hash, done, reply, at_us) VALUES (?, ?, ?, 0, NULL, {now}) ON CONFLICT (id) DO NOTHING`,
			onceGet:    `SELECT type, hash, done, reply FROM {once} WHERE id = ?`,
		}
	case SQLite:
		s = statements{
			migrations: [][]string{{
				`CREATE TABLE IF NOT EXISTS {tok} (resource TEXT PRIMARY KEY NOT NULL, token INTEGER NOT NULL, node TEXT NOT NULL, epoch INTEGER NOT NULL, uses INTEGER NOT NULL) WITHOUT ROWID`,
				`CREATE TABLE IF NOT EXISTS {once} (id TEXT PRIMARY KEY NOT NULL, type TEXT NOT NULL, hash TEXT NOT NULL, done INTEGER NOT NULL, reply BLOB, at_us INTEGER NOT NULL)`,
				`CREATE INDEX IF NOT EXISTS {once_at} ON {once} (at_us)`,
			}},
			check: `UPDATE {tok} SET token = token + CASE WHEN node = ? AND epoch = ? THEN 0 ELSE 1 END, node = ?, epoch = ?, uses = uses + 1 ` +
				`WHERE resource = ? AND ` + live + ` RETURNING token`,
			first:      `INSERT INTO {tok} (resource, token, node, epoch, uses) SELECT ?, 1, ?, ?, 1 WHERE ` + live + ` ON CONFLICT (resource) DO NOTHING RETURNING token`,
			onceInsert: `INSERT INTO {once} (id, type, hash, done, reply, at_us) VALUES (?, ?, ?, 0, NULL, {now}) ON CONFLICT (id) DO NOTHING`,
			onceGet:    `SELECT type, hash, done, reply FROM {once} WHERE id = ?`,
		}
	case MySQL:
		s = statements{
			migrations: [][]string{{
				"CREATE TABLE IF NOT EXISTS {tok} (resource VARBINARY(64) NOT NULL PRIMARY KEY, token BIGINT NOT NULL, node VARBINARY(255) NOT NULL, epoch BIGINT NOT NULL, uses BIGINT NOT NULL) ENGINE=InnoDB",
				"CREATE TABLE IF NOT EXISTS {once} (id VARBINARY(64) NOT NULL PRIMARY KEY, type VARBINARY(255) NOT NULL, hash VARBINARY(64) NOT NULL, done TINYINT NOT NULL, reply LONGBLOB, at_us BIGINT NOT NULL, INDEX (at_us)) ENGINE=InnoDB",
			}},
			// Assignments run left to right: token reads the old holder.
			// uses keeps the row affected; LAST_INSERT_ID(x) yields the token.
			check: "UPDATE {tok} SET token = LAST_INSERT_ID(token + IF(node = ? AND epoch = ?, 0, 1)), node = ?, epoch = ?, uses = uses + 1 " +
				"WHERE resource = ? AND " + live,
			first: "INSERT INTO {tok} (resource, token, node, epoch, uses) SELECT ?, 1, ?, ?, 1 FROM DUAL WHERE " + live +
				" ON DUPLICATE KEY UPDATE resource = resource",
			lock:       "SELECT 1 FROM {tok} WHERE resource = ? FOR UPDATE",
			onceInsert: "INSERT INTO {once} (id, type, hash, done, reply, at_us) VALUES (?, ?, ?, 0, NULL, {now}) ON DUPLICATE KEY UPDATE id = id",
			// A locking read sees the latest committed record.
			onceGet: "SELECT type, hash, done, reply FROM {once} WHERE id = ? LOCK IN SHARE MODE",
		}
	}
	s.drop = []string{`DROP TABLE IF EXISTS {once}`, `DROP TABLE IF EXISTS {tok}`}
	s.record = `SELECT epoch, {now} - beat_us FROM {hb} WHERE node = ?`
	s.verify = `SELECT COUNT(*) FROM {hb} WHERE node = ? AND epoch = ? AND beat_us > {now} - ?`
	s.holder = `SELECT node, epoch, token FROM {tok} WHERE resource = ?`
	s.onceFinish = `UPDATE {once} SET done = 1, reply = ? WHERE id = ?`
	s.sweep = `DELETE FROM {once} WHERE at_us < {now} - ?`

	bind := func(q string) string { return sqlconn.Rebind(d, r.Replace(q)) }
	for i, step := range s.migrations {
		for j, q := range step {
			s.migrations[i][j] = r.Replace(q)
		}
	}
	for i, q := range s.drop {
		s.drop[i] = r.Replace(q)
	}
	for _, q := range []*string{&s.check, &s.lock, &s.first, &s.record, &s.verify, &s.holder, &s.onceInsert, &s.onceGet, &s.onceFinish, &s.sweep} {
		*q = bind(*q)
	}
	return s
}
