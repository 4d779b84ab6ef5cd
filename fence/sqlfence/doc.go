// Package sqlfence implements package fence in SQL: fencing tokens and
// message records in tables beside the heartbeat store's, in the same
// database, checked in the user's own *sql.Tx. [Run] runs a fenced
// transaction with a typed reply, recorded as JSON; [Fence.Do] runs one
// whose reply is bytes; [Fence.Check], [Fence.Begin] and [Fence.Finish]
// are its steps. For the reasons behind its rules, see docs/design.md, "Fencing".
//
//  1. PostgreSQL, MySQL, MariaDB: fenced transactions run at READ COMMITTED.
//  2. SQLite: transactions begin with BEGIN IMMEDIATE (_txlock=immediate).
//  3. PostgreSQL's idle_in_transaction_session_timeout, or MariaDB's
//     idle_transaction_timeout, is at most the heartbeat's EvictAfter.
package sqlfence
