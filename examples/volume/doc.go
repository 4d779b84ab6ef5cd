// Package volume is a complete third-party service on cloudbus, the one
// the README's "Write your own service" walks through: block volumes
// that are created on any node and attached to VMs on their owner.
//
//   - messages.go: the messages and the reply, with their wire names.
//   - service.go: the handlers, routed by volume UUID, each write fenced
//     and idempotent.
//   - repo.go: the SQL repository (SQLite, PostgreSQL, MySQL/MariaDB),
//     its tables created by a nodekit.Schema.
//   - cmd/volumed: the node program, on the node kit (service/nodekit).
//   - cmd/volumectl: a client through api.portal.
//   - volume_test.go: tests on the test kit (service/servicetest) with
//     the same repository: takeover, a duplicate runs once, a stale
//     owner cannot commit.
//
// Run two nodes and a client against RabbitMQ and PostgreSQL:
//
//	go run ./examples/volume/cmd/volumed -bus amqp://guest:guest@127.0.0.1:5672/ -db postgres://postgres@127.0.0.1:5432/test &
//	go run ./examples/volume/cmd/volumed -bus amqp://guest:guest@127.0.0.1:5672/ -db postgres://postgres@127.0.0.1:5432/test &
//	go run ./examples/volume/cmd/volumectl -bus amqp://guest:guest@127.0.0.1:5672/ create data 10
package volume
