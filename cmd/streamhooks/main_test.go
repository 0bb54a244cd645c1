package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/openapitest"
	"github.com/streamhooks/webhooks/receiver"
)

// serverBinary is examples/streamserver, built once by TestMain.
var serverBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "streamhooks-cli")
	if err != nil {
		panic(err)
	}
	serverBinary = filepath.Join(dir, "streamserver")
	build := exec.Command("go", "build", "-o", serverBinary, "../../examples/streamserver")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		panic(err)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const token = "cli-test-token"

// startServer runs the example server with an API token and returns its
// URL; it stops when the test ends.
func startServer(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(serverBinary, "-dev", "-addr", "127.0.0.1:0", "-log-format", "json")
	cmd.Env = append(os.Environ(), "STREAMHOOKS_API_TOKEN="+token)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(stderr)
	for lines.Scan() {
		var line struct {
			Msg string `json:"msg"`
			URL string `json:"url"`
		}
		if json.Unmarshal(lines.Bytes(), &line) == nil && line.URL != "" {
			go func() {
				for lines.Scan() {
				}
			}()
			return line.URL
		}
	}
	t.Fatal("the server exited before it served")
	return ""
}

// cliRun runs the CLI with args against base and returns its exit status,
// stdout and stderr.
func cliRun(t *testing.T, base string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	// Every exchange is checked against the OpenAPI document.
	transport = openapitest.NewTransport(t, http.DefaultTransport)
	env := map[string]string{urlEnv: base, tokenEnv: token}
	code := run(context.Background(), args, &stdout, &stderr, func(k string) string { return env[k] }, time.Now)
	return code, stdout.String(), stderr.String()
}

// mustRun runs the CLI and requires it to succeed.
func mustRun(t *testing.T, base string, args ...string) string {
	t.Helper()
	code, out, errOut := cliRun(t, base, args...)
	require.Equal(t, 0, code, "streamhooks %s: %s", strings.Join(args, " "), errOut)
	return out
}

// put creates or appends to a JSON stream on the server.
func put(t *testing.T, base, method, path, body string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Less(t, resp.StatusCode, 300)
}

