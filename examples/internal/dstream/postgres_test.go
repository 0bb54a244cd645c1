package dstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// dsnEnv names the variable that holds the DSN of a PostgreSQL database the
// tests may create schemas in.
const dsnEnv = "STREAMHOOKS_TEST_POSTGRES"

// testDSN returns the test database's DSN. Without one the test skips,
// except under CI, where the Postgres mode must be tested.
func testDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		msg := dsnEnv + " is not set; set it to a PostgreSQL DSN to test dstream's Postgres mode"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dsn
}

// database is a schema of a test's own, dropped when the test ends, so that
// tests sharing the cluster do not see each other's streams.
type database struct {
	dsn, schema string
}

func newDatabase(t *testing.T) *database {
	t.Helper()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	db := &database{dsn: testDSN(t), schema: "dstream_test_" + hex.EncodeToString(b)}
	db.exec(t, "CREATE SCHEMA "+db.schema)
	t.Cleanup(func() { db.exec(t, "DROP SCHEMA "+db.schema+" CASCADE") })
	return db
}

// exec runs sql on a connection of its own.
func (db *database) exec(t *testing.T, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	require.NoError(t, err)
}

// open returns a function that opens Servers on the schema, each on a small
// pool of its own, as separate processes would. They close when the test
// ends.
func (db *database) open(t *testing.T) func(Options) *Server {
	return func(opts Options) *Server {
		t.Helper()
		cfg, err := pgxpool.ParseConfig(db.dsn)
		require.NoError(t, err)
		cfg.ConnConfig.RuntimeParams["search_path"] = db.schema
		cfg.MaxConns = 4
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s, err := OpenPostgres(context.Background(), pool, opts)
		require.NoError(t, err)
		t.Cleanup(s.Close)
		return s
	}
}
