package check

import (
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// certKeys are the keys of every certificate Secret.
var certKeys = []string{"ca.crt", "tls.crt", "tls.key"}

// GeneratedSecrets are the Secrets no manifest holds, since they carry
// private keys: certs.sh makes them (README.md), each with certKeys.
var GeneratedSecrets = []string{
	"troupe-store-0-tls", "troupe-store-1-tls", "troupe-store-2-tls",
	"troupe-scheduler-tls", "troupe-controller-tls", "troupe-agent-tls",
}

// Roles are the troupe subcommands a container may run.
var Roles = []string{"store", "scheduler", "controller", "agent"}

// agentCapabilities are the capabilities the exec agent may add (each is
// justified in agent.yaml); every other container adds none.
var agentCapabilities = []string{"SETUID", "SETGID", "CHOWN", "FOWNER", "DAC_OVERRIDE", "KILL"}

// goRuntimeEnv are variables the Go runtime, not troupe, reads.
var goRuntimeEnv = []string{"GOMAXPROCS", "GOMEMLIMIT", "GOGC", "GODEBUG", "GOTRACEBACK"}

// Flags are each role's flag names, from `troupe <role> -h`.
type Flags map[string]map[string]bool

// role is the troupe subcommand container c runs ("" if it runs no troupe).
func role(c *corev1.Container) string {
	if len(c.Command) == 1 && c.Command[0] == "/troupe" && len(c.Args) > 0 {
		return c.Args[0]
	}
	return ""
}

// envVarOfFlag is the variable troupe reads flag from (tools/troupe/flags.go).
func envVarOfFlag(flag string) string {
	return "TROUPE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

func flagOfEnvVar(name string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, "TROUPE_"), "_", "-"))
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// CheckAll runs every check of the manifests against each other and the
// flags.
func CheckAll(c *cell, flags Flags) []error {
	var errs []error
	for _, f := range []func() []error{c.checkImages, c.checkWorkloads, c.checkServices, c.checkStatefulSets,
		c.checkPDBs, c.checkReferences, c.checkStoreAddresses} {
		errs = append(errs, f()...)
	}
	errs = append(errs, c.checkEnv(flags)...)
	return errs
}

func matches(sel *metav1.LabelSelector, lbls map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() {
		return false
	}
	return s.Matches(labels.Set(lbls))
}

