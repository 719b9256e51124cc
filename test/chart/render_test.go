// Package chart_test renders charts/hami-go with helm's SDK, exactly as `helm template` would,
// decodes every object strictly with client-go's scheme (so a misspelt field fails), and checks
// what each object says.
package chart_test

import (
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	kruntime "k8s.io/apimachinery/pkg/runtime"
)

// releaseNamespace and releaseName are what every test installs as.
const (
	releaseNamespace = "hami-go-system"
	releaseName      = "hami-go"
)

// chartDir is charts/hami-go, found from this file's location.
func chartDir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "charts", "hami-go")
}

// object is one rendered manifest: its source template, its typed form (client-go's scheme) or
// unstructured form (kinds the scheme does not know), and its GVK.
type object struct {
	template string
	gvk      schema.GroupVersionKind
	typed    kruntime.Object
	raw      *unstructured.Unstructured
	name     string
	ns       string
}

// rendered is a whole release: its objects by "Kind/name".
type rendered struct {
	objs map[string]object
}

// get returns the object "Kind/name" or fails the test.
func (r rendered) get(t testing.TB, kindName string) object {
	t.Helper()
	o, ok := r.objs[kindName]
	if !ok {
		t.Fatalf("no %s in the rendered chart; have %v", kindName, r.keys())
	}
	return o
}

func (r rendered) has(kindName string) bool { _, ok := r.objs[kindName]; return ok }

func (r rendered) keys() []string {
	var ks []string
	for k := range r.objs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// typedAs returns the object "Kind/name" as T.
func typedAs[T any](t testing.TB, r rendered, kindName string) T {
	t.Helper()
	o := r.get(t, kindName)
	v, ok := o.typed.(T)
	if !ok {
		t.Fatalf("%s decoded as %T", kindName, o.typed)
	}
	return v
}

// valuesFile reads a values file of the chart directory (e.g. "values-local.yaml").
func valuesFile(t testing.TB, name string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(filepath.Join(chartDir(t), name))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return v.AsMap()
}

// sets turns helm --set expressions into a values map.
func sets(t testing.TB, exprs ...string) map[string]any {
	t.Helper()
	m := map[string]any{}
	for _, e := range exprs {
		if err := strvals.ParseInto(e, m); err != nil {
			t.Fatalf("--set %s: %v", e, err)
		}
	}
	return m
}

// merge deep-merges maps left to right (later wins), like several -f/--set flags.
func merge(ms ...map[string]any) map[string]any {
	out := map[string]any{}
	for _, m := range ms {
		mergeInto(out, m)
	}
	return out
}

func mergeInto(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergeInto(dm, sm)
				continue
			}
			cp := map[string]any{}
			mergeInto(cp, sm)
			dst[k] = cp
			continue
		}
		dst[k] = v
	}
}

