package check

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const (
	manifestDir = ".."       // deploy/kubernetes
	repoRoot    = "../../.." // the troupe module
)

// troupeBinary builds troupe from the main module once ($TROUPE_BIN, if
// set, names one built already).
var troupeBinary = sync.OnceValues(func() (string, error) {
	if bin := os.Getenv("TROUPE_BIN"); bin != "" {
		return filepath.Abs(bin)
	}
	dir, err := os.MkdirTemp("", "troupe-k8s-check-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "troupe")
	cmd := exec.Command("go", "build", "-o", bin, "./tools/troupe")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./tools/troupe: %v\n%s", err, out)
	}
	return bin, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if bin, err := troupeBinary(); err == nil && os.Getenv("TROUPE_BIN") == "" {
		os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

// flagLine is a flag in the help cobra prints: "      --data-dir string"
// or "  -n, --namespace string".
var flagLine = regexp.MustCompile(`(?m)^ +(?:-[a-z0-9], )?--([a-z0-9][a-z0-9-]*)`)

// troupeFlags are the flags of each role, from `troupe <role> -h`.
var troupeFlags = sync.OnceValues(func() (Flags, error) {
	bin, err := troupeBinary()
	if err != nil {
		return nil, err
	}
	flags := Flags{}
	for _, r := range Roles {
		out, _ := exec.Command(bin, r, "-h").CombinedOutput()
		set := map[string]bool{}
		for _, m := range flagLine.FindAllStringSubmatch(string(out), -1) {
			set[m[1]] = true
		}
		delete(set, "help") // -h is no setting
		if len(set) < 5 {
			return nil, fmt.Errorf("troupe %s -h listed %d flags:\n%s", r, len(set), out)
		}
		flags[r] = set
	}
	return flags, nil
})

func mustFlags(t *testing.T) Flags {
	t.Helper()
	f, err := troupeFlags()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func readManifests(t *testing.T) map[string][]byte {
	t.Helper()
	files, err := readDir(manifestDir)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func report(t *testing.T, errs []error) {
	t.Helper()
	for _, err := range errs {
		t.Error(err)
	}
}

// TestManifests decodes every document of every manifest strictly into its
// typed object and checks them against each other and troupe's flags.
func TestManifests(t *testing.T) {
	c, errs := load(readManifests(t))
	report(t, errs)
	if len(c.workloads) == 0 || len(c.services) == 0 {
		t.Fatalf("found %d workloads and %d services", len(c.workloads), len(c.services))
	}
	report(t, CheckAll(c, mustFlags(t)))
	roles := map[string]bool{}
	for _, w := range c.workloads {
		for _, ctr := range w.tpl.Spec.Containers {
			roles[role(&ctr)] = true
		}
	}
	for _, r := range Roles {
		if !roles[r] {
			t.Errorf("no workload runs troupe %s", r)
		}
	}
	t.Logf("%d objects, %d workloads, %d services, %d budgets", len(c.objects), len(c.workloads), len(c.services), len(c.pdbs))
}

// TestChecksCatchMistakes makes one mistake at a time in the manifests and
// expects the checks to say so: they are not vacuous.
func TestChecksCatchMistakes(t *testing.T) {
	flags := mustFlags(t)
	for _, tc := range []struct {
		name, file, old, new, want string
	}{
		{"unknown field", "store.yaml", "  serviceName: troupe-store\n", "  serviceName: troupe-store\n  replica: 3\n", `unknown field "replica"`},
		{"misplaced field", "controller.yaml", "      automountServiceAccountToken: false\n", "      automountServiceAccountToken: false\n      readOnlyRootFilesystem: true\n", `unknown field "readOnlyRootFilesystem"`},
		{"duplicate key", "agent.yaml", "      enableServiceLinks: false\n", "      enableServiceLinks: false\n      enableServiceLinks: true\n", `already set in map`},
		{"unknown kind", "namespace.yaml", "kind: Namespace", "kind: Namespaces", `not a kind these manifests may hold`},
		{"service selects nothing", "store.yaml", "  name: troupe-store-public\n  namespace: troupe\n  labels:\n    app.kubernetes.io/name: troupe\n    app.kubernetes.io/component: store\nspec:\n  type: ClusterIP\n  selector:\n    app.kubernetes.io/name: troupe\n    app.kubernetes.io/component: store\n",
			"  name: troupe-store-public\n  namespace: troupe\n  labels:\n    app.kubernetes.io/name: troupe\n    app.kubernetes.io/component: store\nspec:\n  type: ClusterIP\n  selector:\n    app.kubernetes.io/name: troupe\n    app.kubernetes.io/component: stores\n", `selects no workload's pods`},
		{"service port unknown", "store.yaml", "      port: 7100\n      targetPort: raft\n", "      port: 7100\n      targetPort: rafts\n", `targets "rafts", not a port of`},
		{"serviceName not headless", "store.yaml", "  clusterIP: None\n", "", `not headless`},
		{"not published before ready", "store.yaml", "  publishNotReadyAddresses: true\n", "", `publish not-ready addresses`},
		{"ordered pods", "store.yaml", "  podManagementPolicy: Parallel\n", "", `podManagementPolicy must be Parallel`},
		{"missing secret", "scheduler.yaml", "secretName: troupe-scheduler-tls", "secretName: troupe-schedulers-tls", `neither a manifest nor certs.sh makes`},
		{"wrong key", "store.yaml", "{key: tls.key, path: store-1/tls.key}", "{key: tls.pem, path: store-1/tls.key}", `uses key "tls.pem"`},
		{"cert path on no volume", "controller.yaml", "value: /etc/troupe/pki/tls.crt", "value: /etc/troupe/tls.crt", `TROUPE_CERT: /etc/troupe/tls.crt is on no volume`},
		{"cert from the wrong pod", "store.yaml", "path: store-2/tls.crt}", "path: store-2/tls2.crt}", `pod store-2: TROUPE_CERT`},
		{"probe port missing", "controller.yaml", "              path: /healthz\n              port: http\n            periodSeconds: 10\n          livenessProbe", "              path: /healthz\n              port: metrics\n            periodSeconds: 10\n          livenessProbe", `readiness probe's port "metrics" is not a port`},
		{"probe port numeric", "store.yaml", "              path: /metrics\n              port: http\n", "              path: /metrics\n              port: 7200\n", `liveness probe's port 7200 is not a named port`},
		{"pdb selects other", "store.yaml", "  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: troupe\n      app.kubernetes.io/component: store\n", "  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: troupe\n      app.kubernetes.io/component: agent\n", `StatefulSet store: 0 PodDisruptionBudgets`},
		{"pdb two at a time", "store.yaml", "  maxUnavailable: 1\n", "  maxUnavailable: 2\n", `want maxUnavailable 1`},
		{"env not a flag", "scheduler.yaml", "- name: TROUPE_KINDS", "- name: TROUPE_KIND", `TROUPE_KIND is no flag of troupe scheduler`},
		{"env of another role", "controller.yaml", "- name: TROUPE_HTTP_ADDR\n              value: 0.0.0.0:7300\n", "- name: TROUPE_HTTP_ADDR\n              value: 0.0.0.0:7300\n            - name: TROUPE_DATA_DIR\n              value: /x\n", `TROUPE_DATA_DIR is no flag of troupe controller`},
		{"unused helper", "controller.yaml", "          env:\n", "          env:\n            - name: NODE\n              value: x\n", `sets NODE, which troupe controller does not read`},
		{"reference before set", "store.yaml", "            - name: POD_NAME\n              valueFrom:\n                fieldRef:\n                  fieldPath: metadata.name\n", "", `refers to $(POD_NAME), which is not set before it`},
		{"raft address not its name", "store.yaml", "value: $(POD_NAME).troupe-store.troupe.svc:7100", "value: $(POD_NAME).troupe-store.default.svc:7100", `TROUPE_RAFT_ADDR is`},
		{"initial members", "store.yaml", "3=store-2.troupe-store.troupe.svc:7100", "3=store-3.troupe-store.troupe.svc:7100", `TROUPE_INITIAL_MEMBERS is`},
		{"listen on loopback", "store.yaml", "value: 0.0.0.0:7200", "value: 127.0.0.1:7200", `listens on 127.0.0.1 only`},
		{"listen on another port", "scheduler.yaml", "value: 0.0.0.0:7300", "value: 0.0.0.0:7301", `its port "http" is 7300`},
		{"store left out", "agent.yaml", "store-0.troupe-store.troupe.svc:7000,store-1.troupe-store.troupe.svc:7000,", "store-0.troupe-store.troupe.svc:7000,", `leaves out store node store-1`},
		{"store misnamed", "controller.yaml", "store-0.troupe-store.troupe.svc:7000", "store-0.troupe-store:7000", `TROUPE_ENDPOINT names "store-0.troupe-store:7000"`},
		{"root store", "store.yaml", "        runAsNonRoot: true\n", "", `must run as non-root`},
		{"writable root", "agent.yaml", "            privileged: false\n            allowPrivilegeEscalation: false\n            readOnlyRootFilesystem: true\n", "            privileged: false\n            allowPrivilegeEscalation: false\n            readOnlyRootFilesystem: false\n", `readOnlyRootFilesystem must be true`},
		{"more capabilities", "agent.yaml", `"DAC_OVERRIDE", "KILL"]`, `"DAC_OVERRIDE", "KILL", "SYS_ADMIN"]`, `adds capability SYS_ADMIN`},
		{"privileged", "agent.yaml", "privileged: false", "privileged: true", `is privileged`},
		{"readable keys", "agent.yaml", "defaultMode: 0400", "defaultMode: 0440", `only its process can read`},
		{"zombies", "agent.yaml", "      shareProcessNamespace: true\n", "", `shareProcessNamespace must be true`},
		{"service links", "store.yaml", "      enableServiceLinks: false\n", "", `enableServiceLinks must be false`},
		{"no limits", "controller.yaml", "            limits:\n              cpu: \"1\"\n              memory: 1Gi\n", "", `needs a request and a limit`},
		{"overlapping selectors", "scheduler.yaml", "      app.kubernetes.io/instance: scheduler-1\n  template", "  template", `selector also selects the pods of Deployment scheduler-0`},
		{"unlisted manifest", "kustomization.yaml", "  - agent.yaml\n", "", `kustomization.yaml lists resources`},
		{"image without a tag setting", "controller.yaml", "image: troupe:dev", "image: troupe-controller:dev", `is not one of kustomization.yaml's images`},
		{"wrong namespace", "controller.yaml", "  namespace: troupe\n", "  namespace: default\n", `not the cell's "troupe"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := readManifests(t)
			if !bytes.Contains(files[tc.file], []byte(tc.old)) {
				t.Fatalf("%s does not contain %q", tc.file, tc.old)
			}
			files[tc.file] = bytes.Replace(files[tc.file], []byte(tc.old), []byte(tc.new), 1)
			c, errs := load(files)
			if c != nil {
				errs = append(errs, CheckAll(c, flags)...)
			}
			var msgs []string
			for _, err := range errs {
				msgs = append(msgs, err.Error())
			}
			if !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, tc.want) }) {
				t.Errorf("want an error containing %q, got:\n%s", tc.want, strings.Join(msgs, "\n"))
			}
		})
	}
}

// identityOf is a certificate's Troupe identity, its one
// spiffe://troupe.cell/<role>/<name> URI SAN.
func identityOf(cert *x509.Certificate) (role, name string, err error) {
	var ids []string
	for _, u := range cert.URIs {
		if u.Scheme == "spiffe" && u.Host == "troupe.cell" {
			ids = append(ids, strings.TrimPrefix(u.Path, "/"))
		}
	}
	if len(ids) != 1 {
		return "", "", fmt.Errorf("certificate %s carries %d Troupe identities", cert.Subject, len(ids))
	}
	role, name, _ = strings.Cut(ids[0], "/")
	return role, name, nil
}

// TestCertificates runs certs.sh and checks what it makes: the Secrets the
// manifests mount, no others, each with a key matching its certificate,
// issued by the CA it carries, for the identity of the role that mounts
// it; a store node's certificate names every address it is dialled at.
func TestCertificates(t *testing.T) {
	bin, err := troupeBinary()
	if err != nil {
		t.Fatal(err)
	}
	c, errs := load(readManifests(t))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	tmp := t.TempDir()
	out := filepath.Join(tmp, "secrets")
	script, err := filepath.Abs(filepath.Join(manifestDir, "certs.sh"))
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) ([]byte, error) {
		cmd := exec.Command("sh", append([]string{script}, args...)...)
		cmd.Env = append(os.Environ(), "TROUPE="+bin, "OUT="+out, "KUBECTL=false", "ADMIN=test")
		return cmd.CombinedOutput()
	}
	for _, bad := range []string{"*", "node-1"} {
		if o, err := run(filepath.Join(tmp, "ca"), bad); err == nil {
			t.Errorf("certs.sh took agent name %q:\n%s", bad, o)
		}
	}
	if o, err := run(filepath.Join(tmp, "ca"), "node-*"); err != nil {
		t.Fatalf("certs.sh: %v\n%s", err, o)
	}
	paths, _ := filepath.Glob(filepath.Join(out, "*.yaml"))
	secrets := map[string]*corev1.Secret{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s := &corev1.Secret{}
		if err := yaml.UnmarshalStrict(data, s); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if s.Namespace != c.namespace || s.Kind != "Secret" || s.APIVersion != "v1" {
			t.Errorf("%s: a %s/%s in namespace %q", p, s.APIVersion, s.Kind, s.Namespace)
		}
		if keys := slices.Sorted(maps.Keys(s.Data)); !slices.Equal(keys, certKeys) {
			t.Errorf("Secret %s has keys %v, want %v", s.Name, keys, certKeys)
		}
		secrets[s.Name] = s
	}
	if got, want := slices.Sorted(maps.Keys(secrets)), slices.Sorted(slices.Values(GeneratedSecrets)); !slices.Equal(got, want) {
		t.Fatalf("certs.sh made Secrets %v, the manifests use %v", got, want)
	}
	certs := map[string]*x509.Certificate{}
	for name, s := range secrets {
		if _, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"]); err != nil {
			t.Errorf("Secret %s: %v", name, err)
			continue
		}
		block, _ := pem.Decode(s.Data["tls.crt"])
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(s.Data["ca.crt"]) {
			t.Fatalf("Secret %s: ca.crt holds no certificate", name)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: time.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("Secret %s: %v", name, err)
		}
		certs[name] = cert
	}

	// Each troupe container's certificate is of its role; a store node's
	// names what it is dialled at.
	pods, services := c.storeEndpoints()
	for _, w := range c.workloads {
		for _, ctr := range w.tpl.Spec.Containers {
			r := role(&ctr)
			if r == "" {
				continue
			}
			for i, pod := range w.podNames() {
				path, _ := expand(&ctr, "TROUPE_CERT", pod)
				src, err := c.resolveFile(&w.tpl.Spec, &ctr, path)
				if err != nil {
					t.Error(err)
					continue
				}
				cert := certs[src.name]
				if cert == nil {
					t.Errorf("pod %s: its certificate comes from %s %s, which certs.sh does not make", pod, src.kind, src.name)
					continue
				}
				idRole, idName, err := identityOf(cert)
				if err != nil {
					t.Error(err)
					continue
				}
				if idRole != r {
					t.Errorf("pod %s runs troupe %s with a certificate of %s/%s", pod, r, idRole, idName)
				}
				switch r {
				case "agent":
					if !strings.HasSuffix(idName, "*") || idName == "*" {
						t.Errorf("the agents' certificate names %s/%s, not a machine prefix pattern", idRole, idName)
					}
				case "store":
					if idName != strconv.Itoa(i+1) {
						t.Errorf("pod %s (node %d) presents store/%s", pod, i+1, idName)
					}
					raft, _ := expand(&ctr, "TROUPE_RAFT_ADDR", pod)
					dialled := []string{raft}
					for ep, p := range pods {
						if p == pod {
							dialled = append(dialled, ep)
						}
					}
					for ep := range services {
						dialled = append(dialled, ep)
					}
					dialled = append(dialled, "localhost:7000", "127.0.0.1:7000") // kubectl port-forward
					for _, ep := range dialled {
						host, _, _ := strings.Cut(ep, ":")
						if err := cert.VerifyHostname(host); err != nil {
							t.Errorf("pod %s is dialled at %s: %v", pod, ep, err)
						}
					}
				}
			}
		}
	}
}
