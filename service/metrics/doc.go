// Package metrics exports a node's metrics to Prometheus. The core
// packages (bus, heartbeat, ring, fence, service) import no metrics
// library: this adapter builds on what they expose. A [Metrics] is a
// [bus.Observer] that counts the message flow as it happens, and a
// collector that reads the node, its transport and its database pools at
// each scrape. [Metrics.Handler] serves them; [Metrics.Registry] takes a
// program's own collectors, so they share one /metrics. The node kit
// (package nodekit) gives every node one, on GET /metrics of its admin
// listener.
//
// Build the Metrics first, give it to the node's Config.Observer, then
// hand it the node with [Metrics.SetNode]:
//
//	m, err := metrics.New(metrics.Config{Transport: tr, Pools: map[string]*sql.DB{"services": db}})
//	n, err := service.NewNode(service.Config{..., Transport: tr, Observer: m})
//	m.SetNode(n)
//	http.Handle("GET /metrics", m.Handler())
//
// # Metrics
//
// Message flow, counted in [Metrics.Observe] (op is a [bus.Op]'s name:
// send, call, broadcast, handle, reply, event, reject, release, retry,
// dead-letter, late-reply; service is the target service's name, never
// its node; type is the message type name; code a [message.Code]):
//
//	cloudbus_messages_total{op,service,type}                counter   messages by what the bus did with them
//	cloudbus_message_failures_total{op,service,type,code}   counter   those whose operation failed, by error code;
//	                                                                  op="reject" counts refusals (late: code timeout)
//	cloudbus_call_duration_seconds{service,type}            histogram call round trip, caller side
//	cloudbus_handle_duration_seconds{service,type}          histogram handler run, handler side
//	cloudbus_handle_queued_seconds{service,type}            histogram wait on this node before the handler ran
//	cloudbus_forwards_total{service,type}                   counter   messages passed on as they came (bus.Observation.Forward):
//	                                                                  each attempt of the API portal's forwards (also an
//	                                                                  op="call"), one-way messages forwarded to their owner
//	                                                                  (also an op="send")
//	cloudbus_reroutes_total{service,type,code}              counter   messages about a resource sent again to the owner after
//	                                                                  an attempt failed with code (not_owner, no_route,
//	                                                                  node_left): bus.OpReroute, reported by service.Call,
//	                                                                  service.Send and the portal; service is the failed target's
//
// A re-route is not an op of cloudbus_messages_total: the attempts it
// follows are calls or sends there already.
//
// Node state, read at each scrape (absent until [Metrics.SetNode]):
//
//	cloudbus_node_state{state}                gauge   1 for the current state (new, starting, serving, leaving, evicted, stopped)
//	cloudbus_node_epoch                       gauge   the epoch of the node's current life
//	cloudbus_lease_expired                    gauge   1 while the node refuses messages about resources
//	cloudbus_ring_members                     gauge   members in the node's ring
//	cloudbus_ring_ownership_ratio             gauge   share of the key space this node owns (sampled on 1,024 fixed keys)
//	cloudbus_ring_info{fingerprint}           gauge   always 1; nodes with equal fingerprints agree on every owner
//	cloudbus_heartbeat_members{state}         gauge   membership records last listed, up or bus_down
//	cloudbus_heartbeat_age_seconds{peer}      gauge   each peer's time since its last beat, as last listed
//	cloudbus_membership_joins_total           counter members added to the ring
//	cloudbus_membership_leaves_total          counter members removed from the ring, for any reason
//	cloudbus_evictions_total                  counter nodes this node evicted
//	cloudbus_clock_offset_seconds             gauge   cluster time minus this process's clock, once sampled
//	cloudbus_clock_uncertainty_seconds        gauge   bound on that estimate's error
//	cloudbus_bus_pending_calls                gauge   calls waiting for a reply
//	cloudbus_bus_running_handlers             gauge   handlers running
//	cloudbus_bus_queued_messages              gauge   messages waiting for a handler
//	cloudbus_bus_deliveries_total{outcome}    counter the bus's counters (rejected, late, late_reply, released,
//	                                                  lost, failed, retried, dead_lettered); they restart with
//	                                                  each life of the node, which Prometheus reads as a reset
//	cloudbus_drained_queues_total             counter departed nodes' queues this node emptied
//	cloudbus_drained_messages_total{outcome}  counter their messages: moved, late, dropped
//
// Fence, read at each scrape when [Config.Fence] is set (the fence's
// Stats: *sqlfence.Fence, *memfence.Fence; counted by its Do and Run):
//
//	cloudbus_fence_runs_total      counter transactions run and committed
//	cloudbus_fence_repeats_total   counter messages handled before, answered with their recorded reply
//	cloudbus_fence_stale_total     counter writes refused because their claim did not hold
//
// Transport and pools:
//
//	cloudbus_transport_connected               gauge   1 while the transport reaches the broker
//	cloudbus_transport_connections_lost_total  counter connections lost (transports with ConnectionsLost, as amqpbus)
//	cloudbus_transport_publishes_refused_total counter publishes the broker nacked and the transport sent again
//	                                           (transports with PublishesRefused, as amqpbus)
//	go_sql_*{db_name}                          the standard sql.DBStats collector of client_golang for each
//	                                           pool of Config.Pools: open, in use, idle, max open
//	                                           connections, wait count and duration, closed by reason
//
// The default registry adds the Go runtime (go_*) and process
// (process_*) collectors.
//
// Refusals are failures by code: op="reject" with code timeout (late),
// bad_request or unknown_message (undecodable), too_large (oversize);
// a call about a resource this node does not own (or while its lease
// expired) ends as op="handle" with code not_owner, a one-way one as
// op="release" or, forwarded to its owner, as a handle without failure
// (and a forward). A fence's refusal is the handler's error: op="handle"
// with the code the handler returned (not_owner for a stale claim, also
// counted by cloudbus_fence_stale_total), which the caller re-routes
// (cloudbus_reroutes_total). Dead letters are op="dead-letter" (and
// cloudbus_bus_deliveries_total{outcome="dead_lettered"}).
//
// # Label values
//
// Every label value is bounded: service and type names, ops, codes,
// states. Resource UUIDs and message ids never appear; node UUIDs appear
// only as peer of cloudbus_heartbeat_age_seconds, bounded by the cluster's
// size. Values that came from outside are bounded too: a type or code
// longer than 128 bytes or not printable ASCII counts as "other", and so
// does any (op, service, type) past [Config.MaxSeries] series, or any code
// past 64 per series.
//
// # Cost
//
// Observe looks its series up in a map under a read lock and updates
// pre-resolved children: it allocates nothing once a series exists
// (except to read an error's code). BenchmarkObserve measures one
// observation (100 to 200 ns on a loaded 2-core machine); a call makes
// three (call, handle, reply), about 1 % of an in-memory call (35 to
// 50 µs) and under 0.1 % of a call through RabbitMQ (about 2 ms).
// BenchmarkCall measures calls with and without the adapter, side by
// side, on the in-memory bus and on RabbitMQ.
package metrics
