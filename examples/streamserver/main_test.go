package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// env is a fake environment for parseConfig.
func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

func TestParseConfigRefusesAnOpenAPIWithoutDev(t *testing.T) {
	_, err := parseConfig([]string{"-addr", "127.0.0.1:0"}, env(nil))
	require.ErrorContains(t, err, "no API token")
	require.ErrorContains(t, err, "-api-token")
	require.ErrorContains(t, err, apiTokenEnv)

	cfg, err := parseConfig([]string{"-dev"}, env(nil))
	require.NoError(t, err)
	require.Empty(t, cfg.APIToken)
	require.True(t, cfg.Dev)
}

func TestParseConfigTakesTheTokenFromFlagOrEnvironment(t *testing.T) {
	cfg, err := parseConfig(nil, env(map[string]string{apiTokenEnv: "from-env"}))
	require.NoError(t, err)
	require.Equal(t, "from-env", cfg.APIToken)

	cfg, err = parseConfig([]string{"-api-token", "from-flag"}, env(map[string]string{apiTokenEnv: "from-env"}))
	require.NoError(t, err)
	require.Equal(t, "from-flag", cfg.APIToken)

	cfg, err = parseConfig([]string{"-dev"}, env(map[string]string{apiTokenEnv: "from-env"}))
	require.NoError(t, err)
	require.Equal(t, "from-env", cfg.APIToken, "-dev does not drop a token that is given")
	require.False(t, cfg.PublicStreams, "streams need the token by default")

	cfg, err = parseConfig([]string{"-public-streams"}, env(map[string]string{apiTokenEnv: "from-env"}))
	require.NoError(t, err)
	require.True(t, cfg.PublicStreams)
}

func TestParseConfigEncryptionKey(t *testing.T) {
	dir := t.TempDir()
	key := bytes.Repeat([]byte{0xa5}, encryptionKeyBytes)
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, data, 0o600))
		return path
	}
	good := write("good", []byte(base64.StdEncoding.EncodeToString(key)+"\n"))
	withData := func(extra ...string) []string {
		return append([]string{"-api-token", "t", "-data", filepath.Join(dir, "data")}, extra...)
	}

	cfg, err := parseConfig(withData("-encryption-key-file", good), env(nil))
	require.NoError(t, err)
	require.Equal(t, key, cfg.EncryptionKey)

	cfg, err = parseConfig(withData(), env(map[string]string{encryptionKeyEnv: base64.StdEncoding.EncodeToString(key)}))
	require.NoError(t, err)
	require.Equal(t, key, cfg.EncryptionKey)

	cfg, err = parseConfig(withData(), env(nil))
	require.NoError(t, err)
	require.Nil(t, cfg.EncryptionKey, "no key means none")

	short := write("short", []byte(base64.StdEncoding.EncodeToString(key[:16])))
	_, err = parseConfig(withData("-encryption-key-file", short), env(nil))
	require.ErrorContains(t, err, "is 16 bytes, want 32, base64-encoded")
	require.ErrorContains(t, err, short)

	_, err = parseConfig(withData(), env(map[string]string{encryptionKeyEnv: base64.StdEncoding.EncodeToString(append(key, 1))}))
	require.ErrorContains(t, err, "is 33 bytes, want 32")
	require.ErrorContains(t, err, encryptionKeyEnv)

	raw := write("raw", key) // the bytes themselves, not base64
	_, err = parseConfig(withData("-encryption-key-file", raw), env(nil))
	require.ErrorContains(t, err, "is not base64")

	_, err = parseConfig(withData("-encryption-key-file", filepath.Join(dir, "missing")), env(nil))
	require.ErrorContains(t, err, "reading the encryption key")

	_, err = parseConfig([]string{"-api-token", "t", "-encryption-key-file", good}, env(nil))
	require.ErrorContains(t, err, "needs -data or -postgres")
}

func TestParseConfigPostgres(t *testing.T) {
	const dsn = "postgres://db.example/streams"
	cfg, err := parseConfig([]string{"-dev", "-postgres", dsn}, env(nil))
	require.NoError(t, err)
	require.Equal(t, dsn, cfg.Postgres)

	cfg, err = parseConfig([]string{"-dev"}, env(map[string]string{postgresEnv: dsn}))
	require.NoError(t, err)
	require.Equal(t, dsn, cfg.Postgres)

	cfg, err = parseConfig([]string{"-dev", "-postgres", "postgres://other"}, env(map[string]string{postgresEnv: dsn}))
	require.NoError(t, err)
	require.Equal(t, "postgres://other", cfg.Postgres, "the flag wins")

	_, err = parseConfig([]string{"-dev", "-postgres", dsn, "-data", t.TempDir()}, env(nil))
	require.ErrorContains(t, err, "exclude each other")
	_, err = parseConfig([]string{"-dev", "-data", t.TempDir()}, env(map[string]string{postgresEnv: dsn}))
	require.ErrorContains(t, err, "exclude each other")

	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, encryptionKeyBytes))
	cfg, err = parseConfig([]string{"-dev", "-postgres", dsn}, env(map[string]string{encryptionKeyEnv: key}))
	require.NoError(t, err, "a key seals secrets in the database too")
	require.Len(t, cfg.EncryptionKey, encryptionKeyBytes)
}

