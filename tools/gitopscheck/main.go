// Command gitopscheck judges one Kubernetes object the way the GitOps tools do, so the tests can
// check what Argo CD and Flux will show for a ConsumerGroupPolicy without running either.
//
// Usage (the object, JSON or YAML, on standard input; one JSON line on standard output):
//
//	gitopscheck kstatus                          {"status": "Current|InProgress|Failed|Terminating|...", "message": "..."}
//	gitopscheck argocd-health --script FILE      {"status": "Healthy|Progressing|Degraded|Suspended|Missing|Unknown", "message": "..."}
//
// kstatus is sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute, the library behind Flux's
// `wait: true` and `healthChecks` (and kpt's, and cli-utils' apply waits).
//
// argocd-health runs a resource health script as Argo CD's controller does (gitops-engine's
// pkg/health, then util/lua/lua.go in argoproj/argo-cd): an object being deleted is Progressing,
// "Pending deletion", before any script runs; otherwise a gopher-lua state with only the package, base and table libraries open
// (a script from argocd-cm gets no `string` or `math` unless useOpenLibs is set for its kind),
// the object as the global table `obj` (integers as Lua numbers, arrays as sequences), a one
// second deadline, and the table the chunk returns read as {status, message}; a status outside
// Argo's six is reported as Unknown, as Argo does. Argo also opens a restricted `os`; this tool
// does not, so a script that needs it fails here (ours does not).
//
// Exit codes: 0 with the verdict printed; 2 for bad usage or an object that cannot be read;
// 1 when the script fails or returns no table (Argo shows such a resource with a health error).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

// verdict is what both subcommands print: the same two fields as Argo's HealthStatus and the
// status and message of kstatus' Result.
type verdict struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// usageError is bad input (exit 2); anything else is a runtime failure (exit 1).
type usageError struct{ error }

const usage = `usage: gitopscheck kstatus < object.(json|yaml)
       gitopscheck argocd-health --script health.lua < object.(json|yaml)`

// Argo CD's health codes (gitops-engine pkg/health) and the message it shows for any other.
var argoStatuses = map[string]bool{
	"Unknown": true, "Progressing": true, "Suspended": true, "Healthy": true, "Degraded": true, "Missing": true,
}

const argoInvalidStatus = "Lua returned an invalid health status"

// argoScriptDeadline is Argo CD's limit for one script run.
const argoScriptDeadline = time.Second

func main() {
	out, err := run(os.Args[1:], os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		var bad usageError
		if errors.As(err, &bad) {
			os.Exit(2)
		}
		os.Exit(1)
	}
	line, err := json.Marshal(out)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(string(line))
}

func run(args []string, stdin io.Reader) (verdict, error) {
	if len(args) == 0 {
		return verdict{}, usageError{errors.New(usage)}
	}
	switch args[0] {
	case "kstatus":
		if len(args) != 1 {
			return verdict{}, usageError{fmt.Errorf("kstatus takes no arguments\n%s", usage)}
		}
		obj, err := readObject(stdin)
		if err != nil {
			return verdict{}, err
		}
		return kstatus(obj)
	case "argocd-health":
		if len(args) != 3 || args[1] != "--script" {
			return verdict{}, usageError{fmt.Errorf("argocd-health needs --script FILE\n%s", usage)}
		}
		script, err := os.ReadFile(args[2])
		if err != nil {
			return verdict{}, usageError{fmt.Errorf("reading the script (--script): %w", err)}
		}
		obj, err := readObject(stdin)
		if err != nil {
			return verdict{}, err
		}
		return argoHealth(obj, string(script))
	default:
		return verdict{}, usageError{fmt.Errorf("unknown subcommand %q\n%s", args[0], usage)}
	}
}

// readObject decodes one object as the API server's clients hold it: JSON integers become int64,
// as in an informer's cache. YAML is converted to JSON first.
func readObject(r io.Reader) (*unstructured.Unstructured, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading standard input: %w", err)
	}
	data, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, usageError{fmt.Errorf("standard input is neither JSON nor YAML: %w", err)}
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(data); err != nil {
		return nil, usageError{fmt.Errorf("standard input is not one Kubernetes object (apiVersion, kind): %w", err)}
	}
	return obj, nil
}

func kstatus(obj *unstructured.Unstructured) (verdict, error) {
	result, err := status.Compute(obj)
	if err != nil {
		return verdict{}, fmt.Errorf("kstatus: %w", err)
	}
	return verdict{Status: string(result.Status), Message: result.Message}, nil
}

func argoHealth(obj *unstructured.Unstructured, script string) (verdict, error) {
	// gitops-engine's GetResourceHealth answers for an object being deleted before any script runs.
	if obj.GetDeletionTimestamp() != nil {
		return verdict{Status: "Progressing", Message: "Pending deletion"}, nil
	}
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return verdict{}, fmt.Errorf("opening the Lua library %q: %w", lib.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), argoScriptDeadline)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", toLua(l, obj.Object))
	if err := l.DoString(script); err != nil {
		return verdict{}, fmt.Errorf("health script: %w", err)
	}
	returned := l.Get(-1)
	if returned.Type() != lua.LTTable {
		return verdict{}, fmt.Errorf("expect table output from Lua script, not %s", returned.Type())
	}
	// Argo encodes the table to JSON and decodes it into its HealthStatus; doing the same keeps a
	// wrongly typed field an error here as it is there.
	encoded, err := json.Marshal(fromLua(returned))
	if err != nil {
		return verdict{}, fmt.Errorf("encoding the script's table: %w", err)
	}
	var health verdict
	if err := json.Unmarshal(encoded, &health); err != nil {
		return verdict{}, fmt.Errorf("the script's table is not {status, message}: %w", err)
	}
	if !argoStatuses[health.Status] {
		return verdict{Status: "Unknown", Message: argoInvalidStatus}, nil
	}
	return health, nil
}

// toLua is Argo CD's decodeValue: maps become tables keyed by string, slices sequences, numbers
// LNumber, null and unknown types nil.
func toLua(l *lua.LState, value interface{}) lua.LValue {
	switch v := value.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case json.Number:
		return lua.LString(v)
	case []interface{}:
		table := l.CreateTable(len(v), 0)
		for _, item := range v {
			table.Append(toLua(l, item))
		}
		return table
	case map[string]interface{}:
		table := l.CreateTable(0, len(v))
		for key, item := range v {
			table.RawSetH(lua.LString(key), toLua(l, item))
		}
		return table
	}
	return lua.LNil
}

// fromLua converts a returned value the way gopher-json (which Argo uses) encodes it: a table
// with a sequence part only is an array, any other table an object with string keys.
func fromLua(value lua.LValue) interface{} {
	switch v := value.(type) {
	case lua.LBool:
		return bool(v)
	case lua.LNumber:
		return float64(v)
	case lua.LString:
		return string(v)
	case *lua.LTable:
		if n := v.Len(); n > 0 {
			items := make([]interface{}, 0, n)
			for i := 1; i <= n; i++ {
				items = append(items, fromLua(v.RawGetInt(i)))
			}
			return items
		}
		fields := map[string]interface{}{}
		v.ForEach(func(key, item lua.LValue) {
			fields[key.String()] = fromLua(item)
		})
		return fields
	}
	return nil
}
