-- Golden file of heartbeat/sqlstore: schema version 1, as the release before version 2 stored it in SQLite.
-- Written once by the version 1 store itself (commit 41d8e42, the parent of 778d4fa, which added version 2),
-- with the golden state of writeHeartbeatGolden in golden_test.go as far as version 1 had it (no bus status, no
-- queue book: the bus-down node beat twice), the database clock's values pinned.
-- Do not edit, and keep it forever: TestGolden loads it, opens the store on it and reads every row back.
CREATE TABLE "golden_heartbeat" (node TEXT PRIMARY KEY NOT NULL, epoch INTEGER NOT NULL, seq INTEGER NOT NULL, beat_us INTEGER NOT NULL);
CREATE TABLE "golden_heartbeat_meta" (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL, last_epoch INTEGER NOT NULL);
INSERT INTO "golden_heartbeat" (node, epoch, seq, beat_us) VALUES ('1a0e5b9c2d7f4e8a9b3c6d1e0f2a4b01', 1748779200000000, 4, 1748779230500000);
INSERT INTO "golden_heartbeat" (node, epoch, seq, beat_us) VALUES ('2b1f6c0d3e8a4f9b8c4d7e2f1a3b5c02', 1748779201000000, 2, 1748779229000000);
INSERT INTO "golden_heartbeat" (node, epoch, seq, beat_us) VALUES ('3c2a7d1e4f9b4a0c9d5e8f3a2b4c6d03', 1748779202000000, 0, 1748779202000000);
INSERT INTO "golden_heartbeat_meta" (id, version, last_epoch) VALUES (1, 1, 4102444800000000);
