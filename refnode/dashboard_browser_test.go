package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/message"
)

// chromium returns the path of a Chromium or Chrome binary: $CHROME_PATH,
// or chromium, chromium-browser or google-chrome on the PATH. Without
// one the test skips, or fails under CI (.ci/run installs Debian's
// chromium).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROME_PATH"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no Chromium under CI: .ci/run installs Debian's chromium; or set CHROME_PATH")
	}
	t.Skip("no Chromium: install one (apt-get install chromium) or set CHROME_PATH")
	return ""
}

// artifactDir is where the browser test writes its screenshots:
// $CLOUDBUS_ARTIFACTS, or cloudbus-artifacts in the temporary directory.
func artifactDir(t *testing.T) string {
	dir := os.Getenv("CLOUDBUS_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "cloudbus-artifacts")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// pageRow is a members table row as the page shows it.
type pageRow struct {
	Node   string `json:"node"`
	Health string `json:"health"`
	Share  string `json:"share"`
}

// TestDashboardInBrowser opens node A's dashboard of a 3-node embedded
// cluster in headless Chromium: the page renders three healthy nodes
// and their shares; node C is killed, and the page shows it leave and
// its share move to the others within the eviction threshold plus an
// update; the owner lookup agrees with the ring. Screenshots before and
// after the kill are written as artifacts (paths logged).
func TestDashboardInBrowser(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector is on: CI runs TestDashboardInBrowser without it, in the serial step (a browser beside the other packages' tests would time out)")
	}
	exe := chromium(t)
	ctx := t.Context()
	const interval, evict = 100 * time.Millisecond, time.Second
	so, err := parseServe([]string{"-embedded", "3", "-api-listen", "127.0.0.1:0", "-heartbeat", interval.String(), "-evict-after", evict.String()}, func(string) string { return "" })
	require.NoError(t, err)
	require.NoError(t, validateEmbedded(&so, func(string) bool { return false }))
	e, err := newEmbeddedCluster(ctx, so, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer e.close()
	a, c := e.apis[0], e.apis[2]
	dead := c.m.node.UUID()

	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	bctx, cancelTimeout := context.WithTimeout(bctx, 90*time.Second)
	defer cancelTimeout()

	// 30 VMs, so the page shows what each node owns.
	post := func(path, body string) map[string]any {
		resp, err := http.Post(fmt.Sprintf("http://%s%s", a.addr, path), "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusCreated, resp.StatusCode, "POST %s: %s", path, b)
		var out map[string]any
		require.NoError(t, json.Unmarshal(b, &out))
		return out
	}
	for i := range 6 {
		post("/v1/hosts", fmt.Sprintf(`{"name":"h%d"}`, i))
	}
	img := post("/v1/images", `{"name":"tour"}`)
	const vms = 30
	for range vms {
		post("/v1/vms", fmt.Sprintf(`{"image_uuid":%q}`, img["uuid"]))
	}
	// ownedVMs is the sum of the members table's VM counts.
	const ownedVMs = `[...document.querySelectorAll('#members tbody tr[data-node]')].reduce((n, r) => n + Number((r.lastChild.textContent.match(/(\d+) VMs/) || [0, 0])[1]), 0)`

	rows := func() []pageRow {
		out, err := chromedp.Run(bctx, chromedp.Evaluate[[]pageRow](`[...document.querySelectorAll('#members tbody tr[data-node]')].map(r => ({node: r.dataset.node, health: r.dataset.health, share: r.querySelector('.share').textContent}))`))
		require.NoError(t, err)
		return out
	}
	poll := func(expr string) {
		t.Helper()
		_, err := chromedp.Run(bctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond)))
		require.NoError(t, err, "waiting until %s", expr)
	}
	started := time.Now()
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(fmt.Sprintf("http://%s/", a.addr))))
	poll(fmt.Sprintf(`document.querySelectorAll('#members tbody tr[data-health="healthy"]').length === 3 && document.getElementById('status').className === 'ok' && %s === %d`, ownedVMs, vms))
	t.Logf("the page showed 3 healthy nodes %s after the browser started", time.Since(started).Round(time.Millisecond))
	before := rows()
	require.Len(t, before, 3)
	var total float64
	for _, r := range before {
		var pct float64
		_, err := fmt.Sscanf(r.Share, "%f%%", &pct)
		require.NoError(t, err, r.Share)
		assert.InDelta(t, 33.3, pct, 3, "node %s's share", r.Node)
		total += pct
	}
	assert.InDelta(t, 100, total, 0.1)
	bars, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('#shares div').length`))
	require.NoError(t, err)
	assert.Equal(t, 3, bars, "a share bar per node")
	dir := artifactDir(t)
	shot := func(name string) {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, png, 0o644))
		t.Logf("screenshot: %s (%d bytes)", p, len(png))
	}
	shot("dashboard-before-kill.png")

	// The kill, as the README's tour does it: node C dies; A's page
	// shows it leave.
	killC(t, a.addr.String(), http.StatusOK)
	killed := time.Now()
	poll(fmt.Sprintf(`document.querySelectorAll('#members tbody tr[data-node]').length === 2 && !document.querySelector('#members tbody tr[data-node=%q]') && document.getElementById('status').className === 'ok' && !!document.querySelector('#events li[data-kind="left"], #events li[data-kind="evicted"]')`, dead))
	left := time.Since(killed)
	shown := left
	const update = 250 * time.Millisecond // the dashboard's least Interval
	t.Logf("the page showed node C leave %s after its kill (evicted after %s, the page updated every %s)", shown.Round(time.Millisecond), evict, update)
	assert.Less(t, shown, evict+update+2*time.Second, "within the eviction threshold plus an update (and 2 s for a loaded machine)")
	after := rows()
	require.Len(t, after, 2)
	total = 0
	for _, r := range after {
		var pct float64
		_, err := fmt.Sscanf(r.Share, "%f%%", &pct)
		require.NoError(t, err)
		assert.InDelta(t, 50, pct, 3, "node %s's share after the kill", r.Node)
		total += pct
	}
	assert.InDelta(t, 100, total, 0.1, "C's share moved to the survivors")
	poll(fmt.Sprintf(`%s === %d`, ownedVMs, vms)) // the VM counts are read every 2 s
	t.Logf("the page showed all %d VMs owned by the survivors %s after the kill", vms, time.Since(killed).Round(time.Millisecond))
	eventsText, err := chromedp.Run(bctx, chromedp.Text("#events"))
	require.NoError(t, err)
	assert.Contains(t, eventsText, dead[:8], "the events list names the dead node")

	// The owner lookup, by keyboard: every live node agrees with the ring.
	key := message.NewUUID()
	want, err := e.apis[1].m.node.Owner(key)
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Focus("#owner-key"),
		chromedp.SendKeys("#owner-key", key+"\r"),
		chromedp.WaitVisible("#owner-answer"),
	))
	owner, err := chromedp.Run(bctx, chromedp.AttributeValue("#owner-answer", "data-owner"))
	require.NoError(t, err)
	agreed, err := chromedp.Run(bctx, chromedp.AttributeValue("#owner-answer", "data-agreed"))
	require.NoError(t, err)
	assert.Equal(t, want, owner.Value, "the page's owner of %s", key)
	assert.Equal(t, "true", agreed.Value)
	shot("dashboard-after-kill.png")
	answer, err := chromedp.Run(bctx, chromedp.Text("#owner-result"))
	require.NoError(t, err)
	assert.True(t, strings.Contains(answer, "every node agrees"), answer)
}

// killC posts node=C to /embedded/kill at addr and checks the status.
func killC(t *testing.T, addr string, want int) {
	t.Helper()
	resp, err := http.PostForm("http://"+addr+"/embedded/kill", url.Values{"node": {"C"}})
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, want, resp.StatusCode, "%s", body)
}

// TestEmbeddedKill: POST /embedded/kill crashes the node named, once;
// an unknown name is 404.
func TestEmbeddedKill(t *testing.T) {
	so, err := parseServe([]string{"-embedded", "3", "-api-listen", "127.0.0.1:0", "-heartbeat", "50ms", "-evict-after", "300ms"}, func(string) string { return "" })
	require.NoError(t, err)
	require.NoError(t, validateEmbedded(&so, func(string) bool { return false }))
	e, err := newEmbeddedCluster(t.Context(), so, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer e.close()
	a := e.apis[0].addr.String()
	resp, err := http.PostForm("http://"+a+"/embedded/kill", url.Values{"node": {"Z"}})
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	killC(t, a, http.StatusOK)
	killC(t, a, http.StatusConflict)
	require.NoError(t, e.c.await(t.Context(), "the survivors' rings hold 2 nodes", func() bool {
		return len(e.c.live()) == 2 && e.c.converged() && len(e.apis[0].m.node.Members()) == 2
	}))
}
