package sqlitestore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/sqlitestore"
)

// crashEnv names the database a crashChild process writes to.
const crashEnv = "SQLITESTORE_CRASH_DB"

// TestKillLosesNoAckedUpdate kills a process that is writing to the store
// and checks that every update it saw acknowledged is in the file: a write
// returns only after its group committed, and the WAL recovers on open.
func TestKillLosesNoAckedUpdate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "hooks.db")
	s, err := sqlitestore.Open(path)
	require.NoError(t, err)
	sqlSetup(t, s, "/a")
	require.NoError(t, s.Close())

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
	cmd.Env = append(os.Environ(), crashEnv+"="+path)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var acked int64
	lines := bufio.NewScanner(out)
	for acked < 300 && lines.Scan() {
		if n, ok := strings.CutPrefix(lines.Text(), "acked "); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			require.NoError(t, err)
			acked = max(acked, v)
		}
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.GreaterOrEqual(t, acked, int64(300), "the child stopped early")

	s = sqlOpen(t, path)
	c, err := s.GetConsumer(ctx, webhooks.ConsumerID("s", "/a"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, c.Epoch, acked, "an acknowledged update was lost")
}

// TestCrashChild is the process TestKillLosesNoAckedUpdate kills. It
// increments the consumer's epoch from several goroutines and prints each
// acknowledged value, until killed or for at most a minute.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashEnv)
	if path == "" {
		t.Skip("run by TestKillLosesNoAckedUpdate")
	}
	s, err := sqlitestore.Open(path)
	require.NoError(t, err)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				c, err := s.UpdateConsumer(ctx, webhooks.ConsumerID("s", "/a"), sqlSave(func(c *webhooks.Consumer) { c.Epoch++ }))
				if err != nil {
					return
				}
				mu.Lock()
				fmt.Printf("acked %d\n", c.Epoch)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}
