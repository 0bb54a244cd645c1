package webhooks

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// mechanismFiles are the files allowed to ask which delivery mode a
// subscription has: the seam and the mechanisms and transports behind it.
var mechanismFiles = map[string]bool{
	"mechanism.go": true, "wake.go": true, "push.go": true,
	"handler_delivery.go": true, "webhook_transport.go": true,
}

// No code outside the mechanism files compares a delivery mode: what
// differs between modes lives behind the mechanism interface.
func TestModeChecksStayInMechanisms(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go") && !mechanismFiles[fi.Name()]
	}, 0)
	require.NoError(t, err)
	isMode := func(e ast.Expr) bool {
		id, ok := e.(*ast.Ident)
		return ok && (id.Name == "DeliveryWake" || id.Name == "DeliveryEvents" || id.Name == "DeliveryHandler")
	}
	var found []string
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.BinaryExpr:
					if (n.Op == token.EQL || n.Op == token.NEQ) && (isMode(n.X) || isMode(n.Y)) {
						found = append(found, fset.Position(n.Pos()).String())
					}
				case *ast.CaseClause:
					for _, e := range n.List {
						if isMode(e) {
							found = append(found, fset.Position(e.Pos()).String())
						}
					}
				case *ast.SelectorExpr:
					if n.Sel.Name == "pushes" {
						found = append(found, fset.Position(n.Pos()).String())
					}
				}
				return true
			})
		}
	}
	require.Empty(t, found, "delivery-mode checks outside the mechanism files")
}

// A nil subscription is no delivery mode: the core does not take it for
// a wake one.
func TestNilSubscriptionIsNoMode(t *testing.T) {
	require.Panics(t, func() { mechanismOf(nil) })
	require.Panics(t, func() { testMachine().start(newConsumer("s", "/a", OffsetNone, t0), nil, nil, t0) })
}
