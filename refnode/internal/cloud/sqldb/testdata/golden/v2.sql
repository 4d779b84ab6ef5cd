-- Golden file of refnode/internal/cloud/sqldb: schema version 2, as today's code stores it in SQLite.
-- Written by a real store (writeRecordsGolden in golden_test.go) with
-- 	go test ./refnode/internal/cloud/sqldb -run TestGolden -update-golden
-- Do not edit, and keep it forever: TestGolden loads it, opens the store on it and reads every row back.
-- The fence's tables beside these have golden files of their own, in fence/sqlfence.
CREATE TABLE "golden_hosts" (uuid TEXT NOT NULL PRIMARY KEY, name TEXT NOT NULL, address TEXT NOT NULL, status TEXT NOT NULL, managed_by TEXT NOT NULL, takeovers INTEGER NOT NULL, connected_us INTEGER);
CREATE TABLE "golden_images" (uuid TEXT NOT NULL PRIMARY KEY, name TEXT NOT NULL, url TEXT NOT NULL, size_mb INTEGER NOT NULL);
CREATE TABLE "golden_vms" (uuid TEXT NOT NULL PRIMARY KEY, name TEXT NOT NULL, image_uuid TEXT NOT NULL, host_uuid TEXT NOT NULL, cpus INTEGER NOT NULL, memory_mb INTEGER NOT NULL, state TEXT NOT NULL, version INTEGER NOT NULL DEFAULT 1);
CREATE TABLE "golden_meta" (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL);
INSERT INTO "golden_hosts" (uuid, name, address, status, managed_by, takeovers, connected_us) VALUES ('1b2c3d4e5f6041828394a5b6c7d8e901', 'kvm-01', '10.0.0.11', 'connected', '9a8b7c6d5e4f40312213a4b5c6d7e801', 2, 1748781296789012);
INSERT INTO "golden_hosts" (uuid, name, address, status, managed_by, takeovers, connected_us) VALUES ('1b2c3d4e5f6041828394a5b6c7d8e902', 'kvm-02', '10.0.0.12', 'disconnected', '9a8b7c6d5e4f40312213a4b5c6d7e802', 0, 1748728799000001);
INSERT INTO "golden_hosts" (uuid, name, address, status, managed_by, takeovers, connected_us) VALUES ('1b2c3d4e5f6041828394a5b6c7d8e903', '', 'kvm-03.example.com', 'disconnected', '', 0, NULL);
INSERT INTO "golden_hosts" (uuid, name, address, status, managed_by, takeovers, connected_us) VALUES ('1b2c3d4e5f6041828394a5b6c7d8e904', 'kvm-04 «ünïcode»', '[fd00::4]:16509', 'connected', '9a8b7c6d5e4f40312213a4b5c6d7e801', 7, 0);
INSERT INTO "golden_images" (uuid, name, url, size_mb) VALUES ('0a1b2c3d4e5f40718293a4b5c6d7e801', 'ubuntu-24.04', 'https://images.example.com/ubuntu-24.04-server-cloudimg-amd64.img', 2252);
INSERT INTO "golden_images" (uuid, name, url, size_mb) VALUES ('0a1b2c3d4e5f40718293a4b5c6d7e802', '', '', 0);
INSERT INTO "golden_images" (uuid, name, url, size_mb) VALUES ('0a1b2c3d4e5f40718293a4b5c6d7e803', 'Ünïcode 镜像 ''quoted'' "double"', 'file:///var/lib/images/with space.qcow2?x=1&y=2', 5497558138880);
INSERT INTO "golden_vms" (uuid, name, image_uuid, host_uuid, cpus, memory_mb, state, version) VALUES ('2c3d4e5f6a7041928394a5b6c7d8e901', 'web-1', '0a1b2c3d4e5f40718293a4b5c6d7e801', '1b2c3d4e5f6041828394a5b6c7d8e901', 2, 2048, 'created', 1);
INSERT INTO "golden_vms" (uuid, name, image_uuid, host_uuid, cpus, memory_mb, state, version) VALUES ('2c3d4e5f6a7041928394a5b6c7d8e902', 'web-2', '0a1b2c3d4e5f40718293a4b5c6d7e801', '1b2c3d4e5f6041828394a5b6c7d8e901', 1, 512, 'starting', 2);
INSERT INTO "golden_vms" (uuid, name, image_uuid, host_uuid, cpus, memory_mb, state, version) VALUES ('2c3d4e5f6a7041928394a5b6c7d8e903', 'db-1', '0a1b2c3d4e5f40718293a4b5c6d7e803', '1b2c3d4e5f6041828394a5b6c7d8e902', 64, 262144, 'running', 2);
INSERT INTO "golden_vms" (uuid, name, image_uuid, host_uuid, cpus, memory_mb, state, version) VALUES ('2c3d4e5f6a7041928394a5b6c7d8e904', '', '0a1b2c3d4e5f40718293a4b5c6d7e802', '1b2c3d4e5f6041828394a5b6c7d8e902', 0, 0, 'stopping', 1);
INSERT INTO "golden_vms" (uuid, name, image_uuid, host_uuid, cpus, memory_mb, state, version) VALUES ('2c3d4e5f6a7041928394a5b6c7d8e905', 'it''s stopped', '0a1b2c3d4e5f40718293a4b5c6d7e801', '1b2c3d4e5f6041828394a5b6c7d8e904', 4, 8192, 'stopped', 2);
INSERT INTO "golden_vms" (uuid, name, image_uuid, host_uuid, cpus, memory_mb, state, version) VALUES ('2c3d4e5f6a7041928394a5b6c7d8e906', 'cache-1', '0a1b2c3d4e5f40718293a4b5c6d7e801', '1b2c3d4e5f6041828394a5b6c7d8e901', 8, 16384, 'rebooting', 2);
INSERT INTO "golden_vms" (uuid, name, image_uuid, host_uuid, cpus, memory_mb, state, version) VALUES ('2c3d4e5f6a7041928394a5b6c7d8e907', 'old', '0a1b2c3d4e5f40718293a4b5c6d7e802', '1b2c3d4e5f6041828394a5b6c7d8e903', 1, 256, 'destroyed', 2);
INSERT INTO "golden_meta" (id, version) VALUES (1, 2);