func TestParseConfigInbox(t *testing.T) {
	cfg, err := parseConfig([]string{"-dev", "-inbox", "-inbox-secret", "github=gh=s", "-inbox-secret", "standard=whsec_c2VjcmV0"}, env(nil))
	require.NoError(t, err)
	require.True(t, cfg.Inbox)
	require.Equal(t, map[string]string{"github": "gh=s", "standard": "whsec_c2VjcmV0"}, cfg.InboxSecrets)

	_, err = parseConfig([]string{"-dev", "-inbox-secret", "github=s"}, env(nil))
	require.ErrorContains(t, err, "needs -inbox")
	_, err = parseConfig([]string{"-dev", "-inbox-retention"}, env(nil))
	require.ErrorContains(t, err, "-inbox-retention needs -inbox")
	cfg, err = parseConfig([]string{"-dev", "-inbox", "-inbox-retention"}, env(nil))
	require.NoError(t, err)
	require.True(t, cfg.InboxRetention)
	for _, bad := range []string{"github", "=s", "github="} {
		_, err = parseConfig([]string{"-dev", "-inbox", "-inbox-secret", bad}, env(nil))
		require.ErrorContains(t, err, "PROVIDER=SECRET", bad)
	}
}

// Every flag can come from its STREAMHOOKS_* variable; a flag given wins.
func TestParseConfigFromEnvironment(t *testing.T) {
	cfg, err := parseConfig([]string{"-addr", "127.0.0.1:9999"}, env(map[string]string{
		"STREAMHOOKS_ADDR":                  "127.0.0.1:1",
		"STREAMHOOKS_DEV":                   "true",
		"STREAMHOOKS_LOG_FORMAT":            "json",
		"STREAMHOOKS_LOG_LEVEL":             "debug",
		"STREAMHOOKS_METRICS_SUBSCRIPTIONS": "20",
		"STREAMHOOKS_INBOX":                 "1",
		"STREAMHOOKS_INBOX_SECRET":          "github=s1 standard=whsec_c2VjcmV0",
		"STREAMHOOKS_CALLBACK_BASE":         "https://hooks.example",
	}))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9999", cfg.Addr, "the flag wins")
	require.True(t, cfg.Dev)
	require.True(t, cfg.Inbox)
	require.Equal(t, map[string]string{"github": "s1", "standard": "whsec_c2VjcmV0"}, cfg.InboxSecrets)
	require.Equal(t, 20, cfg.SubscriptionMetrics)
	require.Equal(t, "https://hooks.example", cfg.CallbackBase)
	require.True(t, cfg.Logger.Enabled(context.Background(), slog.LevelDebug))
	require.IsType(t, &slog.JSONHandler{}, cfg.Logger.Handler())

	cfg, err = parseConfig([]string{"-dev"}, env(nil))
	require.NoError(t, err)
	require.False(t, cfg.Logger.Enabled(context.Background(), slog.LevelDebug), "info by default")
	require.IsType(t, &slog.TextHandler{}, cfg.Logger.Handler())

	_, err = parseConfig([]string{"-dev"}, env(map[string]string{"STREAMHOOKS_LIVENESS_TIMEOUT": "soon"}))
	require.ErrorContains(t, err, "$STREAMHOOKS_LIVENESS_TIMEOUT")
	_, err = parseConfig([]string{"-dev", "-log-format", "xml"}, env(nil))
	require.ErrorContains(t, err, "want text or json")
}

// -tenant-token maps tenants to tokens, from flags or from
// $STREAMHOOKS_TENANT_TOKEN, space-separated.
func TestParseConfigTenants(t *testing.T) {
	cfg, err := parseConfig([]string{"-api-token", "op", "-tenant-token", "acme=t1", "-tenant-token", "globex=t=2", "-tenant-max-subscriptions", "5"}, env(nil))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"acme": "t1", "globex": "t=2"}, cfg.TenantTokens)
	require.Equal(t, 5, cfg.TenantMaxSubscriptions)
	cfg, err = parseConfig(nil, env(map[string]string{
		"STREAMHOOKS_API_TOKEN":                "op",
		"STREAMHOOKS_TENANT_TOKEN":             "acme=t1 globex=t2",
		"STREAMHOOKS_TENANT_MAX_SUBSCRIPTIONS": "3",
	}))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"acme": "t1", "globex": "t2"}, cfg.TenantTokens)
	require.Equal(t, 3, cfg.TenantMaxSubscriptions)
	for _, bad := range []string{"acme", "=t", "acme="} {
		_, err = parseConfig([]string{"-api-token", "op", "-tenant-token", bad}, env(nil))
		require.ErrorContains(t, err, "TENANT=TOKEN", bad)
	}
}
