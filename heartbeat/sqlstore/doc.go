// Package sqlstore is a [heartbeat.Store] in a SQL table, for SQLite
// (the embedded default: the processes of one machine share heartbeats
// through one database file), PostgreSQL and MySQL/MariaDB, over
// database/sql.
//
//	s, err := sqlstore.Open(ctx, sqlstore.Config{URL: "sqlite:/var/lib/cloudbus/heartbeat.db"})
//	// or URL: "postgres://cloudbus:secret@db:5432/cloudbus?sslmode=require"
//	// or URL: "mysql://cloudbus:secret@db:3306/cloudbus"
//	if err != nil { ... }
//	defer s.Close()
//	m, err := heartbeat.NewMonitor(s, nodeUUID, heartbeat.DefaultConfig(), listener, logger)
//
// [Open] creates its own small connection pool (at most
// [Config.MaxOpenConns], default 4: PostgreSQL allows 100 connections in
// all); [OpenDB] uses the caller's *sql.DB. Both create the tables if
// they are missing and migrate them to this version's schema.
//
// # Sharing a pool
//
// A process with other stores in the same database can give the
// heartbeat store the pool it already has, with [OpenDB] and the URL it
// opened the pool from (see the example of OpenDB):
//
//	db, err := sql.Open("pgx", url) // the application's pool, for its own tables too
//	s, err := sqlstore.OpenDB(ctx, db, sqlstore.Config{URL: url})
//
// The URL is never connected to: it tells the dialect, names the database
// (masked) in errors and logs, and lets the store scrub its passwords from
// driver errors. Without it, [Config.Dialect] is required and errors name
// the dialect only. The caller closes its pool after the store. On
// SQLite, whose file has one writer at a time, one pool per process keeps
// the process's writers together; give it the settings Open uses (see
// SQLite below). refnode shares one pool between this store and its
// record store.
//
// # Tables
//
// The heartbeat table (default "cloudbus_heartbeat") holds one row per
// live node; the meta table beside it (Table+"_meta") holds one row with
// the schema version and the last epoch issued:
//
//	cloudbus_heartbeat      (node PRIMARY KEY, epoch BIGINT, seq BIGINT, beat_us BIGINT)
//	cloudbus_heartbeat_meta (id = 1 PRIMARY KEY, version INT, last_epoch BIGINT)
//
// beat_us is the database's clock at the last beat (or registration), in
// microseconds since 1970. Open takes a lock (PostgreSQL
// pg_advisory_xact_lock, SQLite BEGIN IMMEDIATE, MySQL GET_LOCK), creates
// what is missing and runs the migrations from the stored version up,
// so nodes starting together do it once. It refuses tables of a newer
// version than it knows.
//
// # Time comes from the database
//
// No statement takes a time from the client. Register and Beat stamp
// beat_us with the database's clock, and List computes every age on the
// database, as now minus beat_us, so nodes with skewed clocks agree on
// which records are stale. The clock, NOW below, in microseconds:
//
//	PostgreSQL  (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
//	SQLite      (CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)
//	MySQL       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))
//
// PostgreSQL's now() is the start of the transaction, so clock_timestamp()
// is used, once per statement through the scalar subquery. SQLite's
// CURRENT_TIMESTAMP has one-second resolution; unixepoch('subsec')
// (SQLite 3.42 and later; modernc.org/sqlite v1.62.0 embeds 3.54) has
// milliseconds, so SQLite ages have millisecond resolution, the others
// microsecond. MySQL's UTC_TIMESTAMP(6) is the statement's start;
// counting from 1970 in UTC avoids the time zone (UNIX_TIMESTAMP(NOW(6))
// is ambiguous for an hour a year where daylight saving ends).
//
// # The statements
//
// Every write is one conditional statement, so concurrent nodes cannot
// undo each other's decisions; there are no client-side transactions.
// In PostgreSQL's syntax ($n are the arguments):
//
//	Register    WITH e AS (UPDATE meta SET last_epoch = GREATEST(last_epoch + 1, NOW) WHERE id = 1 RETURNING last_epoch)
//	            INSERT INTO t (node, epoch, seq, beat_us) SELECT $1, e.last_epoch, 0, NOW FROM e
//	            ON CONFLICT (node) DO UPDATE SET epoch = EXCLUDED.epoch, seq = 0, beat_us = EXCLUDED.beat_us
//	            RETURNING epoch
//	Beat        UPDATE t SET beat_us = NOW, seq = seq + 1 WHERE node = $1 AND epoch = $2
//	            -- no row updated: heartbeat.ErrEvicted
//	List        SELECT node, epoch, seq, GREATEST(NOW - beat_us, 0) FROM t ORDER BY node
//	Evict       DELETE FROM t WHERE node = $1 AND epoch = $2 AND seq = $3
//	            -- true if this statement deleted the row
//	Deregister  DELETE FROM t WHERE node = $1 AND epoch = $2
//
// SQLite and MySQL cannot modify two tables in one statement, so their
// Register takes the epoch in a statement of its own, then upserts the
// record with it; an epoch taken by a Register that then failed is
// simply never used:
//
//	SQLite  UPDATE meta SET last_epoch = max(last_epoch + 1, NOW) WHERE id = 1 RETURNING last_epoch
//	        INSERT INTO t (node, epoch, seq, beat_us) VALUES (?, ?, 0, NOW)
//	        ON CONFLICT (node) DO UPDATE SET epoch = excluded.epoch, seq = 0, beat_us = excluded.beat_us
//	MySQL   UPDATE meta SET last_epoch = LAST_INSERT_ID(GREATEST(last_epoch + 1, NOW)) WHERE id = 1
//	        -- the driver's Result.LastInsertId is the new epoch
//	        INSERT INTO t (node, epoch, seq, beat_us) VALUES (?, ?, 0, NOW)
//	        ON DUPLICATE KEY UPDATE epoch = ?, seq = 0, beat_us = NOW
//
// The other statements are PostgreSQL's with ? for $n (and max for
// GREATEST in SQLite). An epoch is max(the table's last epoch + 1, the
// database's clock in microseconds): it differs from every epoch issued
// before through this table, to any node, even if the database's clock
// goes back, and is unlikely to repeat if the tables are recreated.
//
// Why the conditions suffice: Beat and Evict on one row are serialized by
// the database's row lock (PostgreSQL and InnoDB re-check the WHERE
// clause on the row's latest version; SQLite has one writer at a time).
// An Evict whose sequence is stale matches no row, so a node that beat
// after the evictor's List is never evicted; of two evictors with the
// same sequence, the second finds the row gone. A Beat after an Evict,
// a Deregister or a newer Register finds no row with its epoch and
// returns [heartbeat.ErrEvicted], and never recreates the row.
//
// # SQLite
//
// Every connection [Open] makes sets busy_timeout (default 5 s, so a
// writer waits for the write lock instead of failing with "database is
// locked"), journal_mode=WAL (readers never block the writer nor each
// other) and synchronous=NORMAL (no fsync per commit; after a power cut
// the last beats may be lost, which costs a node nothing: it beats
// again), and opens transactions with BEGIN IMMEDIATE (_txlock=immediate),
// because the busy timeout does not retry a read transaction that finds
// it must write on a stale snapshot. The only transaction is Open's
// migration; every other statement is its own. In modernc.org/sqlite's
// DSN syntax the URL sqlite:/path/hb.db becomes
//
//	file:/path/hb.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate
//
// WAL needs shared memory between the processes: keep the file on a
// local disk, not on a network file system. An in-memory database is
// refused: it would be private to one connection (use heartbeat/memstore).
//
// # Errors and credentials
//
// An error names the operation, the node and the database by its masked
// URL ([Store.MaskedURL]: the password is "xxxxx"), and wraps
// the driver's error, with any password scrubbed from its text:
//
//	sqlstore: beat node 3694776a... epoch 1764480000123456 on postgres://cloudbus:xxxxx@db:5432/cloudbus: ...
//
// If ctx ended, the error also matches ctx's error. An error leaves the
// outcome unknown: retrying Register, Beat and Deregister is safe; a
// retried Evict may report false for a record the first try deleted.
// The logs (open, migration) name the database masked too.
//
// # Testing
//
// The tests run the heartbeat/storetest conformance suite on each
// dialect. SQLite always runs, in a temporary directory; PostgreSQL runs
// when CLOUDBUS_POSTGRES_DSN is set (for example
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable) and MySQL when
// CLOUDBUS_MYSQL_DSN is set (for example
// root@tcp(127.0.0.1:3306)/test?parseTime=true). Without them those tests
// skip, naming the variable; under CI=true they fail instead. Each test
// uses its own randomly named table and drops it at the end, so test
// processes may share the databases.
package sqlstore
