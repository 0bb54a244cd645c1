// Package storetest checks that a webhooks.Store keeps the contract the
// engine relies on. A backend author runs it from a test:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) webhooks.Store {
//			s, err := mystore.Open(filepath.Join(t.TempDir(), "hooks.db"))
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s // Run closes it: *mystore.Store is an io.Closer
//		})
//	}
//
//	func TestStoreDurable(t *testing.T) {
//		storetest.RunDurable(t, func(t *testing.T, dir string) webhooks.Store {
//			s, err := mystore.Open(filepath.Join(dir, "hooks.db"))
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// A Store that several engine processes may share also runs RunShared, with
// two handles on one database, and one that batches the reads made at once
// runs RunBatchedReads. The lease cases of both suites run only for
// a Store that implements webhooks.Leaser, and skip otherwise, and the
// webhook key cases only for a webhooks.WebhookKeyStore, and the DS cases
// only for a webhooks.DSStore.
//
// Where the Store interface leaves a choice open, the suite accepts any
// answer, and where its wording allows two readings the suite takes the one
// below:
//
//   - Times must keep their instant to the nanosecond; the zero time must
//     stay zero. Location and monotonic reading may be dropped, so times are
//     compared with time.Equal semantics.
//   - A nil slice and an empty one are the same value.
//   - "Ordered by ID" is byte-wise order, as strings.Compare gives it.
//   - DueConsumers may return consumers with equal deadlines in any order.
//   - CountConsumers may report states that have no consumers as zero or
//     leave them out.
//
// The suite does not check what the interface leaves to the implementation:
// a DueConsumers limit below one, an UpdateConsumer fn that changes the
// consumer's identity or returns an unknown action, what UpdateConsumer
// returns alongside fn's error, or an empty signing key.
//
// The randomized subtest draws a new seed on each run and logs it on failure;
// set STORETEST_SEED to that number to replay the run.
package storetest

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// Run checks the whole Store contract, one subtest per behavior. Every
// subtest calls newStore for a store of its own, which must be empty. If
// that store implements io.Closer, Run closes it when the subtest ends, so
// newStore must not also register its Close.
func Run(t *testing.T, newStore func(t *testing.T) webhooks.Store) {
	for _, tc := range contractTests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			if c, ok := s.(io.Closer); ok {
				t.Cleanup(func() { require.NoError(t, c.Close(), "closing the store") })
			}
			tc.fn(t, s)
		})
	}
}

// RunDurable checks that a persistent Store keeps everything across a
// restart: subscriptions with their secrets, consumers with every field, the
// signing key, and the effect of updates and deletes. open opens the store
// kept in dir, which RunDurable creates empty and then opens again after
// closing the previous store. The Store must implement io.Closer;
// RunDurable closes every store it opens.
func RunDurable(t *testing.T, open func(t *testing.T, dir string) webhooks.Store) {
	for _, tc := range durableTests {
		t.Run(tc.name, func(t *testing.T) {
			r := &reopener{t: t, open: open, dir: t.TempDir()}
			t.Cleanup(r.close)
			r.reopen()
			tc.fn(t, r)
		})
	}
}

type contractTest struct {
	name string
	fn   func(t *testing.T, s webhooks.Store)
}

// contractTests run in this order; each gets a fresh store.
var contractTests = []contractTest{
	{"Subscriptions", testSubscriptions},
	{"SubscriptionFields", testSubscriptionFields},
	{"UpdateSubscription", testUpdateSubscription},
	{"CreateConsumer", testCreateConsumer},
	{"ConsumerFields", testConsumerFields},
	{"CallerOwnsConsumers", testCallerOwnsConsumers},
	{"UpdateConsumer/NotFound", testUpdateNotFound},
	{"UpdateConsumer/FnSeesStored", testUpdateFnSeesStored},
	{"UpdateConsumer/None", testUpdateNone},
	{"UpdateConsumer/Save", testUpdateSave},
	{"UpdateConsumer/Delete", testUpdateDelete},
	{"UpdateConsumer/FnError", testUpdateFnError},
	{"ConsumersByStream", testConsumersByStream},
	{"DueConsumers", testDueConsumers},
	{"NextDeadline", testNextDeadline},
	{"CountConsumers", testCountConsumers},
	{"SigningKey", testSigningKey},
	{"WebhookKeys", testWebhookKeys},
	{"DeleteSubscriptionCascade", testDeleteCascade},
	{"ListConsumers", testListConsumers},
	{"UpdateHealth", testUpdateHealth},
	{"DeliveryLog/Bounded", testDeliveryLogBounded},
	{"DeliveryLog/Fields", testDeliveryLogFields},
	{"DeliveryLog/Deletes", testDeliveryLogDeletes},
	{"Concurrent/NoLostUpdate", testNoLostUpdate},
	{"Concurrent/DifferentConsumers", testConcurrentConsumers},
	{"Concurrent/DeleteCascade", testConcurrentDeleteCascade},
	{"Concurrent/CreateSameID", testConcurrentCreate},
	{"Concurrent/SigningKey", testConcurrentSigningKey},
	{"Concurrent/WebhookKeys", testConcurrentWebhookKeys},
	{"Concurrent/Health", testConcurrentHealth},
	{"Lease/Grant", testLeaseGrant},
	{"Lease/HeldByAnother", testLeaseHeldByAnother},
	{"Lease/Renew", testLeaseRenew},
	{"Lease/Expiry", testLeaseExpiry},
	{"Lease/Release", testLeaseRelease},
	{"Lease/Concurrent", testLeaseConcurrent},
	{"DS/Put", testDSPut},
	{"DS/Tombstone", testDSTombstone},
	{"DS/LinkIdempotent", testDSLinkIdempotent},
	{"DS/ExplicitGlob", testDSExplicitGlob},
	{"DS/DropStream", testDSDropStream},
	{"DS/DeliveryLog", testDSDeliveryLog},
	{"DS/Pending", testDSPending},
	{"DS/Fencing", testDSFencing},
	{"DS/Release", testDSRelease},
	{"DS/Claim", testDSClaim},
	{"DS/ClaimRace", testDSClaimRace},
	{"DS/ConcurrentAcks", testDSConcurrentAcks},
	{"DS/LinksPaging", testDSLinksPaging},
	{"DS/UpdateCursor", testDSUpdateCursor},
	{"DS/Due", testDSDue},
	{"Model", testModel},
}
