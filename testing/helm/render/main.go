// Command antdt-helm-render renders a Helm 3 chart the way `helm template` does, for
// tests on machines without helm: Go's text/template with sprig (the engine and the
// function library Helm uses), Helm's own functions (include, tpl, required, toYaml,
// fromYaml, toJson, fromJson, lookup), .Values, .Release, .Chart, .Capabilities, .Files,
// values merged from values.yaml, -f files and --set, and the values checked against
// values.schema.json (gojsonschema, as Helm checks them). A test tool, not part of AntDT.
//
//	antdt-helm-render [--name RELEASE] [--namespace NS] [-f values.yaml]... [--set k=v]...
//	                  [--include-crds] [--skip-tests] [--notes] CHART_DIR
//
// Writes the rendered objects to stdout as one YAML stream, each document headed
// "# Source: <chart>/templates/<file>" as helm does. Exits 1 with the template's error
// (file, line and the failing call) when rendering fails.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"github.com/xeipuuv/gojsonschema"
	"sigs.k8s.io/yaml"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

type options struct {
	release, namespace string
	valueFiles, sets   multiFlag
	includeCrds, notes bool
	skipTests          bool
	kubeVersion        string
	chartDir           string
}

func main() {
	var o options
	flag.StringVar(&o.release, "name", "antdt", "release name")
	flag.StringVar(&o.namespace, "namespace", "default", "release namespace")
	flag.Var(&o.valueFiles, "f", "values file (repeatable; later files win)")
	flag.Var(&o.sets, "set", "key=value (repeatable; dotted keys, {a,b} lists)")
	flag.BoolVar(&o.includeCrds, "include-crds", false, "also print the chart's crds/")
	flag.BoolVar(&o.notes, "notes", false, "print NOTES.txt instead of the objects")
	flag.BoolVar(&o.skipTests, "skip-tests", false, "leave out templates/tests/ (helm test's hooks)")
	flag.StringVar(&o.kubeVersion, "kube-version", "v1.30.0", "Capabilities.KubeVersion")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: antdt-helm-render [flags] CHART_DIR")
		os.Exit(2)
	}
	o.chartDir = flag.Arg(0)
	out, err := render(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
	os.Stdout.WriteString(out)
}

func readYAMLMap(file string) (map[string]interface{}, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	m := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	if m == nil {
		m = map[string]interface{}{}
	}
	return m, nil
}

// mergeValues merges src over dst, maps key by key (Helm's coalescing of values files);
// a null in src removes the key.
func mergeValues(dst, src map[string]interface{}) map[string]interface{} {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		sm, sok := v.(map[string]interface{})
		dm, dok := dst[k].(map[string]interface{})
		if sok && dok {
			dst[k] = mergeValues(dm, sm)
		} else {
			dst[k] = v
		}
	}
	return dst
}

var integer = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// parseSetValue types a --set value as helm's strvals does: true/false, integers,
// null, {a,b} lists; anything else is a string.
func parseSetValue(v string) interface{} {
	switch v {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if strings.HasPrefix(v, "{") && strings.HasSuffix(v, "}") {
		items := []interface{}{}
		inner := strings.TrimSuffix(strings.TrimPrefix(v, "{"), "}")
		if inner != "" {
			for _, s := range strings.Split(inner, ",") {
				items = append(items, parseSetValue(s))
			}
		}
		return items
	}
	if integer.MatchString(v) {
		if i, err := strconv.ParseInt(v, 10, 64); err == nil {
			return i
		}
	}
	return v
}

func applySet(values map[string]interface{}, expr string) error {
	eq := strings.Index(expr, "=")
	if eq <= 0 {
		return fmt.Errorf("--set %q: want key=value", expr)
	}
	keys := strings.Split(expr[:eq], ".")
	m := values
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]interface{})
		if !ok {
			next = map[string]interface{}{}
			m[k] = next
		}
		m = next
	}
	last := keys[len(keys)-1]
	if v := parseSetValue(expr[eq+1:]); v == nil {
		delete(m, last)
	} else {
		m[last] = v
	}
	return nil
}

func validateValues(chartDir string, values map[string]interface{}) error {
	schemaFile := filepath.Join(chartDir, "values.schema.json")
	schema, err := os.ReadFile(schemaFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	doc, err := json.Marshal(values)
	if err != nil {
		return err
	}
	result, err := gojsonschema.Validate(gojsonschema.NewBytesLoader(schema), gojsonschema.NewBytesLoader(doc))
	if err != nil {
		return fmt.Errorf("values.schema.json: %v", err)
	}
	if !result.Valid() {
		var msgs []string
		for _, e := range result.Errors() {
			msgs = append(msgs, "- "+e.String())
		}
		return fmt.Errorf("values don't meet the specifications of the schema(s) in the following chart(s):\n%s", strings.Join(msgs, "\n"))
	}
	return nil
}

// files is .Files: the chart's files (not templates/), by path relative to the chart.
type files map[string][]byte

func (f files) Get(name string) string { return string(f[name]) }
func (f files) Glob(pattern string) map[string][]byte {
	out := map[string][]byte{}
	for name, data := range f {
		if ok, _ := path.Match(pattern, name); ok {
			out[name] = data
		}
	}
	return out
}

type apiVersions []string

func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

func loadFiles(chartDir string) (files, map[string]string, error) {
	fs := files{}
	templates := map[string]string{}
	err := filepath.Walk(chartDir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(chartDir, p)
		rel = filepath.ToSlash(rel)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.HasPrefix(rel, "templates/") {
			templates[rel] = string(data)
		} else {
			fs[rel] = data
		}
		return nil
	})
	return fs, templates, err
}

