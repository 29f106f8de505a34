package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// How the CLI reaches a cell: where (endpoints), as whom (credentials).
// Each comes from, first to last: the command line; the environment
// (TROUPE_ENDPOINT, TROUPE_CA, ...); the context of the CLI's
// configuration (--context, else its current context); for the endpoint,
// 127.0.0.1:7000. A --context given on the command line beats the
// environment: `troupe get jobs --context prod` reaches prod whatever
// TROUPE_ENDPOINT says.

// defaultEndpoint is the store address when nothing names one: troupe
// up's.
const defaultEndpoint = "127.0.0.1:7000"

// dialTimeout bounds the CLI's first contact with a cell (probe): a
// store that does not answer within it is taken as not running.
const dialTimeout = 2 * time.Second

// tlsFlags are a process's credentials: the cell's CA and its own
// certificate and key (troupe certs makes them), or --insecure.
type tlsFlags struct {
	ca, cert, key string
	insecure      bool
}

// register defines --ca, --cert, --key and --insecure on fs.
func (f *tlsFlags) register(fs flagVars) {
	fs.StringVar(&f.ca, "ca", "", "the cell's CA certificate, PEM")
	fs.StringVar(&f.cert, "cert", "", "this process's certificate, PEM; its identity says what it may do")
	fs.StringVar(&f.key, "key", "", "this process's private key, PEM")
	fs.BoolVar(&f.insecure, "insecure", false, "no TLS and no authorization: whoever reaches a port may read and change everything")
}

// source returns the credentials the flags name, nil with --insecure
// (after a warning on warn, every start).
func (f tlsFlags) source(what string, warn io.Writer) (*pki.Source, error) {
	if f.insecure {
		if f.ca != "" || f.cert != "" || f.key != "" {
			return nil, fmt.Errorf("%s: --insecure and --ca/--cert/--key exclude each other", what)
		}
		fmt.Fprintf(warn, "WARNING: troupe %s runs with --insecure: no TLS, no authentication, no authorization; anyone who reaches its ports can read and change the whole cell\n", what)
		return nil, nil
	}
	if f.ca == "" && f.cert == "" && f.key == "" {
		return nil, fmt.Errorf("%s: no credentials: give --ca, --cert and --key (troupe certs makes them), or --insecure", what)
	}
	files := pki.Files{CA: f.ca, Cert: f.cert, Key: f.key}
	if err := files.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	s, err := pki.NewSource(files, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return s, nil
}

// connFlags are the flags of a command that reaches a cell as a client:
// --endpoint, the credentials, --context, --config and --timeout.
type connFlags struct {
	endpoint string
	tls      tlsFlags
	context  string
	config   string
	timeout  time.Duration
}

// addConnFlags defines the connection flags on cmd, --timeout with
// timeout as its default.
func (a *app) addConnFlags(cmd *cobra.Command, timeout time.Duration, timeoutUsage string) *connFlags {
	f := &connFlags{}
	fs := cmd.Flags()
	fs.StringVar(&f.endpoint, "endpoint", "", "store gRPC address(es), comma-separated (default: the context's, else "+defaultEndpoint+")")
	f.tls.register(fs)
	a.addConfigFlags(cmd, &f.config, &f.context)
	fs.DurationVar(&f.timeout, "timeout", timeout, timeoutUsage)
	return f
}

// addConfigFlags defines --config and, unless context is nil, --context
// on cmd; a shell completes --context with the contexts' names.
func (a *app) addConfigFlags(cmd *cobra.Command, config, context *string) {
	fs := cmd.Flags()
	fs.StringVar(config, "config", "", "the CLI's configuration file (default ~/.troupe/config.yaml)")
	if context != nil {
		fs.StringVar(context, "context", "", "the context of the CLI's configuration to use (default: its current context)")
		_ = cmd.RegisterFlagCompletionFunc("context", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return a.contextNames(*config), cobra.ShellCompDirectiveNoFileComp
		})
	}
}

