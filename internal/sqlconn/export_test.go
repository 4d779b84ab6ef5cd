package sqlconn

import "log/slog"

// WithSchemaLock is withSchemaLock, for the lock's own tests.
var WithSchemaLock = withSchemaLock

// Execer is what a function run under the schema lock gets.
type Execer = execer

// DriverLog is driverLog, the MySQL driver's logger on a slog.Logger.
func DriverLog(l *slog.Logger) interface{ Print(v ...any) } { return driverLog{l} }
