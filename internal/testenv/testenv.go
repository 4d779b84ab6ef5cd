// Package testenv gives tests the real services they run against: a
// RabbitMQ broker and PostgreSQL and MySQL/MariaDB databases, named by
// environment variables. A test that needs one calls [AMQPURL],
// [PostgresDSN] or [MySQLDSN]: without the variable the test skips with a
// message naming it and an example value, and under CI=true, where CI
// (.ci/run) provides every service, it fails instead, so that no such
// test is silently skipped in CI.
//
//	func TestOnRabbitMQ(t *testing.T) {
//		url := testenv.AMQPURL(t) // skips (or fails under CI=true) if unset
//		...
//	}
//
// The package is internal to cloudbus and only for tests. It reads the
// environment on every call, so tests may change it with t.Setenv.
package testenv

import (
	"os"
	"testing"
)

// The variables naming the services. The names are fixed: .ci/run,
// CONTRIBUTING.md and developers' shells set them.
const (
	// AMQPVar names the RabbitMQ broker, as an amqp:// URL.
	AMQPVar = "CLOUDBUS_AMQP_URL"
	// PostgresVar names the PostgreSQL database, as a postgres:// URL.
	PostgresVar = "CLOUDBUS_POSTGRES_DSN"
	// MySQLVar names the MySQL/MariaDB database, as a go-sql-driver/mysql
	// DSN or a mysql:// URL.
	MySQLVar = "CLOUDBUS_MYSQL_DSN"
	// AMQPClusterVar names a private 3-node RabbitMQ cluster, as a
	// comma-separated list of amqp:// URLs, one per broker node; the
	// script .ci/rabbitmq-cluster starts one and prints the list.
	AMQPClusterVar = "CLOUDBUS_AMQP_CLUSTER"
)

// examples are the values the skip messages suggest: the services of a
// developer's machine as .ci/run sets them.
var examples = map[string]string{
	AMQPVar:     "amqp://guest:guest@127.0.0.1:5672/",
	PostgresVar: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
	MySQLVar:    "root@tcp(127.0.0.1:3306)/test?parseTime=true",
	AMQPClusterVar: "$(bash .ci/rabbitmq-cluster start >&2 && cat /tmp/cloudbus-rabbit-cluster/urls), " +
		"a list like amqp://guest:guest@127.0.0.1:27671/,amqp://guest:guest@127.0.0.1:27672/,amqp://guest:guest@127.0.0.1:27673/",
}

// AMQPURL returns the broker's URL from [AMQPVar]. Without it the test
// skips, naming the variable, or fails under CI=true.
func AMQPURL(t testing.TB) string {
	t.Helper()
	return lookup(t, AMQPVar)
}

// PostgresDSN returns the PostgreSQL URL from [PostgresVar]. Without it
// the test skips, naming the variable, or fails under CI=true.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	return lookup(t, PostgresVar)
}

// MySQLDSN returns the MySQL DSN from [MySQLVar]. Without it the test
// skips, naming the variable, or fails under CI=true.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	return lookup(t, MySQLVar)
}

// AMQPCluster returns the URLs of a RabbitMQ cluster's nodes from
// [AMQPClusterVar], comma-separated. Without it the test skips, naming
// the variable and the script that starts a cluster, or fails under
// CI=true.
func AMQPCluster(t testing.TB) string {
	t.Helper()
	return lookup(t, AMQPClusterVar)
}

// WillRun reports whether the tests that need the variable name will
// run rather than skip: it is set, or CI=true (where they fail without
// it). Use it to prepare something costly for those tests only, such as
// a binary built in TestMain.
func WillRun(name string) bool {
	return os.Getenv(name) != "" || ci()
}

// ci reports whether the tests run in CI, where every service must be
// there.
func ci() bool { return os.Getenv("CI") == "true" }

// lookup returns the variable's value, or skips t (fails it under
// CI=true). It returns "" only to a t whose Skipf or Fatalf returns.
func lookup(t testing.TB, name string) string {
	t.Helper()
	if v := os.Getenv(name); v != "" {
		return v
	}
	if ci() {
		t.Fatalf("%s is not set, and CI=true requires this test to run (e.g. %s=%s)", name, name, examples[name])
		return ""
	}
	t.Skipf("set %s (e.g. %s) to run this test", name, examples[name])
	return ""
}
