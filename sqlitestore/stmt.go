package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// Parsing SQL costs more than running the engine's small statements, so
// both sides prepare each query once and keep it.

// scanner is a row to scan: *sql.Row, *sql.Rows, or errRow.
type scanner interface{ Scan(dest ...any) error }

// errRow is a row whose statement could not be prepared.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// readers are the connections that read, with their prepared statements.
type readers struct {
	db    *sql.DB
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

func (r *readers) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, ok := r.stmts[query]; ok {
		return st, nil
	}
	st, err := r.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	r.stmts[query] = st
	return st, nil
}

func (r *readers) queryRow(ctx context.Context, query string, args ...any) scanner {
	st, err := r.stmt(ctx, query)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(ctx, args...)
}

func (r *readers) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := r.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

func (r *readers) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for _, st := range r.stmts {
		errs = append(errs, st.Close())
	}
	clear(r.stmts)
	return errors.Join(append(errs, r.db.Close())...)
}

// wtx is the one connection that writes, with its prepared statements. It
// begins and ends transactions itself, with BEGIN IMMEDIATE: database/sql's
// Tx would have statements prepared outside the transaction wait for the
// connection the transaction holds. Only Open and then the writer goroutine
// use it.
type wtx struct {
	db    *sql.DB
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
}

func (w *wtx) stmt(query string) (*sql.Stmt, error) {
	if st, ok := w.stmts[query]; ok {
		return st, nil
	}
	st, err := w.conn.PrepareContext(context.Background(), query)
	if err != nil {
		return nil, err
	}
	w.stmts[query] = st
	return st, nil
}

// The writes run to completion once begun, whatever their callers'
// contexts say; see Store.commit.

func (w *wtx) exec(query string, args ...any) (sql.Result, error) {
	st, err := w.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.Exec(args...)
}

func (w *wtx) queryRow(query string, args ...any) scanner {
	st, err := w.stmt(query)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRow(args...)
}

func (w *wtx) query(query string, args ...any) (*sql.Rows, error) {
	st, err := w.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.Query(args...)
}

// begin takes the write lock, waiting up to the busy timeout for another
// process to release it, so that every read in the transaction sees the
// latest commit and nothing else writes before it ends.
func (w *wtx) begin() error {
	_, err := w.exec("BEGIN IMMEDIATE")
	return err
}

func (w *wtx) commit() error {
	_, err := w.exec("COMMIT")
	return err
}

// rollback ends the transaction. It fails, harmlessly, if SQLite has
// already rolled it back.
func (w *wtx) rollback() {
	_, _ = w.exec("ROLLBACK")
}

func (w *wtx) close() error {
	var errs []error
	for _, st := range w.stmts {
		errs = append(errs, st.Close())
	}
	clear(w.stmts)
	return errors.Join(append(errs, w.conn.Close(), w.db.Close())...)
}
