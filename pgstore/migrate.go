package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/streamhooks/webhooks/internal/seal"
)

// migrations are the schema's versions in order: step i takes the schema
// from version i to i+1. Released steps never change; a new schema is a new
// step.
var migrations = []string{
	// 1: subscriptions, consumers and their indexes. Identifiers and paths
	// collate as bytes ("C"): ListSubscriptions and ConsumersByStream order
	// by ID byte-wise, whatever the database's locale.
	`
CREATE TABLE streamhooks_meta (
	key   text COLLATE "C" PRIMARY KEY,
	value bytea NOT NULL
);

-- description is bytea: text cannot hold the NUL a client may send.
CREATE TABLE streamhooks_subscriptions (
	id          text COLLATE "C" PRIMARY KEY,
	pattern     text NOT NULL,
	webhook     text NOT NULL,
	description bytea NOT NULL,
	secret      bytea NOT NULL, -- sealed when the store has an encryption key
	created_at  bigint
);

-- Times are UTC Unix nanoseconds, NULL when zero. data holds the other
-- fields, as webhooks.Consumer.MarshalData encodes them.
CREATE TABLE streamhooks_consumers (
	id              text COLLATE "C" PRIMARY KEY,
	subscription_id text COLLATE "C" NOT NULL REFERENCES streamhooks_subscriptions (id) ON DELETE CASCADE,
	primary_stream  text COLLATE "C" NOT NULL,
	state           text NOT NULL,
	deadline        bigint,
	data            bytea NOT NULL
);
CREATE INDEX streamhooks_consumers_by_subscription ON streamhooks_consumers (subscription_id);
CREATE INDEX streamhooks_consumers_by_primary_stream ON streamhooks_consumers (primary_stream);
-- Most consumers are IDLE with no deadline and stay out of this index.
CREATE INDEX streamhooks_consumers_by_deadline ON streamhooks_consumers (deadline, id) WHERE deadline IS NOT NULL;

-- The streams of a consumer other than its primary stream, for
-- ConsumersByStream. An update that changes offsets only leaves it alone.
CREATE TABLE streamhooks_consumer_streams (
	path        text COLLATE "C" NOT NULL,
	consumer_id text COLLATE "C" NOT NULL REFERENCES streamhooks_consumers (id) ON DELETE CASCADE,
	PRIMARY KEY (path, consumer_id)
);
CREATE INDEX streamhooks_consumer_streams_by_consumer ON streamhooks_consumer_streams (consumer_id);
`,
	// Leases, for webhooks.Leaser. until is UTC Unix nanoseconds.
	`
CREATE TABLE streamhooks_leases (
	name   text COLLATE "C" PRIMARY KEY,
	holder text NOT NULL,
	until  bigint NOT NULL
);
`,
	// A subscription's other fields, as webhooks.Subscription.MarshalData
	// encodes them, sealed as secret is; empty for one stored before.
	`
ALTER TABLE streamhooks_subscriptions ADD COLUMN data bytea NOT NULL DEFAULT '';
`,
	// ListConsumers reads a page of a subscription's consumers, in a state
	// or in all, from an index in ID order. The first index serves the
	// cascade from subscriptions too, in place of the one it extends.
	// Health and the delivery log have tables of their own, so that what
	// changes with every delivery neither notifies the watchers nor
	// rewrites a subscription's row. seq orders a consumer's attempts.
	`
CREATE INDEX streamhooks_consumers_by_subscription_id ON streamhooks_consumers (subscription_id, id);
CREATE INDEX streamhooks_consumers_by_subscription_state ON streamhooks_consumers (subscription_id, state, id);
DROP INDEX streamhooks_consumers_by_subscription;

CREATE TABLE streamhooks_subscription_health (
	subscription_id text COLLATE "C" PRIMARY KEY REFERENCES streamhooks_subscriptions (id) ON DELETE CASCADE,
	data            bytea NOT NULL -- webhooks.SubscriptionHealth.MarshalBinary
);

CREATE TABLE streamhooks_delivery_attempts (
	seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	consumer_id text COLLATE "C" NOT NULL REFERENCES streamhooks_consumers (id) ON DELETE CASCADE,
	data        bytea NOT NULL -- webhooks.DeliveryAttempt.MarshalData
);
CREATE INDEX streamhooks_delivery_attempts_by_consumer ON streamhooks_delivery_attempts (consumer_id, seq);
`,
	// The __ds subscriptions (webhooks.DSStore): a row per subscription
	// with its cursor group, kept as a tombstone after a delete, and a row
	// per linked stream. Paths and offsets collate as bytes, the order in
	// which offsets compare. lease_ttl is in nanoseconds.
	`
CREATE TABLE streamhooks_ds_subscriptions (
	id               text COLLATE "C" PRIMARY KEY,
	deleted          boolean NOT NULL,
	type             text NOT NULL,
	pattern          text NOT NULL,
	streams          bytea NOT NULL, -- a JSON array
	webhook_url      text NOT NULL,
	wake_stream      text COLLATE "C" NOT NULL,
	lease_ttl        bigint NOT NULL,
	description      bytea NOT NULL,
	config_hash      text NOT NULL,
	created_at       bigint,
	generation       bigint NOT NULL,
	wake_id          text NOT NULL,
	holder           text NOT NULL,
	lease_expires_at bigint,
	due_at           bigint,
	attempt          integer NOT NULL,
	status           text NOT NULL
);
CREATE INDEX streamhooks_ds_subscriptions_by_due ON streamhooks_ds_subscriptions (due_at, id) WHERE due_at IS NOT NULL AND NOT deleted;

CREATE TABLE streamhooks_ds_links (
	subscription_id text COLLATE "C" NOT NULL REFERENCES streamhooks_ds_subscriptions (id),
	path            text COLLATE "C" NOT NULL,
	link_type       smallint NOT NULL, -- webhooks.DSLinkType flags
	acked_offset    text COLLATE "C" NOT NULL,
	tail_offset     text COLLATE "C" NOT NULL,
	pending         boolean NOT NULL, -- tail_offset > acked_offset
	PRIMARY KEY (subscription_id, path)
);
CREATE INDEX streamhooks_ds_links_by_path ON streamhooks_ds_links (path, subscription_id);
CREATE INDEX streamhooks_ds_links_pending ON streamhooks_ds_links (subscription_id, path) WHERE pending;
`,
	// The delivery log of the __ds subscriptions (webhooks.DSDeliveryLogKey),
	// beside the consumers' log, whose rows reference a consumer. A
	// subscription's delete drops its rows.
	`
CREATE TABLE streamhooks_ds_delivery_attempts (
	seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	subscription_id text COLLATE "C" NOT NULL REFERENCES streamhooks_ds_subscriptions (id),
	data            bytea NOT NULL -- webhooks.DeliveryAttempt.MarshalData
);
CREATE INDEX streamhooks_ds_delivery_attempts_by_subscription ON streamhooks_ds_delivery_attempts (subscription_id, seq);
`,
}