// containers are a pod's init containers and containers.
func containers(spec *corev1.PodSpec) []*corev1.Container {
	var out []*corev1.Container
	for i := range spec.InitContainers {
		out = append(out, &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		out = append(out, &spec.Containers[i])
	}
	return out
}

// runsAgent reports whether the pod runs the agent (root is allowed there).
func runsAgent(spec *corev1.PodSpec) bool {
	return slices.ContainsFunc(spec.Containers, func(c corev1.Container) bool { return role(&c) == "agent" })
}

func (c *cell) checkImages() []error {
	var errs []error
	var names []string
	for _, im := range c.kust.Images {
		names = append(names, im.Name)
	}
	for _, w := range c.workloads {
		for _, ctr := range containers(&w.tpl.Spec) {
			repo, _, _ := strings.Cut(ctr.Image, ":")
			if !slices.Contains(names, repo) {
				errs = append(errs, fmt.Errorf("%s: container %s's image %q is not one of kustomization.yaml's images %v (where tags are set)", w.where, ctr.Name, ctr.Image, names))
			}
		}
	}
	return errs
}

// checkWorkloads checks each workload's selector, pod security, resources,
// volumes and probes.
func (c *cell) checkWorkloads() []error {
	var errs []error
	add := func(w *workload, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s %s: %s", w.where, w.kind, w.name, fmt.Sprintf(format, args...)))
	}
	for _, w := range c.workloads {
		spec := &w.tpl.Spec
		if !matches(w.selector, w.tpl.Labels) {
			add(w, "selector %v does not select its pod template's labels %v", w.selector, w.tpl.Labels)
		}
		for _, o := range c.workloads {
			if o != w && matches(w.selector, o.tpl.Labels) {
				add(w, "selector also selects the pods of %s %s", o.kind, o.name)
			}
		}
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			add(w, "automountServiceAccountToken must be false: no troupe process talks to Kubernetes, and the agent's tasks run in its pod")
		}
		if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
			add(w, "enableServiceLinks must be false: a Service's link variables (TROUPE_STORE_PORT, ...) land where troupe reads its flags")
		}
		if spec.HostNetwork || spec.HostPID || spec.HostIPC {
			add(w, "uses a host namespace")
		}
		agent := runsAgent(spec)
		if agent && (spec.ShareProcessNamespace == nil || !*spec.ShareProcessNamespace) {
			add(w, "shareProcessNamespace must be true: the pause process, as PID 1, reaps the orphans of tasks")
		}
		podNonRoot := spec.SecurityContext != nil && spec.SecurityContext.RunAsNonRoot != nil && *spec.SecurityContext.RunAsNonRoot
		podSeccomp := spec.SecurityContext != nil && spec.SecurityContext.SeccompProfile != nil &&
			spec.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault
		volumes := map[string]bool{}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				add(w, "volume %s is a hostPath", v.Name)
			}
			// Keys are for the process alone: in an agent's pod, tasks
			// run as other users.
			var mode *int32
			switch {
			case v.Secret != nil:
				mode = v.Secret.DefaultMode
			case v.Projected != nil:
				mode = v.Projected.DefaultMode
			}
			if (v.Secret != nil || v.Projected != nil) && (mode == nil || *mode&0o007 != 0 || (agent && *mode&0o077 != 0)) {
				add(w, "volume %s of Secrets needs a defaultMode that only its process can read (0440 with fsGroup, 0400 for root)", v.Name)
			}
			volumes[v.Name] = true
		}
		for _, pvc := range w.claims {
			volumes[pvc.Name] = true
		}
		mounted := map[string]bool{}
		for _, ctr := range containers(spec) {
			sc := ctr.SecurityContext
			if sc == nil {
				add(w, "container %s has no securityContext", ctr.Name)
				continue
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				add(w, "container %s: readOnlyRootFilesystem must be true", ctr.Name)
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				add(w, "container %s: allowPrivilegeEscalation must be false", ctr.Name)
			}
			if sc.Privileged != nil && *sc.Privileged {
				add(w, "container %s is privileged", ctr.Name)
			}
			if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
				add(w, "container %s must drop ALL capabilities", ctr.Name)
			}
			if sc.Capabilities != nil {
				for _, cp := range sc.Capabilities.Add {
					if !agent || !slices.Contains(agentCapabilities, string(cp)) {
						add(w, "container %s adds capability %s (agents may add only %v)", ctr.Name, cp, agentCapabilities)
					}
				}
			}
			seccomp := podSeccomp || (sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault)
			if !seccomp {
				add(w, "container %s: seccompProfile must be RuntimeDefault", ctr.Name)
			}
			if !agent {
				nonRoot := podNonRoot
				if sc.RunAsNonRoot != nil {
					nonRoot = *sc.RunAsNonRoot
				}
				if !nonRoot || (sc.RunAsUser != nil && *sc.RunAsUser == 0) {
					add(w, "container %s must run as non-root (runAsNonRoot; only agents are root)", ctr.Name)
				}
			}
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, hasReq := ctr.Resources.Requests[r]
				lim, hasLim := ctr.Resources.Limits[r]
				if !hasReq || !hasLim {
					add(w, "container %s: %s needs a request and a limit", ctr.Name, r)
				} else if req.Cmp(lim) > 0 {
					add(w, "container %s: %s request %s is above its limit %s", ctr.Name, r, req.String(), lim.String())
				}
			}
			for _, m := range ctr.VolumeMounts {
				if !volumes[m.Name] {
					add(w, "container %s mounts volume %s, which the pod does not have", ctr.Name, m.Name)
				}
				if m.SubPath != "" {
					add(w, "container %s mounts %s with subPath: updates of the volume (renewed certificates) would not reach it", ctr.Name, m.Name)
				}
				mounted[m.Name] = true
			}
			ports := map[string]bool{}
			for _, p := range ctr.Ports {
				ports[p.Name] = true
			}
			for kind, p := range map[string]*corev1.Probe{"readiness": ctr.ReadinessProbe, "liveness": ctr.LivenessProbe, "startup": ctr.StartupProbe} {
				if p == nil {
					continue
				}
				var port *intstr.IntOrString
				switch {
				case p.HTTPGet != nil:
					port = &p.HTTPGet.Port
				case p.TCPSocket != nil:
					port = &p.TCPSocket.Port
				default:
					add(w, "container %s: %s probe is neither httpGet nor tcpSocket", ctr.Name, kind)
					continue
				}
				if port.Type != intstr.String {
					add(w, "container %s: %s probe's port %s is not a named port", ctr.Name, kind, port.String())
				} else if !ports[port.StrVal] {
					add(w, "container %s: %s probe's port %q is not a port of the container", ctr.Name, kind, port.StrVal)
				}
			}
			if r := role(ctr); r != "" && r != "agent" && (ctr.ReadinessProbe == nil || ctr.LivenessProbe == nil) {
				add(w, "container %s (%s) needs a readiness and a liveness probe", ctr.Name, r)
			}
		}
		for v := range volumes {
			if !mounted[v] {
				add(w, "volume %s is mounted by no container", v)
			}
		}
	}
	return errs
}

