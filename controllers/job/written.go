package job

import (
	"sync"
	"time"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// writtenTTL bounds how long a sync waits for the task cache to show a
// write of the controller's own: a write overtaken before the cache saw
// it (another writer deleted the task) is given up after it.
const writtenTTL = 30 * time.Second

// behindRetry is when a job whose cache is behind the controller's own
// writes is looked at again, should the cache's events not bring it
// back first.
const behindRetry = time.Second

// written remembers the controller's own task writes until its task
// cache shows them, as client-go's controllers keep "expectations". A
// sync must not decide from a cache older than the controller's last
// writes: a rolling update that replaced two tasks, seeing them still as
// they were, would replace two more and take more tasks down than the
// update allows; the writes conditioned on the stale versions would
// fail, but those to other tasks would not.
type written struct {
	mu   sync.Mutex
	jobs map[string]map[string]write // by job, by task key
}

type write struct {
	version uint64 // the task's version once written, or the deletion's revision
	gone    bool   // deleted
	at      time.Time
}

// note records a write of the task at key, of job, at version.
func (w *written) note(job, key string, version uint64, gone bool, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.jobs == nil {
		w.jobs = map[string]map[string]write{}
	}
	if w.jobs[job] == nil {
		w.jobs[job] = map[string]write{}
	}
	w.jobs[job][key] = write{version: version, gone: gone, at: now}
}

// behind reports whether the cache (cached) does not yet show a write of
// job's tasks; the writes it shows, and those older than writtenTTL, are
// forgotten.
func (w *written) behind(job string, cached func(key string) (*troupev1.Task, bool), now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	behind := false
	for key, wr := range w.jobs[job] {
		t, ok := cached(key)
		seen := ok && t.GetMetadata().GetVersion() >= wr.version
		if wr.gone {
			seen = !ok || t.GetMetadata().GetVersion() > wr.version
		}
		if seen || now.Sub(wr.at) > writtenTTL {
			delete(w.jobs[job], key)
			continue
		}
		behind = true
	}
	if len(w.jobs[job]) == 0 {
		delete(w.jobs, job)
	}
	return behind
}
