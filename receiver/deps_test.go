package receiver

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestStandardLibraryOnly: a receiver that imports this package pulls in
// the standard library and the module's own small internal packages, and
// nothing else: not the engine, OpenTelemetry, JWT, SQLite, pgx, glob or
// uuid.
func TestStandardLibraryOnly(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		t.Fatalf("go command: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/streamhooks/webhooks"
	for _, pkg := range strings.Fields(string(out)) {
		if pkg != module+"/receiver" && !strings.HasPrefix(pkg, module+"/internal/") {
			t.Errorf("receiver depends on %s", pkg)
		}
	}
}