// renderChart renders the chart with user values (nil = defaults) as `helm template` does.
func renderChart(t testing.TB, vals map[string]any) rendered {
	t.Helper()
	files, err := renderFiles(t, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return decodeAll(t, files)
}

// renderFiles renders and returns the non-empty manifests by template path.
func renderFiles(t testing.TB, vals map[string]any) (map[string]string, error) {
	t.Helper()
	return renderFilesIn(t, releaseNamespace, vals)
}

// kubeVersion is the cluster version the renders assume (helm template --kube-version): the local
// cluster's (hack/cluster/lib.sh K8S_VERSION). The SDK's own default (chartutil.DefaultCapabilities)
// is v1.20.0, below the chart's floor.
const kubeVersion = "v1.37.2"

// renderFilesIn is renderFiles for a release in namespace ns.
func renderFilesIn(t testing.TB, ns string, vals map[string]any) (map[string]string, error) {
	t.Helper()
	return renderFilesAt(t, ns, kubeVersion, vals)
}

// capabilitiesAt are the SDK's default capabilities with the cluster version kv ("1.30.0").
func capabilitiesAt(t testing.TB, kv string) *chartutil.Capabilities {
	t.Helper()
	v, err := chartutil.ParseKubeVersion(kv)
	if err != nil {
		t.Fatalf("kube version %q: %v", kv, err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *v
	return caps
}

// renderAt renders the chart as `helm template --kube-version kv` does.
func renderAt(t testing.TB, kv string, vals map[string]any) rendered {
	t.Helper()
	files, err := renderFilesAt(t, releaseNamespace, kv, vals)
	if err != nil {
		t.Fatalf("render at %s: %v", kv, err)
	}
	return decodeAll(t, files)
}

// renderFilesAt is renderFilesIn for a cluster of version kv.
func renderFilesAt(t testing.TB, ns, kv string, vals map[string]any) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	if vals == nil {
		vals = map[string]any{}
	}
	opts := chartutil.ReleaseOptions{Name: releaseName, Namespace: ns, Revision: 1, IsInstall: true}
	rv, err := chartutil.ToRenderValues(ch, vals, opts, capabilitiesAt(t, kv))
	if err != nil {
		return nil, err
	}
	out, err := engine.Render(ch, rv)
	if err != nil {
		return nil, err
	}
	for k, v := range out {
		if strings.TrimSpace(v) == "" || strings.HasSuffix(k, "NOTES.txt") {
			delete(out, k)
		}
	}
	return out, nil
}

// decodeAll splits every file into documents and decodes each one strictly.
func decodeAll(t testing.TB, files map[string]string) rendered {
	t.Helper()
	strict := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
	r := rendered{objs: map[string]object{}}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, tpl := range names {
		for _, doc := range releaseutil.SplitManifests(files[tpl]) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			u := &unstructured.Unstructured{}
			js, err := yaml.YAMLToJSON([]byte(doc))
			if err != nil {
				t.Fatalf("%s: not YAML: %v\n%s", tpl, err, doc)
			}
			if err := u.UnmarshalJSON(js); err != nil {
				t.Fatalf("%s: not an object: %v\n%s", tpl, err, doc)
			}
			o := object{template: tpl, gvk: u.GroupVersionKind(), raw: u, name: u.GetName(), ns: u.GetNamespace()}
			if scheme.Scheme.Recognizes(o.gvk) {
				typed, _, err := strict.Decode([]byte(doc), nil, nil)
				if err != nil {
					t.Fatalf("%s: %s/%s does not decode strictly: %v\n%s", tpl, o.gvk.Kind, o.name, err, doc)
				}
				o.typed = typed
			} else if !knownCRD[o.gvk] {
				t.Fatalf("%s: kind %v is neither in client-go's scheme nor an expected CRD", tpl, o.gvk)
			}
			key := o.gvk.Kind + "/" + o.name
			if o.gvk.Kind == "RoleBinding" || o.gvk.Kind == "Role" {
				key = o.gvk.Kind + "/" + o.ns + "/" + o.name
			}
			if _, dup := r.objs[key]; dup {
				t.Fatalf("%s: %s rendered twice", tpl, key)
			}
			r.objs[key] = o
		}
	}
	return r
}

// knownCRD lists the kinds the chart may render that client-go's scheme does not know.
var knownCRD = map[schema.GroupVersionKind]bool{
	{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}: true,
	{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"}: true,
	{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}:          true,
	{Group: "cert-manager.io", Version: "v1", Kind: "Issuer"}:               true,
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}

// field reads a nested field of an unstructured object, e.g. field(u, "spec", "dnsNames").
func field(t testing.TB, u *unstructured.Unstructured, path ...string) any {
	t.Helper()
	v, ok, err := unstructured.NestedFieldNoCopy(u.Object, path...)
	if err != nil || !ok {
		t.Fatalf("%s/%s has no field %s (err %v)", u.GetKind(), u.GetName(), strings.Join(path, "."), err)
	}
	return v
}
