package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	webhooks "github.com/streamhooks/webhooks"
)

// dbError wraps err, the error of operation op, and marks it with
// webhooks.ErrStoreUnavailable if it means the database cannot be reached
// right now.
func dbError(op string, err error) error {
	if unreachable(err) {
		return fmt.Errorf("pgstore: %s: %w: %w", op, webhooks.ErrStoreUnavailable, err)
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

// unreachable reports whether err is a failure to reach the database, as
// opposed to an error in what was asked of it: a refused or lost
// connection, a timeout, or a server that is shutting down, starting up or
// full. A cancelled caller is not one.
func unreachable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var (
		pgErr  *pgconn.PgError
		netErr net.Error
	)
	switch {
	case errors.As(err, &pgErr):
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "53300": // admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08") // connection_exception
	case pgconn.Timeout(err), pgconn.SafeToRetry(err), errors.Is(err, pgconn.ErrConnClosed):
		return true
	case errors.As(err, &netErr), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return true
	default:
		var connectErr *pgconn.ConnectError
		return errors.As(err, &connectErr)
	}
}
