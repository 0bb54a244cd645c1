package webhooks

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/streamhooks/webhooks/internal/netguard"
)

// failureClass says why a delivery attempt failed. The values are part of
// the logs and metrics operators read: keep them stable.
type failureClass string

const (
	failDNS       failureClass = "dns"          // the webhook's host name did not resolve
	failConnect   failureClass = "connect"      // the dial failed: refused, unreachable
	failTLS       failureClass = "tls"          // TLS handshake or certificate
	failTimeout   failureClass = "timeout"      // no response in time
	failSSRF      failureClass = "ssrf_blocked" // the WebhookPolicy refused the address dialed
	failStatus3xx failureClass = "status_3xx"   // redirects are never followed
	failStatus4xx failureClass = "status_4xx"
	failStatus5xx failureClass = "status_5xx"
	failBody      failureClass = "body"    // the connection broke after the request went out
	failOther     failureClass = "other"   // anything else, e.g. a malformed response
	failBadAck    failureClass = "bad_ack" // a 2xx acknowledged up to an offset outside its batch
)

// maxFailureDetail bounds the error text a deliveryFailure gives to logs.
const maxFailureDetail = 200

// deliveryFailure is why a delivery attempt failed: its class, and either
// the status of the response or the error that kept one from arriving.
type deliveryFailure struct {
	class  failureClass
	status int   // the response's status, if one arrived
	err    error // why no response arrived, otherwise
	// retryAfter is how long a 429 or 503 response asked the engine to
	// wait before it retries.
	retryAfter time.Duration
}

// statusFailure classifies a response status; it returns nil for a 2xx.
func statusFailure(status int) *deliveryFailure {
	var class failureClass
	switch status / 100 {
	case 2:
		return nil
	case 3:
		class = failStatus3xx
	case 4:
		class = failStatus4xx
	case 5:
		class = failStatus5xx
	default:
		class = failOther
	}
	return &deliveryFailure{class: class, status: status}
}

// transportFailure classifies an error of http.Client.Do, or of building
// the request.
func transportFailure(err error) *deliveryFailure {
	return &deliveryFailure{class: classifyTransport(err), err: err}
}

func classifyTransport(err error) failureClass {
	var (
		dnsErr  *net.DNSError
		opErr   *net.OpError
		netErr  net.Error
		certErr *tls.CertificateVerificationError
		recErr  tls.RecordHeaderError
		alert   tls.AlertError
		echErr  *tls.ECHRejectionError
	)
	switch {
	case errors.Is(err, errRequestTimeout), errors.Is(err, errAttemptTimeout):
		return failTimeout
	case errors.Is(err, netguard.ErrBlocked):
		return failSSRF
	case errors.As(err, &dnsErr):
		return failDNS
	case errors.As(err, &certErr), errors.As(err, &recErr), errors.As(err, &alert), errors.As(err, &echErr),
		errors.Is(err, http.ErrSchemeMismatch):
		return failTLS
	case errors.As(err, &opErr) && opErr.Op == "remote error":
		// crypto/tls reports an alert from the peer this way.
		return failTLS
	case errors.As(err, &netErr) && netErr.Timeout():
		// The dialer's or the TLS handshake's own timeout.
		return failTimeout
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return failConnect
	case errors.As(err, &opErr) && (opErr.Op == "read" || opErr.Op == "write"),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return failBody
	default:
		return failOther
	}
}

// detail is the transport error's text without the method and URL, which
// may carry credentials, cut to maxFailureDetail bytes.
func (d *deliveryFailure) detail() string {
	if d.err == nil {
		return ""
	}
	err := d.err
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	s := err.Error()
	if len(s) <= maxFailureDetail {
		return s
	}
	cut := maxFailureDetail
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// reason is d as a consumer's LastError: its class, and the status or the
// error's detail.
func (d *deliveryFailure) reason() string {
	if d.status != 0 {
		return fmt.Sprintf("%s: status %d", d.class, d.status)
	}
	if detail := d.detail(); detail != "" {
		return string(d.class) + ": " + detail
	}
	return string(d.class)
}
