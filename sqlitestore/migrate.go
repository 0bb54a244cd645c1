package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/streamhooks/webhooks/internal/seal"
)

// migrations are the schema's versions in order: step i takes a database
// from PRAGMA user_version i to i+1. Released steps never change; a new
// schema is a new step.
var migrations = []string{
	// 1: subscriptions, consumers and their indexes.
	`
CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value BLOB NOT NULL
) WITHOUT ROWID;

CREATE TABLE subscriptions (
	id          TEXT PRIMARY KEY,
	pattern     TEXT NOT NULL,
	webhook     TEXT NOT NULL,
	description TEXT NOT NULL,
	secret      BLOB NOT NULL, -- sealed when the store has an encryption key
	created_at  INTEGER
);

-- Times are UTC Unix nanoseconds, NULL when zero. data holds the other
-- fields, as webhooks.Consumer.MarshalData encodes them.
CREATE TABLE consumers (
	id              TEXT PRIMARY KEY,
	subscription_id TEXT NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
	primary_stream  TEXT NOT NULL,
	state           TEXT NOT NULL,
	deadline        INTEGER,
	data            BLOB NOT NULL
);
CREATE INDEX consumers_by_subscription ON consumers (subscription_id);
CREATE INDEX consumers_by_primary_stream ON consumers (primary_stream, id);
-- Most consumers are IDLE with no deadline and stay out of this index.
CREATE INDEX consumers_by_deadline ON consumers (deadline, id) WHERE deadline IS NOT NULL;

-- The streams of a consumer other than its primary stream, for
-- ConsumersByStream.
CREATE TABLE consumer_streams (
	path        TEXT NOT NULL,
	consumer_id TEXT NOT NULL REFERENCES consumers (id) ON DELETE CASCADE,
	PRIMARY KEY (path, consumer_id)
) WITHOUT ROWID;
CREATE INDEX consumer_streams_by_consumer ON consumer_streams (consumer_id);

-- Consumers per state, kept by triggers so that CountConsumers reads a few
-- rows and cascading deletes are counted too.
CREATE TABLE consumer_counts (
	state TEXT PRIMARY KEY,
	n     INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TRIGGER consumers_count_insert AFTER INSERT ON consumers BEGIN
	INSERT INTO consumer_counts (state, n) VALUES (new.state, 1)
		ON CONFLICT (state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER consumers_count_delete AFTER DELETE ON consumers BEGIN
	UPDATE consumer_counts SET n = n - 1 WHERE state = old.state;
END;
CREATE TRIGGER consumers_count_update AFTER UPDATE OF state ON consumers
WHEN old.state IS NOT new.state BEGIN
	UPDATE consumer_counts SET n = n - 1 WHERE state = old.state;
	INSERT INTO consumer_counts (state, n) VALUES (new.state, 1)
		ON CONFLICT (state) DO UPDATE SET n = n + 1;
END;
`,
	// Leases, for webhooks.Leaser. until is UTC Unix nanoseconds.
	`
CREATE TABLE leases (
	name   TEXT PRIMARY KEY,
	holder TEXT NOT NULL,
	until  INTEGER NOT NULL
) WITHOUT ROWID;
`,
	// A counter of subscription changes, bumped by triggers in the
	// transaction of each create and delete, that WatchSubscriptions polls.
	`
CREATE TABLE subscriptions_version (
	one     INTEGER PRIMARY KEY CHECK (one = 1),
	version INTEGER NOT NULL
);
INSERT INTO subscriptions_version (one, version) VALUES (1, 0);
CREATE TRIGGER subscriptions_version_insert AFTER INSERT ON subscriptions BEGIN
	UPDATE subscriptions_version SET version = version + 1;
END;
CREATE TRIGGER subscriptions_version_delete AFTER DELETE ON subscriptions BEGIN
	UPDATE subscriptions_version SET version = version + 1;
END;
`,
	// A subscription's other fields, as webhooks.Subscription.MarshalData
	// encodes them, sealed as secret is; empty for one stored before.
	`
ALTER TABLE subscriptions ADD COLUMN data BLOB NOT NULL DEFAULT x'';
`,
	// Updates bump the change counter too.
	`
CREATE TRIGGER subscriptions_version_update AFTER UPDATE ON subscriptions BEGIN
	UPDATE subscriptions_version SET version = version + 1;
END;
`,
	// ListConsumers reads a page of a subscription's consumers, in a state
	// or in all, from an index in ID order. The first index serves the
	// cascade from subscriptions too, in place of the one it extends.
	// Health and the delivery log have tables of their own: an update of
	// subscriptions bumps the change counter, and both change with every
	// delivery. seq, the rowid, orders a consumer's attempts: a new row's
	// is above every stored one's.
	`
CREATE INDEX consumers_by_subscription_id ON consumers (subscription_id, id);
CREATE INDEX consumers_by_subscription_state ON consumers (subscription_id, state, id);
DROP INDEX consumers_by_subscription;

CREATE TABLE subscription_health (
	subscription_id TEXT PRIMARY KEY REFERENCES subscriptions (id) ON DELETE CASCADE,
	data            BLOB NOT NULL -- webhooks.SubscriptionHealth.MarshalBinary
) WITHOUT ROWID;

CREATE TABLE delivery_attempts (
	seq         INTEGER PRIMARY KEY,
	consumer_id TEXT NOT NULL REFERENCES consumers (id) ON DELETE CASCADE,
	data        BLOB NOT NULL -- webhooks.DeliveryAttempt.MarshalData
);
CREATE INDEX delivery_attempts_by_consumer ON delivery_attempts (consumer_id, seq);
`,
	// The __ds subscriptions (webhooks.DSStore): a row per subscription
	// with its cursor group, kept as a tombstone (deleted = 1) after a
	// delete, and a row per linked stream. Offsets and paths compare as
	// bytes, SQLite's BINARY collation. lease_ttl is in nanoseconds.
	// Creates and deletes bump the change counter WatchSubscriptions polls.
	`
CREATE TABLE ds_subscriptions (
	id               TEXT PRIMARY KEY,
	deleted          INTEGER NOT NULL,
	type             TEXT NOT NULL,
	pattern          TEXT NOT NULL,
	streams          TEXT NOT NULL, -- a JSON array
	webhook_url      TEXT NOT NULL,
	wake_stream      TEXT NOT NULL,
	lease_ttl        INTEGER NOT NULL,
	description      TEXT NOT NULL,
	config_hash      TEXT NOT NULL,
	created_at       INTEGER,
	generation       INTEGER NOT NULL,
	wake_id          TEXT NOT NULL,
	holder           TEXT NOT NULL,
	lease_expires_at INTEGER,
	due_at           INTEGER,
	attempt          INTEGER NOT NULL,
	status           TEXT NOT NULL
);
CREATE INDEX ds_subscriptions_by_due ON ds_subscriptions (due_at, id) WHERE due_at IS NOT NULL AND deleted = 0;

CREATE TABLE ds_links (
	-- No foreign key: a subscription row is never deleted (a delete
	-- tombstones it and drops its links itself), and the key's check
	-- would probe the links on every upsert of a subscription.
	subscription_id TEXT NOT NULL,
	path            TEXT NOT NULL,
	link_type       INTEGER NOT NULL, -- webhooks.DSLinkType flags
	acked_offset    TEXT NOT NULL,
	tail_offset     TEXT NOT NULL,
	pending         INTEGER NOT NULL, -- tail_offset > acked_offset
	PRIMARY KEY (subscription_id, path)
) WITHOUT ROWID;
CREATE INDEX ds_links_by_path ON ds_links (path, subscription_id);
CREATE INDEX ds_links_pending ON ds_links (subscription_id, path) WHERE pending = 1;

CREATE TRIGGER ds_subscriptions_version_insert AFTER INSERT ON ds_subscriptions BEGIN
	UPDATE subscriptions_version SET version = version + 1;
END;
CREATE TRIGGER ds_subscriptions_version_update AFTER UPDATE OF deleted ON ds_subscriptions BEGIN
	UPDATE subscriptions_version SET version = version + 1;
END;
`,
	// The delivery log of the __ds subscriptions (webhooks.DSDeliveryLogKey),
	// beside the consumers' log, whose rows reference a consumer. A
	// subscription's delete drops its rows.
	`
CREATE TABLE ds_delivery_attempts (
	seq             INTEGER PRIMARY KEY,
	subscription_id TEXT NOT NULL,
	data            BLOB NOT NULL -- webhooks.DeliveryAttempt.MarshalData
);
CREATE INDEX ds_delivery_attempts_by_subscription ON ds_delivery_attempts (subscription_id, seq);
`,
}