// contextNames are the names of the contexts of the configuration file
// config ("": TROUPE_CONFIG's, else the default one; a shell completing
// runs no command, so the environment has not filled the flags), none if
// it cannot be read.
func (a *app) contextNames(config string) []string {
	if v, ok := a.lookupEnv(envName("config")); ok && config == "" {
		config = v
	}
	cc, _ := readClientConfig(a.configPath(config))
	var names []string
	for _, c := range cc.Contexts {
		names = append(names, c.Name)
	}
	return names
}

// configPath is the CLI's configuration file: --config, else the default.
func (a *app) configPath(config string) string {
	if config != "" {
		return config
	}
	return defaultClientConfigPath(a.home)
}

// target is a cell the CLI reaches: its store's endpoints, where they
// came from (for messages), and the credentials.
type target struct {
	endpoints []string
	from      string // "--endpoint", "TROUPE_ENDPOINT", `context "local"`, "the default"
	creds     *pki.Source
}

// target resolves where and as whom cmd reaches the cell (see above).
func (a *app) target(cmd *cobra.Command, f *connFlags) (target, error) {
	fs := cmd.Flags()
	explicitContext := fs.Changed("context") && !a.fromEnv["context"]
	// source says where flag name's value came from, "" if it is to come
	// from the context.
	source := func(names ...string) string {
		for _, n := range names {
			switch {
			case !fs.Changed(n):
			case !a.fromEnv[n]:
				return "--" + n
			case !explicitContext:
				return envName(n)
			}
		}
		return ""
	}
	endpointFrom := source(append([]string{"endpoint"}, aliasesOf(fs, "endpoint")...)...)
	tlsGiven := map[string]bool{}
	for _, n := range []string{"ca", "cert", "key", "insecure"} {
		tlsGiven[n] = source(n) != ""
	}
	anyTLS := tlsGiven["ca"] || tlsGiven["cert"] || tlsGiven["key"] || tlsGiven["insecure"]

	fullTLS := (tlsGiven["insecure"] && f.tls.insecure) || (tlsGiven["ca"] && tlsGiven["cert"] && tlsGiven["key"])
	path := a.configPath(f.config)
	var ctx *cellContext
	if explicitContext || endpointFrom == "" || !fullTLS {
		cc, err := readClientConfig(path)
		if err != nil {
			return target{}, err
		}
		name := f.context
		if name == "" {
			name = cc.CurrentContext
		}
		if name != "" {
			if ctx = cc.context(name); ctx == nil {
				return target{}, fmt.Errorf("no context %q in %s (troupe config get-contexts lists them)", name, path)
			}
		}
	}

	t := target{endpoints: strings.Split(f.endpoint, ","), from: endpointFrom}
	switch {
	case endpointFrom != "":
	case ctx != nil && len(ctx.Endpoints) > 0:
		t.endpoints, t.from = ctx.Endpoints, fmt.Sprintf("context %q", ctx.Name)
	default:
		t.endpoints, t.from = []string{defaultEndpoint}, "the default"
	}

	var creds tlsFlags
	switch {
	case anyTLS:
		// The flags given, and the context's files for those they leave
		// out.
		var cx cellContext
		if ctx != nil && !ctx.Insecure {
			cx = *ctx
		}
		creds.insecure = tlsGiven["insecure"] && f.tls.insecure
		pick := func(n, flag, fromContext string) string {
			switch {
			case tlsGiven[n]:
				return flag
			case creds.insecure:
				return ""
			}
			return fromContext
		}
		creds.ca, creds.cert, creds.key = pick("ca", f.tls.ca, cx.CA), pick("cert", f.tls.cert, cx.Cert), pick("key", f.tls.key, cx.Key)
	case ctx != nil:
		creds = tlsFlags{ca: ctx.CA, cert: ctx.Cert, key: ctx.Key, insecure: ctx.Insecure}
	default:
		return target{}, fmt.Errorf("no credentials: start a cell with troupe up (it writes the context %q into %s), "+
			"add a context (troupe config set-context NAME --endpoint ADDR --ca CA --cert CERT --key KEY), "+
			"or give --ca, --cert and --key, or --insecure", upContext, path)
	}
	var err error
	t.creds, err = creds.source("cli", a.errOut)
	return t, err
}

