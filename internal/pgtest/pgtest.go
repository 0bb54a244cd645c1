// Package pgtest gives the module's tests a PostgreSQL schema of their own
// in the database named by STREAMHOOKS_TEST_POSTGRES.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// EnvDSN names the variable that holds the DSN of a PostgreSQL database in
// which the tests may create and drop schemas.
const EnvDSN = "STREAMHOOKS_TEST_POSTGRES"

// DSN returns the test database's DSN. Without one the test skips, except
// under CI, where every PostgreSQL test must run.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		msg := EnvDSN + " is not set; set it to a PostgreSQL DSN to run this test"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dsn
}

// Exec runs sql on a connection of its own to the test database.
func Exec(t testing.TB, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, DSN(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	require.NoError(t, err)
}

// Name returns prefix with a random suffix: a name no other test uses.
func Name(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Schema creates an empty schema, dropped when the test ends, so that tests
// sharing the database do not see each other's tables, and returns its
// name.
func Schema(t testing.TB) string {
	t.Helper()
	name := Name("streamhooks_test_")
	Exec(t, "CREATE SCHEMA "+name)
	t.Cleanup(func() { Exec(t, "DROP SCHEMA "+name+" CASCADE") })
	return name
}

// SchemaDSN returns the test database's DSN with its connections in a
// fresh Schema.
func SchemaDSN(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(DSN(t))
	require.NoError(t, err, "%s must be a URL", EnvDSN)
	q := u.Query()
	q.Set("search_path", Schema(t))
	u.RawQuery = q.Encode()
	return u.String()
}
