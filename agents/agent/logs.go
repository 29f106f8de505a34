package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/cellstore/pki"
)

// serveLogs starts the log server when LogAddr is set and the runtime
// keeps logs.
func (a *Agent) serveLogs(ctx context.Context) error {
	if a.cfg.LogAddr == "" {
		return nil
	}
	logs, ok := a.cfg.Runtime.(runtime.Logs)
	if !ok {
		return fmt.Errorf("agent %s: the runtime keeps no logs to serve", a.cfg.Machine)
	}
	lis, err := net.Listen("tcp", a.cfg.LogAddr)
	if err != nil {
		return fmt.Errorf("agent %s: serve logs: %w", a.cfg.Machine, err)
	}
	a.logAddr = lis.Addr().String()
	if a.cfg.TLS != nil {
		// Operators (admin) and viewers read logs, over TLS with their
		// certificates; a task's output is theirs to see, no one else's.
		lis = tls.NewListener(lis, a.cfg.TLS.ServerConfig(pki.AcceptRoles(pki.RoleAdmin, pki.RoleViewer), false))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /logs/", func(w http.ResponseWriter, r *http.Request) {
		ref := strings.TrimPrefix(r.URL.Path, "/logs/")
		if parts := strings.Split(ref, "/"); len(parts) != 3 || strings.Contains(ref, "..") {
			http.Error(w, "want /logs/<namespace>/<job>/<index>", http.StatusBadRequest)
			return
		}
		stream := r.URL.Query().Get("stream")
		if stream == "" {
			stream = "stdout"
		}
		if stream != "stdout" && stream != "stderr" {
			http.Error(w, "stream is stdout or stderr", http.StatusBadRequest)
			return
		}
		f, err := os.Open(filepath.Join(logs.TaskDir(ref), stream+".log"))
		if errors.Is(err, os.ErrNotExist) {
			http.Error(w, "no logs of "+ref+" on "+a.cfg.Machine, http.StatusNotFound)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		http.ServeContent(w, r, "", time.Time{}, f)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.cfg.Logger.Warn("log server stopped", zap.Error(err))
		}
	}()
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	return nil
}