// migrate brings the schema to the latest version and checks the
// encryption key, in one transaction that holds the write lock, so that
// processes opening the file together migrate it once.
func (s *Store) migrate(ctx context.Context) (err error) {
	if err := s.w.begin(); err != nil {
		return fmt.Errorf("sqlitestore: open: %w", err)
	}
	defer func() {
		if err != nil {
			s.w.rollback()
		}
	}()
	// Readers that never wait for the writer need the write-ahead log.
	var mode string
	if err := s.w.queryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("sqlitestore: open: %w", err)
	}
	if mode != "wal" {
		return fmt.Errorf("sqlitestore: database is in journal mode %q, not WAL", mode)
	}
	var version int
	if err := s.w.queryRow("PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("sqlitestore: open: %w", err)
	}
	if version > len(migrations) {
		return fmt.Errorf("sqlitestore: database schema version %d is newer than this build supports (%d); use a newer build", version, len(migrations))
	}
	for v := version; v < len(migrations); v++ {
		// Steps hold several statements and run once: not prepared.
		if _, err := s.w.conn.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("sqlitestore: migrate to schema version %d: %w", v+1, err)
		}
		// user_version lives in the file header and commits with the step.
		if _, err := s.w.conn.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v+1)); err != nil {
			return fmt.Errorf("sqlitestore: migrate to schema version %d: %w", v+1, err)
		}
	}
	if err := s.checkKey(); err != nil {
		return err
	}
	if err := s.w.commit(); err != nil {
		return fmt.Errorf("sqlitestore: open: %w", err)
	}
	return nil
}