// selected are the workloads whose pods sel selects.
func (c *cell) selected(sel *metav1.LabelSelector) []*workload {
	var out []*workload
	for _, w := range c.workloads {
		if matches(sel, w.tpl.Labels) {
			out = append(out, w)
		}
	}
	return out
}

// containerPort finds the named port among the pod's containers.
func containerPort(spec *corev1.PodSpec, name string) (int32, bool) {
	for _, ctr := range spec.Containers {
		for _, p := range ctr.Ports {
			if p.Name == name {
				return p.ContainerPort, true
			}
		}
	}
	return 0, false
}

// checkServices: every Service selects the pods of some workload, on
// ports they have.
func (c *cell) checkServices() []error {
	var errs []error
	for _, s := range c.services {
		sel := &metav1.LabelSelector{MatchLabels: s.Spec.Selector}
		ws := c.selected(sel)
		if len(ws) == 0 {
			errs = append(errs, fmt.Errorf("Service %s: selector %v selects no workload's pods", s.Name, s.Spec.Selector))
		}
		for _, w := range ws {
			for _, p := range s.Spec.Ports {
				t := p.TargetPort
				switch {
				case t.Type == intstr.String:
					if _, ok := containerPort(&w.tpl.Spec, t.StrVal); !ok {
						errs = append(errs, fmt.Errorf("Service %s: port %s targets %q, not a port of %s %s", s.Name, p.Name, t.StrVal, w.kind, w.name))
					}
				default:
					errs = append(errs, fmt.Errorf("Service %s: port %s must target a named port", s.Name, p.Name))
				}
			}
		}
	}
	return errs
}