// The CLI manages a subscription end to end against a real example server:
// create, list, get, pause, resume, update, a dead letter listed and
// revived, its deliveries, rewind, test, rotate and delete; errors show
// the API's code and exit 1.
func TestCLIAgainstTheExampleServer(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	hits := make(chan string, 16)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- r.Header.Get(receiver.IDHeader)
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer hook.Close()
	base := startServer(t)

	// Create from a file, with flags overriding it.
	file := filepath.Join(t.TempDir(), "sub.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"webhook":"http://127.0.0.1:1/nowhere","delivery":"events",
		"batch":{"max_wait_ms":0},"retry":{"max_attempts":1}}`), 0o600))
	out := mustRun(t, base, "subscriptions", "create", "orders", "--pattern", "/orders/*", "--file", file, "--webhook", hook.URL)
	require.Contains(t, out, "whsec_")
	out = mustRun(t, base, "subscriptions", "list")
	require.Contains(t, out, "ID")
	require.Contains(t, out, "orders")
	require.Contains(t, out, hook.URL)
	out = mustRun(t, base, "-o", "json", "subscriptions", "get", "orders")
	var sub map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &sub), out)
	require.Equal(t, "events", sub["delivery"])
	require.Contains(t, mustRun(t, base, "subscriptions", "pause", "orders"), "paused")
	require.Contains(t, mustRun(t, base, "subscriptions", "resume", "orders"), "active")
	require.Contains(t, mustRun(t, base, "subscriptions", "update", "orders", "--description", "the orders"), "the orders")

	// A batch that fails its one attempt is a dead letter; revived, it is
	// delivered.
	put(t, base, http.MethodPut, "/orders/1", `[{"n":1}]`)
	<-hits
	id := webhooks.ConsumerID("orders", "/orders/1")
	var dead string
	require.Eventually(t, func() bool {
		dead = mustRun(t, base, "dead", "orders")
		return strings.Contains(dead, id)
	}, 10*time.Second, 10*time.Millisecond)
	require.Contains(t, dead, "REASON")
	t.Logf("streamhooks dead orders\n%s", dead)
	require.Contains(t, mustRun(t, base, "consumers", "orders", "--state", "FAILED", "--limit", "1"), id)
	failing.Store(false)
	out = mustRun(t, base, "revive", "orders", id)
	t.Logf("streamhooks revive orders %s\n%s", id, out)
	<-hits
	require.Eventually(t, func() bool {
		return !strings.Contains(mustRun(t, base, "dead", "orders"), id)
	}, 10*time.Second, 10*time.Millisecond)
	// The example server keeps no delivery log: a table without rows.
	out = mustRun(t, base, "deliveries", "orders", id)
	require.Contains(t, out, "ERROR CLASS")

	out = mustRun(t, base, "rewind", "orders", "--offset", "-1")
	require.Contains(t, out, "REWOUND")
	<-hits
	out = mustRun(t, base, "test", "orders")
	require.Contains(t, out, "true")
	<-hits
	out = mustRun(t, base, "-o", "json", "rotate", "orders", "--overlap", "1h")
	var rotated map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rotated))
	require.Contains(t, rotated["webhook_secret"], "whsec_")

	// Errors: the API's code and message, exit 1; usage errors exit 2.
	code, _, errOut := cliRun(t, base, "subscriptions", "get", "nope")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "SUBSCRIPTION_NOT_FOUND")
	code, _, errOut = cliRun(t, base, "--token", "wrong", "subscriptions", "list")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "UNAUTHORIZED")
	code, _, _ = cliRun(t, base, "rewind", "orders")
	require.Equal(t, 2, code)

	require.Contains(t, mustRun(t, base, "subscriptions", "delete", "orders"), "deleted")
	require.NotContains(t, mustRun(t, base, "subscriptions", "list"), "orders")
}

// verify accepts a saved request signed, in either scheme, with the key
// that scheme takes, and refuses one whose body changed.
func TestCLIVerify(t *testing.T) {
	raw := []byte("0123456789abcdef0123456789abcdef")
	secret := "whsec_" + base64.StdEncoding.EncodeToString(raw)
	at := time.Unix(1_700_000_000, 0)
	ts := strconv.FormatInt(at.Unix(), 10)
	signed := []byte(`{"n":1}`)
	// Spec 001 keys the HMAC with the whole secret, prefix included.
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "." + string(signed)))
	spec := "Webhook-Signature: t=" + ts + ",sha256=" + hex.EncodeToString(m.Sum(nil)) + "\r\n"
	// Standard Webhooks keys it with the base64 after whsec_, decoded.
	m = hmac.New(sha256.New, raw)
	m.Write([]byte("msg_1." + ts + "." + string(signed)))
	standard := "Webhook-Id: msg_1\r\nWebhook-Timestamp: " + ts + "\r\nWebhook-Signature: v1," + base64.StdEncoding.EncodeToString(m.Sum(nil)) + "\r\n"
	save := func(headers, body string) string {
		req := "POST /hook HTTP/1.1\r\nHost: example\r\n" + headers + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		f := filepath.Join(t.TempDir(), "req.http")
		require.NoError(t, os.WriteFile(f, []byte(req), 0o600))
		return f
	}
	for name, headers := range map[string]string{"spec": spec, "standard": standard} {
		require.Contains(t, mustRun(t, "", "verify", "--secret", secret, save(headers, `{"n":1}`)), "signature valid", name)
		code, _, errOut := cliRun(t, "", "verify", "--secret", secret, save(headers, `{"n":2}`))
		require.Equal(t, 1, code, name)
		require.Contains(t, errOut, "signature", name)
		code, _, _ = cliRun(t, "", "verify", "--secret", secret, "--max-age", "5m", save(headers, `{"n":1}`))
		require.Equal(t, 1, code, "%s: signed long ago", name)
	}
}

// A subscription created --verify is pending while its endpoint does not
// echo the challenge; challenge sends another, verify activates it by
// hand, and verifying an active one is refused with the API's code.
func TestCLIVerifiesAPendingSubscription(t *testing.T) {
	challenges := make(chan string, 16)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		challenges <- r.Header.Get(receiver.ChallengeHeader)
	}))
	defer hook.Close()
	base := startServer(t)

	out := mustRun(t, base, "-o", "json", "subscriptions", "create", "orders", "--pattern", "/orders/*", "--webhook", hook.URL, "--verify")
	var sub map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &sub), out)
	require.Equal(t, "pending", sub["status"])
	require.NotEmpty(t, <-challenges, "the first challenge goes out at once")
	require.Contains(t, mustRun(t, base, "subscriptions", "challenge", "orders"), "pending")
	require.NotEmpty(t, <-challenges, "challenge sends another at once")
	require.Contains(t, mustRun(t, base, "subscriptions", "verify", "orders"), "active")
	code, _, errOut := cliRun(t, base, "subscriptions", "verify", "orders")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not pending")
}