// connect resolves cmd's cell, checks that its store answers (probe) and
// returns a client of it, with a context ending after --timeout.
func (a *app) connect(cmd *cobra.Command, f *connFlags) (*clientlib.Client, target, context.Context, context.CancelFunc, error) {
	t, err := a.target(cmd, f)
	if err != nil {
		return nil, t, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	if err := probe(ctx, t, min(a.dialTimeout, f.timeout)); err != nil {
		cancel()
		return nil, t, nil, nil, err
	}
	cc := clientlib.DefaultConfig(t.endpoints...)
	cc.TLS = t.creds
	c, err := clientlib.New(cc)
	if err != nil {
		cancel()
		return nil, t, nil, nil, err
	}
	return c, t, ctx, cancel, nil
}

// probe asks every endpoint of t for its status at once, each once and
// within timeout, and succeeds as soon as one answers (any answer: a
// refusal is one too). When none does, it says so in a few words instead
// of after the client's retries: a cell that is not running, the wrong
// address, or credentials the store refuses.
func probe(ctx context.Context, t target, timeout time.Duration) error {
	errs := make([]error, len(t.endpoints))
	var wg sync.WaitGroup
	for i, ep := range t.endpoints {
		wg.Go(func() { _, errs[i] = nodeStatus(ctx, ep, t.creds, timeout) })
	}
	wg.Wait()
	for _, err := range errs {
		switch status.Code(err) {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Unimplemented:
		default:
			return nil // an answer
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for i, err := range errs {
		if status.Code(err) == codes.Unimplemented {
			return fmt.Errorf("what answers at %s (from %s) is no Troupe store: %s", t.endpoints[i], t.from, status.Convert(err).Message())
		}
		if msg := status.Convert(err).Message(); strings.Contains(msg, "handshake") || strings.Contains(msg, "certificate") {
			return fmt.Errorf("the store at %s and the CLI do not accept each other's certificates (check --ca, --cert and --key, or the context's): %s",
				t.endpoints[i], msg)
		}
	}
	return unreachable(t, errs, timeout)
}

// unreachable is the error of a cell none of whose endpoints answers
// within timeout.
func unreachable(t target, errs []error, timeout time.Duration) error {
	why := "no answer"
	for _, err := range errs {
		msg := status.Convert(err).Message()
		switch {
		case status.Code(err) == codes.DeadlineExceeded:
			why = fmt.Sprintf("no answer within %v", timeout)
		case strings.Contains(msg, "connection refused"):
			why = "connection refused"
		case strings.Contains(msg, "no such host"):
			why = "no such host"
		default:
			why = msg
		}
	}
	return fmt.Errorf("no store answers at %s (from %s: %s): is the cell running? set --endpoint, TROUPE_ENDPOINT or a context (troupe config)",
		strings.Join(t.endpoints, ","), t.from, why)
}

// nodeStatus asks the store node at endpoint for its status, within
// timeout.
func nodeStatus(ctx context.Context, endpoint string, creds *pki.Source, timeout time.Duration) (*storev1.StatusResponse, error) {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(pki.StoreCredentials(creds)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return storev1.NewStoreClient(conn).Status(ctx, &storev1.StatusRequest{})
}

// storeConn is a plain gRPC connection to t's first endpoint, for the
// store's administrative calls (members, backup), once probe found the
// cell answering within timeout.
func (a *app) storeConn(ctx context.Context, t target, timeout time.Duration) (*grpc.ClientConn, error) {
	if err := probe(ctx, t, min(a.dialTimeout, timeout)); err != nil {
		return nil, err
	}
	return grpc.NewClient(t.endpoints[0], grpc.WithTransportCredentials(pki.StoreCredentials(t.creds)))
}

// errNotFound says obj ("job default/web") does not exist; errors.Is
// finds clientlib.ErrNotFound in it.
func errNotFound(obj string) error { return fmt.Errorf("%s %w", obj, clientlib.ErrNotFound) }