// keyCheck is sealed into the meta table of an encrypted database, so that
// a wrong key fails at Open rather than at the first secret read.
const keyCheck = "streamhooks sqlitestore key check"

// checkKey fixes whether the database is encrypted, on the Open that creates
// it, and verifies the key on every later Open.
func (s *Store) checkKey() error {
	var sealed []byte
	err := s.w.queryRow("SELECT value FROM meta WHERE key = 'key_check'").Scan(&sealed)
	switch {
	case errors.Is(err, sql.ErrNoRows) && s.sealer == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		// Secrets stored in plaintext would stay readable under a key.
		var secrets bool
		if err := s.w.queryRow("SELECT EXISTS (SELECT 1 FROM subscriptions) OR EXISTS (SELECT 1 FROM meta)").Scan(&secrets); err != nil {
			return fmt.Errorf("sqlitestore: open: %w", err)
		}
		if secrets {
			return errors.New("sqlitestore: database was created without an encryption key and holds plaintext secrets")
		}
		_, err := s.w.exec("INSERT INTO meta (key, value) VALUES ('key_check', ?)", s.sealer.Seal([]byte(keyCheck), seal.ADKeyCheck))
		if err != nil {
			return fmt.Errorf("sqlitestore: open: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("sqlitestore: open: %w", err)
	case s.sealer == nil:
		return errors.New("sqlitestore: database is encrypted; open it WithEncryptionKey")
	}
	if plain, err := s.sealer.Open(sealed, seal.ADKeyCheck); err != nil || string(plain) != keyCheck {
		return errors.New("sqlitestore: encryption key does not match the database")
	}
	return nil
}
