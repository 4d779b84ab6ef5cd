// Package sqlstore is a [heartbeat.Store] in SQL tables, on SQLite (one
// file shared by the processes of one machine), PostgreSQL or
// MySQL/MariaDB, over database/sql. Design and figures: docs/design.md,
// "Heartbeats and eviction", "The SQL store".
//
//	s, err := sqlstore.Open(ctx, sqlstore.Config{URL: "sqlite:/var/lib/cloudbus/heartbeat.db"})
//	// or URL: "postgres://cloudbus:secret@db:5432/cloudbus?sslmode=require"
//	// or URL: "mysql://cloudbus:secret@db:3306/cloudbus"
//	if err != nil { ... }
//	defer s.Close()
//	m, err := heartbeat.NewMonitor(s, nodeUUID, heartbeat.DefaultConfig(), listener, logger)
//
// # A pool of its own
//
// Give the store a connection pool that nothing else uses: the one [Open]
// makes, or a *sql.DB of its own passed to [OpenDB] with the URL it was
// opened from. A beat that waits for a connection behind other work
// misses its timeout, and its node is evicted.
//
// # Tables
//
// [Open] and [OpenDB] create the tables Table, Table+"_queues" and
// Table+"_meta" if missing, and migrate older ones, under a lock. They
// refuse tables of a newer version: upgrade every node of a cluster
// together.
//
// # Time
//
// Every stamp and age is computed by the database's clock; no statement
// takes a time from the client. Ages have microsecond resolution, a
// millisecond on SQLite.
//
// # SQLite
//
// [Open] sets journal_mode=WAL, synchronous=NORMAL and busy_timeout on
// every connection, and begins transactions with BEGIN IMMEDIATE. Keep
// the file on a local disk. In-memory databases are refused.
//
// # Session locks
//
// The store is a [heartbeat.SessionLocker]: a node may hold a lock that
// the database releases as soon as the node's session ends, so a peer can
// tell a dead process from a slow one at once. PostgreSQL: a
// session-level advisory lock, measured free 21-23 ms after its session
// was terminated; MySQL/MariaDB: GET_LOCK, 1-22 ms; SQLite: flock(2) of a
// file beside the database file, which the kernel releases when the
// process exits (the suite logs each: go test ./heartbeat/sqlstore -run
// 'Conformance.*/ended' -v). A held lock keeps one connection of the pool for its
// life; a frozen or cut-off holder keeps its lock as long as the database
// keeps its session (see [Store.HoldSession]).
//
// # Errors
//
// An error names the operation, the node and the database by its masked
// URL ([Store.MaskedURL]), wraps the driver's error with passwords
// scrubbed, and matches ctx's error if ctx ended. Retrying is safe,
// except that a retried Evict may report false for a record the first
// try deleted.
package sqlstore
