// Package nodekit runs a production management node of any set of
// services: the one way to turn services into a program that is safe to
// run. refnode serve is built on it.
//
// A program gives its part ([Config]: its name, its tables, its
// services); the operator gives theirs ([Settings]: flags and
// environment variables named after the program). [Main] does the rest:
//
//	func main() {
//		reg := message.NewRegistry()
//		if err := volume.Register(reg); err != nil {
//			panic(err)
//		}
//		nodekit.Main(nodekit.Config{
//			Name:     "volume", // flags -bus, -db, …; variables VOLUME_BUS, VOLUME_DB, …
//			Registry: reg,
//			Schema:   &volume.Schema,
//			Services: func(_ context.Context, env nodekit.Env) ([]service.Service, error) {
//				return []service.Service{volume.New(env)}, nil
//			},
//		})
//	}
//
// examples/volume is that program, complete.
//
// What a node does, in order ([Open], [Node.Run], [Node.Close]):
//
//  1. It opens the database with the session settings fencing needs
//     ([OpenDatabase]): PostgreSQL's idle_in_transaction_session_timeout
//     or MariaDB's idle_transaction_timeout set to the eviction
//     threshold, so that a node paused inside a fenced transaction
//     cannot hold its resources' rows past its eviction; on MySQL, which
//     has no such setting, it refuses to start unless the operator
//     accepts the risk (-db-allow-no-idle-timeout). The heartbeat store
//     gets a pool of its own, so beats never wait behind the services'
//     work.
//  2. It creates and migrates the program's tables ([Schema]) under a
//     lock every node shares, so nodes started together do it once.
//  3. It opens the fence of the services' writes (package
//     fence/sqlfence) on the same database, and deletes its expired
//     message records every minute.
//  4. It connects to the broker, builds the services with their [Env],
//     and joins the cluster.
//  5. It serves the admin handler ([Admin]) on its own listener (-listen,
//     never a public one): GET /healthz (serving), GET /livez and GET
//     /readyz (JSON bodies naming each check), GET /status, GET /metrics
//     (Prometheus, package service/metrics; see [Node.Metrics]),
//     /debug/pprof/ with -pprof, and the program's own routes and status
//     sections. With -trace stdout or otlp it makes OpenTelemetry spans
//     (package service/tracing); the W3C trace context travels in the
//     messages either way.
//  6. On SIGTERM or SIGINT it leaves in order: out of every ring, its
//     queues drained, its services stopped. Run's error says why a node
//     stopped otherwise (evicted by its peers: start it again).
//
// The node prints what an operator needs on stdout:
//
//	node:    0b5f…
//	admin:   http://127.0.0.1:41117 (GET / the dashboard, GET /healthz, GET /status, GET /metrics)
//	bus:     amqp://guest:xxxxx@127.0.0.1:5672/ (queues cloudbus.message.<service>.0b5f…)
//	db:      postgres://app:xxxxx@db:5432/app (tables cloudbus_heartbeat, cloudbus_volume_*)
//	serving: 2 nodes in the ring (fingerprint 3f2a…), ready in 412ms; SIGTERM or Ctrl-C leaves in order
//	leaving: interrupt (signal again to quit at once)
//	left:    in 38ms
//
// Tables are named from the queue prefix ([TableBase]): the cluster's
// heartbeat table <base>_heartbeat and the program's <base>_<Name>_*
// (Env.Tables), its fence's among them. Test the same services on
// service/servicetest, which hands them the same Env on SQLite, PostgreSQL
// or MySQL.
package nodekit
