-- Golden file of heartbeat/sqlstore: schema version 2, as today's code stores it in SQLite.
-- Written by a real store (writeHeartbeatGolden in golden_test.go), the database clock's values pinned, with
-- 	go test ./heartbeat/sqlstore -run TestGolden -update-golden
-- Do not edit, and keep it forever: TestGolden loads it, opens the store on it and reads every row back.
CREATE TABLE "golden_heartbeat" (node TEXT PRIMARY KEY NOT NULL, epoch INTEGER NOT NULL, seq INTEGER NOT NULL, beat_us INTEGER NOT NULL, bus_down_us INTEGER NOT NULL DEFAULT 0);
CREATE TABLE "golden_heartbeat_meta" (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL, last_epoch INTEGER NOT NULL);
CREATE TABLE "golden_heartbeat_queues" (node TEXT NOT NULL, queue TEXT NOT NULL, PRIMARY KEY (node, queue)) WITHOUT ROWID;
INSERT INTO "golden_heartbeat" (node, epoch, seq, beat_us, bus_down_us) VALUES ('1a0e5b9c2d7f4e8a9b3c6d1e0f2a4b01', 1748779200000000, 4, 1748779230500000, 0);
INSERT INTO "golden_heartbeat" (node, epoch, seq, beat_us, bus_down_us) VALUES ('2b1f6c0d3e8a4f9b8c4d7e2f1a3b5c02', 1748779201000000, 2, 1748779229000000, 1748779215250000);
INSERT INTO "golden_heartbeat" (node, epoch, seq, beat_us, bus_down_us) VALUES ('3c2a7d1e4f9b4a0c9d5e8f3a2b4c6d03', 1748779202000000, 0, 1748779202000000, 0);
INSERT INTO "golden_heartbeat_meta" (id, version, last_epoch) VALUES (1, 2, 4102444800000000);
INSERT INTO "golden_heartbeat_queues" (node, queue) VALUES ('1a0e5b9c2d7f4e8a9b3c6d1e0f2a4b01', 'cloudbus.message.cloudbus-membership.1a0e5b9c2d7f4e8a9b3c6d1e0f2a4b01');
INSERT INTO "golden_heartbeat_queues" (node, queue) VALUES ('1a0e5b9c2d7f4e8a9b3c6d1e0f2a4b01', 'cloudbus.message.vmInstance.1a0e5b9c2d7f4e8a9b3c6d1e0f2a4b01');
INSERT INTO "golden_heartbeat_queues" (node, queue) VALUES ('2b1f6c0d3e8a4f9b8c4d7e2f1a3b5c02', 'cloudbus.message.cloudbus-membership.2b1f6c0d3e8a4f9b8c4d7e2f1a3b5c02');
INSERT INTO "golden_heartbeat_queues" (node, queue) VALUES ('4d3b8e2f5a0c4b1d8e6f9a4b3c5d7e04', 'cloudbus.message.cloudbus-membership.4d3b8e2f5a0c4b1d8e6f9a4b3c5d7e04');
INSERT INTO "golden_heartbeat_queues" (node, queue) VALUES ('4d3b8e2f5a0c4b1d8e6f9a4b3c5d7e04', 'cloudbus.message.host.4d3b8e2f5a0c4b1d8e6f9a4b3c5d7e04');