// migrationLock is the first key of the advisory lock that serializes
// migrations; the second is the schema's name, so that stores in different
// schemas of one database do not wait for each other.
const migrationLock = 0x5e4d_0001

// migrate brings the schema to the latest version and checks the
// encryption key, in one transaction that holds an advisory lock, so that
// engines starting together migrate once and the others wait and see the
// result.
func (s *Store) migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext(coalesce(current_schema(), '')))", migrationLock); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS streamhooks_schema_versions (
			version    integer PRIMARY KEY,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return err
		}
		var version int
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM streamhooks_schema_versions").Scan(&version); err != nil {
			return err
		}
		if version > len(migrations) {
			return fmt.Errorf("schema version %d is newer than this build supports (%d); use a newer build", version, len(migrations))
		}
		for v := version; v < len(migrations); v++ {
			// Steps hold several statements: the simple protocol runs them.
			if _, err := tx.Conn().PgConn().Exec(ctx, migrations[v]).ReadAll(); err != nil {
				return fmt.Errorf("migrate to schema version %d: %w", v+1, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO streamhooks_schema_versions (version) VALUES ($1)", v+1); err != nil {
				return fmt.Errorf("migrate to schema version %d: %w", v+1, err)
			}
		}
		return s.checkKey(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	return nil
}

// keyCheck is sealed into the meta table of an encrypted database, so that
// a wrong key fails at New rather than at the first secret read.
const keyCheck = "streamhooks pgstore key check"

// checkKey fixes whether the database is encrypted, on the New that
// creates it, and verifies the key on every later New.
func (s *Store) checkKey(ctx context.Context, tx pgx.Tx) error {
	var sealed []byte
	err := tx.QueryRow(ctx, "SELECT value FROM streamhooks_meta WHERE key = 'key_check'").Scan(&sealed)
	switch {
	case errors.Is(err, pgx.ErrNoRows) && s.sealer == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		// Secrets stored in plaintext would stay readable under a key.
		var secrets bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM streamhooks_subscriptions) OR EXISTS (SELECT 1 FROM streamhooks_meta)").Scan(&secrets); err != nil {
			return err
		}
		if secrets {
			return errors.New("database was created without an encryption key and holds plaintext secrets")
		}
		_, err := tx.Exec(ctx, "INSERT INTO streamhooks_meta (key, value) VALUES ('key_check', $1)", s.sealer.Seal([]byte(keyCheck), seal.ADKeyCheck))
		return err
	case err != nil:
		return err
	case s.sealer == nil:
		return errors.New("database is encrypted; pass WithEncryptionKey")
	}
	if plain, err := s.sealer.Open(sealed, seal.ADKeyCheck); err != nil || string(plain) != keyCheck {
		return errors.New("encryption key does not match the database")
	}
	return nil
}