func (c *cell) service(name string) *corev1.Service {
	for _, s := range c.services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// env returns the value of variable name in ctr ("", false if unset or
// not a plain value).
func env(ctr *corev1.Container, name string) (string, bool) {
	for _, e := range ctr.Env {
		if e.Name == name && e.ValueFrom == nil {
			return e.Value, true
		}
	}
	return "", false
}

// expand resolves $(VAR) references in ctr's variable name for a pod
// named pod: plain values, and the pod's name from the downward API.
func expand(ctr *corev1.Container, name, pod string) (string, bool) {
	vals := map[string]string{}
	found := false
	var out string
	for _, e := range ctr.Env {
		v := e.Value
		if e.ValueFrom != nil {
			switch {
			case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
				v = pod
			default:
				v = "<" + e.Name + ">"
			}
		}
		v = envRef.ReplaceAllStringFunc(v, func(ref string) string {
			if x, ok := vals[ref[2:len(ref)-1]]; ok {
				return x
			}
			return ref
		})
		vals[e.Name] = v
		if e.Name == name {
			out, found = v, true
		}
	}
	return out, found
}

// storeContainer is the workload's store container, if it runs one.
func storeContainer(w *workload) *corev1.Container {
	for i := range w.tpl.Spec.Containers {
		if role(&w.tpl.Spec.Containers[i]) == "store" {
			return &w.tpl.Spec.Containers[i]
		}
	}
	return nil
}

// podDNS is the name pod has under the headless Service of sts.
func (c *cell) podDNS(w *workload, ordinal int) string {
	return fmt.Sprintf("%s-%d.%s.%s.svc", w.name, ordinal, w.sts.Spec.ServiceName, c.namespace)
}

// listens checks that address binds every interface on the port the
// container names name.
func listens(ctr *corev1.Container, variable, portName string) error {
	addr, ok := env(ctr, variable)
	if !ok {
		return fmt.Errorf("container %s does not set %s", ctr.Name, variable)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("container %s: %s=%q: %w", ctr.Name, variable, addr, err)
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		return fmt.Errorf("container %s: %s=%q listens on %s only, where no other pod or probe reaches it", ctr.Name, variable, addr, host)
	}
	want := -1
	for _, p := range ctr.Ports {
		if p.Name == portName {
			want = int(p.ContainerPort)
		}
	}
	if strconv.Itoa(want) != port {
		return fmt.Errorf("container %s: %s=%q, but its port %q is %d", ctr.Name, variable, addr, portName, want)
	}
	return nil
}

// checkStatefulSets: a store StatefulSet has a headless Service that
// publishes not-ready pods, starts its pods in parallel, and its nodes'
// Raft addresses, IDs and initial members agree with the names the
// Service gives them.
func (c *cell) checkStatefulSets() []error {
	var errs []error
	for _, w := range c.workloads {
		if w.sts == nil {
			continue
		}
		add := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: StatefulSet %s: %s", w.where, w.name, fmt.Sprintf(format, args...)))
		}
		svc := c.service(w.sts.Spec.ServiceName)
		switch {
		case svc == nil:
			add("serviceName %q names no Service", w.sts.Spec.ServiceName)
		case svc.Spec.ClusterIP != corev1.ClusterIPNone:
			add("serviceName %q names a Service that is not headless (clusterIP: None)", svc.Name)
		case !svc.Spec.PublishNotReadyAddresses:
			add("its headless Service %s must publish not-ready addresses: nodes become ready only once they found a quorum", svc.Name)
		case !matches(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, w.tpl.Labels):
			add("its headless Service %s does not select its pods", svc.Name)
		}
		ctr := storeContainer(w)
		if ctr == nil {
			continue
		}
		if w.sts.Spec.PodManagementPolicy != "Parallel" {
			add("podManagementPolicy must be Parallel: with OrderedReady, store-1 waits for store-0 to be ready, which needs a quorum")
		}
		if v, _ := env(ctr, "TROUPE_NODE_ID_FROM_HOSTNAME"); v != "true" {
			add("TROUPE_NODE_ID_FROM_HOSTNAME must be true (pod store-N is node N+1)")
		}
		for _, l := range []struct{ variable, port string }{{"TROUPE_GRPC_ADDR", "grpc"}, {"TROUPE_RAFT_LISTEN_ADDR", "raft"}, {"TROUPE_HTTP_ADDR", "http"}} {
			if err := listens(ctr, l.variable, l.port); err != nil {
				add("%v", err)
			}
		}
		raftPort, _ := containerPort(&w.tpl.Spec, "raft")
		for i, pod := range w.podNames() {
			want := fmt.Sprintf("%s:%d", c.podDNS(w, i), raftPort)
			if got, _ := expand(ctr, "TROUPE_RAFT_ADDR", pod); got != want {
				add("pod %s's TROUPE_RAFT_ADDR is %q, not its name under the headless Service %q", pod, got, want)
			}
		}
		members, _ := env(ctr, "TROUPE_INITIAL_MEMBERS")
		var want []string
		for i := range w.replicas {
			want = append(want, fmt.Sprintf("%d=%s:%d", i+1, c.podDNS(w, i), raftPort))
		}
		if members != strings.Join(want, ",") {
			add("TROUPE_INITIAL_MEMBERS is %q, not the %d pods' node IDs and Raft addresses %q", members, w.replicas, strings.Join(want, ","))
		}
	}
	return errs
}

