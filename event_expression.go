package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// Filter expressions (filter.expression) are CEL over the event's JSON
// object, bound to the variable event: comparisons, in, startsWith, has()
// and boolean logic, plus matchesPattern, which matches a string against a
// filter pattern (the rules of filter.patterns) so that
// event.type.matchesPattern("tool.*") selects dotted event types.
const (
	// maxExpressionLength bounds an expression, in bytes.
	maxExpressionLength = 4096
	// expressionCostLimit bounds one evaluation in CEL's cost units, about
	// one per operation and one per few bytes a string function reads: a
	// typical filter costs tens, and a pathological one (nested
	// comprehensions over a large list) stops here.
	expressionCostLimit = 100_000
	// expressionInterruptEvery is how many comprehension steps run between
	// checks of the attempt's context.
	expressionInterruptEvery = 100
	// maxCachedExpressions bounds the compiled programs kept for reuse.
	maxCachedExpressions = 1024
	// matchesPatternFunc is the name of the dotted-pattern function.
	matchesPatternFunc = "matchesPattern"
)

// eventExpression is a compiled filter expression.
type eventExpression struct {
	prg cel.Program
}

// expressionEnv is the CEL environment of every filter expression.
var expressionEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("event", cel.MapType(cel.StringType, cel.DynType)),
		cel.Function(matchesPatternFunc,
			cel.MemberOverload("string_matches_pattern_string", []*cel.Type{cel.StringType, cel.StringType}, cel.BoolType,
				cel.BinaryBinding(matchesPattern))),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(maxExpressionLength),
	)
})

// expressionCache keeps compiled expressions by their text, so that a
// batch does not compile its subscription's again. Programs are safe for
// concurrent use.
var expressionCache = struct {
	sync.Mutex
	m map[string]*eventExpression
}{m: map[string]*eventExpression{}}

// patternCache keeps the compiled patterns of matchesPattern. Every one
// was checked when its expression compiled; the cache only spares
// compiling them per event.
var patternCache sync.Map // string → *regexp.Regexp

// compileExpression checks expr and compiles it, or refuses it with a
// *ValidationError of filter.expression whose reason is the compiler's
// message about expr.
func compileExpression(expr string) (*eventExpression, error) {
	expressionCache.Lock()
	x, ok := expressionCache.m[expr]
	expressionCache.Unlock()
	if ok {
		return x, nil
	}
	if len(expr) > maxExpressionLength {
		return nil, invalid("filter.expression", "filter.expression is longer than %d bytes", maxExpressionLength)
	}
	env, err := expressionEnv()
	if err != nil {
		return nil, fmt.Errorf("webhooks: the filter expression environment: %w", err)
	}
	checked, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, invalid("filter.expression", "filter.expression: %s", iss.Err())
	}
	if !checked.OutputType().IsExactType(cel.BoolType) {
		return nil, invalid("filter.expression", "filter.expression must be a boolean, not %s", checked.OutputType())
	}
	if err := checkPatternArgs(checked); err != nil {
		return nil, err
	}
	prg, err := env.Program(checked,
		cel.CostLimit(expressionCostLimit),
		cel.InterruptCheckFrequency(expressionInterruptEvery),
		cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, invalid("filter.expression", "filter.expression: %s", err)
	}
	x = &eventExpression{prg: prg}
	expressionCache.Lock()
	if len(expressionCache.m) >= maxCachedExpressions {
		clear(expressionCache.m)
	}
	expressionCache.m[expr] = x
	expressionCache.Unlock()
	return x, nil
}

// checkPatternArgs requires every pattern given to matchesPattern to be a
// string literal that is a valid filter pattern, so that a bad one is
// refused at the door and none compiles per event.
func checkPatternArgs(checked *cel.Ast) error {
	root := ast.NavigateAST(checked.NativeRep())
	for _, call := range ast.MatchDescendants(root, ast.FunctionMatcher(matchesPatternFunc)) {
		args := call.AsCall().Args()
		if len(args) != 1 || args[0].Kind() != ast.LiteralKind {
			return invalid("filter.expression", "filter.expression: %s takes a string literal", matchesPatternFunc)
		}
		p, ok := args[0].AsLiteral().(types.String)
		if !ok {
			return invalid("filter.expression", "filter.expression: %s takes a string literal", matchesPatternFunc)
		}
		if _, err := compiledPattern(string(p)); err != nil {
			return invalid("filter.expression", "filter.expression: %v", err)
		}
	}
	return nil
}

// compiledPattern is the regular expression of filter pattern p.
func compiledPattern(p string) (*regexp.Regexp, error) {
	if re, ok := patternCache.Load(p); ok {
		return re.(*regexp.Regexp), nil
	}
	alt, err := patternRegexp(p)
	if err != nil {
		return nil, err
	}
	re, err := regexp.Compile(`^(?:` + alt + `)$`)
	if err != nil {
		return nil, fmt.Errorf("filter pattern %q: %v", p, err)
	}
	patternCache.Store(p, re)
	return re, nil
}

// matchesPattern is the binding of string.matchesPattern(string): linear
// in the string's length, as filter.patterns are.
func matchesPattern(value, pattern ref.Val) ref.Val {
	s, ok := value.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(value)
	}
	p, ok := pattern.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(pattern)
	}
	re, err := compiledPattern(string(p))
	if err != nil {
		return types.NewErr("%s", err)
	}
	return types.Bool(re.MatchString(string(s)))
}

// match evaluates the expression on event. An event that is not a JSON
// object never matches, and an evaluation that fails (a missing field
// compared, a type mismatch, the cost limit) does not match and returns
// its error, for the log.
func (x *eventExpression) match(ctx context.Context, event []byte) (bool, error) {
	var obj map[string]any
	if json.Unmarshal(event, &obj) != nil || obj == nil {
		return false, nil
	}
	out, _, err := x.prg.ContextEval(ctx, map[string]any{"event": obj})
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	return ok && bool(b), nil
}
