package pgstore_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/pgstore"
)

// The pool is the host's: it closes it after the engine has stopped.
func Example() {
	ctx := context.Background()
	var streams webhooks.StreamSource // the host's streams

	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(ctx, pool, pgstore.WithEncryptionKey(loadKey()))
	if err != nil {
		log.Fatal(err)
	}
	eng, err := webhooks.New(store, streams, webhooks.WithCallbackBaseURL("https://streams.example.com"))
	if err != nil {
		log.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer eng.Stop(ctx)
}

// loadKey stands for reading a 32-byte key from the host's secret manager.
func loadKey() []byte { return make([]byte, 32) }