// checkPDBs: every store StatefulSet has one PodDisruptionBudget letting
// one node go at a time, and budgets select one workload each.
func (c *cell) checkPDBs() []error {
	var errs []error
	for _, p := range c.pdbs {
		ws := c.selected(p.Spec.Selector)
		if len(ws) != 1 {
			errs = append(errs, fmt.Errorf("PodDisruptionBudget %s selects %d workloads, not one", p.Name, len(ws)))
		}
	}
	for _, w := range c.workloads {
		if w.sts == nil || storeContainer(w) == nil {
			continue
		}
		var budgets []string
		for _, p := range c.pdbs {
			if matches(p.Spec.Selector, w.tpl.Labels) {
				budgets = append(budgets, p.Name)
				if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.String() != "1" || p.Spec.MinAvailable != nil {
					errs = append(errs, fmt.Errorf("PodDisruptionBudget %s: want maxUnavailable 1 (and no minAvailable) for the store", p.Name))
				}
			}
		}
		if len(budgets) != 1 {
			errs = append(errs, fmt.Errorf("StatefulSet %s: %d PodDisruptionBudgets select it (%v), want one", w.name, len(budgets), budgets))
		}
	}
	return errs
}

// keysOf returns the keys of Secret or ConfigMap name, and whether it
// exists (as a manifest, or as one certs.sh makes).
func (c *cell) keysOf(kind, name string) ([]string, bool) {
	switch kind {
	case "Secret":
		if s, ok := c.secrets[name]; ok {
			var keys []string
			for k := range s.Data {
				keys = append(keys, k)
			}
			for k := range s.StringData {
				keys = append(keys, k)
			}
			return keys, true
		}
		if slices.Contains(GeneratedSecrets, name) {
			return certKeys, true
		}
	case "ConfigMap":
		if cm, ok := c.configMaps[name]; ok {
			var keys []string
			for k := range cm.Data {
				keys = append(keys, k)
			}
			for k := range cm.BinaryData {
				keys = append(keys, k)
			}
			return keys, true
		}
	}
	return nil, false
}

// fileSource is where a file of a pod comes from.
type fileSource struct{ kind, name, key string }

// projections are the Secrets and ConfigMaps volume v shows, with their
// items.
func projections(v *corev1.Volume) []struct {
	kind, name string
	items      []corev1.KeyToPath
} {
	type proj = struct {
		kind, name string
		items      []corev1.KeyToPath
	}
	var out []proj
	switch {
	case v.Secret != nil:
		out = append(out, proj{"Secret", v.Secret.SecretName, v.Secret.Items})
	case v.ConfigMap != nil:
		out = append(out, proj{"ConfigMap", v.ConfigMap.Name, v.ConfigMap.Items})
	case v.Projected != nil:
		for _, s := range v.Projected.Sources {
			if s.Secret != nil {
				out = append(out, proj{"Secret", s.Secret.Name, s.Secret.Items})
			}
			if s.ConfigMap != nil {
				out = append(out, proj{"ConfigMap", s.ConfigMap.Name, s.ConfigMap.Items})
			}
		}
	}
	return out
}

// resolveFile finds which Secret or ConfigMap key file path is, in
// container ctr of the pod.
func (c *cell) resolveFile(spec *corev1.PodSpec, ctr *corev1.Container, path string) (fileSource, error) {
	var mount *corev1.VolumeMount
	for i, m := range ctr.VolumeMounts {
		if strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") && (mount == nil || len(m.MountPath) > len(mount.MountPath)) {
			mount = &ctr.VolumeMounts[i]
		}
	}
	if mount == nil {
		return fileSource{}, fmt.Errorf("%s is on no volume container %s mounts", path, ctr.Name)
	}
	rel := strings.TrimPrefix(path, strings.TrimSuffix(mount.MountPath, "/")+"/")
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if v.Name != mount.Name {
			continue
		}
		for _, p := range projections(v) {
			if len(p.items) == 0 {
				if keys, _ := c.keysOf(p.kind, p.name); slices.Contains(keys, rel) {
					return fileSource{p.kind, p.name, rel}, nil
				}
				continue
			}
			for _, it := range p.items {
				if it.Path == rel {
					return fileSource{p.kind, p.name, it.Key}, nil
				}
			}
		}
		return fileSource{}, fmt.Errorf("%s: volume %s holds no file %s", path, v.Name, rel)
	}
	return fileSource{}, fmt.Errorf("%s: container %s mounts volume %s, which the pod does not have", path, ctr.Name, mount.Name)
}

