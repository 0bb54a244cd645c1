package webhooks

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/internal/netguard"
)

// failTimeoutErr is a net.Error that timed out, as a dialer's own timeout.
type failTimeoutErr struct{}

func (failTimeoutErr) Error() string   { return "i/o timeout" }
func (failTimeoutErr) Timeout() bool   { return true }
func (failTimeoutErr) Temporary() bool { return true }

// failPost wraps err as http.Client.Do does.
func failPost(err error) error {
	return &url.Error{Op: "Post", URL: "https://hooks.example/h?key=secret", Err: err}
}

func failDial(err error) error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: err}
}

func TestTransportFailureClasses(t *testing.T) {
	refused := netguard.Policy{}.DialControl("tcp", "127.0.0.1:443", nil)
	require.Error(t, refused)
	for _, tc := range []struct {
		name string
		err  error
		want failureClass
	}{
		{"request timeout", failPost(errRequestTimeout), failTimeout},
		{"request timeout, bare", errRequestTimeout, failTimeout},
		{"netguard refusal at dial", failPost(failDial(refused)), failSSRF},
		{"netguard refusal, bare", fmt.Errorf("%w: x", netguard.ErrBlocked), failSSRF},
		{"no such host", failPost(failDial(&net.DNSError{Err: "no such host", Name: "h.invalid", IsNotFound: true})), failDNS},
		{"DNS timeout", failPost(failDial(&net.DNSError{Err: "i/o timeout", Name: "h.example", IsTimeout: true})), failDNS},
		{"unknown authority", failPost(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), failTLS},
		{"not a TLS server", failPost(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), failTLS},
		{"HTTP answer to HTTPS", failPost(http.ErrSchemeMismatch), failTLS},
		{"alert from the peer", failPost(&net.OpError{Op: "remote error", Err: errors.New("tls: handshake failure")}), failTLS},
		{"alert error", failPost(tls.AlertError(40)), failTLS},
		{"ECH rejected", failPost(&tls.ECHRejectionError{}), failTLS},
		{"connection refused", failPost(failDial(os.NewSyscallError("connect", syscall.ECONNREFUSED))), failConnect},
		{"host unreachable", failPost(failDial(os.NewSyscallError("connect", syscall.EHOSTUNREACH))), failConnect},
		{"reset while connecting", failPost(failDial(os.NewSyscallError("connect", syscall.ECONNRESET))), failConnect},
		{"dial timeout", failPost(failDial(failTimeoutErr{})), failTimeout},
		{"TLS handshake timeout", failPost(failTimeoutErr{}), failTimeout},
		{"reset before the answer", failPost(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), failBody},
		{"reset while sending", failPost(&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}), failBody},
		{"closed before the answer", failPost(io.EOF), failBody},
		{"headers cut short", failPost(fmt.Errorf("reading headers: %w", io.ErrUnexpectedEOF)), failBody},
		{"bare reset", failPost(syscall.ECONNRESET), failBody},
		{"malformed status", failPost(errors.New(`malformed HTTP status code "000"`)), failOther},
		{"bad scheme", failPost(errors.New(`unsupported protocol scheme "ftp"`)), failOther},
		{"cancelled", failPost(context.Canceled), failOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := transportFailure(tc.err)
			require.Equal(t, tc.want, f.class)
			require.Zero(t, f.status)
			require.Equal(t, tc.err, f.err)
		})
	}
}

func TestStatusFailureClasses(t *testing.T) {
	for _, status := range []int{200, 201, 204, 299} {
		require.Nil(t, statusFailure(status), "status %d", status)
	}
	for status, want := range map[int]failureClass{
		300: failStatus3xx, 302: failStatus3xx, 308: failStatus3xx,
		400: failStatus4xx, 404: failStatus4xx, 429: failStatus4xx, 499: failStatus4xx,
		500: failStatus5xx, 503: failStatus5xx, 599: failStatus5xx,
		101: failOther, 600: failOther, 999: failOther,
	} {
		f := statusFailure(status)
		require.NotNil(t, f, "status %d", status)
		require.Equal(t, want, f.class, "status %d", status)
		require.Equal(t, status, f.status)
		require.NoError(t, f.err)
	}
}

// The detail logged for a transport error leaves out the URL, which may
// carry credentials, and stays short and valid UTF-8.
func TestTransportFailureDetail(t *testing.T) {
	f := transportFailure(failPost(failDial(os.NewSyscallError("connect", syscall.ECONNREFUSED))))
	require.Equal(t, "dial tcp: connect: connection refused", f.detail())

	long := errors.New(strings.Repeat("é", maxFailureDetail))
	d := transportFailure(long).detail()
	require.True(t, utf8.ValidString(d), d)
	require.LessOrEqual(t, len(d), maxFailureDetail+len("…"))
	require.True(t, strings.HasSuffix(d, "…"))

	require.Empty(t, statusFailure(500).detail())
}
