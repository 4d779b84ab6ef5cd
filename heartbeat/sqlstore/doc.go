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
// [Open] creates the store's own small connection pool (at most
// [Config.MaxOpenConns], default 4: PostgreSQL allows 100 connections in
// all); [OpenDB] uses a *sql.DB the caller opened. Both create the tables
// if they are missing and migrate them to this version's schema.
//
// # A pool of its own
//
// Give the heartbeat store a pool that nothing else uses: the one [Open]
// makes, or a *sql.DB of its own passed to [OpenDB]. A beat counts only
// if it reaches the database within the monitor's OpTimeout (500 ms by
// default); one that waits for a connection behind the application's
// work misses it as surely as one the database never answered, and a
// node whose beats miss for the lease fences itself and is evicted. That
// happened to refnode, which shared one pool of 8 connections between
// this store and its records: with its database link slowed to 100-150
// ms per round trip and about 60 calls a second, record transactions (5
// to 9 round trips each) held all 8 connections within 1.2 s, 7 beats in
// a row timed out waiting for one though the database answered each in
// 200-300 ms once it had it, and the node was evicted 4.2-4.6 s after the
// slowdown. With the heartbeat store on a pool of its own, the same
// slowdown, with the record pool just as full, missed no beat (about 130
// ms at p50, at most 465 ms on a machine at a load average of 13) and
// evicted nobody (refnode's TestSlowDatabaseEvictsNobody; see the
// README). On MySQL and MariaDB a beat still waits for any fenced
// transaction of its node to end, for a row lock rather than a
// connection (see package fence, "Writes, not liveness").
//
// Four connections (the default) are plenty: the store's users make one
// statement at a time each, the monitor (a beat, a list and any
// evictions every interval, the clock every fourth) and, in a
// service.Node, the queue sweep (every EvictAfter) and the check of a
// lifecycle event against the store (one event at a time), so the
// monitor finds a free connection even when all the others run.
// Connections idle for a minute are closed: a quiet node keeps one or
// two.
//
// A process that opens its pools itself passes one to [OpenDB] with the
// URL it opened it from:
//
//	hb, err := sql.Open("pgx", url) // for the heartbeat store alone
//	hb.SetMaxOpenConns(4)
//	s, err := sqlstore.OpenDB(ctx, hb, sqlstore.Config{URL: url})
//
// The URL is never connected to: it tells the dialect, names the database
// (masked) in errors and logs, and lets the store scrub its passwords from
// driver errors. Without it, [Config.Dialect] is required and errors name
// the dialect only. The caller closes its pool after the store; on
// SQLite, give it the settings Open uses (see SQLite below).
//
// SQLite has one writer per file: a beat on its own pool still waits for
// the write lock that any writing transaction holds until it ends, and a
// pool of its own spares it only the wait for a connection. refnode's
// BenchmarkSQLiteBeatsUnderRecordLoad measured both, two processes on
// one file: with every record connection held 200 ms at a time, beats on
// the shared pool took 106 ms (p50) and up to 205 ms, on their own
// pool 0.4 ms and up to 3 ms; at 60 calls a second, or with bursts of 64
// transactions 5 times a second, the same; only with the file's writer
// saturated (8 writers per process in a loop, 8,000-11,000 writes a
// second) did more beats miss their timeout on their own pool, 7-11 %
// against 1 %, as SQLite's busy handler lets a waiting connection sleep
// (1, 2, 5, 10 ms, ...) while a writer that the shared pool hands a
// connection takes the lock at once. refnode gives the heartbeat store
// its own pool on SQLite too; a load that saturates one file's writer
// calls for PostgreSQL or MySQL.
//
// # Tables
//
// The heartbeat table (default "cloudbus_heartbeat") holds one row per
// live node; the queues table beside it (Table+"_queues") one row per
// recorded queue of a node; the meta table (Table+"_meta") one row with
// the schema version and the last epoch issued:
//
//	cloudbus_heartbeat        (node PRIMARY KEY, epoch BIGINT, seq BIGINT, beat_us BIGINT, bus_down_us BIGINT)
//	cloudbus_heartbeat_queues (node, queue, PRIMARY KEY (node, queue))
//	cloudbus_heartbeat_meta   (id = 1 PRIMARY KEY, version INT, last_epoch BIGINT)
//
// beat_us is the database's clock at the last beat (or registration), in
// microseconds since 1970; bus_down_us is the database's clock at the
// first of the beats that have reported, without interruption, the
// message bus down, or 0 if the last one that told reported it up (or if
// none told since the registration). The queues table is keyed by node,
// not by epoch: a node's queues outlive its record, so that survivors
// can drain them after evicting it, and a node that rejoins finds them.
// Node and queue names are 1 to 255 bytes (RabbitMQ's limit for a queue)
// and compare byte for byte: TEXT on PostgreSQL and SQLite, VARBINARY(255)
// on MySQL, whose VARCHAR collations, utf8mb4_bin included, ignore
// trailing spaces.
//
// Open takes a lock (PostgreSQL pg_advisory_xact_lock, SQLite BEGIN
// IMMEDIATE, MySQL GET_LOCK), creates what is missing and runs the
// migrations from the stored version up, so nodes starting together do
// it once. It refuses tables of a newer version than it knows. The
// versions:
//
//	1  CREATE TABLE IF NOT EXISTS t (node, epoch, seq, beat_us)
//	2  ALTER TABLE t ADD COLUMN bus_down_us BIGINT NOT NULL DEFAULT 0
//	   CREATE TABLE IF NOT EXISTS t_queues (node, queue, PRIMARY KEY (node, queue))
//
// so tables of version 1 are migrated in place and keep their records,
// every one reporting the bus up. PostgreSQL and SQLite run a migration
// in one transaction; MySQL cannot roll DDL back. Every step can run
// twice, as it does after a failure on MySQL, or if the meta row was
// lost (the migrations then run again from version 0): PostgreSQL adds
// the column IF NOT EXISTS; MySQL, which lacks that, adds it through a
// prepared statement only if information_schema.COLUMNS lacks it; SQLite,
// which lacks it too, rebuilds the table instead (CREATE TABLE t_v2 with
// the column, INSERT the version 1 columns from t, DROP t, RENAME t_v2 TO
// t), so a table rebuilt again forgets its bus status (outages restart at
// the next down beat). A node of version 1 refuses to open migrated
// tables: upgrade every node of a cluster together.
//
// # Time comes from the database
//
// No statement takes a time from the client. Register and Beat stamp
// beat_us with the database's clock, and List computes every age on the
// database, as now minus beat_us, so nodes with skewed clocks agree on
// which records are stale; BeatBus stamps bus_down_us with the same
// clock, and List computes [heartbeat.Record.BusDown] as now minus
// bus_down_us, at least a microsecond, in the same SELECT. The clock,
// NOW below, in microseconds:
//
//	PostgreSQL  (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
//	SQLite      (CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)
//	MySQL       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))
//
// PostgreSQL's now() is the start of the transaction, so clock_timestamp()
// is used, once per statement through the scalar subquery; a statement
// that needs it twice reads it once, in a FROM item, so that both uses
// see one instant (SQLite's and MySQL's NOW are fixed per statement).
// SQLite's CURRENT_TIMESTAMP has one-second resolution; unixepoch('subsec')
// (SQLite 3.42 and later; modernc.org/sqlite v1.62.0 embeds 3.54) has
// milliseconds, so SQLite ages have millisecond resolution, the others
// microsecond. MySQL's UTC_TIMESTAMP(6) is the statement's start;
// counting from 1970 in UTC avoids the time zone (UNIX_TIMESTAMP(NOW(6))
// is ambiguous for an hour a year where daylight saving ends).
//
// # The statements
//
// Every write to the heartbeat table is one conditional statement, so
// concurrent nodes cannot undo each other's decisions; there are no
// client-side transactions (but for a queue book write of more than 500
// names, below). In PostgreSQL's syntax ($n are the arguments):
//
//	Register    WITH e AS (UPDATE meta SET last_epoch = GREATEST(last_epoch + 1, NOW) WHERE id = 1 RETURNING last_epoch)
//	            INSERT INTO t (node, epoch, seq, beat_us, bus_down_us) SELECT $1, e.last_epoch, 0, NOW, 0 FROM e
//	            ON CONFLICT (node) DO UPDATE SET epoch = EXCLUDED.epoch, seq = 0, beat_us = EXCLUDED.beat_us, bus_down_us = 0
//	            RETURNING epoch
//	Beat        UPDATE t SET beat_us = NOW, seq = seq + 1 WHERE node = $1 AND epoch = $2
//	            -- no row updated: heartbeat.ErrEvicted
//	BeatBus     UPDATE t SET beat_us = NOW, seq = seq + 1, bus_down_us = 0 WHERE node = $1 AND epoch = $2
//	  bus up    -- no row updated: heartbeat.ErrEvicted
//	BeatBus     UPDATE t SET beat_us = c.now, seq = seq + 1,
//	  bus down      bus_down_us = CASE WHEN bus_down_us = 0 THEN c.now ELSE bus_down_us END
//	            FROM (SELECT NOW AS now) AS c WHERE node = $1 AND epoch = $2
//	            -- no row updated: heartbeat.ErrEvicted
//	List        SELECT node, epoch, seq, GREATEST(c.now - beat_us, 0),
//	                CASE WHEN bus_down_us = 0 THEN 0 ELSE GREATEST(c.now - bus_down_us, 1) END
//	            FROM t CROSS JOIN (SELECT NOW AS now) AS c ORDER BY node
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
//	        INSERT INTO t (node, epoch, seq, beat_us, bus_down_us) VALUES (?, ?, 0, NOW, 0)
//	        ON CONFLICT (node) DO UPDATE SET epoch = excluded.epoch, seq = 0, beat_us = excluded.beat_us, bus_down_us = 0
//	MySQL   UPDATE meta SET last_epoch = LAST_INSERT_ID(GREATEST(last_epoch + 1, NOW)) WHERE id = 1
//	        -- the driver's Result.LastInsertId is the new epoch
//	        INSERT INTO t (node, epoch, seq, beat_us, bus_down_us) VALUES (?, ?, 0, NOW, 0)
//	        ON DUPLICATE KEY UPDATE epoch = ?, seq = 0, beat_us = NOW, bus_down_us = 0
//
// The other statements are PostgreSQL's with ? for $n (and max for
// GREATEST in SQLite); SQLite's and MySQL's bus-down BeatBus and List
// write NOW twice instead of the FROM item. An epoch is max(the table's
// last epoch + 1, the database's clock in microseconds): it differs from
// every epoch issued before through this table, to any node, even if the
// database's clock goes back, and is unlikely to repeat if the tables
// are recreated.
//
// Why the conditions suffice: Beat and Evict on one row are serialized by
// the database's row lock (PostgreSQL and InnoDB re-check the WHERE
// clause on the row's latest version; SQLite has one writer at a time).
// An Evict whose sequence is stale matches no row, so a node that beat
// after the evictor's List is never evicted; of two evictors with the
// same sequence, the second finds the row gone. A Beat after an Evict,
// a Deregister or a newer Register finds no row with its epoch and
// returns [heartbeat.ErrEvicted], and never recreates the row. BeatBus
// is a Beat: the same WHERE, the same row lock. Its bus-down form reads
// bus_down_us in the row it updates, so of two down beats the second
// keeps the first one's stamp.
//
// # The queue book
//
// Each call is one statement of every name, or, past 500 names, one
// transaction of such statements (q is t_queues):
//
//	AddQueues     INSERT INTO q (node, queue) VALUES ($1, $2), ($3, $4), ... ON CONFLICT (node, queue) DO NOTHING
//	              -- MySQL: ON DUPLICATE KEY UPDATE queue = queue
//	Queues        SELECT node, queue FROM q ORDER BY node, queue
//	RemoveQueues  WITH doomed AS (SELECT node, queue FROM q WHERE node = $1 AND queue IN ($2, $3, ...)
//	                  ORDER BY queue FOR UPDATE)
//	              DELETE FROM q USING doomed WHERE q.node = doomed.node AND q.queue = doomed.queue
//	              -- SQLite, MySQL: DELETE FROM q WHERE node = ? AND queue IN (?, ?, ...)
//
// Names already recorded are skipped, names not recorded are ignored, so
// both writes are idempotent. Concurrent writers lock rows in one order:
// AddQueues sends its names sorted, and PostgreSQL's RemoveQueues locks
// its rows sorted before deleting them (a plain DELETE locks in its
// plan's order, which differs between a short list and a long one). A
// write the database aborts anyway to break a deadlock (PostgreSQL
// 40P01, MySQL 1213) is tried again, a few times.
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
// it must write on a stale snapshot. The only transactions are Open's
// migration and queue book writes of more than 500 names; every other
// statement is its own. In modernc.org/sqlite's DSN syntax the URL
// sqlite:/path/hb.db becomes
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
// outcome unknown: retrying Register, Beat, BeatBus, Deregister,
// AddQueues and RemoveQueues is safe; a retried Evict may report false
// for a record the first try deleted.
// The logs (open, migration) name the database masked too.
//
// # Testing
//
// The tests run the heartbeat/storetest conformance suite, with its bus
// status and queue book scenarios, on each dialect, and migrate tables of
// version 1 on each. SQLite always runs, in a temporary directory; PostgreSQL runs
// when CLOUDBUS_POSTGRES_DSN is set (for example
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable) and MySQL when
// CLOUDBUS_MYSQL_DSN is set (for example
// root@tcp(127.0.0.1:3306)/test?parseTime=true). Without them those tests
// skip, naming the variable; under CI=true they fail instead. Each test
// uses its own randomly named table and drops it at the end, so test
// processes may share the databases.
package sqlstore
