package nodekit

import (
	"fmt"
	"html"
	"net/http"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"
)

// maxProfileSeconds bounds ?seconds= of the CPU profile and the trace.
const maxProfileSeconds = 300

// servePprof adds the runtime's profiles under /debug/pprof/, as
// net/http/pprof serves them (go tool pprof reads them), to the admin
// handler only: net/http/pprof itself would also add them to
// http.DefaultServeMux, which a program may serve on a public port.
//
//	GET /debug/pprof/                  the index
//	GET /debug/pprof/<name>[?debug=N]  goroutine, heap, allocs, block, mutex, threadcreate:
//	                                   binary (debug=0, the default) or text
//	GET /debug/pprof/profile?seconds=N CPU profile (30 s)
//	GET /debug/pprof/trace?seconds=N   execution trace (1 s)
//
// It serves no /debug/pprof/cmdline: the command line holds the -bus and
// -db URLs, passwords included.
func (a *Admin) servePprof() {
	a.mux.HandleFunc("GET /debug/pprof/", pprofIndex)
	a.mux.HandleFunc("GET /debug/pprof/profile", func(w http.ResponseWriter, r *http.Request) {
		d, ok := profileSeconds(w, r, 30)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="profile"`)
		if err := pprof.StartCPUProfile(w); err != nil {
			w.Header().Del("Content-Disposition")
			http.Error(w, "start the CPU profile: "+err.Error()+"; is another one running? Try again when it ends", http.StatusInternalServerError)
			return
		}
		sleep(r, d)
		pprof.StopCPUProfile()
	})
	a.mux.HandleFunc("GET /debug/pprof/trace", func(w http.ResponseWriter, r *http.Request) {
		d, ok := profileSeconds(w, r, 1)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="trace"`)
		if err := trace.Start(w); err != nil {
			w.Header().Del("Content-Disposition")
			http.Error(w, "start the trace: "+err.Error()+"; is another one running? Try again when it ends", http.StatusInternalServerError)
			return
		}
		sleep(r, d)
		trace.Stop()
	})
}

// pprofIndex serves /debug/pprof/: the index, or the profile named.
func pprofIndex(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/debug/pprof/")
	if name == "" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<html><head><title>/debug/pprof/</title></head><body><p>Profiles:</p><ul>\n")
		for _, p := range pprof.Profiles() {
			n := html.EscapeString(p.Name())
			fmt.Fprintf(w, "<li><a href=\"%s?debug=1\">%s</a> (%d)</li>\n", n, n, p.Count())
		}
		fmt.Fprint(w, "<li><a href=\"profile\">profile</a> (CPU, ?seconds=30)</li>\n<li><a href=\"trace\">trace</a> (?seconds=1)</li>\n</ul></body></html>\n")
		return
	}
	p := pprof.Lookup(name)
	if p == nil {
		http.Error(w, fmt.Sprintf("no profile %q: see /debug/pprof/ for the list", name), http.StatusNotFound)
		return
	}
	debug, _ := strconv.Atoi(r.URL.Query().Get("debug"))
	if name == "heap" && r.URL.Query().Get("gc") != "" {
		runtime.GC()
	}
	if debug > 0 {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	}
	_ = p.WriteTo(w, debug)
}

// profileSeconds reads ?seconds= (def if absent); it answers 400 and
// false if the value is not a whole number of seconds from 1 to
// maxProfileSeconds.
func profileSeconds(w http.ResponseWriter, r *http.Request, def int) (time.Duration, bool) {
	s := def
	if v := r.URL.Query().Get("seconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxProfileSeconds {
			http.Error(w, fmt.Sprintf("seconds=%q: give a whole number of seconds from 1 to %d", v, maxProfileSeconds), http.StatusBadRequest)
			return 0, false
		}
		s = n
	}
	return time.Duration(s) * time.Second, true
}

// sleep waits d, or until the client goes away.
func sleep(r *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}