func toYAML(v interface{}) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(data), "\n")
}

func funcMap(t **template.Template, chartName string) template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	includeDepth := 0
	f["include"] = func(name string, data interface{}) (string, error) {
		includeDepth++
		defer func() { includeDepth-- }()
		if includeDepth > 1000 {
			return "", fmt.Errorf("include %q: too deep (recursion?)", name)
		}
		var buf bytes.Buffer
		if err := (*t).ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		clone, err := (*t).Clone()
		if err != nil {
			return "", err
		}
		parsed, err := clone.New(chartName + "/tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		if err := parsed.Execute(&buf, data); err != nil {
			return "", err
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	f["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return nil, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return nil, errors.New(msg)
		}
		return v, nil
	}
	f["toYaml"] = toYAML
	f["fromYaml"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := yaml.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	f["toJson"] = func(v interface{}) string {
		data, _ := json.Marshal(v)
		return string(data)
	}
	f["fromJson"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	f["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil // helm template: no cluster
	}
	return f
}

var emptyDoc = regexp.MustCompile(`^(\s*(#[^\n]*)?\n?)*$`)

func render(o options) (string, error) {
	chart, err := readYAMLMap(filepath.Join(o.chartDir, "Chart.yaml"))
	if err != nil {
		return "", err
	}
	chartName, _ := chart["name"].(string)
	if chartName == "" {
		return "", errors.New("Chart.yaml: name is required")
	}
	values, err := readYAMLMap(filepath.Join(o.chartDir, "values.yaml"))
	if err != nil {
		return "", err
	}
	for _, f := range o.valueFiles {
		extra, err := readYAMLMap(f)
		if err != nil {
			return "", err
		}
		values = mergeValues(values, extra)
	}
	for _, s := range o.sets {
		if err := applySet(values, s); err != nil {
			return "", err
		}
	}
	if err := validateValues(o.chartDir, values); err != nil {
		return "", err
	}
	fs, templates, err := loadFiles(o.chartDir)
	if err != nil {
		return "", err
	}
	// .Chart's fields as helm names them (Name, Version, AppVersion, ...).
	chartObj := map[string]interface{}{}
	for k, v := range chart {
		chartObj[strings.ToUpper(k[:1])+k[1:]] = v
	}
	minor := strings.Split(strings.TrimPrefix(o.kubeVersion, "v"), ".")
	top := map[string]interface{}{
		"Values":  values,
		"Chart":   chartObj,
		"Release": map[string]interface{}{"Name": o.release, "Namespace": o.namespace, "Service": "Helm", "IsInstall": true, "IsUpgrade": false, "Revision": 1},
		"Files":   fs,
		"Capabilities": map[string]interface{}{
			"KubeVersion": map[string]interface{}{"Version": o.kubeVersion, "Major": minor[0], "Minor": minor[1], "GitVersion": o.kubeVersion},
			"APIVersions": apiVersions{"v1", "apps/v1", "policy/v1", "rbac.authorization.k8s.io/v1", "networking.k8s.io/v1", "coordination.k8s.io/v1"},
		},
		"Template": map[string]interface{}{"BasePath": chartName + "/templates"},
	}

	var t *template.Template
	t = template.New(chartName).Option("missingkey=zero").Funcs(funcMap(&t, chartName))
	names := make([]string, 0, len(templates))
	for name := range templates {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, err := t.New(chartName + "/" + name).Parse(templates[name]); err != nil {
			return "", err
		}
	}

	var out strings.Builder
	if o.notes {
		full := chartName + "/templates/NOTES.txt"
		if t.Lookup(full) == nil {
			return "", nil
		}
		var buf bytes.Buffer
		top["Template"].(map[string]interface{})["Name"] = full
		if err := t.ExecuteTemplate(&buf, full, top); err != nil {
			return "", err
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	if o.includeCrds {
		var crds []string
		for name := range fs {
			if strings.HasPrefix(name, "crds/") && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
				crds = append(crds, name)
			}
		}
		sort.Strings(crds)
		for _, name := range crds {
			fmt.Fprintf(&out, "---\n# Source: %s/%s\n%s\n", chartName, name, strings.TrimSpace(fs.Get(name)))
		}
	}
	for _, name := range names {
		base := path.Base(name)
		if strings.HasPrefix(base, "_") || base == "NOTES.txt" {
			continue
		}
		if o.skipTests && strings.HasPrefix(name, "templates/tests/") {
			continue
		}
		full := chartName + "/" + name
		top["Template"].(map[string]interface{})["Name"] = full
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, full, top); err != nil {
			return "", err
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		for _, doc := range strings.Split(text, "\n---") {
			doc = strings.TrimPrefix(doc, "---")
			if emptyDoc.MatchString(doc) {
				continue
			}
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", full, strings.Trim(doc, "\n"))
		}
	}
	return out.String(), nil
}
