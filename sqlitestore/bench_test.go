package sqlitestore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/sqlitestore"
	"github.com/streamhooks/webhooks/storetest"
)

// BenchmarkUpdateConsumer measures one state transition, a wake-like
// UpdateConsumer that saves, in the memory store and in SQLite. The parallel
// variant spreads calls over many consumers, as concurrent callbacks do, and
// shows what grouped commits recover of the fsync per write.
func BenchmarkUpdateConsumer(b *testing.B) {
	ctx := context.Background()
	const n = 1024
	paths := make([]string, n)
	ids := make([]string, n)
	for i := range paths {
		paths[i] = fmt.Sprintf("/stream/%d", i)
		ids[i] = webhooks.ConsumerID("s", paths[i])
	}
	wake := sqlSave(func(c *webhooks.Consumer) {
		c.Epoch++
		c.State = webhooks.StateWaking
		c.Deadline = sqlT0.Add(time.Duration(c.Epoch) * time.Second)
	})
	for _, store := range []struct {
		name string
		open func(b *testing.B) webhooks.Store
	}{
		{"memory", func(*testing.B) webhooks.Store { return memstore.New() }},
		{"sqlite", func(b *testing.B) webhooks.Store { return sqlOpen(b, filepath.Join(b.TempDir(), "hooks.db")) }},
		{"sqlite-normal", func(b *testing.B) webhooks.Store {
			return sqlOpen(b, filepath.Join(b.TempDir(), "hooks.db"), sqlitestore.WithSynchronous(sqlitestore.SyncNormal))
		}},
	} {
		b.Run("store="+store.name, func(b *testing.B) {
			s := store.open(b)
			sqlSetup(b, s, paths...)
			b.Run("serial", func(b *testing.B) {
				i := 0
				for b.Loop() {
					if _, err := s.UpdateConsumer(ctx, ids[i%n], wake); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.SetParallelism(16) // concurrent requests, not cores
				b.RunParallel(func(pb *testing.PB) {
					i := rand.IntN(n)
					for pb.Next() {
						if _, err := s.UpdateConsumer(ctx, ids[i%n], wake); err != nil {
							b.Error(err)
							return
						}
						i++
					}
				})
			})
		})
	}
}

// BenchmarkListConsumers measures a page of ListConsumers, early and late,
// over one subscription of 100,000 consumers.
func BenchmarkListConsumers(b *testing.B) {
	storetest.BenchmarkListConsumers(b, sqlOpen(b, filepath.Join(b.TempDir(), "hooks.db"), sqlitestore.WithSynchronous(sqlitestore.SyncNormal)))
}

// BenchmarkDSCost measures the DSStore's ack, link, append and wake at
// 10, 10,000 and 100,000 links (storetest.BenchmarkDSCost).
func BenchmarkDSCost(b *testing.B) {
	storetest.BenchmarkDSCost(b, sqlOpen(b, filepath.Join(b.TempDir(), "hooks.db")))
}

// BenchmarkDSCostRatio reports the DSStore's cost at 100,000 links as a
// ratio of its cost at 10 (storetest.BenchmarkDSCostRatio).
func BenchmarkDSCostRatio(b *testing.B) {
	storetest.BenchmarkDSCostRatio(b, sqlOpen(b, filepath.Join(b.TempDir(), "hooks.db")))
}