// checkReferences: every Secret and ConfigMap a pod uses exists, with the
// keys it uses, and every file a troupe process is told to read (its CA,
// certificate and key) is one of them.
func (c *cell) checkReferences() []error {
	var errs []error
	for _, w := range c.workloads {
		spec := &w.tpl.Spec
		add := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: %s %s: %s", w.where, w.kind, w.name, fmt.Sprintf(format, args...)))
		}
		need := func(kind, name, key, what string) {
			keys, ok := c.keysOf(kind, name)
			switch {
			case !ok:
				add("%s uses %s %q, which neither a manifest nor certs.sh makes", what, kind, name)
			case key != "" && !slices.Contains(keys, key):
				add("%s uses key %q of %s %s, which has %v", what, key, kind, name, keys)
			}
		}
		for i := range spec.Volumes {
			v := &spec.Volumes[i]
			for _, p := range projections(v) {
				need(p.kind, p.name, "", "volume "+v.Name)
				for _, it := range p.items {
					need(p.kind, p.name, it.Key, "volume "+v.Name)
				}
			}
		}
		for _, ctr := range containers(spec) {
			for _, e := range ctr.Env {
				if e.ValueFrom == nil {
					continue
				}
				if r := e.ValueFrom.SecretKeyRef; r != nil {
					need("Secret", r.Name, r.Key, "variable "+e.Name)
				}
				if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
					need("ConfigMap", r.Name, r.Key, "variable "+e.Name)
				}
			}
			for _, ef := range ctr.EnvFrom {
				if ef.SecretRef != nil {
					need("Secret", ef.SecretRef.Name, "", "envFrom")
				}
				if ef.ConfigMapRef != nil {
					need("ConfigMap", ef.ConfigMapRef.Name, "", "envFrom")
				}
			}
			if role(ctr) == "" {
				continue
			}
			for _, pod := range w.podNames() {
				var secret string
				for _, f := range []struct{ variable, key string }{{"TROUPE_CA", "ca.crt"}, {"TROUPE_CERT", "tls.crt"}, {"TROUPE_KEY", "tls.key"}} {
					path, ok := expand(ctr, f.variable, pod)
					if !ok {
						add("container %s sets no %s: troupe would refuse to start (or need --insecure)", ctr.Name, f.variable)
						continue
					}
					src, err := c.resolveFile(spec, ctr, path)
					if err != nil {
						add("pod %s: %s: %v", pod, f.variable, err)
						continue
					}
					if src.kind != "Secret" || src.key != f.key {
						add("pod %s: %s=%s is key %q of %s %s, want key %q of a Secret", pod, f.variable, path, src.key, src.kind, src.name, f.key)
					}
					if secret != "" && src.name != secret {
						add("pod %s: its CA, certificate and key come from different Secrets (%s, %s)", pod, secret, src.name)
					}
					secret = src.name
				}
			}
		}
	}
	return errs
}

// storeEndpoints are the gRPC addresses a store client may dial: each
// store pod's name under its headless Service, and the Services selecting
// store pods, with the port they reach gRPC at.
func (c *cell) storeEndpoints() (pods map[string]string, services map[string]bool) {
	pods, services = map[string]string{}, map[string]bool{}
	for _, w := range c.workloads {
		if w.sts == nil || storeContainer(w) == nil {
			continue
		}
		port, _ := containerPort(&w.tpl.Spec, "grpc")
		for i, pod := range w.podNames() {
			pods[fmt.Sprintf("%s:%d", c.podDNS(w, i), port)] = pod
		}
		for _, s := range c.services {
			if !matches(&metav1.LabelSelector{MatchLabels: s.Spec.Selector}, w.tpl.Labels) {
				continue
			}
			for _, p := range s.Spec.Ports {
				if p.TargetPort.StrVal == "grpc" {
					services[fmt.Sprintf("%s.%s.svc:%d", s.Name, c.namespace, p.Port)] = true
				}
			}
		}
	}
	return pods, services
}

