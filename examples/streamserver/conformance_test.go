package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
	"github.com/streamhooks/webhooks/internal/pgtest"
)

// conformanceDir holds the npm project pinning the published Durable
// Streams conformance suite, @durable-streams/server-conformance-tests.
var conformanceDir = filepath.Join("testdata", "conformance")

// conformanceGroups are the suite's top-level groups the example server
// claims: the reserved subscription APIs (the suite's opt-in
// `subscriptions: true` tests) and the core groups it supports. README
// ("Conformance") lists the core groups it does not.
var conformanceGroups = []string{
	"Reserved subscription APIs",
	"Basic Stream Operations",
	"Read Operations",
	"Long-Poll Operations",
	"Content-Type Validation",
	"HEAD Metadata",
	"Chunking and Large Payloads",
	"Read-Your-Writes Consistency",
	"JSON Mode",
}

// TestConformanceSuite runs the published conformance suite, with its
// subscription tests, against the example server serving the reserved
// `__ds` API under /v1/stream, where the suite expects it: on the memory
// Store, on SQLite and on PostgreSQL (STREAMHOOKS_TEST_POSTGRES; skipped
// without it, except under CI). It needs node and `npm ci` run in
// testdata/conformance; without them it skips, except under CI.
func TestConformanceSuite(t *testing.T) {
	node, err := exec.LookPath("node")
	vitest := filepath.Join("node_modules", "vitest", "vitest.mjs")
	if err == nil {
		_, err = os.Stat(filepath.Join(conformanceDir, vitest))
	}
	if err == nil {
		_, err = os.Stat(filepath.Join(conformanceDir, "node_modules", "@durable-streams", "server-conformance-tests", "package.json"))
	}
	if err != nil {
		msg := "conformance suite unavailable (" + err.Error() + "); run: npm ci --prefix examples/streamserver/testdata/conformance"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	for _, store := range []struct {
		name string
		cfg  func(t *testing.T) exampleserver.Config
	}{
		{"memory", func(*testing.T) exampleserver.Config { return exampleserver.Config{} }},
		{"sqlite", func(t *testing.T) exampleserver.Config { return exampleserver.Config{DataDir: t.TempDir()} }},
		{"postgres", func(t *testing.T) exampleserver.Config { return exampleserver.Config{Postgres: pgtest.SchemaDSN(t)} }},
	} {
		t.Run(store.name, func(t *testing.T) { runConformance(t, node, vitest, store.cfg(t)) })
	}
}

// runConformance runs the suite against an example server started with
// cfg, its address, stream root and logger set here.
func runConformance(t *testing.T, node, vitest string, cfg exampleserver.Config) {
	ctx := context.Background()
	cfg.Addr, cfg.Dev, cfg.StreamRoot = "127.0.0.1:0", true, "/v1/stream"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := exampleserver.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		shutdown, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, srv.Close(shutdown))
	})

	quoted := make([]string, len(conformanceGroups))
	for i, g := range conformanceGroups {
		quoted[i] = regexp.QuoteMeta(g)
	}
	run, cancel := context.WithTimeout(ctx, 8*time.Minute)
	defer cancel()
	// -t matches a test's full name, its groups' titles and its own joined
	// by spaces; "HEAD Metadata" is also the start of "HEAD Metadata Edge
	// Cases", which is not claimed.
	cmd := exec.CommandContext(run, node, vitest, "run", "--reporter=dot",
		"-t", "^("+strings.Join(quoted, "|")+")(?! Edge Cases) ")
	cmd.Dir = conformanceDir
	cmd.Env = append(os.Environ(), "CONFORMANCE_TEST_URL="+srv.URL, "NO_COLOR=1", "FORCE_COLOR=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if err != nil || testing.Verbose() {
		t.Logf("conformance suite output:\n%s", out.String())
	}
	require.NoError(t, err, "the conformance suite failed")
	// A filter that matched nothing would pass with no test run.
	require.Regexp(t, `Tests\s+\d+ passed`, out.String())
	require.NotRegexp(t, `Tests\s+.*failed`, out.String())
}
