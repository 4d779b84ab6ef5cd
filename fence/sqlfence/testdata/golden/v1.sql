-- Golden file of fence/sqlfence: schema version 1, as today's code stores it in SQLite.
-- Written by a real fence (writeFenceGolden in golden_test.go), the database clock's values pinned, with
-- 	go test ./fence/sqlfence -run TestGolden -update-golden
-- Do not edit, and keep it forever: TestGolden loads it, opens the fence on it and reads every row back.
-- The heartbeat table the fence reads (golden_heartbeat) has golden files of its own, in heartbeat/sqlstore.
CREATE TABLE "golden_fence_tokens" (resource TEXT PRIMARY KEY NOT NULL, token INTEGER NOT NULL, node TEXT NOT NULL, epoch INTEGER NOT NULL, uses INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE "golden_fence_once" (id TEXT PRIMARY KEY NOT NULL, type TEXT NOT NULL, hash TEXT NOT NULL, done INTEGER NOT NULL, reply BLOB, at_us INTEGER NOT NULL);
CREATE INDEX "golden_fence_once_at" ON "golden_fence_once" (at_us);
CREATE TABLE "golden_fence_meta" (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL);
INSERT INTO "golden_fence_tokens" (resource, token, node, epoch, uses) VALUES ('7a6b5c4d3e2f40118293a4b5c6d7e801', 1, '6f5e4d3c2b1a40998877665544332201', 1748779200000000, 1);
INSERT INTO "golden_fence_tokens" (resource, token, node, epoch, uses) VALUES ('7a6b5c4d3e2f40118293a4b5c6d7e802', 2, '6f5e4d3c2b1a40998877665544332202', 1748779201000000, 3);
INSERT INTO "golden_fence_tokens" (resource, token, node, epoch, uses) VALUES ('7a6b5c4d3e2f40118293a4b5c6d7e803', 2, '6f5e4d3c2b1a40998877665544332201', 1748779203000000, 2);
INSERT INTO "golden_fence_once" (id, type, hash, done, reply, at_us) VALUES ('8b7c6d5e4f3a40218293a4b5c6d7e801', 'refnode.v1.StartVm', 'b0f8b834d1637ee5a36dea847b47b10a810ddcf9810ca99afbb5633e857e86bb', 1, X'7B22766D223A7B2275756964223A223761366235633464336532663430313138323933613462356336643765383031222C227374617465223A2272756E6E696E67227D2C2268616E646C65645F6279223A223666356534643363326231613430393938383737363635353434333332323031227D', 1740787200000000);
INSERT INTO "golden_fence_once" (id, type, hash, done, reply, at_us) VALUES ('8b7c6d5e4f3a40218293a4b5c6d7e802', 'refnode.v1.AddHost', '44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a', 1, X'', 1740873600000000);
INSERT INTO "golden_fence_once" (id, type, hash, done, reply, at_us) VALUES ('8b7c6d5e4f3a40218293a4b5c6d7e803', 'test.Binary', '2ffd7b69e6c84fb9639208d3e64e18da1eac3779a75aac2270a903fc7b46b75b', 1, X'00FF80270A227265706C7922', 1743465600000000);
INSERT INTO "golden_fence_once" (id, type, hash, done, reply, at_us) VALUES ('8b7c6d5e4f3a40218293a4b5c6d7e804', 'refnode.v1.StopVm', 'f3e0792e105e2bfe88e7b3bab5097b93a59a8c5b239fe3c6f87a8d0f72ab9032', 0, NULL, 1743552000000000);
INSERT INTO "golden_fence_meta" (id, version) VALUES (1, 1);
