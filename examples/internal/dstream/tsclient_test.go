package dstream

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tsClientDir holds the npm project pinning the official TypeScript client.
var tsClientDir = filepath.Join("testdata", "tsclient")

// tsOutput is the line testdata/tsclient/read.mjs prints.
type tsOutput struct {
	Items    json.RawMessage `json:"items"`
	Text     *string         `json:"text"`
	Offset   string          `json:"offset"`
	UpToDate bool            `json:"upToDate"`
}

// TestOfficialTypeScriptClient reads from the server with
// @durable-streams/client. It needs node and `npm ci` run in
// testdata/tsclient; without them it skips, except under CI.
func TestOfficialTypeScriptClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(tsClientDir, "node_modules", "@durable-streams", "client", "package.json"))
	}
	if err != nil {
		msg := "TypeScript client unavailable (" + err.Error() + "); run: npm ci --prefix examples/internal/dstream/testdata/tsclient"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}

	// A server per subtest, so a long-poll the client left behind in one
	// cannot signal "waiting" to the other.
	start := func(t *testing.T) (*fixture, <-chan struct{}) {
		s := New(Options{})
		waiting := watchWaiting(s)
		return serve(t, s), waiting
	}

	t.Run("json", func(t *testing.T) {
		f, waiting := start(t)
		f.mustCreate(t, "/agents/task-1", "application/json", `[{"n":1},{"n":2}]`)
		tail := f.mustAppend(t, "/agents/task-1", "application/json", `"three"`)

		out := runTSClient(t, node, "catchup", f.url("/agents/task-1"))
		require.JSONEq(t, `[{"n":1},{"n":2},"three"]`, string(out.Items))
		require.Equal(t, tail, out.Offset)
		require.True(t, out.UpToDate)

		out = liveTSClient(t, node, f, waiting, "/agents/task-1", tail, "application/json", `{"n":4}`)
		require.JSONEq(t, `[{"n":4}]`, string(out.Items))
	})

	t.Run("bytes", func(t *testing.T) {
		f, waiting := start(t)
		f.mustCreate(t, "/logs/1", "text/plain", "hello ")
		tail := f.mustAppend(t, "/logs/1", "text/plain", "world")

		out := runTSClient(t, node, "catchup", f.url("/logs/1"))
		require.NotNil(t, out.Text)
		require.Equal(t, "hello world", *out.Text)
		require.Equal(t, tail, out.Offset)
		require.True(t, out.UpToDate)

		out = liveTSClient(t, node, f, waiting, "/logs/1", tail, "text/plain", "!")
		require.NotNil(t, out.Text)
		require.Equal(t, "!", *out.Text)
	})
}

func tsCommand(ctx context.Context, node string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.CommandContext(ctx, node, append([]string{"read.mjs"}, args...)...)
	cmd.Dir = tsClientDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cmd, &stdout, &stderr
}

func runTSClient(t *testing.T, node string, args ...string) tsOutput {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, stdout, stderr := tsCommand(ctx, node, args...)
	require.NoError(t, cmd.Run(), "stderr: %s", stderr)
	return parseTSOutput(t, stdout.Bytes())
}

// liveTSClient starts a long-poll read at offset, appends body once the
// client's long-poll is waiting on the server, and returns what it received.
func liveTSClient(t *testing.T, node string, f *fixture, waiting <-chan struct{}, path, offset, contentType, body string) tsOutput {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, stdout, stderr := tsCommand(ctx, node, "live", f.url(path), offset)
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	select {
	case <-waiting:
	case err := <-exited:
		t.Fatalf("client exited before its long-poll waited: %v\nstderr: %s", err, stderr)
	case <-ctx.Done():
		t.Fatal("client never long-polled")
	}
	tail := f.mustAppend(t, path, contentType, body)

	require.NoError(t, <-exited, "stderr: %s", stderr) // ctx bounds the wait
	out := parseTSOutput(t, stdout.Bytes())
	require.Equal(t, tail, out.Offset)
	require.True(t, out.UpToDate)
	return out
}

func parseTSOutput(t *testing.T, b []byte) tsOutput {
	t.Helper()
	var out tsOutput
	require.NoError(t, json.Unmarshal(b, &out), "output: %s", b)
	return out
}