// checkStoreAddresses: every client role's TROUPE_ENDPOINT lists every store
// node by the name its certificate carries (or a Service of the store).
func (c *cell) checkStoreAddresses() []error {
	var errs []error
	pods, services := c.storeEndpoints()
	for _, w := range c.workloads {
		for _, ctr := range w.tpl.Spec.Containers {
			r := role(&ctr)
			if r == "" || r == "store" {
				continue
			}
			v, ok := env(&ctr, "TROUPE_ENDPOINT")
			if !ok {
				errs = append(errs, fmt.Errorf("%s: %s %s: container %s sets no TROUPE_ENDPOINT", w.where, w.kind, w.name, ctr.Name))
				continue
			}
			seen := map[string]bool{}
			for _, ep := range strings.Split(v, ",") {
				if _, ok := pods[ep]; !ok && !services[ep] {
					errs = append(errs, fmt.Errorf("%s: %s %s: TROUPE_ENDPOINT names %q, which is no store pod's name under its headless Service nor a store Service (%v)",
						w.where, w.kind, w.name, ep, slices.Sorted(maps.Keys(pods))))
				}
				seen[ep] = true
			}
			for ep := range pods {
				if !seen[ep] && !slices.ContainsFunc(strings.Split(v, ","), func(s string) bool { return services[s] }) {
					errs = append(errs, fmt.Errorf("%s: %s %s: TROUPE_ENDPOINT leaves out store node %s: the client routes each request to its shard's leader among the nodes it knows", w.where, w.kind, w.name, ep))
				}
			}
		}
	}
	return errs
}

// checkEnv: every variable a troupe container sets is a flag of its
// subcommand (TROUPE_<FLAG>), one the Go runtime reads, or a helper that
// a later variable refers to as $(NAME); references name variables set
// before them (Kubernetes leaves others as they are); role processes
// serve /healthz where their probes look.
func (c *cell) checkEnv(flags Flags) []error {
	var errs []error
	for _, w := range c.workloads {
		for _, ctr := range containers(&w.tpl.Spec) {
			add := func(format string, args ...any) {
				errs = append(errs, fmt.Errorf("%s: %s %s: container %s: %s", w.where, w.kind, w.name, ctr.Name, fmt.Sprintf(format, args...)))
			}
			r := role(ctr)
			if r == "" {
				if len(ctr.Command) > 0 && ctr.Command[0] == "/troupe" {
					add("runs /troupe with no subcommand")
				}
				continue
			}
			fl, ok := flags[r]
			if !ok {
				add("runs troupe %s, which is not one of %v", r, Roles)
				continue
			}
			for _, a := range ctr.Args[1:] {
				name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				if !strings.HasPrefix(a, "-") || !fl[name] {
					add("argument %q is not a flag of troupe %s", a, r)
				}
			}
			defined := map[string]bool{}
			referenced := map[string]bool{}
			for _, e := range ctr.Env {
				for _, m := range envRef.FindAllStringSubmatch(e.Value, -1) {
					if !defined[m[1]] {
						add("%s refers to $(%s), which is not set before it", e.Name, m[1])
					}
					referenced[m[1]] = true
				}
				if defined[e.Name] {
					add("sets %s twice", e.Name)
				}
				defined[e.Name] = true
			}
			for _, e := range ctr.Env {
				switch {
				case strings.HasPrefix(e.Name, "TROUPE_"):
					if !fl[flagOfEnvVar(e.Name)] {
						add("%s is no flag of troupe %s (it has %s)", e.Name, r, strings.Join(envNames(fl), ", "))
					}
				case slices.Contains(goRuntimeEnv, e.Name):
				case referenced[e.Name]:
				default:
					add("sets %s, which troupe %s does not read and no variable refers to", e.Name, r)
				}
			}
			if r == "scheduler" || r == "controller" {
				if err := listens(ctr, "TROUPE_HTTP_ADDR", "http"); err != nil {
					add("%v", err)
				}
			}
		}
	}
	return errs
}

func envNames(fl map[string]bool) []string {
	var out []string
	for f := range fl {
		out = append(out, envVarOfFlag(f))
	}
	slices.Sort(out)
	return out
}
