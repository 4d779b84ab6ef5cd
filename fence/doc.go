// Package fence makes ownership authorize writes, and messages idempotent,
// in the user's database transactions: fence/sqlfence in SQL,
// fence/memfence in memory. For the reasons, see docs/design.md,
// "Fencing".
//
// A [Claim] holds while its node's heartbeat record is live at its epoch;
// a write whose claim does not hold fails with a [*StaleError]. A
// transaction's reply is recorded with it for its message's [Key]; the
// fences' Run functions record a typed reply as JSON ([MarshalReply]) and
// give a repeat the same typed value ([UnmarshalReply]).
//
// # Side effects outside the database
//
// Call Verify just before one; repair its record by five rules:
//
//  1. Journal an outcome with the version its failed write read.
//  2. Repair in a fenced transaction, at that version only.
//  3. Drop an entry whose base is not current.
//  4. What the other system reports wins.
//  5. The journal is in memory.
//
// # Writes, not liveness
//
// No fence statement writes or locks a heartbeat record.
package fence
