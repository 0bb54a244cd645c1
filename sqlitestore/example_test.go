package sqlitestore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/sqlitestore"
)

func Example() {
	dir, err := os.MkdirTemp("", "streamhooks")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "hooks.db")
	ctx := context.Background()

	s, err := sqlitestore.Open(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	err = s.CreateSubscription(ctx, &webhooks.Subscription{ID: "orders", Pattern: "/orders/*", Webhook: "https://example.com/hook"})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := s.Close(); err != nil {
		fmt.Println(err)
		return
	}

	// The subscription survives a restart.
	s, err = sqlitestore.Open(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	sub, err := s.GetSubscription(ctx, "orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(sub.ID, sub.Pattern)
	// Output: orders /orders/*
}
