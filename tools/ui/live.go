package ui

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"time"
)

// A page follows the cell through its stream, /ui/live/<page>: server-sent
// events that the page's script applies.
//
//	event: sections   data: {"<section id>": "<its HTML>", ...}
//	event: grid       data: gridMessage
//
// The first of each says everything; later ones only what changed. The
// stream builds the page again when a topic it shows changes (or every
// Config.Refresh, so that ages move on), at most every
// Config.MinInterval, and only for as long as someone watches.

// serveLive streams the page at path until the client goes.
func (s *Server) serveLive(w http.ResponseWriter, r *http.Request, path string) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	q := r.URL.Query()
	if _, found, _ := s.build(path, q); !found {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	s.streams.Add(1)
	defer s.streams.Add(-1)
	ctx := r.Context()
	var refresh <-chan time.Time
	if s.cfg.Refresh > 0 {
		t := time.NewTicker(s.cfg.Refresh)
		defer t.Stop()
		refresh = t.C
	}
	sent := map[string]template.HTML{}
	var grid *gridFrame
	for {
		ver, changed := s.agg.changes()
		p, _, err := s.build(path, q)
		if err != nil {
			s.cfg.Logger.Sugar().Errorw("ui: rendering a page", "path", path, "error", err)
			return
		}
		update := map[string]template.HTML{}
		for _, sec := range p.Sections {
			if prev, ok := sent[sec.ID]; !ok || prev != sec.HTML {
				update[sec.ID], sent[sec.ID] = sec.HTML, sec.HTML
			}
		}
		if len(update) > 0 {
			if writeEvent(w, "sections", update) != nil {
				return
			}
			s.updates.Add(1)
		}
		if p.Grid {
			f := s.agg.grid()
			if msg, ok := gridUpdate(grid, f); ok {
				if writeEvent(w, "grid", msg) != nil {
					return
				}
				s.updates.Add(1)
			}
			grid = &f
		}
		flusher.Flush()
		// Wait for a change the page shows.
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-refresh:
				if _, err := io.WriteString(w, ": still here\n\n"); err != nil {
					return
				}
				break wait
			case <-changed:
				var now versions
				now, changed = s.agg.changes()
				if p.shows(ver, now) {
					break wait
				}
			}
		}
		if s.cfg.MinInterval > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.cfg.MinInterval):
			}
		}
	}
}

// writeEvent writes one server-sent event of type name with v as JSON.
func writeEvent(w io.Writer, name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
	return err
}
