package sqlconn

// WithSchemaLock is withSchemaLock, for the lock's own tests.
var WithSchemaLock = withSchemaLock

// Execer is what a function run under the schema lock gets.
type Execer = execer
