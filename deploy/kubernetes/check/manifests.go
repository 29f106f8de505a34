package check

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// kinds are the objects the manifests may hold, by apiVersion/kind: each
// document is decoded into its typed object, strictly.
var kinds = map[string]func() any{
	"v1/Namespace":                       func() any { return &corev1.Namespace{} },
	"v1/Service":                         func() any { return &corev1.Service{} },
	"v1/Secret":                          func() any { return &corev1.Secret{} },
	"v1/ConfigMap":                       func() any { return &corev1.ConfigMap{} },
	"v1/ServiceAccount":                  func() any { return &corev1.ServiceAccount{} },
	"apps/v1/StatefulSet":                func() any { return &appsv1.StatefulSet{} },
	"apps/v1/Deployment":                 func() any { return &appsv1.Deployment{} },
	"apps/v1/DaemonSet":                  func() any { return &appsv1.DaemonSet{} },
	"policy/v1/PodDisruptionBudget":      func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy": func() any { return &networkingv1.NetworkPolicy{} },
}

// kustomization is the part of kustomize's Kustomization that
// kustomization.yaml may use (anything else is an unknown field).
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images,omitempty"`
}

// object is one decoded manifest document.
type object struct {
	where string // file#document
	gvk   string // apiVersion/kind
	meta  metav1.Object
	obj   any
}

// workload is a StatefulSet, Deployment or DaemonSet.
type workload struct {
	where, kind, name string
	selector          *metav1.LabelSelector
	tpl               *corev1.PodTemplateSpec
	replicas          int // -1 for a DaemonSet
	claims            []corev1.PersistentVolumeClaim
	sts               *appsv1.StatefulSet
}

// podNames are the names the workload's pods have, as far as their
// environment can tell (a StatefulSet's are known).
func (w *workload) podNames() []string {
	if w.sts == nil {
		return []string{w.name + "-pod"}
	}
	var names []string
	for i := range w.replicas {
		names = append(names, fmt.Sprintf("%s-%d", w.name, i))
	}
	return names
}

// cell is everything deploy/kubernetes declares.
type cell struct {
	kust       kustomization
	objects    []*object
	namespace  string
	services   []*corev1.Service
	secrets    map[string]*corev1.Secret
	configMaps map[string]*corev1.ConfigMap
	workloads  []*workload
	pdbs       []*policyv1.PodDisruptionBudget
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// readDir reads kustomization.yaml and every other .yaml file of dir.
func readDir(dir string) (map[string][]byte, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		files[filepath.Base(p)] = data
	}
	return files, nil
}

// decodeStrict decodes one YAML document into the typed object its
// apiVersion and kind name; nil for a document of comments only.
func decodeStrict(where string, doc []byte) (*object, error) {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if strings.TrimSpace(string(j)) == "null" {
		return nil, nil
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(j, &tm); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	gvk := tm.APIVersion + "/" + tm.Kind
	newObj, ok := kinds[gvk]
	if !ok {
		return nil, fmt.Errorf("%s: apiVersion %q kind %q is not a kind these manifests may hold", where, tm.APIVersion, tm.Kind)
	}
	obj := newObj()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", where, gvk, err)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if m.GetName() == "" {
		return nil, fmt.Errorf("%s: %s without metadata.name", where, gvk)
	}
	return &object{where: where, gvk: gvk, meta: m, obj: obj}, nil
}

// load decodes files (kustomization.yaml and the manifests) into a cell;
// the errors are every problem found.
func load(files map[string][]byte) (*cell, []error) {
	var errs []error
	c := &cell{secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{}}
	kdata, ok := files["kustomization.yaml"]
	if !ok {
		errs = append(errs, fmt.Errorf("kustomization.yaml is missing"))
	} else if err := yaml.UnmarshalStrict(kdata, &c.kust); err != nil {
		errs = append(errs, fmt.Errorf("kustomization.yaml: %w", err))
	}
	var names []string
	for name := range files {
		if name != "kustomization.yaml" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if res := slices.Sorted(slices.Values(c.kust.Resources)); !slices.Equal(res, names) {
		errs = append(errs, fmt.Errorf("kustomization.yaml lists resources %v, the directory holds manifests %v", res, names))
	}
	seen := map[string]string{}
	for _, name := range names {
		for i, doc := range docSeparator.Split(string(files[name]), -1) {
			o, err := decodeStrict(fmt.Sprintf("%s#%d", name, i), []byte(doc))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if o == nil {
				continue
			}
			id := o.gvk + " " + o.meta.GetNamespace() + "/" + o.meta.GetName()
			if prev, dup := seen[id]; dup {
				errs = append(errs, fmt.Errorf("%s: %s is declared in %s too", o.where, id, prev))
			}
			seen[id] = o.where
			c.objects = append(c.objects, o)
			c.index(o, &errs)
		}
	}
	if c.namespace == "" {
		errs = append(errs, fmt.Errorf("no Namespace manifest"))
	}
	for _, o := range c.objects {
		if o.gvk != "v1/Namespace" && o.meta.GetNamespace() != c.namespace {
			errs = append(errs, fmt.Errorf("%s: %s %s is in namespace %q, not the cell's %q", o.where, o.gvk, o.meta.GetName(), o.meta.GetNamespace(), c.namespace))
		}
	}
	return c, errs
}

// index files o under its kind.
func (c *cell) index(o *object, errs *[]error) {
	switch v := o.obj.(type) {
	case *corev1.Namespace:
		if c.namespace != "" {
			*errs = append(*errs, fmt.Errorf("%s: a second Namespace, %s (the manifests are one cell's)", o.where, v.Name))
		}
		c.namespace = v.Name
	case *corev1.Service:
		c.services = append(c.services, v)
	case *corev1.Secret:
		c.secrets[v.Name] = v
	case *corev1.ConfigMap:
		c.configMaps[v.Name] = v
	case *appsv1.StatefulSet:
		r := 1
		if v.Spec.Replicas != nil {
			r = int(*v.Spec.Replicas)
		}
		c.workloads = append(c.workloads, &workload{where: o.where, kind: "StatefulSet", name: v.Name, selector: v.Spec.Selector,
			tpl: &v.Spec.Template, replicas: r, claims: v.Spec.VolumeClaimTemplates, sts: v})
	case *appsv1.Deployment:
		r := 1
		if v.Spec.Replicas != nil {
			r = int(*v.Spec.Replicas)
		}
		c.workloads = append(c.workloads, &workload{where: o.where, kind: "Deployment", name: v.Name, selector: v.Spec.Selector, tpl: &v.Spec.Template, replicas: r})
	case *appsv1.DaemonSet:
		c.workloads = append(c.workloads, &workload{where: o.where, kind: "DaemonSet", name: v.Name, selector: v.Spec.Selector, tpl: &v.Spec.Template, replicas: -1})
	case *policyv1.PodDisruptionBudget:
		c.pdbs = append(c.pdbs, v)
	}
}
