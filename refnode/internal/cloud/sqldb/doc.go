// Package sqldb is a [cloud.Store] in SQL tables: the host, image, VM
// and job records of a refnode cluster in SQLite (the embedded default: the
// processes of one machine share one database file), PostgreSQL or
// MySQL/MariaDB, over database/sql. Every management node of a cluster
// opens the same tables; the tables are the only state they share besides
// the heartbeat records.
//
//	p, err := sqlconn.Open(sqlconn.Config{URL: "sqlite:/var/lib/refnode/refnode.db"})
//	// or URL: "postgres://refnode:secret@db:5432/refnode?sslmode=require"
//	// or URL: "mysql://refnode:secret@db:3306/refnode"
//	if err != nil { ... }
//	defer p.Close()
//	s, err := sqldb.Open(ctx, p, sqldb.Config{})
//	if err != nil { ... }
//	defer s.Close() // before the pool
//
// The store runs on a pool of cloudbus's internal/sqlconn, whose URL
// forms are those of heartbeat/sqlstore, so one -db flag serves both
// stores: sqlite:PATH or a file: URI, postgres:// (or postgresql://),
// mysql://user:password@host:port/db, or go-sql-driver/mysql's own DSN
// (user:password@tcp(host:3306)/db).
//
// # Tables
//
// With Config.Prefix p (default "refnode"):
//
//	p_hosts   (uuid PRIMARY KEY, name, address, status, managed_by, takeovers, connected_us)
//	p_images  (uuid PRIMARY KEY, name, url, size_mb)
//	p_vms     (uuid PRIMARY KEY, name, image_uuid, host_uuid, cpus, memory_mb, state, version)
//	p_jobs    (uuid PRIMARY KEY, kind, resource, args, state, step, node, code, error, result,
//	           created_us, updated_us, deadline_us, version)
//	p_meta    (id = 1 PRIMARY KEY, version)
//
// connected_us is Host.ConnectedAt, and created_us, updated_us and
// deadline_us a Job's times, in microseconds since 1970 (NULL for the
// zero time), so times keep microseconds on every database. A VM's
// version is cloud.VM.Version, and a job's cloud.Job.Version: 1 when the
// row is inserted, one more at every update, written under the row's
// lock. A job's args and result are JSON text; on MySQL every text
// column holds at most 64 KiB (TEXT). [Open]
// creates the tables if they are missing, holding a lock so that nodes
// starting together do it once (PostgreSQL pg_advisory_xact_lock, SQLite
// BEGIN IMMEDIATE, MySQL GET_LOCK), migrates older tables, and refuses
// tables of a newer schema version than it knows. Clusters sharing a
// database use different prefixes. The schema versions:
//
//	1  the three record tables
//	2  ALTER TABLE p_vms ADD COLUMN version BIGINT NOT NULL DEFAULT 1
//	3  CREATE TABLE p_jobs (…), empty
//
// Tables of version 1 are migrated in place, and each VM row they
// hold gets version 1, as if just inserted: nothing but the version
// compares with it, and the in-memory journals whose entries carry a
// version (package fence, Journal) belonged to processes of the older
// code. A node of version 1 refuses to open migrated tables; one already
// running when another migrated them goes on writing VMs without moving
// their version, so upgrade every node of a cluster together (stop them
// all, then start the new ones). The migration runs again harmlessly on
// PostgreSQL (ADD COLUMN IF NOT EXISTS) and MySQL (the ALTER runs only
// if information_schema lacks the column) if the meta row is lost; on
// SQLite, which has neither, Open then fails with "duplicate column
// name: version", and the meta row must be restored (the version the
// tables are at, 2 or 3) by hand, rather than the column be rebuilt with
// every VM back at version 1. Version 3 only creates a table (CREATE
// TABLE IF NOT EXISTS): tables of version 2 are migrated in place,
// keeping their rows, and running it again changes nothing. A node of
// version 2 refuses tables of version 3, like a node of version 1
// those of version 2.
//
// # Atomic updates
//
// UpdateHost, UpdateImage, UpdateVM and UpdateJob run in a transaction
// that locks the row first: SELECT … FOR UPDATE on PostgreSQL and MySQL,
// and BEGIN IMMEDIATE on SQLite, which takes the database's write lock
// (SQLite has one writer at a time). Inside [Store.Do] that transaction
// is the Do's, which keeps the lock until it ends. The update function
// runs while the lock is held, so two writers of one record, in one
// process or in several, never lose each other's writes, and a
// compare-and-set made in it is atomic; it must therefore be quick and
// must not call the store. Adds are one INSERT each: of concurrent adds
// of one UUID exactly one succeeds, the others fail with an error
// matching message.ErrAlreadyExists.
//
// # Connections
//
// The store uses the caller's pool and never closes it. refnode serve
// opens two pools from -db: one of 8 connections for this store, one of
// 4 for the heartbeat store (sqlstore.OpenDB), so that beats never wait
// for a connection behind this store's transactions (see refnode's
// openStores). The pool's settings are sqlconn's: capped (default 4
// connections), and on SQLite every connection sets busy_timeout
// (default 5 s: a writer waits for another process's write lock instead
// of failing with "database is locked"), journal_mode=WAL (readers never
// block the writer) and synchronous=NORMAL, and begins transactions with
// BEGIN IMMEDIATE. WAL needs shared memory between the processes: keep
// the file on a local disk. An in-memory SQLite database is refused (it
// would be private to one connection; use package memdb).
//
// # Errors and credentials
//
// Unknown UUIDs fail with errors matching message.ErrNotFound, malformed
// ones with message.ErrInvalidUUID, as the Store contract says. A
// database error names the operation, the record and the database by its
// masked URL (sqlconn.MaskURL: the password is "xxxxx"),
// with any password scrubbed from the driver's text; if ctx ended it also
// matches ctx's error. It is marked as a database error
// (sqlconn.IsDatabaseError): refnode's services log its text and answer
// API clients without it. Such an error leaves the outcome unknown: an add
// may have happened (retrying it then fails as a duplicate), an update
// either happened whole or not at all.
//
// # Testing
//
// The tests run the cloudtest conformance suite on SQLite always (in a
// temporary directory), on PostgreSQL when CLOUDBUS_POSTGRES_DSN is set
// and on MySQL when CLOUDBUS_MYSQL_DSN is set; without them those tests
// skip, naming the variable, and under CI=true they fail instead. Each
// case uses its own random table prefix and drops its tables at the end.
package sqldb
